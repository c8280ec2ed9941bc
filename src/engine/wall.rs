//! Wall-clock mode: every thread counts at the rate whether it runs or not. Time on a CPU is
//! sampled by the CPU clock at a fixed period; a thread that leaves a CPU (to sleep, park, wait
//! for a lock or I/O, or because it was preempted) is sampled once, in the kernel, with the stack
//! it left with, and that stack is counted for every period boundary until the thread comes back
//! (its `PERF_RECORD_SWITCH`). Counting period boundaries — `⌊until/P⌋ − ⌊from/P⌋` — makes short
//! waits count in proportion to their length, with no rounding carried between them.
//!
//! Threads blocked when the recording starts have no switch-out sample: their stack is read from
//! outside instead (`process::freeze::blocked`), and counted from the start once they run. Those
//! that never run are idle for the whole recording and are left out unless asked for.

use super::collect::RawSample;
use foldhash::HashMap;

/// How far behind now the off-CPU time of threads still off is counted: a switch-in record
/// reaches us within a drain of the ring buffers (tens of ms); counting past it would count time
/// the thread was back on a CPU. Below the naming delay, so the counts are named in time.
pub(super) const LAG_NS: u64 = 1_000_000_000;

pub(super) struct OffCpu {
    period_ns: u64,
    /// Per CPU: samples are handed over as drained, switches later and in time order.
    ordered: bool,
    /// Threads off a CPU now, with the stack they left with; `time` is where counting goes on.
    off: HashMap<u32, Wait>,
    /// Threads blocked since before the start, with the stack read from outside; `time` is the
    /// start.
    blocked_at_start: HashMap<u32, RawSample>,
    /// Per CPU: each thread's latest sample on a CPU. Those samples come at once, its switches
    /// later and in time order: a wait that began before one is over, even if its switch-in
    /// record never comes (lost, or written too late to be handed out in order).
    on_cpu_at: HashMap<u32, u64>,
    /// Per CPU: when each thread last came back; a switch out or in older than that was written
    /// late and is dropped.
    back_at: HashMap<u32, u64>,
    /// Samples on a CPU and periods off one, counted so far.
    pub on_cpu: u64,
    pub off_cpu: u64,
}

/// A thread off a CPU since `left`; its sample's `time` is where counting goes on.
struct Wait {
    sample: RawSample,
    left: u64,
}

impl OffCpu {
    pub fn new(period_ns: u64, ordered: bool) -> Self {
        OffCpu {
            period_ns: period_ns.max(1),
            ordered,
            off: HashMap::default(),
            blocked_at_start: HashMap::default(),
            on_cpu_at: HashMap::default(),
            back_at: HashMap::default(),
            on_cpu: 0,
            off_cpu: 0,
        }
    }

    /// Period boundaries in `[from, until)`.
    fn periods(&self, from: u64, until: u64) -> u64 {
        (until / self.period_ns).saturating_sub(from / self.period_ns)
    }

    /// `s` counted from its time up to `until` into `out`, if that spans a period boundary.
    fn count(&mut self, s: &RawSample, until: u64, out: &mut Vec<RawSample>) {
        let weight = self.periods(s.time, until);
        if weight > 0 {
            self.off_cpu += weight;
            out.push(RawSample {
                weight,
                ..s.clone()
            });
        }
    }

    /// Thread `s.tid` was blocked when recording started, with this stack.
    pub fn blocked_at_start(&mut self, s: RawSample) {
        self.blocked_at_start.insert(s.tid, s);
    }

    /// A sample taken on a CPU.
    pub fn on_cpu(&mut self, tid: u32) {
        self.on_cpu += 1;
        // A switch-in record was lost: when the thread came back is unknown.
        self.off.remove(&tid);
        self.blocked_at_start.remove(&tid);
    }

    /// The thread left a CPU with the stack of `s`.
    pub fn switched_out(&mut self, s: RawSample) {
        if self.back_at.get(&s.tid).is_some_and(|&back| back > s.time) {
            return;
        }
        self.blocked_at_start.remove(&s.tid);
        // One still there lost its switch-in record: it is dropped, not counted up to now.
        let left = s.time;
        self.off.insert(s.tid, Wait { sample: s, left });
    }

