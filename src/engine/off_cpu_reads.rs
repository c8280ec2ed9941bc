//! Per-CPU wall-clock mode: the stacks of threads off a CPU, read from outside while they wait.
//!
//! The kernel hands over the user registers each thread of the target left its CPU with (a
//! registers-only sample per switch, no stack copy). The stack above them does not change until
//! the thread runs again, so it is read from the target's memory while the thread is still off:
//! once per wait that crosses a period boundary (the waits that count, see [`super::wall`]), and
//! at once for a wait at a place (stack pointer and pc) the thread never waited at before. A
//! read counts only if the thread came back after the read ended: one that was back sooner may
//! have changed its stack while it was read.
//!
//! A wait that crossed a boundary but ended before it could be read (the drain came after the
//! thread was back) takes the stack of that thread's last wait read at the same stack pointer
//! and pc: a thread that blocks where it blocked before, at the same depth. Failing that, the
//! wait counts with the frame its registers alone give. A thread that waits microseconds at a
//! time is back before any read ends; two such reads at the same place that walk to the same
//! stack are taken as its stack there.

use super::collect::RawSample;
use crate::process::{freeze, ProcessMemory};
use crate::sampler::{Regs, Sample, SampleKind};
use foldhash::HashMap;

/// Stacks read per thread kept for waits that end before they are read.
const KNOWN_PER_THREAD: usize = 8;

/// Threads whose known stacks are kept; past it, those that waited longest ago are forgotten
/// (threads come and go without a record of their exit).
const KNOWN_THREADS: usize = 4096;

/// How the stacks of the waits that counted were found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffCpuStackStats {
    /// Read from the target while the thread waited.
    pub read: u64,
    /// Taken from an earlier wait of the thread at the same stack pointer and pc.
    pub reused: u64,
    /// Neither: only the frame of the registers.
    pub unread: u64,
    /// Reads dropped because the thread was back before the read ended.
    pub raced: u64,
}

/// A thread off a CPU: when it left, with which registers, and its stack once read.
struct Waiting {
    time: u64,
    regs: Regs,
    /// The stack read, and when the read ended.
    read: Option<(RawSample, u64)>,
}

/// A stack read for a wait of a thread at `sp` and `ip`.
struct Known {
    sp: u64,
    ip: u64,
    sample: RawSample,
}

/// What a thread's switch back onto a CPU means for its wait.
pub(super) enum Back {
    /// Nothing to count: the wait crossed no period boundary, or its stack was counted already.
    Nothing,
    /// The wait counts with this stack (from its time on), unread until now.
    Left(RawSample),
    /// The stack read for the wait and counted already must be replaced by this one.
    Replace(RawSample),
}

pub(super) struct OffCpuReads {
    mem: ProcessMemory,
    period_ns: u64,
    stack_size: usize,
    waiting: HashMap<u32, Waiting>,
    /// Per thread: when it last came back from a wait read, and the stacks read.
    known: HashMap<u32, (u64, Vec<Known>)>,
    /// Per thread, the last read that raced with the thread waking, at its place.
    raced: HashMap<u32, Known>,
    pub stats: OffCpuStackStats,
}

impl OffCpuReads {
    pub fn new(pid: u32, period_ns: u64, stack_size: u32) -> Self {
        OffCpuReads {
            mem: ProcessMemory { pid },
            period_ns: period_ns.max(1),
            stack_size: stack_size as usize,
            waiting: HashMap::default(),
            known: HashMap::default(),
            raced: HashMap::default(),
            stats: OffCpuStackStats::default(),
        }
    }

    /// Whether a wait from `from` to `until` crosses a period boundary.
    fn counts(&self, from: u64, until: u64) -> bool {
        until / self.period_ns > from / self.period_ns
    }

    /// The next period boundary after `now`.
    pub fn next_boundary(&self, now: u64) -> u64 {
        (now / self.period_ns + 1).saturating_mul(self.period_ns)
    }

    /// Thread `s.tid` left a CPU with `s.regs` (a wait not yet ended whose switch-in was lost
    /// is forgotten).
    pub fn left(&mut self, s: &Sample<'_>) {
        self.waiting.insert(
            s.tid,
            Waiting {
                time: s.time,
                regs: s.regs,
                read: None,
            },
        );
    }

