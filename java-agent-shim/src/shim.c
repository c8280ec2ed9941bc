/*
 * jvmperf JVMTI shim: loaded into the target JVM, it streams JIT code events to the jvmperf daemon over a
 * Unix socket. The wire format and lifecycle are specified in ../PROTOCOL.md.
 *
 * Threads:
 *  - the Attach Listener runs Agent_OnAttach, which connects to the new daemon (non-blocking) and starts the
 *    shim thread, or, while the current daemon is still connected, sends the new one BUSY and leaves;
 *  - JVM threads post live events: they encode records and push them into a bounded byte ring (never waiting);
 *  - the shim thread owns the socket: HELLO, the GenerateEvents replay (written straight to the socket),
 *    draining the ring, and daemon commands.
 * g_q guards the ring, the set of method ids sent on this connection and the drop counters. It is never held
 * across I/O or JVMTI calls.
 *
 * Memory: the ring (QUEUE_CAP), the sent-id set (at most 2 * MAX_SENT_IDS slots; cleared when full or when the
 * daemon asks, see METHODS_FORGOTTEN), the command buffer (one daemon frame) and the socket write buffer
 * (OUT_CAP, static). Event callbacks free their encoding buffers before they return. STATS reports all of it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "jvmti_abi.h" /* JNI and JVMTI, as much as the shim uses: no JDK needed to build it */

#ifndef JVMPERF_SHIM_VERSION
#error "build.rs defines JVMPERF_SHIM_VERSION"
#endif

/* The shim is built against the build host's glibc but loaded into JVMs that may run an older one (container
 * images): bind pthread_create to its pre-2.34 version; build.rs also links libpthread.so.0 for those. */
#if defined(__GLIBC__) && defined(__x86_64__)
__asm__(".symver pthread_create, pthread_create@GLIBC_2.2.5");
#elif defined(__GLIBC__) && defined(__aarch64__)
__asm__(".symver pthread_create, pthread_create@GLIBC_2.17");
#endif

enum {
    K_HELLO = 1,
    K_METHOD = 2,
    K_NMETHOD_LOAD = 3,
    K_NMETHOD_UNLOAD = 4,
    K_CODE_BLOB = 5,
    K_THREAD_START = 6,
    K_THREAD_END = 7,
    K_DROPPED = 8,
    K_REPLAY_DONE = 9,
    K_RETRANSFORM_DONE = 10,
    K_STATS = 11,
    K_METHODS_FORGOTTEN = 12,
    K_BUSY = 13,
    K_RETRANSFORM = 100,
    K_FORGET_METHODS = 101,
};

#define PROTOCOL_VERSION 1
#define HDR_SIZE 16u                /* len, kind, flags, time */
#define MIN_FRAME_LEN 12u           /* smallest value of the len field */
#define MAX_FRAME_LEN (16u << 20)   /* largest value of the len field */
#ifndef QUEUE_CAP
#define QUEUE_CAP (4u << 20) /* tests build with a smaller one to exercise overflow */
#endif
#define MAX_RETRANSFORM 65536u
/* Bound of the sent-method-id set: a JVM that keeps loading classes makes new jmethodIDs forever. */
#ifndef MAX_SENT_IDS
#define MAX_SENT_IDS (1u << 17)
#endif
#define STATS_VERSION 2
#define BUSY_VERSION 1
#define DROPPED_INTERVAL_NS 100000000ull
#define STATS_INTERVAL_NS 1000000000ull
#define POLL_MS 10

#define ACC_NATIVE 0x0100
#define ACC_ABSTRACT 0x0400

#define JV(fn, ...) ((*g_jvmti)->fn(g_jvmti, __VA_ARGS__))

/* ---- encoding ------------------------------------------------------------------------------------------ */

