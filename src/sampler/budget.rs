//! How large each thread's ring buffer is: large enough to hold the samples a busy thread makes
//! between two drains with margin, within the memory the kernel lets us lock for perf buffers.
//!
//! The kernel's rule (`perf_mmap` in kernel/events/core.c): every mapping locks its data pages
//! plus a header page. They are charged to the user up to `perf_event_mlock_kb` × online CPUs
//! (shared by all of the user's perf buffers), and beyond that to the process's pinned memory,
//! which may not exceed RLIMIT_MEMLOCK. Neither limit applies with CAP_IPC_LOCK or with
//! `perf_event_paranoid` = -1. There we set our own ceiling, since ring pages are unswappable
//! kernel memory allocated in full when mapped.

use procfs::Current;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A busy thread's ring holds this much of its CPU time in samples. The engine drains every
/// ring once per turn: a 20 ms poll timeout, a naming slice of 15 ms, the walk of what was
/// drained. On a 2-core VM with both cores busy, turns of 60–145 ms were measured (slices and
/// shim reads stretched by preemption); 250 ms rides out those with margin.
pub(super) const BUSY_HOLD_MS: u64 = 250;

/// A CPU's ring (per-CPU sampling) holds this much of that CPU's samples, whichever threads they
/// are of: there are few such rings, and a JVM of thousands of runnable threads can keep jvmperf
/// off a CPU for hundreds of milliseconds at a time (measured on `bench.ManyThreads` just after
/// its start: drains 100–350 ms apart).
pub(super) const CPU_HOLD_MS: u64 = 1000;

/// Every thread's ring holds this much when it opens, idle or not: enough for a turn or two of
/// a thread that turns busy, until the drain sees it and gives it a busy ring.
pub(super) const BASE_HOLD_MS: u64 = 50;

/// Records a ring holds at least: busy, and to begin with (so the wakeup at a quarter full
/// comes with a record or more).
const MIN_BUSY_RECORDS: usize = 12;
const MIN_BASE_RECORDS: usize = 4;

/// The smallest ring holds one record: where the budget is shared by thousands of threads (per-
/// thread sampling), most of them idle, a ring of one record each leaves room for the busy ones
/// to grow; a ring of two would take it all (3000 threads × 128 KiB with 32 KiB stacks).
const MIN_RECORDS: usize = 1;

/// Size caps per ring: a busy one (16 MiB is 100 ms at 5 kHz with 32 KiB stacks), and the one
/// every thread gets to begin with.
const MAX_BUSY_BYTES: usize = 16 << 20;
/// Size cap of a CPU's ring: 1 s at 999 Hz with 32 KiB stacks.
const MAX_CPU_BYTES: usize = 32 << 20;
const MAX_BASE_BYTES: usize = 2 << 20;

/// Ceiling on everything we lock where the kernel sets none, and its share of available memory.
const PRIVILEGED_MAX_BYTES: usize = 256 << 20;
const PRIVILEGED_MAX_SHARE_OF_AVAILABLE: usize = 32;

/// Threads that may appear after the sampler opens get a share of the budget too.
fn planned_threads(threads: usize) -> usize {
    threads + (threads / 4).max(4)
}

/// Pages locked for ring buffers by all samplers of this process (data and header pages).
static LOCKED_PAGES: AtomicUsize = AtomicUsize::new(0);

/// The locked memory our ring buffers may take, in pages (header pages included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub pages: usize,
    /// Whether the kernel sets the limit (else it is our own ceiling).
    pub kernel_limited: bool,
    /// Where the limit comes from, for messages: "perf_event_mlock_kb=516 × 2 CPUs + …".
    pub source: String,
}

/// Facts about this host and process that decide the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub page_size: usize,
    pub perf_event_mlock_kb: u64,
    pub online_cpus: usize,
    /// Soft RLIMIT_MEMLOCK in bytes (`u64::MAX`: unlimited).
    pub rlimit_memlock: u64,
    /// Pages the process has pinned already (`VmPin`), charged against RLIMIT_MEMLOCK too.
    pub pinned_pages: usize,
    pub cap_ipc_lock: bool,
    pub perf_event_paranoid: i64,
    /// `MemAvailable` in bytes, if known.
    pub mem_available: Option<u64>,
}

