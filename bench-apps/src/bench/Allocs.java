package bench;

import java.lang.management.ManagementFactory;

/**
 * Ground truth for allocation profiling: three threads allocate at paced rates, each from a
 * method of its own, and the JVM counts each thread's bytes
 * ({@code com.sun.management.ThreadMXBean.getThreadAllocatedBytes}):
 *
 * <ul>
 *   <li>{@code smallArrays} ({@code alloc-small}): {@code long[4]}, 48 bytes, inside TLABs, at
 *       {@value #SMALL_MB_S} MB/s;
 *   <li>{@code mediumArrays} ({@code alloc-medium}): {@code long[2048]}, 16 KiB, at
 *       {@value #MEDIUM_MB_S} MB/s;
 *   <li>{@code largeArrays} ({@code alloc-large}): {@code long[524288]}, 4 MiB, outside TLABs,
 *       at {@value #LARGE_MB_S} MB/s.
 * </ul>
 *
 * <p>Each allocation escapes (into a ring of live references), so the JIT cannot remove it. Run
 * with {@code java -cp target/bench-apps/classes bench.Allocs [seconds]}. Output: {@code READY}
 * after ~2 s of warm-up, then every 100 ms {@code GT <System.nanoTime()> small=<bytes>
 * medium=<bytes> large=<bytes>}: each thread's bytes allocated since it started, as the JVM
 * counts them; at the end {@code DONE} with the same figures.
 */
public final class Allocs {
    static final String[] NAMES = {"small", "medium", "large"};
    static final long SMALL_MB_S = 300;
    static final long MEDIUM_MB_S = 24;
    static final long LARGE_MB_S = 100;
    static final long WARMUP_NANOS = 2_000_000_000L;
    static final long REPORT_NANOS = 100_000_000L;
    /** Allocations per pacing check. */
    static final int BATCH = 64;

    private Allocs() {}

    /** Keeps the last few allocations reachable (a few MiB of each kind). */
    static final class Ring {
        final Object[] slots;
        int next;

        Ring(int size) {
            slots = new Object[size];
        }

        void keep(Object o) {
            slots[next] = o;
            next = (next + 1) % slots.length;
        }
    }

    static void smallArrays(Ring ring) {
        for (int i = 0; i < BATCH * 64; i++) {
            ring.keep(new long[4]);
        }
    }

    static void mediumArrays(Ring ring) {
        for (int i = 0; i < BATCH; i++) {
            ring.keep(new long[2048]);
        }
    }

    static void largeArrays(Ring ring) {
        ring.keep(new long[524_288]);
    }

    /** Bytes one call of the kind's method allocates (array headers of 16 bytes). */
    static long bytesPerCall(int kind) {
        switch (kind) {
            case 0:
                return BATCH * 64L * (16 + 4 * 8);
            case 1:
                return BATCH * (16 + 2048L * 8);
            default:
                return 16 + 524_288L * 8;
        }
    }

    static long rate(int kind) {
        long mb = kind == 0 ? SMALL_MB_S : kind == 1 ? MEDIUM_MB_S : LARGE_MB_S;
        return mb * 1_000_000L;
    }

    static void run(int kind) {
        Ring ring = new Ring(kind == 2 ? 2 : 256);
        long perCall = bytesPerCall(kind);
        long start = System.nanoTime();
        long done = 0;
        while (true) {
            switch (kind) {
                case 0:
                    smallArrays(ring);
                    break;
                case 1:
                    mediumArrays(ring);
                    break;
                default:
                    largeArrays(ring);
                    break;
            }
            done += perCall;
            long due = start + (long) (done * 1e9 / rate(kind));
            long ahead = due - System.nanoTime();
            if (ahead > 1_000_000L) {
                try {
                    Thread.sleep(ahead / 1_000_000L);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }

    public static void main(String[] args) throws InterruptedException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 3600;
        com.sun.management.ThreadMXBean mx =
                (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        Thread[] threads = new Thread[NAMES.length];
        for (int i = 0; i < threads.length; i++) {
            int kind = i;
            threads[i] = new Thread(() -> run(kind), "alloc-" + NAMES[i]);
            threads[i].setDaemon(true);
            threads[i].start();
        }
        Thread.sleep(WARMUP_NANOS / 1_000_000L);
        System.out.println("READY");
        System.out.flush();
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        // The first line at once: a recording started at READY samples from its first moment.
        for (boolean first = true; ; first = false) {
            if (!first) {
                Thread.sleep(REPORT_NANOS / 1_000_000L);
            }
            long now = System.nanoTime();
            StringBuilder line = new StringBuilder(now < end ? "GT " : "DONE ").append(now);
            for (int i = 0; i < threads.length; i++) {
                line.append(' ')
                        .append(NAMES[i])
                        .append('=')
                        .append(mx.getThreadAllocatedBytes(threads[i].getId()));
            }
            System.out.println(line);
            System.out.flush();
            if (now >= end) {
                return;
            }
        }
    }
}