struct buf {
    uint8_t *p;
    size_t len, cap;
    int bad; /* out of memory or a frame over the size limit: the content must not be sent */
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint8_t *buf_grow(struct buf *b, size_t n) {
    if (b->bad)
        return NULL;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (n > cap - b->len) {
            if (cap > SIZE_MAX / 2) {
                b->bad = 1;
                return NULL;
            }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->bad = 1;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    uint8_t *at = b->p + b->len;
    b->len += n;
    return at;
}

static void wr_le(uint8_t *at, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        at[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t rd_le(const uint8_t *at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)at[i] << (8 * i);
    return v;
}

static void put_le(struct buf *b, uint64_t v, int n) {
    uint8_t *at = buf_grow(b, (size_t)n);
    if (at)
        wr_le(at, v, n);
}
#define put_u8(b, v) put_le(b, (uint64_t)(v), 1)
#define put_u16(b, v) put_le(b, (uint64_t)(v), 2)
#define put_u32(b, v) put_le(b, (uint64_t)(uint32_t)(v), 4)
#define put_u64(b, v) put_le(b, (uint64_t)(v), 8)

static void put_str(struct buf *b, const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n > MAX_FRAME_LEN) {
        b->bad = 1;
        return;
    }
    put_u32(b, n);
    uint8_t *at = buf_grow(b, n);
    if (at && n)
        memcpy(at, s, n);
}

/* Thread and code blob names are cut to this many bytes: their frames then stay within COPY_UNDER_LOCK_MAX,
 * which q_push copies under the queue's lock. */
#define MAX_NAME_BYTES 4032u

/* How many of the n bytes of s to keep for at most max: a cut on a character boundary of its (modified) UTF-8,
 * neither inside a sequence nor between the halves of a surrogate pair (modified UTF-8 encodes one as two
 * 3-byte sequences, the high half ED A0..AF xx). */
static size_t utf8_cut(const char *s, size_t n, size_t max) {
    if (n <= max)
        return n;
    const uint8_t *u = (const uint8_t *)s;
    size_t k = max;
    while (k > 0 && (u[k] & 0xC0) == 0x80)
        k--;
    if (k >= 3 && u[k - 3] == 0xED && (u[k - 2] & 0xF0) == 0xA0)
        k -= 3;
    return k;
}

/* A name, cut to MAX_NAME_BYTES. */
static void put_name(struct buf *b, const char *s) {
    size_t n = s ? utf8_cut(s, strlen(s), MAX_NAME_BYTES) : 0;
    put_u32(b, n);
    uint8_t *at = buf_grow(b, n);
    if (at && n)
        memcpy(at, s, n);
}

static size_t frame_begin(struct buf *b, uint16_t kind) {
    size_t off = b->len;
    put_u32(b, 0);
    put_u16(b, kind);
    put_u16(b, 0);
    put_u64(b, now_ns());
    return off;
}

static void frame_end(struct buf *b, size_t off) {
    if (b->bad)
        return;
    size_t len = b->len - off - 4;
    if (len > MAX_FRAME_LEN) {
        b->bad = 1;
        return;
    }
    wr_le(b->p + off, len, 4);
}

/* One line on the JVM's stderr, only where a JVM started with -agentpath would otherwise fail or lose the agent
 * without a word. */
static void warn(const char *what) {
    fprintf(stderr, "jvmperf shim: %s\n", what);
}

/* ---- global state -------------------------------------------------------------------------------------- */

static JavaVM *g_vm;
static jvmtiEnv *g_jvmti;

/* A connection to a daemon and the pid the daemon gave in its options (in its own pid namespace). */
struct daemon {
    int fd;
    uint32_t pid;
};

/* Attach requests and the shim thread's life; guarded by g_ctl. */
static pthread_mutex_t g_ctl = PTHREAD_MUTEX_INITIALIZER;
static struct daemon g_next = {-1, 0}; /* accepted by the latest attach, not yet taken by the shim thread */
static struct daemon g_conn = {-1, 0}; /* served by the shim thread; closed only after fd is reset here */
static uint32_t g_attach_count;
static int g_thread_running;
static int g_live;       /* live phase reached (Agent_OnLoad waits for VMInit) */
static int g_ever_ok;    /* some Agent_OnAttach/OnLoad returned 0, so the library stays loaded */
static atomic_int g_pending; /* an attach request waits for the shim thread */

/* One session per JVM, whatever the number of shim copies: each jvmperf version embeds its own shim, loaded
 * from a path named by its version, so a JVM may hold several copies, each with its own globals. What must be
 * unique per process lives in a block every copy finds among the process's file descriptors: a memfd named
 * SESSION_MEMFD (fds are shared by the whole process). Written only by the copy that owns the session, except
 * `stop`, which a copy taking over a dead or stalled session sets. */
#define SESSION_MEMFD "jvmperf-shim-session"
#define SESSION_MAGIC 0x3130736e6670766aull /* "jvpfns01": layout version 1 */
struct session_block {
    _Atomic uint64_t magic;
    _Atomic uint64_t owner;         /* the copy serving a daemon (its token), 0 for none */
    _Atomic uint32_t daemon_pid;    /* that daemon's pid, named in BUSY */
    _Atomic int32_t fd;             /* its socket (-1 while it starts or ends) */
    _Atomic uint64_t stalled_since; /* its reader has read nothing since (0: it reads; see watch_reader) */
    _Atomic uint32_t stop;          /* another copy takes over: end the session */
};
static struct session_block g_own_block = {.fd = -1}; /* when no shared block can be made */
static struct session_block *g_sess = &g_own_block;

/* Connection state shared with the event callbacks; guarded by g_q. Work under g_q is bounded by the size of
 * one record (a sub-table of the id set grows by itself; big frames are copied outside the lock). */
static pthread_mutex_t g_q = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_q_idle = PTHREAD_COND_INITIALIZER; /* the last reservation was published */

/* Queue bytes [at, end) reserved by a writer that copies them outside g_q; published when copied. */
struct resv {
    uint64_t end;
    int done;
    struct resv *next;
};

/* The sent-id set is split by hash into sub-tables that grow one at a time, so growing rehashes at most a
 * small part of it while callbacks on application threads wait for g_q. */
#define SUBSETS 64
struct subset {
    uint64_t *tab; /* open addressing, 0 = empty, load factor <= 1/2 */
    uint32_t cap, n;
};

static struct {
    uint8_t *ring;            /* QUEUE_CAP bytes of whole frames; NULL when not connected */
    uint64_t head;            /* running count of bytes reserved */
    uint64_t ready;           /* bytes [tail, ready) are published whole frames */
    uint64_t tail;            /* bytes sent */
    struct resv *resv_first;  /* unpublished reservations in queue order (and published ones behind them) */
    struct resv *resv_last;
    uint64_t high_water;      /* most bytes ever queued at once on this connection */
    struct subset ids[SUBSETS]; /* method ids sent on this connection */
    uint64_t ids_n, ids_bytes;
    uint64_t forgotten;       /* times the set was cleared (METHODS_FORGOTTEN sent) */
    uint64_t gen;             /* bumped on every connect, disconnect and clearing of the set */
    uint64_t drop_records, drop_bytes;
} Q;
static atomic_int g_active; /* fast path check for callbacks; the truth is Q.ring under g_q */

/* The replay runs on the shim thread inside GenerateEvents; its callbacks write to the socket directly. */
static atomic_int g_replaying;
static pthread_t g_replay_thread;

/* Shim-thread only (including the replay callbacks, which run on it). */
static int g_fd = -1;
static int g_unread; /* unread_bytes() at the last write or look, -1 if unknown */
static int g_replay_failed;
static uint32_t g_replay_nmethods, g_replay_blobs;
static int g_can_retransform;

static atomic_int g_vm_dead; /* VMDeath was posted: end the session after sending what is queued */
static _Atomic uint64_t g_vm_death_ns; /* when */
static atomic_int g_vm_death_returned;  /* on_vm_death stopped waiting for the shim thread */

/* The shim thread checks this before each JVMTI or JNI call it makes: once on_vm_death has returned, the VM
 * goes on exiting and a call may block for good (HotSpot blocks a thread in native that enters an exited VM,
 * VM_Exit::block_if_vm_exited). A call already running when VMDeath comes is let finish. */
static int vm_dying(void) {
    return atomic_load(&g_vm_dead);
}

/* Time application threads spent in the shim's ThreadStart/ThreadEnd callbacks this session (STATS). */
static _Atomic uint64_t g_thread_events, g_thread_event_ns, g_thread_event_max_ns;

static int on_replay_thread(void) {
    return atomic_load(&g_replaying) && pthread_equal(pthread_self(), g_replay_thread);
}

/* The replay failed, or the VM is dying and GenerateEvents is let run out without a lookup. Replay thread. */
static int replay_over(void) {
    if (vm_dying())
        g_replay_failed = 1;
    return g_replay_failed;
}

/* ---- sent method ids (caller holds g_q) ----------------------------------------------------------------- */

static uint64_t id_hash(uint64_t id) {
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return id;
}

static struct subset *subset_of(uint64_t id) {
    return &Q.ids[id_hash(id) >> 58]; /* the top 6 bits: SUBSETS == 64 */
}

static int set_has(uint64_t id) {
    const struct subset *s = subset_of(id);
    if (!s->cap)
        return 0;
    for (size_t i = id_hash(id) & (s->cap - 1); s->tab[i]; i = (i + 1) & (s->cap - 1))
        if (s->tab[i] == id)
            return 1;
    return 0;
}

static void tab_put(uint64_t *tab, uint32_t cap, uint64_t id) {
    size_t i = id_hash(id) & (cap - 1);
    while (tab[i] && tab[i] != id)
        i = (i + 1) & (cap - 1);
    tab[i] = id;
}

/* Grows sub-table s to hold `extra` more ids at load factor <= 1/2; on failure s is unchanged. */
static int subset_reserve(struct subset *s, uint32_t extra) {
    uint64_t need = ((uint64_t)s->n + extra) * 2;
    if (need <= s->cap)
        return 0;
    uint64_t cap = s->cap ? s->cap : 64;
    while (cap < need)
        cap *= 2;
    if (cap > UINT32_MAX)
        return -1;
    uint64_t *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return -1;
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->tab[i])
            tab_put(tab, (uint32_t)cap, s->tab[i]);
    free(s->tab);
    Q.ids_bytes += (cap - s->cap) * sizeof *tab;
    s->tab = tab;
    s->cap = (uint32_t)cap;
    return 0;
}

/* Adds an id that is not in the set; its sub-table has room (subset_reserve). */
static void set_add(uint64_t id) {
    struct subset *s = subset_of(id);
    tab_put(s->tab, s->cap, id);
    s->n++;
    Q.ids_n++;
}

static void set_clear(void) {
    for (size_t i = 0; i < SUBSETS; i++) {
        free(Q.ids[i].tab);
        Q.ids[i] = (struct subset){NULL, 0, 0};
    }
    Q.ids_n = Q.ids_bytes = 0;
}

/* ---- queue --------------------------------------------------------------------------------------------- */

static size_t queue_room(void) {
    return QUEUE_CAP - (size_t)(Q.head - Q.tail);
}

/* Copies n bytes to running offset `at` of ring (wrapping); the caller owns [at, at + n). */
static void ring_write(uint8_t *ring, uint64_t at, const uint8_t *src, size_t n) {
    size_t off = (size_t)(at % QUEUE_CAP);
    size_t first = n < QUEUE_CAP - off ? n : QUEUE_CAP - off;
    memcpy(ring + off, src, first);
    memcpy(ring, src + first, n - first);
}

static void note_high_water(void) {
    if (Q.head - Q.tail > Q.high_water)
        Q.high_water = Q.head - Q.tail;
}

static void resv_append(struct resv *r) {
    r->next = NULL;
    if (Q.resv_last)
        Q.resv_last->next = r;
    else
        Q.resv_first = r;
    Q.resv_last = r;
}

/* Publishes the reservations at the front that are done (caller holds g_q). */
static void resv_settle(void) {
    while (Q.resv_first && Q.resv_first->done) {
        struct resv *r = Q.resv_first;
        Q.ready = r->end;
        Q.resv_first = r->next;
        free(r);
    }
    if (!Q.resv_first) {
        Q.resv_last = NULL;
        Q.ready = Q.head;
        pthread_cond_broadcast(&g_q_idle);
    }
}

/* Frames up to this size are copied under g_q; bigger ones are reserved and copied outside it. */
#define COPY_UNDER_LOCK_MAX 4096u

/* Appends n bytes under g_q (n <= COPY_UNDER_LOCK_MAX or while nothing else can write); the caller checked
 * queue_room(). Returns -1 (nothing written) when it cannot record its place behind an unpublished frame. */
static int q_put_locked(const uint8_t *src, size_t n) {
    if (Q.resv_first) {
        struct resv *r = malloc(sizeof *r);
        if (!r)
            return -1;
        r->end = Q.head + n;
        r->done = 1;
        resv_append(r);
    }
    ring_write(Q.ring, Q.head, src, n);
    Q.head += n;
    if (!Q.resv_first)
        Q.ready = Q.head;
    note_high_water();
    return 0;
}

/* Reserves n bytes (caller holds g_q, checked queue_room()); r is the caller's node, queued here. */
static uint64_t q_reserve_locked(struct resv *r, size_t n) {
    uint64_t at = Q.head;
    r->end = at + n;
    r->done = 0;
    resv_append(r);
    Q.head += n;
    note_high_water();
    return at;
}

static void q_publish(struct resv *r) {
    pthread_mutex_lock(&g_q);
    r->done = 1;
    resv_settle();
    pthread_mutex_unlock(&g_q);
}

/* Clears the set and queues METHODS_FORGOTTEN, so the daemon may drop the methods it no longer needs: every
 * later NMETHOD_LOAD is preceded by its METHODs again. Returns -1 (nothing changed) when the queue is full. */
static int forget_sent_ids(void) {
    uint8_t marker[HDR_SIZE];
    if (queue_room() < sizeof marker)
        return -1;
    wr_le(marker, HDR_SIZE - 4, 4);
    wr_le(marker + 4, K_METHODS_FORGOTTEN, 2);
    wr_le(marker + 6, 0, 2);
    wr_le(marker + 8, now_ns(), 8);
    if (q_put_locked(marker, sizeof marker) < 0)
        return -1;
    set_clear();
    Q.forgotten++;
    Q.gen++; /* METHODs encoded against the old set are incomplete now: their commit starts over */
    return 0;
}

static void count_drop(uint64_t records, uint64_t bytes) {
    pthread_mutex_lock(&g_q);
    if (Q.ring) {
        Q.drop_records += records;
        Q.drop_bytes += bytes;
    }
    pthread_mutex_unlock(&g_q);
}

/* Whether the queue has room for n more bytes now (a live record that needs more is dropped unbuilt). */
static int queue_has_room(uint64_t n) {
    pthread_mutex_lock(&g_q);
    int room = Q.ring && queue_room() >= n;
    pthread_mutex_unlock(&g_q);
    return room;
}

/* Enqueues one small self-contained record (no method references) from a live event. */
static void q_push(const struct buf *b) {
    if (b->bad) {
        count_drop(1, b->len);
        return;
    }
    pthread_mutex_lock(&g_q);
    if (Q.ring && (queue_room() < b->len || q_put_locked(b->p, b->len) < 0)) {
        Q.drop_records++;
        Q.drop_bytes += b->len;
    }
    pthread_mutex_unlock(&g_q);
}

/* ---- socket (shim thread) ------------------------------------------------------------------------------ */

/* A reader that stops reading (SIGSTOP, a debugger, a stalled disk) ends the session after this long without
 * progress: while the replay waits for it inside GenerateEvents, the JVM keeps every nmethod not yet posted. */
#define WRITE_DEADLINE_NS 5000000000ull
#define DEATH_WRITE_DEADLINE_NS 150000000ull /* the JVM is exiting and VMDeath waits for the last records */
/* An attach finding the current session's reader stalled this long (stalled_since) takes over instead of answering
 * BUSY. */
#define TAKEOVER_NS 1000000000ull

/* Bytes sent on the session's socket that its reader has not read yet, or -1 if unknown. On an AF_UNIX socket
 * SIOCOUTQ is the memory of the sent buffers the peer has not consumed (unix_outq_len in Linux
 * net/unix/af_unix.c): nothing but the reader's reads makes it go down. */
static int unread_bytes(void) {
    int n = 0;
    return ioctl(g_fd, SIOCOUTQ, &n) == 0 ? n : -1;
}

/* Looks at the reader, with nothing written since the last write or look: bytes waiting for it that did not go
 * down mean it read nothing meanwhile. stalled_since marks the first look that found so; any read clears it.
 * This also catches a stopped reader on a quiet JVM, where writes would not wait until the socket's buffer
 * filled with STATS (~25 minutes). */
static void watch_reader(void) {
    int unread = unread_bytes();
    if (unread == 0 || (unread > 0 && unread < g_unread))
        atomic_store(&g_sess->stalled_since, 0);
    else if (unread > 0 && !atomic_load(&g_sess->stalled_since))
        atomic_store(&g_sess->stalled_since, now_ns());
    g_unread = unread;
}

/* When a write waiting for room since blocked_at gives up: after WRITE_DEADLINE_NS, or once the VM is dying at
 * DEATH_WRITE_DEADLINE_NS after VMDeath, whichever comes first. */
static uint64_t write_deadline(uint64_t blocked_at) {
    uint64_t deadline = blocked_at + WRITE_DEADLINE_NS, death = atomic_load(&g_vm_death_ns);
    if (vm_dying() && death + DEATH_WRITE_DEADLINE_NS < deadline)
        deadline = death + DEATH_WRITE_DEADLINE_NS;
    return deadline;
}

static int sock_write_all(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t blocked_at = 0; /* when the current wait for room in the socket began */
    int rc = 0;
    while (n) {
        ssize_t w = send(g_fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            if (blocked_at) /* the reader made room */
                atomic_store(&g_sess->stalled_since, 0);
            blocked_at = 0;
            g_unread = unread_bytes();
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            uint64_t now = now_ns();
            if (!blocked_at)
                blocked_at = now;
            if (!atomic_load(&g_sess->stalled_since))
                atomic_store(&g_sess->stalled_since, now);
            uint64_t deadline = write_deadline(blocked_at);
            /* A newly attached reader replaces a stuck one. */
            if (atomic_load(&g_pending) || atomic_load(&g_sess->stop) || now >= deadline) {
                rc = -1;
                break;
            }
            uint64_t wait_ms = (deadline - now + 999999) / 1000000; /* not past the deadline */
            struct pollfd pfd = {.fd = g_fd, .events = POLLOUT};
            if (poll(&pfd, 1, wait_ms < 100 ? (int)wait_ms : 100) < 0 && errno != EINTR) {
                rc = -1;
                break;
            }
        } else {
            rc = -1;
            break;
        }
    }
    if (rc < 0)
        atomic_store(&g_sess->stalled_since, 0); /* the session ends */
    return rc;
}

/* Socket writes (all on the shim thread) are combined in one buffer: the replay produces tens of
 * thousands of small records, and a syscall per record would dominate its cost. */
#define OUT_CAP (256u << 10)
static uint8_t g_out[OUT_CAP];
static size_t g_out_len;

static int flush_out(void) {
    int rc = g_out_len ? sock_write_all(g_out, g_out_len) : 0;
    g_out_len = 0;
    return rc;
}

static int send_all(const void *data, size_t n) {
    if (g_out_len + n > OUT_CAP && flush_out() < 0)
        return -1;
    if (n > OUT_CAP)
        return sock_write_all(data, n);
    memcpy(g_out + g_out_len, data, n);
    g_out_len += n;
    return 0;
}

static int send_buf(struct buf *b) {
    int rc = b->bad ? -1 : send_all(b->p, b->len);
    b->len = 0;
    return rc;
}

/* Sends published bytes up to the running offset `limit` (UINT64_MAX: whatever is published now). A finite
 * limit waits for the frames reserved below it to be published: their writers are copying them. */
static int drain(uint64_t limit) {
    for (;;) {
        pthread_mutex_lock(&g_q);
        uint8_t *ring = Q.ring;
        uint64_t ready = Q.ready < limit ? Q.ready : limit, tail = Q.tail;
        int wait = limit != UINT64_MAX && tail == Q.ready && tail < limit && tail < Q.head;
        pthread_mutex_unlock(&g_q);
        if (!ring)
            return 0;
        if (wait) {
            sched_yield();
            continue;
        }
        if (tail >= ready)
            return 0;
        size_t at = (size_t)(tail % QUEUE_CAP);
        size_t n = (size_t)(ready - tail) < QUEUE_CAP - at ? (size_t)(ready - tail) : QUEUE_CAP - at;
        if (send_all(ring + at, n) < 0)
            return -1;
        pthread_mutex_lock(&g_q);
        Q.tail += n; /* producers never write into [tail, head), so the bytes were stable while sent */
        pthread_mutex_unlock(&g_q);
    }
}

/* ---- records from JVM events --------------------------------------------------------------------------- */

static JNIEnv *jni_env(void) {
    JNIEnv *env = NULL;
    if ((*g_vm)->GetEnv(g_vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK)
        return NULL;
    return env;
}

static void encode_method(struct buf *b, JNIEnv *jni, jmethodID m) {
    jclass klass = NULL;
    char *cls_sig = NULL, *name = NULL, *sig = NULL, *src = NULL;
    jint mods = 0, n_lines = 0, bytecode_len = -1;
    jlocation start = 0, end = -1;
    jvmtiLineNumberEntry *lines = NULL;

    /* Each lookup may fail (unloaded class, no debug info, native method): leave that field empty. */
    if (JV(GetMethodDeclaringClass, m, &klass) == JVMTI_ERROR_NONE && klass) {
        if (JV(GetClassSignature, klass, &cls_sig, NULL) != JVMTI_ERROR_NONE)
            cls_sig = NULL;
        if (JV(GetSourceFileName, klass, &src) != JVMTI_ERROR_NONE)
            src = NULL;
    }
    if (JV(GetMethodName, m, &name, &sig, NULL) != JVMTI_ERROR_NONE)
        name = sig = NULL;
    if (JV(GetMethodModifiers, m, &mods) != JVMTI_ERROR_NONE)
        mods = 0;
    if (!(mods & (ACC_NATIVE | ACC_ABSTRACT)) && JV(GetMethodLocation, m, &start, &end) == JVMTI_ERROR_NONE &&
        start == 0 && end >= 0 && end < INT32_MAX)
        bytecode_len = (jint)(end + 1);
    if (JV(GetLineNumberTable, m, &n_lines, &lines) != JVMTI_ERROR_NONE || n_lines < 0 || !lines) {
        n_lines = 0;
        lines = NULL;
    }

    size_t off = frame_begin(b, K_METHOD);
    put_u64(b, (uintptr_t)m);
    put_str(b, cls_sig);
    put_str(b, name);
    put_str(b, sig);
    put_str(b, src);
    put_u32(b, mods);
    put_u32(b, bytecode_len);
    put_u32(b, n_lines);
    for (jint i = 0; i < n_lines; i++) {
        put_u32(b, lines[i].start_location);
        put_u32(b, lines[i].line_number);
    }
    frame_end(b, off);

    JV(Deallocate, (unsigned char *)cls_sig);
    JV(Deallocate, (unsigned char *)src);
    JV(Deallocate, (unsigned char *)name);
    JV(Deallocate, (unsigned char *)sig);
    JV(Deallocate, (unsigned char *)lines);
    if (klass && jni)
        (*jni)->DeleteLocalRef(jni, klass);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static size_t sort_unique(uint64_t *v, size_t n) {
    if (n < 2)
        return n;
    qsort(v, n, sizeof *v, cmp_u64);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (v[i] != v[k - 1])
            v[k++] = v[i];
    return k;
}

static jint pc_frames(const PCStackInfo *pc) {
    return pc->numstackframes > 0 && pc->methods && pc->bcis ? pc->numstackframes : 0;
}

#define MAX_INLINE_RECS 8

struct inline_info {
    const jvmtiCompiledMethodLoadInlineRecord *recs[MAX_INLINE_RECS];
    size_t n_recs;
    uint64_t n_pcs, n_frames;
};

/* HotSpot passes one INLINE_INFO record; other VMs/forks may chain more kinds, so walk the list. */
static void collect_inline(const void *compile_info, struct inline_info *ii) {
    memset(ii, 0, sizeof *ii);
    const jvmtiCompiledMethodLoadRecordHeader *h = compile_info;
    for (int hops = 0; h && hops < 64; h = h->next, hops++) {
        if (h->kind != JVMTI_CMLR_INLINE_INFO || ii->n_recs == MAX_INLINE_RECS)
            continue;
        const jvmtiCompiledMethodLoadInlineRecord *r = (const jvmtiCompiledMethodLoadInlineRecord *)h;
        if (r->numpcs <= 0 || !r->pcinfo)
            continue;
        ii->recs[ii->n_recs++] = r;
        ii->n_pcs += (uint64_t)r->numpcs;
        for (jint i = 0; i < r->numpcs; i++)
            ii->n_frames += (uint64_t)pc_frames(&r->pcinfo[i]);
    }
}

static void encode_nmethod(struct buf *b, jmethodID method, jint code_size, const void *code_addr, int replayed,
                           const struct inline_info *ii) {
    size_t off = frame_begin(b, K_NMETHOD_LOAD);
    put_u64(b, (uintptr_t)method);
    put_u64(b, (uintptr_t)code_addr);
    put_u32(b, code_size);
    put_u8(b, replayed);
    put_u8(b, 0);
    put_u16(b, 0);
    put_u32(b, ii->n_pcs);
    for (size_t r = 0; r < ii->n_recs; r++) {
        for (jint i = 0; i < ii->recs[r]->numpcs; i++) {
            const PCStackInfo *pc = &ii->recs[r]->pcinfo[i];
            jint nf = pc_frames(pc);
            put_u64(b, (uintptr_t)pc->pc);
            put_u32(b, nf);
            for (jint f = 0; f < nf; f++) {
                put_u64(b, (uintptr_t)pc->methods[f]);
                put_u32(b, pc->bcis[f]);
            }
        }
    }
    frame_end(b, off);
}

/* The distinct method ids (root + inlined) into ids[0 .. n_frames]; returns how many. */
static size_t referenced_ids(jmethodID root, const struct inline_info *ii, uint64_t *ids) {
    size_t n = 0;
    ids[n++] = (uintptr_t)root;
    for (size_t r = 0; r < ii->n_recs; r++) {
        for (jint i = 0; i < ii->recs[r]->numpcs; i++) {
            const PCStackInfo *pc = &ii->recs[r]->pcinfo[i];
            for (jint f = 0; f < pc_frames(pc); f++)
                if (pc->methods[f])
                    ids[n++] = (uintptr_t)pc->methods[f];
        }
    }
    return sort_unique(ids, n);
}

struct method_rec {
    uint64_t id;
    size_t off, len; /* its METHOD frame in the batch buffer */
    int include;
};

/* Grows the sub-tables the included ids go to; on failure the set is unchanged (caller holds g_q). */
static int ids_reserve(const struct method_rec *ms, size_t n_ms) {
    uint32_t extra[SUBSETS] = {0};
    for (size_t i = 0; i < n_ms; i++)
        if (ms[i].include)
            extra[subset_of(ms[i].id) - Q.ids]++;
    for (size_t k = 0; k < SUBSETS; k++)
        if (extra[k] && subset_reserve(&Q.ids[k], extra[k]) != 0)
            return -1;
    return 0;
}

/* Writes the included METHODs, then the NMETHOD_LOAD, to the queue bytes reserved at `at`. */
static void write_unit(uint8_t *ring, uint64_t at, const struct buf *bm, const struct method_rec *ms, size_t n_ms,
                       const struct buf *bn) {
    for (size_t i = 0; i < n_ms; i++) {
        if (ms[i].include) {
            ring_write(ring, at, bm->p + ms[i].off, ms[i].len);
            at += ms[i].len;
        }
    }
    ring_write(ring, at, bn->p, bn->len);
}

enum { COMMIT_DONE, COMMIT_RETRY };

/* Sends or enqueues the METHODs (bm, ms) that are still unsent on connection `gen`, then the NMETHOD_LOAD
 * (bn), as one unit. Returns COMMIT_RETRY when the connection or the sent-id set changed since `gen` was read. */
static int commit_nmethod(const struct buf *bm, struct method_rec *ms, size_t n_ms, const struct buf *bn,
                          uint64_t gen, int replayed) {
    uint64_t total = bn->len, n_rec = 1;
    pthread_mutex_lock(&g_q);
    if (!Q.ring || Q.gen != gen) {
        int retry = Q.ring != NULL;
        pthread_mutex_unlock(&g_q);
        return retry ? COMMIT_RETRY : COMMIT_DONE;
    }
    /* Another thread may have sent some of these METHODs meanwhile. */
    for (size_t i = 0; i < n_ms; i++) {
        ms[i].include = !set_has(ms[i].id);
        if (ms[i].include) {
            total += ms[i].len;
            n_rec++;
        }
    }
    /* Forgetting also forgets the ids this NMETHOD_LOAD relies on without resending: encode them all again. */
    int over = Q.ids_n + n_rec > MAX_SENT_IDS;
    if (over && n_rec <= MAX_SENT_IDS && forget_sent_ids() == 0) {
        pthread_mutex_unlock(&g_q);
        return COMMIT_RETRY;
    }
    struct resv *r = NULL;
    int fail = over || ids_reserve(ms, n_ms) != 0;
    if (!fail && !replayed) {
        fail = queue_room() < total;
        /* A big unit is copied outside g_q; any unit behind an unpublished one needs its place recorded. */
        if (!fail && (total > COPY_UNDER_LOCK_MAX || Q.resv_first))
            fail = (r = malloc(sizeof *r)) == NULL;
    }
    if (fail) {
        Q.drop_records += n_rec;
        Q.drop_bytes += total;
        pthread_mutex_unlock(&g_q);
        return COMMIT_DONE;
    }
    for (size_t i = 0; i < n_ms; i++)
        if (ms[i].include)
            set_add(ms[i].id);
    if (!replayed) {
        uint8_t *ring = Q.ring;
        uint64_t at = Q.head;
        if (r) {
            q_reserve_locked(r, total);
        } else {
            Q.head += total;
            Q.ready = Q.head;
            note_high_water();
        }
        int outside = total > COPY_UNDER_LOCK_MAX;
        if (!outside) {
            write_unit(ring, at, bm, ms, n_ms, bn);
            if (r) {
                r->done = 1;
                resv_settle();
            }
        }
        pthread_mutex_unlock(&g_q);
        if (outside) {
            write_unit(ring, at, bm, ms, n_ms, bn);
            q_publish(r);
        }
        return COMMIT_DONE;
    }
    uint64_t limit = Q.head;
    pthread_mutex_unlock(&g_q);

    /* Replay, on the shim thread: flush what was queued before our ids went into the set (it may hold
     * METHODs we now rely on), but not what was queued after (it may rely on the METHODs we write now). */
    int err = drain(limit) < 0;
    for (size_t i = 0; i < n_ms && !err; i++)
        if (ms[i].include)
            err = send_all(bm->p + ms[i].off, ms[i].len) < 0;
    if (!err)
        err = send_all(bn->p, bn->len) < 0;
    if (err)
        g_replay_failed = 1;
    else
        g_replay_nmethods++;
    return COMMIT_DONE;
}

/* The smallest METHOD frame: header, id, four empty strings, access flags, bytecode length, no lines. */
#define MIN_METHOD_FRAME (HDR_SIZE + 8 + 4 * 4 + 4 + 4 + 4)

/* Encodes the METHODs ms[0 .. n_ms) into bm. A live record whose NMETHOD_LOAD takes nmethod_len bytes is given
 * up (-1) as soon as the queue has no room for it: checked before each lookup, for what is encoded so far and
 * the smallest frames of the METHODs left, so that no compilation pays for lookups of a record then dropped.
 * The replay gives up when the VM is dying. */
static int encode_methods(struct buf *bm, JNIEnv *jni, struct method_rec *ms, size_t n_ms, size_t nmethod_len,
                          int replayed) {
    bm->len = 0;
    for (size_t i = 0; i < n_ms; i++) {
        if (replayed ? replay_over()
                     : !queue_has_room(nmethod_len + bm->len + (n_ms - i) * MIN_METHOD_FRAME))
            return -1;
        ms[i].off = bm->len;
        encode_method(bm, jni, (jmethodID)(uintptr_t)ms[i].id);
        ms[i].len = bm->len - ms[i].off;
    }
    return 0;
}

static void JNICALL on_compiled_method_load(jvmtiEnv *jvmti, jmethodID method, jint code_size,
                                            const void *code_addr, jint map_length,
                                            const jvmtiAddrLocationMap *map, const void *compile_info) {
    (void)jvmti, (void)map_length, (void)map;
    if (!atomic_load(&g_active) || !method)
        return;
    int replayed = on_replay_thread();
    if (replayed && replay_over())
        return;

    struct inline_info ii;
    collect_inline(compile_info, &ii);
    uint64_t frame_len = MIN_FRAME_LEN + 28 + ii.n_pcs * 12 + ii.n_frames * 12;
    if (frame_len > MAX_FRAME_LEN || (!replayed && !queue_has_room(frame_len + 4))) {
        /* Checked before anything is built; encode_methods checks again before each lookup, for the METHODs
         * too: a reader that does not keep up must not make every compilation pay for a record then dropped. */
        count_drop(1, frame_len + 4);
        return;
    }

    struct buf bn = {0}, bm = {0};
    struct method_rec *ms = NULL;
    uint64_t *ids = malloc((size_t)(ii.n_frames + 1) * sizeof *ids);
    size_t n_ids = ids ? referenced_ids(method, &ii, ids) : 0;
    if (ids)
        ms = malloc(n_ids * sizeof *ms);
    JNIEnv *jni = jni_env();
    encode_nmethod(&bn, method, code_size, code_addr, replayed, &ii);
    if (!ids || !ms || bn.bad) {
        count_drop(1, frame_len + 4);
        goto out;
    }

    /* A reconnect or a cleared sent-id set between choosing which METHODs to send and enqueueing them
     * invalidates the choice: start over. */
    for (int attempt = 0;; attempt++) {
        if (attempt == 3) {
            count_drop(1, bn.len);
            break;
        }
        size_t n_ms = 0;
        pthread_mutex_lock(&g_q);
        uint64_t gen = Q.gen;
        int up = Q.ring != NULL;
        for (size_t i = 0; up && i < n_ids; i++)
            if (!set_has(ids[i]))
                ms[n_ms++].id = ids[i];
        pthread_mutex_unlock(&g_q);
        if (!up)
            break;

        int given_up = encode_methods(&bm, jni, ms, n_ms, bn.len, replayed) < 0;
        if (given_up || bm.bad) {
            if (!(given_up && replayed))
                count_drop(1 + n_ms, bm.len + bn.len);
            break;
        }
        wr_le(bn.p + 8, now_ns(), 8); /* not older than the METHODs just encoded */
        if (commit_nmethod(&bm, ms, n_ms, &bn, gen, replayed) == COMMIT_DONE)
            break;
    }
out:
    free(ms);
    free(ids);
    free(bm.p);
    free(bn.p);
}

static void JNICALL on_compiled_method_unload(jvmtiEnv *jvmti, jmethodID method, const void *code_addr) {
    (void)jvmti;
    if (!atomic_load(&g_active))
        return;
    struct buf b = {0};
    size_t off = frame_begin(&b, K_NMETHOD_UNLOAD);
    put_u64(&b, (uintptr_t)method);
    put_u64(&b, (uintptr_t)code_addr);
    frame_end(&b, off);
    q_push(&b);
    free(b.p);
}

static void JNICALL on_dynamic_code_generated(jvmtiEnv *jvmti, const char *name, const void *address,
                                              jint length) {
    (void)jvmti;
    if (!atomic_load(&g_active))
        return;
    int replayed = on_replay_thread();
    if (replayed && replay_over())
        return;
    struct buf b = {0};
    size_t off = frame_begin(&b, K_CODE_BLOB);
    put_u64(&b, (uintptr_t)address);
    put_u32(&b, length);
    put_u8(&b, replayed);
    put_u8(&b, 0);
    put_u16(&b, 0);
    put_name(&b, name);
    frame_end(&b, off);
    if (!replayed) {
        q_push(&b);
    } else if (b.bad) {
        count_drop(1, b.len);
    } else if (send_all(b.p, b.len) < 0) {
        g_replay_failed = 1;
    } else {
        g_replay_blobs++;
    }
    free(b.p);
}

/* Accounts the time an application thread spent in a thread callback since t0. */
static void note_thread_event(uint64_t t0) {
    uint64_t ns = now_ns() - t0, max = atomic_load(&g_thread_event_max_ns);
    atomic_fetch_add(&g_thread_events, 1);
    atomic_fetch_add(&g_thread_event_ns, ns);
    while (ns > max && !atomic_compare_exchange_weak(&g_thread_event_max_ns, &max, ns))
        ;
}

static void JNICALL on_thread_start(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread) {
    (void)jvmti;
    if (!atomic_load(&g_active))
        return;
    uint64_t t0 = now_ns();
    uint32_t tid = (uint32_t)syscall(SYS_gettid); /* ThreadStart runs on the new thread */
    jvmtiThreadInfo info;
    memset(&info, 0, sizeof info);
    if (JV(GetThreadInfo, thread, &info) != JVMTI_ERROR_NONE)
        memset(&info, 0, sizeof info);
    struct buf b = {0};
    size_t off = frame_begin(&b, K_THREAD_START);
    put_u32(&b, tid);
    put_name(&b, info.name);
    frame_end(&b, off);
    q_push(&b);
    free(b.p);
    JV(Deallocate, (unsigned char *)info.name);
    if (jni) {
        if (info.thread_group)
            (*jni)->DeleteLocalRef(jni, info.thread_group);
        if (info.context_class_loader)
            (*jni)->DeleteLocalRef(jni, info.context_class_loader);
    }
    note_thread_event(t0);
}

static void JNICALL on_thread_end(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread) {
    (void)jvmti, (void)jni, (void)thread;
    if (!atomic_load(&g_active))
        return;
    uint64_t t0 = now_ns();
    struct buf b = {0};
    size_t off = frame_begin(&b, K_THREAD_END);
    put_u32(&b, (uint32_t)syscall(SYS_gettid));
    frame_end(&b, off);
    q_push(&b);
    free(b.p);
    note_thread_event(t0);
}

/* ---- shim thread: commands ----------------------------------------------------------------------------- */

static int send_retransform_done(uint32_t requested, uint32_t done, jvmtiError err) {
    struct buf b = {0};
    size_t off = frame_begin(&b, K_RETRANSFORM_DONE);
    put_u32(&b, requested);
    put_u32(&b, done);
    put_u32(&b, err);
    frame_end(&b, off);
    int rc = send_buf(&b);
    free(b.p);
    return rc;
}

/* Gives can_retransform_classes back once a retransform is done: the shim keeps no capability it does not
 * use (HotSpot derives its JIT-relevant flags from the capabilities *potentially* available, so holding it
 * costs nothing measurable there, but an environment should not keep what it no longer needs). */
static void relinquish_retransform(void) {
    if (!g_can_retransform || vm_dying())
        return;
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_retransform_classes = 1;
    if (JV(RelinquishCapabilities, &caps) == JVMTI_ERROR_NONE)
        g_can_retransform = 0;
}

struct cls {
    jclass k;
    jint hash;
};

static int cmp_cls(const void *a, const void *b) {
    jint x = ((const struct cls *)a)->hash, y = ((const struct cls *)b)->hash;
    return x < y ? -1 : x > y;
}

/* Takes can_retransform_classes for a retransform (relinquish_retransform gives it back). */
static jvmtiError take_retransform(void) {
    if (g_can_retransform)
        return JVMTI_ERROR_NONE;
    if (vm_dying())
        return JVMTI_ERROR_WRONG_PHASE;
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_retransform_classes = 1;
    jvmtiError err = JV(AddCapabilities, &caps);
    g_can_retransform = err == JVMTI_ERROR_NONE;
    return err;
}

/* Puts the modifiable ones among the distinct classes declaring ids[0 .. n_ids) into ks (local refs; cs is
 * scratch with as many entries) and returns how many; *distinct is how many distinct classes there were. */
static size_t modifiable_classes(JNIEnv *jni, const uint64_t *ids, size_t n_ids, struct cls *cs, jclass *ks,
                                 uint32_t *distinct) {
    size_t n_cs = 0;
    for (size_t i = 0; i < n_ids && !vm_dying(); i++) {
        jclass klass = NULL;
        if (JV(GetMethodDeclaringClass, (jmethodID)(uintptr_t)ids[i], &klass) != JVMTI_ERROR_NONE || !klass)
            continue;
        cs[n_cs].k = klass;
        if (JV(GetObjectHashCode, klass, &cs[n_cs].hash) != JVMTI_ERROR_NONE)
            cs[n_cs].hash = 0;
        n_cs++;
    }
    /* Dedupe classes: equal identity hashes first, then IsSameObject within a run. */
    qsort(cs, n_cs, sizeof *cs, cmp_cls);
    size_t n_ks = 0, run = 0;
    for (size_t i = 0; i < n_cs && !vm_dying(); i++) {
        if (i > 0 && cs[i].hash != cs[i - 1].hash)
            run = n_ks;
        int dup = 0;
        for (size_t j = run; j < n_ks && !dup; j++)
            dup = (*jni)->IsSameObject(jni, ks[j], cs[i].k);
        if (!dup)
            ks[n_ks++] = cs[i].k;
    }
    *distinct = (uint32_t)n_ks;
    size_t m = 0;
    for (size_t i = 0; i < n_ks && !vm_dying(); i++) {
        jboolean ok = JNI_FALSE;
        if (JV(IsModifiableClass, ks[i], &ok) == JVMTI_ERROR_NONE && ok)
            ks[m++] = ks[i];
    }
    return m;
}

/* Retransforms (with unchanged bytes) the classes declaring the given methods. */
static int retransform(JNIEnv *jni, const uint8_t *p, size_t len) {
    if (len < 4)
        return -1;
    uint32_t n = (uint32_t)rd_le(p, 4);
    if (n > MAX_RETRANSFORM)
        return send_retransform_done(0, 0, JVMTI_ERROR_ILLEGAL_ARGUMENT);
    if (len < 4 + (size_t)n * 8)
        return -1;

    uint64_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    struct cls *cs = malloc(((size_t)n + 1) * sizeof *cs);
    jclass *ks = malloc(((size_t)n + 1) * sizeof *ks);
    if (!ids || !cs || !ks) {
        free(ids), free(cs), free(ks);
        return send_retransform_done(0, 0, JVMTI_ERROR_OUT_OF_MEMORY);
    }
    for (uint32_t i = 0; i < n; i++)
        ids[i] = rd_le(p + 4 + (size_t)i * 8, 8);
    size_t n_ids = sort_unique(ids, n);

    /* Only ids this connection was told about are real jmethodIDs; anything else would crash the VM. */
    size_t k = 0;
    pthread_mutex_lock(&g_q);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] && set_has(ids[i]))
            ids[k++] = ids[i];
    pthread_mutex_unlock(&g_q);
    n_ids = k;

    jvmtiError err = take_retransform();
    uint32_t requested = 0, done = 0;
    /* One local ref per class; HotSpot caps a frame's declared capacity at MaxJNILocalCapacity (65536). */
    jint capacity = n_ids + 16 < MAX_RETRANSFORM ? (jint)n_ids + 16 : (jint)MAX_RETRANSFORM;
    if (err == JVMTI_ERROR_NONE && !vm_dying() && (*jni)->PushLocalFrame(jni, capacity) == 0) {
        size_t m = modifiable_classes(jni, ids, n_ids, cs, ks, &requested);
        if (vm_dying())
            err = JVMTI_ERROR_WRONG_PHASE;
        else if (m > 0)
            err = JV(RetransformClasses, (jint)m, ks);
        if (err == JVMTI_ERROR_NONE)
            done = (uint32_t)m;
        if (!vm_dying())
            (*jni)->PopLocalFrame(jni, NULL);
    } else if (err == JVMTI_ERROR_NONE) {
        if (!vm_dying())
            (*jni)->ExceptionClear(jni);
        err = vm_dying() ? JVMTI_ERROR_WRONG_PHASE : JVMTI_ERROR_OUT_OF_MEMORY;
    }
    relinquish_retransform(); /* whatever failed after the capability was taken */
    free(ids), free(cs), free(ks);
    return send_retransform_done(requested, done, err);
}

struct rx {
    uint8_t *p;
    size_t len, cap;
    uint64_t skip; /* bytes of an ignored frame still to discard */
};

/* Reads and handles whatever the daemon sent. Returns -1 when the connection is over. */
static int rx_pump(JNIEnv *jni, struct rx *r) {
    for (;;) {
        ssize_t n;
        if (r->skip) {
            uint8_t junk[4096];
            n = recv(g_fd, junk, r->skip < sizeof junk ? (size_t)r->skip : sizeof junk, MSG_DONTWAIT);
            if (n > 0)
                r->skip -= (uint64_t)n;
        } else {
            if (r->len == r->cap) {
                size_t cap = r->cap ? r->cap * 2 : 65536;
                uint8_t *p = realloc(r->p, cap);
                if (!p)
                    return -1;
                r->p = p;
                r->cap = cap;
            }
            n = recv(g_fd, r->p + r->len, r->cap - r->len, MSG_DONTWAIT);
            if (n > 0)
                r->len += (size_t)n;
        }
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }

        size_t pos = 0;
        while (!r->skip && r->len - pos >= HDR_SIZE) {
            uint32_t len = (uint32_t)rd_le(r->p + pos, 4);
            uint16_t kind = (uint16_t)rd_le(r->p + pos + 4, 2);
            if (len < MIN_FRAME_LEN || len > MAX_FRAME_LEN)
                return -1;
            size_t need = 4 + (size_t)len, have = r->len - pos;
            if (kind != K_RETRANSFORM && kind != K_FORGET_METHODS) {
                if (have >= need) {
                    pos += need;
                } else {
                    r->skip = need - have;
                    pos = r->len;
                }
                continue;
            }
            if (have < need) {
                if (need > r->cap) {
                    uint8_t *p = realloc(r->p, need);
                    if (!p)
                        return -1;
                    r->p = p;
                    r->cap = need;
                }
                break;
            }
            if (kind == K_RETRANSFORM && retransform(jni, r->p + pos + HDR_SIZE, len - MIN_FRAME_LEN) < 0)
                return -1;
            if (kind == K_FORGET_METHODS) {
                pthread_mutex_lock(&g_q);
                forget_sent_ids(); /* a full queue refuses: the daemon asks again later */
                pthread_mutex_unlock(&g_q);
            }
            pos += need;
        }
        memmove(r->p, r->p + pos, r->len - pos);
        r->len -= pos;
    }
}