impl Host {
    pub fn current() -> Host {
        let page_size = super::ring::page_size();
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let rlimit_memlock =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
                .map_or(0, |(soft, _)| soft);
        let status = procfs::process::Process::myself().and_then(|me| me.status());
        let pinned_kib: u64 = status.as_ref().ok().and_then(|s| s.vmpin).unwrap_or(0);
        const CAP_IPC_LOCK: u32 = 14;
        let cap_ipc_lock = status
            .as_ref()
            .is_ok_and(|s| s.capeff & (1 << CAP_IPC_LOCK) != 0);
        // In bytes.
        let mem_available = procfs::Meminfo::current()
            .ok()
            .and_then(|m| m.mem_available);
        Host {
            page_size,
            // The kernel's default; a missing file means no perf events, which fails elsewhere.
            perf_event_mlock_kb: super::attr::read_sysctl("perf_event_mlock_kb")
                .and_then(|v| u64::try_from(v).ok())
                .unwrap_or(516),
            online_cpus: usize::try_from(cpus).unwrap_or(1).max(1),
            rlimit_memlock,
            pinned_pages: usize::try_from(pinned_kib * 1024).unwrap_or(0) / page_size,
            cap_ipc_lock,
            perf_event_paranoid: super::attr::read_sysctl("perf_event_paranoid").unwrap_or(2),
            mem_available,
        }
    }

    pub fn budget(&self) -> Budget {
        let page = self.page_size as u64;
        if self.cap_ipc_lock || self.perf_event_paranoid < 0 {
            let share = self
                .mem_available
                .map_or(u64::MAX, |m| m / PRIVILEGED_MAX_SHARE_OF_AVAILABLE as u64);
            let bytes = share.min(PRIVILEGED_MAX_BYTES as u64);
            let why = if self.cap_ipc_lock {
                "CAP_IPC_LOCK"
            } else {
                "perf_event_paranoid=-1"
            };
            return Budget {
                pages: usize::try_from(bytes / page).unwrap_or(usize::MAX),
                kernel_limited: false,
                source: format!(
                    "jvmperf's own ceiling of {} MiB (the kernel sets none with {why})",
                    bytes >> 20
                ),
            };
        }
        let per_user = self.perf_event_mlock_kb * 1024 / page * self.online_cpus as u64;
        let rlimit = if self.rlimit_memlock == u64::MAX {
            u64::MAX
        } else {
            (self.rlimit_memlock / page).saturating_sub(self.pinned_pages as u64)
        };
        let rlimit_text = if self.rlimit_memlock == u64::MAX {
            "unlimited".to_string()
        } else {
            format!("{} KiB", self.rlimit_memlock / 1024)
        };
        Budget {
            pages: usize::try_from(per_user.saturating_add(rlimit)).unwrap_or(usize::MAX),
            kernel_limited: true,
            source: format!(
                "perf_event_mlock_kb={} × {} CPUs + RLIMIT_MEMLOCK {rlimit_text}",
                self.perf_event_mlock_kb, self.online_cpus
            ),
        }
    }
}

/// Ring sizes for one sampler: every thread starts with a base ring; a thread that the drain
/// finds busy gets a busy ring, as large as the budget allows up to what [`BUSY_HOLD_MS`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingPlan {
    pub page_size: usize,
    /// Largest record a sample makes with these settings.
    pub record_bytes: usize,
    pub frequency_hz: u64,
    /// Data pages (powers of two) of a busy thread's ring as wanted, and of every new thread's
    /// ring as wanted and as the budget allows.
    pub busy_pages: usize,
    /// Data pages of a CPU's ring as wanted (per-CPU sampling).
    pub cpu_pages: usize,
    pub wanted_base_pages: usize,
    pub base_pages: usize,
    /// The smallest ring worth opening: [`MIN_RECORDS`] records.
    pub min_pages: usize,
    pub budget: Budget,
    /// Threads the base rings share half the budget among (those found at open, and some to
    /// come); busy rings come out of the other half.
    pub threads: usize,
    /// Rings the budget cut short: the smallest base ring a new thread got, and the smallest
    /// ring a busy thread grew to (below `busy_pages`).
    pub smallest_base: Option<usize>,
    pub smallest_busy: Option<usize>,
    /// The kernel refused a ring the budget allowed: other perf buffers of the user (another
    /// profiler, another jvmperf) hold part of its limit.
    pub refused: bool,
}

fn pages_for(bytes: usize, page_size: usize) -> usize {
    bytes.div_ceil(page_size).max(1).next_power_of_two()
}