    /// Per-CPU wall-clock mode: whether a switch of thread `tid` at `time` was written after a
    /// later one of the thread was handed out (a late record, dropped).
    pub fn is_late(&self, tid: u32, time: u64) -> bool {
        self.back_at.get(&tid).is_some_and(|&back| back > time)
    }

    /// Per-CPU wall-clock mode: the thread left a CPU again at `time` (an earlier wait whose
    /// switch-in was lost is over).
    pub fn left_again(&mut self, tid: u32, time: u64, out: &mut Vec<RawSample>) {
        self.end_lost_wait(tid, time, out);
        self.blocked_at_start.remove(&tid);
    }

    /// Per-CPU wall-clock mode: the thread exited; what is known of it is forgotten.
    pub fn exited(&mut self, tid: u32) {
        self.off.remove(&tid);
        self.blocked_at_start.remove(&tid);
        self.on_cpu_at.remove(&tid);
        self.back_at.remove(&tid);
    }

    /// A wait of `tid` whose switch-in was lost ends at the thread's last sample on a CPU after
    /// it began (before `until`): it counts up to that sample.
    fn end_lost_wait(&mut self, tid: u32, until: u64, out: &mut Vec<RawSample>) {
        let on_cpu = self.on_cpu_at.get(&tid).copied().unwrap_or(0);
        let Some(wait) = self.off.get(&tid) else {
            return;
        };
        if on_cpu > wait.left && on_cpu <= until {
            if let Some(wait) = self.off.remove(&tid) {
                self.count(&wait.sample, on_cpu, out);
            }
        }
    }

    /// The stack counted for thread `s.tid`'s wait turned out wrong: `s` stands for it from now
    /// on (the periods counted so far stay with the old one).
    pub fn replace_stack(&mut self, s: RawSample) {
        if let Some(off) = self.off.get_mut(&s.tid) {
            off.sample.stack = s.stack;
        }
    }

    /// A sample of thread `tid` taken on a CPU at `time`, where the switch records come later
    /// and in time order (per CPU): the thread's switch-in may still be on its way, so a wait
    /// it ends is ended when counted ([`Self::count_up_to`]).
    pub fn on_cpu_ordered(&mut self, tid: u32, time: u64) {
        self.on_cpu += 1;
        let at = self.on_cpu_at.entry(tid).or_default();
        *at = (*at).max(time);
    }

    /// The thread came back on a CPU at `time`: its time off is counted into `out`.
    pub fn switched_in(&mut self, tid: u32, time: u64, out: &mut Vec<RawSample>) {
        if self.is_late(tid, time) || self.off.get(&tid).is_some_and(|w| w.left > time) {
            return;
        }
        if self.ordered {
            self.back_at.insert(tid, time);
        }
        let left = match self.off.remove(&tid) {
            Some(wait) => Some(wait.sample),
            None => self.blocked_at_start.remove(&tid),
        };
        if let Some(s) = left {
            self.count(&s, time, out);
        }
    }

    /// Counts the time of threads still off a CPU up to `until` into `out` (the time they came
    /// back is not known yet); a wait that a later sample on a CPU shows over ends there.
    pub fn count_up_to(&mut self, until: u64, out: &mut Vec<RawSample>) {
        let tids: Vec<u32> = self.off.keys().copied().collect();
        for tid in tids {
            self.end_lost_wait(tid, until, out);
        }
        let mut off = std::mem::take(&mut self.off);
        for wait in off.values_mut().filter(|w| w.sample.time < until) {
            self.count(&wait.sample, until, out);
            wait.sample.time = until;
        }
        self.off = off;
        // Kept only while they can still matter: a wait yet to be handed out begins after
        // `until`, and a switch written that late is not expected (threads whose exit record
        // was lost are forgotten too).
        if self.ordered {
            let off = &self.off;
            self.on_cpu_at
                .retain(|tid, at| *at >= until || off.contains_key(tid));
            self.back_at
                .retain(|_, back| back.saturating_add(LAG_NS) >= until);
        }
    }