/* ---- shim thread: session ------------------------------------------------------------------------------ */

static const jvmtiEvent k_events[] = {
    JVMTI_EVENT_COMPILED_METHOD_LOAD, JVMTI_EVENT_COMPILED_METHOD_UNLOAD, JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
    JVMTI_EVENT_THREAD_START,         JVMTI_EVENT_THREAD_END,
};

static void set_events(jvmtiEventMode mode) {
    for (size_t i = 0; i < sizeof k_events / sizeof k_events[0]; i++)
        JV(SetEventNotificationMode, mode, k_events[i], NULL);
}

/* System.getProperty(key) as a malloc'd string, or NULL. */
static char *java_property(JNIEnv *jni, const char *key) {
    char *val = NULL;
    if ((*jni)->PushLocalFrame(jni, 8) != 0) {
        (*jni)->ExceptionClear(jni);
        return NULL;
    }
    /* Every call that can throw is checked before the next JNI call (-Xcheck:jni asks for it). */
    jstring jval = NULL;
    jclass sys = (*jni)->FindClass(jni, "java/lang/System");
    jmethodID get = NULL;
    jstring jkey = NULL;
    if (sys && !(*jni)->ExceptionCheck(jni))
        get = (*jni)->GetStaticMethodID(jni, sys, "getProperty", "(Ljava/lang/String;)Ljava/lang/String;");
    if (get && !(*jni)->ExceptionCheck(jni))
        jkey = (*jni)->NewStringUTF(jni, key);
    if (jkey && !(*jni)->ExceptionCheck(jni))
        jval = (jstring)(*jni)->CallStaticObjectMethod(jni, sys, get, jkey);
    if ((*jni)->ExceptionCheck(jni)) {
        (*jni)->ExceptionClear(jni);
        jval = NULL;
    }
    const char *chars = jval ? (*jni)->GetStringUTFChars(jni, jval, NULL) : NULL;
    if (chars) {
        val = strdup(chars);
        (*jni)->ReleaseStringUTFChars(jni, jval, chars);
    }
    if ((*jni)->ExceptionCheck(jni)) /* GetStringUTFChars may throw OutOfMemoryError */
        (*jni)->ExceptionClear(jni);
    (*jni)->PopLocalFrame(jni, NULL);
    return val;
}