/// The largest power of two at most `n` (0 for 0).
fn floor_pow2(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// The largest ring (data pages, a power of two) whose data and header pages fit in `pages`.
fn ring_within(pages: usize) -> usize {
    floor_pow2(pages.saturating_sub(1))
}

impl Budget {
    /// No limit: for sizes as the settings want them.
    pub fn unlimited() -> Budget {
        Budget {
            pages: usize::MAX,
            kernel_limited: false,
            source: "no limit".to_string(),
        }
    }
}

impl RingPlan {
    /// Sizes rings for `threads` threads now (and some to come) from `budget`, of which
    /// `available` pages are left (other samplers of this process may hold some).
    pub fn new(
        record_bytes: usize,
        frequency_hz: u64,
        page_size: usize,
        threads: usize,
        budget: Budget,
        available: usize,
    ) -> RingPlan {
        let rate = usize::try_from(frequency_hz).unwrap_or(usize::MAX);
        let records = |ms: u64, min: usize| (rate.saturating_mul(ms as usize) / 1000).max(min);
        let ring = |records: usize, max_bytes: usize| {
            let min = pages_for(MIN_RECORDS * record_bytes, page_size);
            pages_for(records.saturating_mul(record_bytes), page_size)
                .min(floor_pow2(max_bytes / page_size))
                .max(min)
        };
        let min_pages = ring(MIN_RECORDS, 0);
        let busy_pages = ring(records(BUSY_HOLD_MS, MIN_BUSY_RECORDS), MAX_BUSY_BYTES);
        let cpu_pages = ring(records(CPU_HOLD_MS, MIN_BUSY_RECORDS), MAX_CPU_BYTES);
        let wanted_base_pages =
            ring(records(BASE_HOLD_MS, MIN_BASE_RECORDS), MAX_BASE_BYTES).min(busy_pages);
        let threads = planned_threads(threads);
        let base_pages = wanted_base_pages
            .min(ring_within(available / 2 / threads))
            .max(min_pages);
        RingPlan {
            page_size,
            record_bytes,
            frequency_hz,
            busy_pages,
            cpu_pages,
            wanted_base_pages,
            base_pages,
            min_pages,
            budget,
            threads,
            smallest_base: None,
            smallest_busy: None,
            refused: false,
        }
    }

    /// Data pages for a new thread's ring when `available` pages of the budget are left: the
    /// planned base size while it fits, then at most half of what is left, so that threads
    /// past the plan still get rings, smaller and smaller, rather than none.
    pub fn pages_for_new(&self, available: usize) -> usize {
        if self.base_pages < available {
            return self.base_pages;
        }
        ring_within(available / 2)
            .min(self.base_pages)
            .max(self.min_pages)
    }

    /// Data pages to grow the ring of a busy thread to, from `current`, when `available` pages
    /// are left and `open` threads have rings: a busy ring if it fits besides the base rings
    /// planned for threads still to come, else at most half of what is left. Not larger than
    /// `current`: no room to grow.
    pub fn pages_for_busy(&self, current: usize, available: usize, open: usize) -> usize {
        let reserved = self.threads.saturating_sub(open) * (self.base_pages + 1);
        let room = available.saturating_sub(reserved);
        if self.busy_pages < room {
            self.busy_pages
        } else {
            ring_within(room / 2).min(self.busy_pages)
        }
        .max(current)
    }

    /// Data pages of each of `cpus` per-CPU rings when `available` pages are left: what
    /// [`CPU_HOLD_MS`] needs (every sample taken on the CPU lands there, whichever thread it is
    /// of), or an equal share of what is left.
    pub fn pages_per_cpu(&self, cpus: usize, available: usize) -> usize {
        self.cpu_pages
            .min(ring_within(available / cpus.max(1)))
            .max(self.min_pages)
    }

    /// Wall-clock mode: data pages of each of `cpus` switch rings when `available` pages are
    /// left: `wanted_bytes`, or an equal share of half of what is left (the sampling rings get
    /// the rest).
    pub fn switch_pages_per_cpu(
        &self,
        wanted_bytes: usize,
        cpus: usize,
        available: usize,
    ) -> usize {
        pages_for(wanted_bytes, self.page_size)
            .min(ring_within(available / 2 / cpus.max(1)))
            .max(self.min_pages)
    }

    /// Bytes of samples a JVM's queue may hold when `cpus` CPUs' rings are drained for it by
    /// another thread (the daemon's): what its threads can sample on every CPU in
    /// [`CPU_HOLD_MS`], the time a CPU's ring holds, while its engine is busy elsewhere.
    pub fn queue_bytes(&self, cpus: usize) -> usize {
        let rate = usize::try_from(self.frequency_hz).unwrap_or(usize::MAX);
        let records = (rate.saturating_mul(CPU_HOLD_MS as usize) / 1000).max(MIN_BUSY_RECORDS);
        records
            .saturating_mul(self.record_bytes)
            .saturating_mul(cpus.max(1))
    }

    /// Notes a ring of `pages` data pages mapped for a new thread (`busy` false) or a busy one,
    /// where `wanted` were asked for; when the kernel refused those, later rings get no more.
    pub fn mapped(&mut self, pages: usize, wanted: usize, busy: bool) {
        let (smallest, target) = if busy {
            (&mut self.smallest_busy, self.busy_pages)
        } else {
            (&mut self.smallest_base, self.wanted_base_pages)
        };
        if pages < target {
            *smallest = Some(smallest.map_or(pages, |s| s.min(pages)));
        }
        if pages < wanted {
            self.refused = true;
            if busy {
                self.busy_pages = self.busy_pages.min(pages);
            } else {
                self.base_pages = self.base_pages.min(pages);
            }
        }
    }

    /// Milliseconds of a busy thread's samples a ring of `pages` data pages holds.
    pub fn hold_ms(&self, pages: usize) -> u64 {
        let records = (pages * self.page_size / self.record_bytes.max(1)) as u64;
        records * 1000 / self.frequency_hz.max(1)
    }

    /// One line saying that rings are smaller than wanted, why, and what that risks; `None`
    /// when they are as large as wanted. Busy rings are predicted from `available` and `open`
    /// until a thread has been found busy.
    pub fn note(&self, available: usize, open: usize) -> Option<String> {
        let base = self
            .smallest_base
            .unwrap_or(self.base_pages)
            .min(self.base_pages);
        let busy = self
            .smallest_busy
            .unwrap_or_else(|| self.pages_for_busy(base, available, open));
        if base >= self.wanted_base_pages && busy >= self.busy_pages {
            return None;
        }
        let kib = |pages: usize| pages * self.page_size / 1024;
        let why = if self.refused {
            format!(
                "the kernel refused larger ones ({}; other perf buffers of this user count too)",
                self.budget.source
            )
        } else {
            format!(
                "the locked-memory budget ({}: {} KiB) is shared by ~{} threads",
                self.budget.source,
                kib(self.budget.pages),
                self.threads
            )
        };
        let fix = if self.budget.kernel_limited {
            "raise `sysctl kernel.perf_event_mlock_kb` or `ulimit -l`, run as root, or lower -F \
             or --stack-size"
        } else {
            "lower -F or --stack-size"
        };
        Some(format!(
            "perf ring buffers of {} KiB for a busy thread and {} KiB for the others hold {} \
             and {} ms of a busy thread's samples at {} Hz ({} ms wanted): {why}; samples are \
             lost when a drain comes later than that ({fix})",
            kib(busy),
            kib(base),
            self.hold_ms(busy),
            self.hold_ms(base),
            self.frequency_hz,
            BUSY_HOLD_MS,
        ))
    }
}

/// Pages of the budget not yet locked by a sampler of this process.
pub(super) fn available(budget: &Budget) -> usize {
    budget
        .pages
        .saturating_sub(LOCKED_PAGES.load(Ordering::Relaxed))
}

/// Accounts a mapped ring (`pages` data pages and its header page) until it is dropped.
#[derive(Debug)]
pub(super) struct Locked(usize);

impl Locked {
    pub fn new(data_pages: usize) -> Locked {
        LOCKED_PAGES.fetch_add(data_pages + 1, Ordering::Relaxed);
        Locked(data_pages + 1)
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        LOCKED_PAGES.fetch_sub(self.0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JVM's queue holds what its threads sample on every CPU in the time a CPU's ring holds:
    /// twice the CPUs, twice the bytes; a tenth of the rate, a tenth.
    #[test]
    fn switch_rings_take_at_most_half_of_the_budget() {
        let page = 4096;
        let budget = Budget {
            pages: (256 << 20) / page,
            kernel_limited: false,
            source: "test".into(),
        };
        let plan = RingPlan::new(32 * 1024, 99, page, 128, budget.clone(), budget.pages);
        let switch = plan.switch_pages_per_cpu(8 << 20, 128, budget.pages);
        assert!(
            128 * (switch + 1) <= budget.pages / 2,
            "{switch} pages per CPU"
        );
        // Where the budget allows, the size wanted.
        let few = plan.switch_pages_per_cpu(8 << 20, 2, budget.pages);
        assert_eq!(few * page, 8 << 20);
    }

    #[test]
    fn a_queue_holds_every_cpu_for_the_hold_time() {
        let plan = |hz| RingPlan::new(33_000, hz, 4096, 10, Budget::unlimited(), usize::MAX);
        let fast = plan(1000);
        assert_eq!(fast.queue_bytes(2), 2 * 1000 * 33_000);
        assert_eq!(fast.queue_bytes(64), 32 * fast.queue_bytes(2));
        assert_eq!(plan(100).queue_bytes(2) * 10, fast.queue_bytes(2));
        // Slow rates still hold a few records per CPU.
        assert_eq!(plan(1).queue_bytes(2), 2 * MIN_BUSY_RECORDS * 33_000);
    }
}