    /// Thread `tid` exited: it waits no more, and its places are forgotten.
    pub fn exited(&mut self, tid: u32) {
        self.waiting.remove(&tid);
        self.known.remove(&tid);
        self.raced.remove(&tid);
    }

    /// Reads, at `now`, the stacks of the waiting threads not read yet whose wait already counts,
    /// or is at a place the thread's stack was never read at; each is walked by `walk` and handed
    /// to `counted`.
    pub fn read_due(
        &mut self,
        now: u64,
        walk: &mut dyn FnMut(&Sample<'_>) -> RawSample,
        counted: &mut dyn FnMut(RawSample),
    ) {
        let (period, size, mem) = (self.period_ns, self.stack_size, self.mem);
        for (&tid, w) in self.waiting.iter_mut() {
            let counts = now / period > w.time / period;
            let new_place = || {
                let known = self.known.get(&tid).map_or(&[][..], |(_, k)| k);
                !known.iter().any(|k| (k.sp, k.ip) == (w.regs.sp, w.regs.ip))
            };
            if w.read.is_some() || !(counts || new_place()) {
                continue;
            }
            let stack = freeze::read_stack(&mem, w.regs.sp, size);
            let read_end = crate::profile::monotonic_now_ns();
            let sample = walk(&Sample {
                kind: SampleKind::SwitchOut,
                pid: mem.pid,
                tid,
                time: w.time,
                regs: w.regs,
                stack: &stack,
                kernel_ips: &[],
                in_kernel: true,
            });
            w.read = Some((sample.clone(), read_end));
            counted(sample);
        }
    }

    /// Thread `tid` came back on a CPU at `time`. `walk` walks the registers alone, for a wait
    /// no stack is known for.
    pub fn came_back(
        &mut self,
        tid: u32,
        time: u64,
        walk: &mut dyn FnMut(&Sample<'_>) -> RawSample,
    ) -> Back {
        // A switch-in older than the wait was written late: the wait is not over.
        if self.waiting.get(&tid).is_none_or(|w| w.time > time) {
            return Back::Nothing;
        }
        let Some(w) = self.waiting.remove(&tid) else {
            return Back::Nothing;
        };
        match w.read.clone() {
            Some((sample, read_end)) if time > read_end => {
                self.stats.read += 1;
                self.remember(tid, time, &w.regs, sample);
                Back::Nothing
            }
            Some((sample, _)) => {
                self.stats.raced += 1;
                self.confirm_raced(tid, time, &w.regs, sample);
                Back::Replace(self.stack_not_read(tid, &w, walk))
            }
            None if self.counts(w.time, time) => Back::Left(self.stack_not_read(tid, &w, walk)),
            None => Back::Nothing,
        }
    }

    /// Recording ended: waits read and still going count as read.
    pub fn finish(&mut self) {
        let read = self.waiting.values().filter(|w| w.read.is_some()).count();
        self.stats.read += read as u64;
        self.waiting.clear();
    }

    /// The stack for a wait that ended before its read, or whose read came too late.
    fn stack_not_read(
        &mut self,
        tid: u32,
        w: &Waiting,
        walk: &mut dyn FnMut(&Sample<'_>) -> RawSample,
    ) -> RawSample {
        let known = self
            .known
            .get(&tid)
            .and_then(|(_, k)| k.iter().find(|k| k.sp == w.regs.sp && k.ip == w.regs.ip));
        if let Some(k) = known {
            self.stats.reused += 1;
            return RawSample {
                time: w.time,
                ..k.sample.clone()
            };
        }
        self.stats.unread += 1;
        walk(&Sample {
            kind: SampleKind::SwitchOut,
            pid: self.mem.pid,
            tid,
            time: w.time,
            regs: w.regs,
            stack: &[],
            kernel_ips: &[],
            in_kernel: true,
        })
    }

    /// A read that raced with thread `tid` waking becomes known when the thread's previous raced
    /// read at the same place walked to the same stack.
    fn confirm_raced(&mut self, tid: u32, time: u64, regs: &Regs, sample: RawSample) {
        let same = self
            .raced
            .get(&tid)
            .is_some_and(|k| (k.sp, k.ip, k.sample.stack) == (regs.sp, regs.ip, sample.stack));
        if same {
            self.raced.remove(&tid);
            self.remember(tid, time, regs, sample);
        } else if self.raced.len() < KNOWN_THREADS || self.raced.contains_key(&tid) {
            let known = Known {
                sp: regs.sp,
                ip: regs.ip,
                sample,
            };
            self.raced.insert(tid, known);
        }
    }

    fn remember(&mut self, tid: u32, time: u64, regs: &Regs, sample: RawSample) {
        if self.known.len() >= KNOWN_THREADS && !self.known.contains_key(&tid) {
            let mut last: Vec<u64> = self.known.values().map(|(t, _)| *t).collect();
            let (_, &mut median, _) = last.select_nth_unstable(KNOWN_THREADS / 2);
            self.known.retain(|_, (t, _)| *t > median);
        }
        let (last, known) = self.known.entry(tid).or_default();
        *last = time;
        known.retain(|k| (k.sp, k.ip) != (regs.sp, regs.ip));
        if known.len() == KNOWN_PER_THREAD {
            known.remove(0);
        }
        known.push(Known {
            sp: regs.sp,
            ip: regs.ip,
            sample,
        });
    }

    /// Raw samples held here, whose stack ids are renumbered with the collected samples'.
    pub fn held_mut(&mut self) -> impl Iterator<Item = &mut RawSample> {
        let read = self
            .waiting
            .values_mut()
            .filter_map(|w| w.read.as_mut().map(|(s, _)| s));
        let known = self
            .known
            .values_mut()
            .flat_map(|(_, k)| k.iter_mut().map(|k| &mut k.sample));
        let raced = self.raced.values_mut().map(|k| &mut k.sample);
        read.chain(known).chain(raced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 10_000_000;

    fn regs(sp: u64, ip: u64) -> Regs {
        Regs {
            abi: 2,
            sp,
            ip,
            ..Regs::default()
        }
    }

    fn left(reads: &mut OffCpuReads, tid: u32, time: u64, regs: Regs) {
        reads.left(&Sample {
            kind: SampleKind::LeftCpu,
            pid: 1,
            tid,
            time,
            regs,
            stack: &[],
            kernel_ips: &[],
            in_kernel: true,
        });
    }

    /// Walks into a stack id: 100 + the stack's length in KiB, or 1 for no stack.
    fn walker() -> impl FnMut(&Sample<'_>) -> RawSample {
        |s: &Sample<'_>| RawSample {
            time: s.time,
            tid: s.tid,
            stack: if s.stack.is_empty() {
                1
            } else {
                100 + s.stack.len() as u32 / 1024
            },
            kernel: Vec::new(),
            in_kernel: true,
            weight: 1,
        }
    }

    fn reads() -> OffCpuReads {
        // Our own stack is readable: the reads find it.
        OffCpuReads::new(std::process::id(), P, 4096)
    }

    fn own_sp() -> u64 {
        let x = 0u64;
        std::ptr::addr_of!(x) as u64 & !4095
    }

    #[test]
    fn a_wait_is_read_at_a_new_place_or_once_it_crosses_a_boundary() {
        let mut r = reads();
        let mut walk = walker();
        let mut counted = Vec::new();
        let at = regs(own_sp(), 0x1000);
        // A place never read: read at once, within its first period.
        left(&mut r, 5, 3_000_000, at);
        r.read_due(4_000_000, &mut walk, &mut |s| counted.push(s));
        assert_eq!(counted.len(), 1);
        assert_eq!((counted[0].stack, counted[0].time), (104, 3_000_000));
        // Read once only.
        r.read_due(21_000_000, &mut walk, &mut |s| counted.push(s));
        assert_eq!(counted.len(), 1);
        assert!(matches!(
            r.came_back(5, u64::MAX - 1, &mut walk),
            Back::Nothing
        ));
        assert_eq!(r.stats.read, 1);
        // The same place again: read once the wait crosses a boundary, not before.
        left(&mut r, 5, 31_000_000, at);
        r.read_due(39_000_000, &mut walk, &mut |s| counted.push(s));
        assert_eq!(counted.len(), 1);
        r.read_due(41_000_000, &mut walk, &mut |s| counted.push(s));
        assert_eq!(counted.len(), 2);
        assert_eq!(counted[1].time, 31_000_000);
    }

    #[test]
    fn a_read_that_ended_after_the_thread_was_back_is_replaced() {
        let mut r = reads();
        let mut walk = walker();
        left(&mut r, 5, 3_000_000, regs(own_sp(), 0x1000));
        r.read_due(11_000_000, &mut walk, &mut |_| {});
        // Back at 12 ms, long before this read ended (now, in real monotonic time).
        match r.came_back(5, 12_000_000, &mut walk) {
            Back::Replace(s) => assert_eq!((s.stack, s.time), (1, 3_000_000)),
            _ => panic!("the read raced with the thread"),
        }
        assert_eq!((r.stats.raced, r.stats.unread), (1, 1));
    }

    #[test]
    fn two_raced_reads_at_one_place_that_agree_make_its_stack_known() {
        let mut r = reads();
        let mut walk = walker();
        let at = regs(own_sp(), 0x1000);
        // Back before each read ended: replaced by the registers' frame the first time, by the
        // stack both reads agree on the second.
        for (from, stack) in [(3_000_000u64, 1u32), (13_000_000, 104)] {
            left(&mut r, 5, from, at);
            r.read_due(from + 8_000_000, &mut walk, &mut |_| {});
            match r.came_back(5, from + 8_000_001, &mut walk) {
                Back::Replace(s) => assert_eq!(s.stack, stack),
                _ => panic!("the read raced with the thread"),
            }
        }
        // A wait at that place ending before any read: the agreed stack.
        left(&mut r, 5, 29_000_000, at);
        match r.came_back(5, 31_000_000, &mut walk) {
            Back::Left(s) => assert_eq!(s.stack, 104),
            _ => panic!("the wait crossed a boundary"),
        }
    }

    #[test]
    fn short_waits_count_only_across_a_boundary_with_a_known_stack_or_the_registers() {
        let mut r = reads();
        let mut walk = walker();
        let at = regs(own_sp(), 0x2000);
        // A wait read and validated: its stack becomes known for (sp, ip).
        left(&mut r, 7, 1_000_000, at);
        r.read_due(10_500_000, &mut walk, &mut |_| {});
        assert!(matches!(
            r.came_back(7, u64::MAX - 1, &mut walk),
            Back::Nothing
        ));
        // 2 ms within a period: nothing.
        left(&mut r, 7, 31_000_000, at);
        assert!(matches!(
            r.came_back(7, 33_000_000, &mut walk),
            Back::Nothing
        ));
        // 2 ms across the 40 ms boundary, ended before any read: the known stack.
        left(&mut r, 7, 39_000_000, at);
        match r.came_back(7, 41_000_000, &mut walk) {
            Back::Left(s) => assert_eq!((s.stack, s.time), (104, 39_000_000)),
            _ => panic!("the wait crossed a boundary"),
        }
        // Elsewhere: the registers only.
        left(&mut r, 7, 49_000_000, regs(own_sp(), 0x3000));
        match r.came_back(7, 51_000_000, &mut walk) {
            Back::Left(s) => assert_eq!(s.stack, 1),
            _ => panic!("the wait crossed a boundary"),
        }
        assert_eq!((r.stats.read, r.stats.reused, r.stats.unread), (1, 1, 1));
    }

    #[test]
    fn threads_that_waited_longest_ago_are_forgotten_past_the_limit() {
        let mut r = reads();
        let mut walk = walker();
        let sp = own_sp();
        for tid in 0..=KNOWN_THREADS as u32 {
            left(&mut r, tid, 1_000_000, regs(sp, 0x2000));
            r.read_due(10_500_000, &mut walk, &mut |_| {});
            r.came_back(
                tid,
                u64::MAX - (KNOWN_THREADS as u64 - tid as u64),
                &mut walk,
            );
        }
        assert!(r.known.len() <= KNOWN_THREADS / 2 + 1, "{}", r.known.len());
        assert!(r.known.contains_key(&(KNOWN_THREADS as u32)));
        assert!(!r.known.contains_key(&0));
    }

    #[test]
    fn a_lost_switch_in_drops_the_earlier_wait() {
        let mut r = reads();
        let mut walk = walker();
        left(&mut r, 7, 1_000_000, regs(own_sp(), 0x2000));
        left(&mut r, 7, 45_000_000, regs(own_sp(), 0x3000));
        match r.came_back(7, 51_000_000, &mut walk) {
            Back::Left(s) => assert_eq!(s.time, 45_000_000),
            _ => panic!("the second wait crossed a boundary"),
        }
    }
}