/* A system property, or NULL (also once the VM is dying). JVMTI only knows the VM's own properties; java.version
 * is set by the class library, read through System.getProperty. */
static char *vm_property(JNIEnv *jni, const char *key) {
    char *v = NULL, *val = NULL;
    if (vm_dying())
        return NULL;
    if (JV(GetSystemProperty, key, &v) == JVMTI_ERROR_NONE && v && v[0])
        val = strdup(v);
    JV(Deallocate, (unsigned char *)v);
    if (!val && !vm_dying())
        val = java_property(jni, key);
    return val;
}

static int send_hello(JNIEnv *jni, uint32_t attach_count) {
    static const char *const props[] = {"java.vm.version", "java.version", "java.vm.name"};
    char *vals[3] = {NULL, NULL, NULL};
    struct buf b = {0};
    for (int i = 0; i < 3; i++)
        vals[i] = vm_property(jni, props[i]);
    size_t off = frame_begin(&b, K_HELLO);
    put_u32(&b, PROTOCOL_VERSION);
    put_u32(&b, getpid());
    put_u32(&b, attach_count);
    put_str(&b, JVMPERF_SHIM_VERSION);
    for (int i = 0; i < 3; i++)
        put_str(&b, vals[i]);
    frame_end(&b, off);
    for (int i = 0; i < 3; i++)
        free(vals[i]);
    int rc = send_buf(&b);
    free(b.p);
    return rc;
}