    /// Recording ended at `end`: threads still off count up to it, and with `idle` so do those
    /// blocked all along.
    pub fn finish(&mut self, end: u64, idle: bool, out: &mut Vec<RawSample>) {
        self.count_up_to(end, out);
        self.off.clear();
        let blocked = std::mem::take(&mut self.blocked_at_start);
        for s in blocked.into_values().filter(|_| idle) {
            self.count(&s, end, out);
        }
    }

    /// Threads blocked all along so far (left out of the profile unless `--idle`).
    pub fn idle_threads(&self) -> usize {
        self.blocked_at_start.len()
    }

    /// Raw samples held here, whose stack ids are renumbered with the collected samples'.
    pub fn held_mut(&mut self) -> impl Iterator<Item = &mut RawSample> {
        self.off
            .values_mut()
            .map(|w| &mut w.sample)
            .chain(self.blocked_at_start.values_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 10_000_000;

    fn sample(tid: u32, time: u64, stack: u32) -> RawSample {
        RawSample {
            time,
            tid,
            stack,
            kernel: Vec::new(),
            in_kernel: true,
            weight: 1,
        }
    }

    fn weights(out: &[RawSample]) -> Vec<(u32, u64, u64)> {
        out.iter().map(|s| (s.stack, s.time, s.weight)).collect()
    }

    #[test]
    fn time_off_cpu_counts_period_boundaries_with_the_stack_it_left_with() {
        let mut wall = OffCpu::new(P, false);
        let mut out = Vec::new();
        // 25 ms off from 3 ms: boundaries at 10 and 20 ms.
        wall.switched_out(sample(1, 3_000_000, 7));
        wall.switched_in(1, 28_000_000, &mut out);
        // 4 ms off inside one period: no boundary, nothing counted.
        wall.switched_out(sample(1, 31_000_000, 8));
        wall.switched_in(1, 35_000_000, &mut out);
        // 4 ms across the 40 ms boundary: one.
        wall.switched_out(sample(1, 38_000_000, 9));
        wall.switched_in(1, 42_000_000, &mut out);
        assert_eq!(weights(&out), [(7, 3_000_000, 2), (9, 38_000_000, 1)]);
        assert_eq!(wall.off_cpu, 3);
    }

    #[test]
    fn many_short_waits_add_up_to_their_share() {
        let mut wall = OffCpu::new(P, false);
        let mut out = Vec::new();
        // 1000 waits of 3.7 ms every 11.3 ms: 370 ms off in total, 37 periods.
        let mut t = 1_234_567;
        for _ in 0..1000 {
            wall.switched_out(sample(1, t, 1));
            wall.switched_in(1, t + 3_700_000, &mut out);
            t += 11_300_000;
        }
        let total: u64 = out.iter().map(|s| s.weight).sum();
        assert!((360..=380).contains(&total), "{total}");
    }

    #[test]
    fn long_waits_are_counted_as_they_go_and_to_the_end() {
        let mut wall = OffCpu::new(P, false);
        let mut out = Vec::new();
        wall.switched_out(sample(1, 5_000_000, 7));
        wall.count_up_to(100_000_000, &mut out);
        wall.count_up_to(100_000_000, &mut out);
        wall.switched_in(1, 150_000_000, &mut out);
        assert_eq!(weights(&out), [(7, 5_000_000, 10), (7, 100_000_000, 5)]);
        wall.switched_out(sample(1, 160_000_000, 8));
        wall.finish(200_000_000, false, &mut out);
        assert_eq!(out.last().map(|s| (s.stack, s.weight)), Some((8, 4)));
    }

    #[test]
    fn threads_blocked_from_the_start_count_once_they_run_or_with_idle() {
        for idle in [false, true] {
            let mut wall = OffCpu::new(P, false);
            let mut out = Vec::new();
            wall.blocked_at_start(sample(1, 0, 1));
            wall.blocked_at_start(sample(2, 0, 2));
            wall.blocked_at_start(sample(3, 0, 3));
            // Thread 1 wakes at 50 ms; thread 3 was seen on a CPU with its switch-in lost.
            wall.switched_in(1, 50_000_000, &mut out);
            wall.on_cpu(3);
            assert_eq!(wall.idle_threads(), 1);
            wall.finish(100_000_000, idle, &mut out);
            let mut expected = vec![(1, 0, 5)];
            if idle {
                expected.push((2, 0, 10));
            }
            assert_eq!(weights(&out), expected);
        }
    }

    #[test]
    fn a_lost_switch_in_is_not_counted_as_time_off() {
        let mut wall = OffCpu::new(P, false);
        let mut out = Vec::new();
        wall.switched_out(sample(1, 0, 1));
        wall.on_cpu(1);
        wall.switched_out(sample(1, 500_000_000, 2));
        wall.switched_out(sample(1, 700_000_000, 3));
        wall.switched_in(1, 720_000_000, &mut out);
        assert_eq!(weights(&out), [(3, 700_000_000, 2)]);
    }
    #[test]
    fn per_cpu_a_wait_whose_switch_in_was_lost_ends_at_the_next_sample_on_a_cpu() {
        let mut wall = OffCpu::new(P, true);
        let mut out = Vec::new();
        // Off at 5 ms; its switch-in (at ~30 ms) is lost; on a CPU at 32 and 41 ms.
        wall.switched_out(sample(1, 5_000_000, 7));
        wall.on_cpu_ordered(1, 32_000_000);
        wall.on_cpu_ordered(1, 41_000_000);
        wall.count_up_to(1_000_000_000, &mut out);
        wall.finish(2_000_000_000, false, &mut out);
        // Counted up to its last sample on a CPU: boundaries 10..40 ms, not a second's worth.
        assert_eq!(weights(&out), [(7, 5_000_000, 4)]);
        assert_eq!(wall.off_cpu + wall.on_cpu, 6);
    }

    #[test]
    fn per_cpu_a_wait_not_yet_counted_past_ends_where_its_switch_in_says() {
        let mut wall = OffCpu::new(P, true);
        let mut out = Vec::new();
        // The sample on a CPU comes before the switches are handed out, as per CPU.
        wall.on_cpu_ordered(1, 32_000_000);
        wall.switched_out(sample(1, 5_000_000, 7));
        wall.switched_in(1, 25_000_000, &mut out);
        wall.count_up_to(1_000_000_000, &mut out);
        assert_eq!(weights(&out), [(7, 5_000_000, 2)]);
    }

    #[test]
    fn per_cpu_late_switches_count_no_time_twice() {
        let mut wall = OffCpu::new(P, true);
        let mut out = Vec::new();
        wall.switched_out(sample(1, 5_000_000, 7));
        wall.switched_in(1, 25_000_000, &mut out);
        // A switch-out written late, older than the switch-in handed out: dropped.
        assert!(wall.is_late(1, 15_000_000));
        wall.switched_out(sample(1, 15_000_000, 8));
        // A switch-in written late, older than the wait it would end: the wait goes on.
        wall.switched_out(sample(1, 60_000_000, 9));
        wall.switched_in(1, 50_000_000, &mut out);
        wall.switched_in(1, 80_000_000, &mut out);
        assert_eq!(weights(&out), [(7, 5_000_000, 2), (9, 60_000_000, 2)]);
    }

    #[test]
    fn per_cpu_a_thread_leaving_again_ends_a_lost_wait_at_its_sample_on_a_cpu() {
        let mut wall = OffCpu::new(P, true);
        let mut out = Vec::new();
        wall.switched_out(sample(1, 5_000_000, 7));
        wall.on_cpu_ordered(1, 22_000_000);
        wall.left_again(1, 90_000_000, &mut out);
        wall.count_up_to(1_000_000_000, &mut out);
        assert_eq!(weights(&out), [(7, 5_000_000, 2)]);
    }
}