static int send_replay_done(void) {
    struct buf b = {0};
    size_t off = frame_begin(&b, K_REPLAY_DONE);
    put_u32(&b, g_replay_nmethods);
    put_u32(&b, g_replay_blobs);
    frame_end(&b, off);
    int rc = send_buf(&b);
    free(b.p);
    return rc;
}

/* Sends DROPPED when the counters moved, at most every 100 ms. */
static int maybe_send_dropped(uint64_t *last_records, uint64_t *last_bytes, uint64_t *last_time) {
    pthread_mutex_lock(&g_q);
    uint64_t records = Q.drop_records, bytes = Q.drop_bytes;
    pthread_mutex_unlock(&g_q);
    uint64_t now = now_ns();
    if ((records == *last_records && bytes == *last_bytes) || now - *last_time < DROPPED_INTERVAL_NS)
        return 0;
    struct buf b = {0};
    size_t off = frame_begin(&b, K_DROPPED);
    put_u64(&b, records);
    put_u64(&b, bytes);
    frame_end(&b, off);
    int rc = send_buf(&b);
    free(b.p);
    *last_records = records;
    *last_bytes = bytes;
    *last_time = now;
    return rc;
}

/* Sends STATS (the shim's own memory) at most every second. */
static int maybe_send_stats(const struct rx *r, uint64_t *last_time) {
    uint64_t now = now_ns();
    if (now - *last_time < STATS_INTERVAL_NS)
        return 0;
    *last_time = now;
    pthread_mutex_lock(&g_q);
    uint64_t used = Q.head - Q.tail, high_water = Q.high_water, forgotten = Q.forgotten;
    uint64_t ids_n = Q.ids_n, ids_bytes = Q.ids_bytes + sizeof Q.ids;
    uint64_t drop_records = Q.drop_records, drop_bytes = Q.drop_bytes;
    pthread_mutex_unlock(&g_q);
    struct buf b = {0};
    size_t off = frame_begin(&b, K_STATS);
    put_u32(&b, STATS_VERSION);
    put_u64(&b, QUEUE_CAP + ids_bytes + r->cap + OUT_CAP);
    put_u64(&b, QUEUE_CAP);
    put_u64(&b, used);
    put_u64(&b, high_water);
    put_u64(&b, ids_n);
    put_u64(&b, ids_bytes);
    put_u64(&b, r->cap);
    put_u64(&b, OUT_CAP);
    put_u64(&b, forgotten);
    /* version 2 */
    put_u64(&b, drop_records);
    put_u64(&b, drop_bytes);
    put_u64(&b, atomic_load(&g_thread_events));
    put_u64(&b, atomic_load(&g_thread_event_ns));
    put_u64(&b, atomic_load(&g_thread_event_max_ns));
    jvmtiCapabilities held;
    memset(&held, 0, sizeof held);
    if (vm_dying())
        held.can_retransform_classes = g_can_retransform;
    else if (JV(GetCapabilities, &held) != JVMTI_ERROR_NONE)
        held.can_retransform_classes = 0;
    put_u64(&b, held.can_retransform_classes);
    frame_end(&b, off);
    int rc = send_buf(&b);
    free(b.p);
    return rc;
}

static int connect_unix(const char *path) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path)); /* length checked by parse_options */
    /* Non-blocking: a daemon that does not accept (full backlog) fails the attach instead of stalling it. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The daemon at the other end of fd is still there: no hang-up or error on the socket. A daemon that exited
 * or was killed has had its end closed by the kernel. Never waits. */
static int daemon_alive(int fd) {
    if (fd < 0)
        return 0;
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    int pr;
    do
        pr = poll(&pfd, 1, 0);
    while (pr < 0 && errno == EINTR);
    /* A failing poll says nothing about the reader: count it as there rather than take its session. */
    return pr <= 0 || !(pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

/* Tells the daemon listening at path that the shim serves another one (owner_pid) and hangs up. Never waits: if
 * the record does not fit in the socket right away, that daemon times out instead. */
static void send_busy(const char *path, uint32_t owner_pid) {
    int fd = connect_unix(path);
    if (fd < 0)
        return;
    struct buf b = {0};
    size_t off = frame_begin(&b, K_BUSY);
    put_u32(&b, BUSY_VERSION);
    put_u32(&b, owner_pid);
    frame_end(&b, off);
    if (!b.bad)
        (void)!send(fd, b.p, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(b.p);
    close(fd);
}

static uint64_t my_token(void) {
    return (uint64_t)(uintptr_t)&g_own_block; /* unique per loaded copy */
}

static struct session_block *map_block(int fd) {
    void *p = mmap(NULL, sizeof(struct session_block), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Finds the block another copy made, else makes it; caller holds g_ctl. Copies attach one at a time (the JVM
 * runs every attach request on its Attach Listener), so two never make one each. */
static void find_session_block(void) {
    if (g_sess != &g_own_block)
        return;
    DIR *dir = opendir("/proc/self/fd");
    for (struct dirent *e; dir && g_sess == &g_own_block && (e = readdir(dir));) {
        char target[64];
        ssize_t n = readlinkat(dirfd(dir), e->d_name, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        struct stat st;
        int fd = atoi(e->d_name);
        if (strncmp(target, "/memfd:" SESSION_MEMFD " ", strlen("/memfd:" SESSION_MEMFD " ")) != 0 ||
            fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct session_block))
            continue;
        struct session_block *b = map_block(fd);
        if (b && atomic_load(&b->magic) == SESSION_MAGIC)
            g_sess = b;
        else if (b)
            munmap(b, sizeof *b);
    }
    if (dir)
        closedir(dir);
    if (g_sess != &g_own_block)
        return;
    /* The raw system call: glibc's memfd_create wrapper (2.27) is newer than some JVMs' glibc. */
    int fd = (int)syscall(SYS_memfd_create, SESSION_MEMFD, 1u /* MFD_CLOEXEC */);
    if (fd < 0)
        return;
    struct session_block *b = ftruncate(fd, sizeof *b) == 0 ? map_block(fd) : NULL;
    if (!b) {
        close(fd);
        return;
    }
    atomic_store(&b->fd, -1);
    atomic_store(&b->magic, SESSION_MAGIC);
    g_sess = b; /* fd stays open for good: it is how the other copies find the block */
}

/* The session's reader has read nothing for TAKEOVER_NS while bytes waited for it: it stopped reading. */
static int session_stalled(void) {
    uint64_t since = atomic_load(&g_sess->stalled_since);
    return since && now_ns() - since > TAKEOVER_NS;
}

/* Another copy serves a daemon that is there and reading: its pid in *pid. One whose daemon is gone or stopped
 * reading is asked to end its session (this copy's shim thread then waits for it, see claim_session). */
static int other_copy_serving(uint32_t *pid) {
    uint64_t owner = atomic_load(&g_sess->owner);
    if (!owner || owner == my_token())
        return 0;
    int fd = atomic_load(&g_sess->fd);
    if (fd < 0 || (daemon_alive(fd) && !session_stalled())) {
        *pid = atomic_load(&g_sess->daemon_pid);
        return 1;
    }
    atomic_store(&g_sess->stop, 1);
    return 0;
}

/* Makes this copy the session's owner, waiting up to CLAIM_WAIT_MS for one asked to stop; shim thread. */
#define CLAIM_WAIT_MS 3000
static int claim_session(int fd, uint32_t daemon_pid) {
    for (int waited = 0;; waited += POLL_MS) {
        uint64_t owner = 0;
        if (atomic_compare_exchange_strong(&g_sess->owner, &owner, my_token()))
            break;
        if (waited >= CLAIM_WAIT_MS || vm_dying())
            return -1;
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    atomic_store(&g_sess->stop, 0);
    atomic_store(&g_sess->stalled_since, 0);
    atomic_store(&g_sess->daemon_pid, daemon_pid);
    atomic_store(&g_sess->fd, fd);
    return 0;
}

static void release_session(void) {
    uint64_t owner = my_token();
    if (atomic_load(&g_sess->owner) != owner)
        return;
    atomic_store(&g_sess->fd, -1);
    atomic_store(&g_sess->stalled_since, 0);
    atomic_compare_exchange_strong(&g_sess->owner, &owner, 0);
}

/* GenerateEvents posts every code blob and nmethod there is to this thread's callbacks, which write them to the
 * socket (see replay_over). */
static void replay(void) {
    g_replay_thread = pthread_self();
    atomic_store(&g_replaying, 1);
    if (!replay_over())
        JV(GenerateEvents, JVMTI_EVENT_DYNAMIC_CODE_GENERATED);
    if (!replay_over())
        JV(GenerateEvents, JVMTI_EVENT_COMPILED_METHOD_LOAD);
    atomic_store(&g_replaying, 0);
}

/* Serves the daemon connected on fd (g_conn) until it goes away or a new attach replaces it, then closes fd. */
static void run_session(JNIEnv *jni, int fd, uint32_t attach_count, uint32_t daemon_pid) {
    uint8_t *ring = NULL;
    if (claim_session(fd, daemon_pid) != 0)
        goto out;
    ring = malloc(QUEUE_CAP);
    if (!ring)
        goto out;
    pthread_mutex_lock(&g_q);
    Q.ring = ring;
    Q.head = Q.ready = Q.tail = Q.high_water = 0;
    Q.forgotten = 0;
    Q.gen++;
    Q.drop_records = Q.drop_bytes = 0;
    pthread_mutex_unlock(&g_q);
    atomic_store(&g_thread_events, 0);
    atomic_store(&g_thread_event_ns, 0);
    atomic_store(&g_thread_event_max_ns, 0);
    g_fd = fd;
    g_unread = 0;
    g_replay_failed = 0;
    g_replay_nmethods = g_replay_blobs = 0;
    atomic_store(&g_active, 1);

    struct rx rx = {0};
    if (!vm_dying() && send_hello(jni, attach_count) == 0 && flush_out() == 0 && !vm_dying()) {
        set_events(JVMTI_ENABLE);
        replay();

        uint64_t last_records = 0, last_bytes = 0, last_time = 0, last_stats = 0;
        int ok = !g_replay_failed && drain(UINT64_MAX) == 0 && send_replay_done() == 0 && flush_out() == 0;
        while (ok && !atomic_load(&g_pending) && !atomic_load(&g_sess->stop) && !atomic_load(&g_vm_dead)) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int pr = poll(&pfd, 1, POLL_MS);
            if (pr < 0 && errno != EINTR)
                break;
            if (pr > 0 && rx_pump(jni, &rx) < 0)
                break;
            if (g_unread != 0)
                watch_reader();
            ok = drain(UINT64_MAX) == 0 && maybe_send_dropped(&last_records, &last_bytes, &last_time) == 0 &&
                 maybe_send_stats(&rx, &last_stats) == 0 && flush_out() == 0;
        }
        if (atomic_load(&g_vm_dead)) {
            /* The records posted in the JVM's last moments, then a clean end of the stream. No JVMTI call:
             * once on_vm_death stops waiting, one may block for good on a thread of an exiting VM. */
            atomic_store(&g_active, 0);
            uint64_t long_ago = 0;
            if (ok && drain(UINT64_MAX) == 0 && maybe_send_dropped(&last_records, &last_bytes, &long_ago) == 0)
                flush_out();
        } else {
            set_events(JVMTI_DISABLE);
        }
    }

    atomic_store(&g_active, 0);
    pthread_mutex_lock(&g_q);
    Q.ring = NULL; /* no new reservation; wait for the writers still copying into the ring */
    while (Q.resv_first)
        pthread_cond_wait(&g_q_idle, &g_q);
    set_clear();
    Q.gen++;
    pthread_mutex_unlock(&g_q);
    free(ring);
    free(rx.p);
    g_out_len = 0;
    g_fd = -1;
out:
    release_session();
    pthread_mutex_lock(&g_ctl);
    g_conn.fd = -1; /* before close: Agent_OnAttach polls it under g_ctl */
    pthread_mutex_unlock(&g_ctl);
    close(fd);
}

static void *shim_main(void *arg) {
    (void)arg;
    JNIEnv *jni = NULL;
    JavaVMAttachArgs args = {JNI_VERSION_1_6, (char *)"jvmperf-shim", NULL};
    prctl(PR_SET_NAME, "jvmperf-shim", 0, 0, 0); /* else it keeps the Attach Listener's comm */
    int attached = (*g_vm)->AttachCurrentThreadAsDaemon(g_vm, (void **)&jni, &args) == JNI_OK && jni;
    int dying = 0;
    for (;;) {
        pthread_mutex_lock(&g_ctl);
        dying = atomic_load(&g_vm_dead);
        if (!attached || !atomic_load(&g_pending) || dying) {
            if (g_next.fd >= 0)
                close(g_next.fd);
            g_next.fd = -1;
            atomic_store(&g_pending, 0);
            /* While the VM dies, on_vm_death waits for the detach below: the VM is still whole then, and
             * the exit does not wait (up to 300 ms, HotSpot's VM_Exit) for a thread left in native. */
            if (!dying)
                g_thread_running = 0;
            pthread_mutex_unlock(&g_ctl);
            break;
        }
        atomic_store(&g_pending, 0);
        int fd = g_next.fd;
        g_conn = g_next;
        g_next.fd = -1;
        uint32_t count = g_attach_count, daemon_pid = g_conn.pid;
        pthread_mutex_unlock(&g_ctl);
        run_session(jni, fd, count, daemon_pid);
    }
    /* Past on_vm_death's wait (a JVMTI call that ran long), detaching would enter an exited VM and block. */
    if (attached && !atomic_load(&g_vm_death_returned))
        (*g_vm)->DetachCurrentThread(g_vm);
    if (dying) {
        pthread_mutex_lock(&g_ctl);
        g_thread_running = 0;
        pthread_mutex_unlock(&g_ctl);
    }
    return NULL;
}

/* Caller holds g_ctl. */
static int start_thread(void) {
    if (g_thread_running)
        return 0;
    pthread_attr_t attr;
    pthread_t t;
    if (pthread_attr_init(&attr) != 0)
        return -1;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, shim_main, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return -1;
    g_thread_running = 1;
    return 0;
}

/* ---- agent entry points -------------------------------------------------------------------------------- */

static void JNICALL on_vm_init(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread) {
    (void)jvmti, (void)jni, (void)thread;
    JV(SetEventNotificationMode, JVMTI_DISABLE, JVMTI_EVENT_VM_INIT, NULL);
    pthread_mutex_lock(&g_ctl);
    g_live = 1;
    if (atomic_load(&g_pending) && start_thread() != 0) {
        close(g_next.fd); /* its reader sees the end of the stream and goes on without the agent */
        g_next.fd = -1;
        atomic_store(&g_pending, 0);
        warn("cannot start its thread; the JVM runs without it");
    }
    pthread_mutex_unlock(&g_ctl);
}

/* Lets the shim thread send what is queued and end the stream cleanly, waiting at most VM_DEATH_WAIT_MS. */
#define VM_DEATH_WAIT_MS 200
static void JNICALL on_vm_death(jvmtiEnv *jvmti, JNIEnv *jni) {
    (void)jvmti, (void)jni;
    atomic_store(&g_vm_death_ns, now_ns());
    atomic_store(&g_vm_dead, 1);
    for (int waited = 0; waited < VM_DEATH_WAIT_MS; waited += POLL_MS) {
        pthread_mutex_lock(&g_ctl);
        int running = g_thread_running;
        pthread_mutex_unlock(&g_ctl);
        if (!running)
            break;
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    atomic_store(&g_vm_death_returned, 1);
}

/* Creates the JVMTI environment once per process; caller holds g_ctl. */
static int init_env(JavaVM *vm, int onload) {
    if (g_jvmti)
        return 0;
    jvmtiEnv *env = NULL;
    if ((*vm)->GetEnv(vm, (void **)&env, JVMTI_VERSION_1_2) != JNI_OK || !env)
        return -1;
    /* Minimal on purpose: on JDK 21+ any AddCapabilities also turns on virtual-thread notifications. */
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_generate_compiled_method_load_events = 1;
    caps.can_get_line_numbers = 1;
    caps.can_get_source_file_name = 1;
    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.CompiledMethodLoad = on_compiled_method_load;
    cb.CompiledMethodUnload = on_compiled_method_unload;
    cb.DynamicCodeGenerated = on_dynamic_code_generated;
    cb.ThreadStart = on_thread_start;
    cb.ThreadEnd = on_thread_end;
    cb.VMInit = on_vm_init;
    cb.VMDeath = on_vm_death;
    if ((*env)->AddCapabilities(env, &caps) != JVMTI_ERROR_NONE ||
        (*env)->SetEventCallbacks(env, &cb, (jint)sizeof cb) != JVMTI_ERROR_NONE ||
        (*env)->SetEventNotificationMode(env, JVMTI_ENABLE, JVMTI_EVENT_VM_DEATH, NULL) != JVMTI_ERROR_NONE ||
        (onload && (*env)->SetEventNotificationMode(env, JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, NULL) !=
                       JVMTI_ERROR_NONE)) {
        (*env)->DisposeEnvironment(env);
        return -1;
    }
    g_vm = vm;
    g_jvmti = env;
    return 0;
}

/* options: "<absolute socket path>[,key=value...]"; daemon_pid=N is the daemon's pid (named in BUSY),
 * unknown keys are ignored. */
static int parse_options(const char *options, char *path, size_t cap, uint32_t *daemon_pid) {
    if (!options || options[0] != '/')
        return -1;
    size_t n = strcspn(options, ",");
    if (n >= cap)
        return -1;
    memcpy(path, options, n);
    path[n] = 0;
    *daemon_pid = 0;
    for (const char *kv = options + n; *kv == ','; kv += strcspn(kv + 1, ",") + 1)
        if (strncmp(kv + 1, "daemon_pid=", 11) == 0)
            *daemon_pid = (uint32_t)strtoul(kv + 12, NULL, 10);
    return 0;
}

/* The daemon the shim is serving or about to serve, if it is still connected and reading; caller holds g_ctl. */
static const struct daemon *current_daemon(void) {
    if (daemon_alive(g_next.fd))
        return &g_next;
    return daemon_alive(g_conn.fd) && !session_stalled() ? &g_conn : NULL;
}

/* Runs on the Attach Listener (or the main thread for Agent_OnLoad): only non-blocking socket calls. */
static jint start(JavaVM *vm, const char *options, int onload) {
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint32_t daemon_pid;
    if (!vm || parse_options(options, path, sizeof path, &daemon_pid) != 0) {
        if (onload)
            warn("expects the absolute path of jvmperf's socket as its option; the JVM runs without it");
        return onload ? JNI_OK : JNI_ERR;
    }
    pthread_mutex_lock(&g_ctl);
    int rc = init_env(vm, onload);
    if (rc == 0)
        find_session_block();
    const struct daemon *owner = rc == 0 ? current_daemon() : NULL;
    uint32_t other_pid = 0;
    if (owner) {
        send_busy(path, owner->pid); /* the current recording goes on untouched */
    } else if (rc == 0 && other_copy_serving(&other_pid)) {
        send_busy(path, other_pid); /* a copy of another jvmperf version serves it */
    } else if (rc == 0) {
        int fd = connect_unix(path);
        if (fd < 0) {
            rc = -1;
        } else {
            if (!onload)
                g_live = 1;
            if (g_next.fd >= 0)
                close(g_next.fd); /* its daemon went away before the shim thread took it */
            g_next = (struct daemon){fd, daemon_pid};
            g_attach_count++;
            atomic_store(&g_pending, 1); /* a session with a daemon that went away ends */
            if (g_live && start_thread() != 0) {
                close(fd);
                g_next.fd = -1;
                g_attach_count--;
                atomic_store(&g_pending, 0);
                rc = -1;
            }
        }
    }
    if (rc != 0 && !g_ever_ok && g_jvmti) {
        /* The JVM unloads the library after a failed first attach: leave nothing pointing into it. */
        (*g_jvmti)->DisposeEnvironment(g_jvmti);
        g_jvmti = NULL;
    }
    if (rc == 0)
        g_ever_ok = 1;
    pthread_mutex_unlock(&g_ctl);
    if (rc != 0 && onload) {
        /* A profiler must never keep a JVM from starting. */
        warn("no jvmperf is listening on its socket; the JVM runs without it");
        return JNI_OK;
    }
    return rc == 0 ? JNI_OK : JNI_ERR;
}

JNIEXPORT jint JNICALL Agent_OnAttach(JavaVM *vm, char *options, void *reserved) {
    (void)reserved;
    return start(vm, options, 0);
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    (void)reserved;
    return start(vm, options, 1);
}
