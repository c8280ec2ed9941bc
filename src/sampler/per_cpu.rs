//! Per-CPU sampling, the default where the host allows it (root, CAP_PERFMON, or
//! `perf_event_paranoid` ≤ 0: what `perf record -a` needs): one CPU-clock event per online CPU
//! (`pid = -1`) samples whatever runs there every period of that CPU's time. Such an event lives
//! in the CPU's context and is not switched with tasks (kernel/events/core.c: only task contexts
//! are scheduled in and out), so context switches cost nothing, nothing is opened per thread, and
//! a thread is sampled from its first instruction. Samples of other processes are dropped as they
//! are drained, before any walk. Thread names come with COMM records (`attr.comm`), so a thread
//! that ended before the recording did is still named.
//!
//! Wall-clock mode adds a context-switch event per CPU, sampling the user registers (not the
//! stack) of every task that leaves the CPU, with `PERF_RECORD_SWITCH_CPU_WIDE` records for
//! every switch, into a ring of its own. Each ring is in time order, but not the rings
//! together: a thread that leaves one CPU and comes back on another could be seen back before
//! it left. The target's switches are therefore held until every ring has been drained past
//! them, and handed out in time order ([`ProcessFilter::release`]).

use super::attr;
use super::budget::{self, RingPlan};
use super::event::MappedEvent;
use super::record::{RecordLayout, Regs, SampleKind};
use super::ring::RingBuffer;
use super::{ParsedRecord, Sample, SamplerConfig, SamplerStats};
use crate::error::{Error, ErrorKind, Result};
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};
use perf_event_open_sys::bindings::perf_event_attr;
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;

/// How long after its time stamp a record may still be on its way into a ring: switches are
/// handed out once the drain began at least this long after them. Only a thread that switched
/// on two CPUs while they were being drained one after the other can be seen out of order
/// otherwise, and a record is written microseconds after its time stamp is taken.
const ORDER_MARGIN_NS: u64 = 100_000;

/// Wall-clock mode: each CPU's switch ring, when the budget allows. A switch costs ~260 bytes
/// there (a register sample, and the CPU-wide switch records out and in): 8 MiB hold ~0.5 s of a
/// CPU switching 65,000 times a second, and a JVM of thousands of runnable threads can keep
/// jvmperf off the CPUs for hundreds of milliseconds.
const SWITCH_RING_BYTES: usize = 8 << 20;

pub(super) struct CpuSampler {
    config: SamplerConfig,
    attr: perf_event_attr,
    cpus: Vec<MappedEvent>,
    /// Wall-clock mode: each CPU's context-switch event and its ring.
    switches: Vec<MappedEvent>,
    enabled: bool,
    pub plan: RingPlan,
    /// Data pages of each CPU's ring, and what was wanted.
    pages: usize,
    epoll: Epoll,
    stats: SamplerStats,
    scratch: Vec<u8>,
    kernel_ips: Vec<u64>,
}

/// The records of one process among those of every CPU.
#[derive(Default)]
pub(super) struct ProcessFilter {
    pid: u32,
    /// Its threads sampled so far (or lately, with `keep_ns`).
    sampled: HashSet<u32>,
    /// Names its threads took while sampled (COMM records).
    pub names: HashMap<u32, String>,
    /// Wall-clock mode: its threads' switches drained and not yet handed out.
    switches: Vec<Switch>,
    /// Wall-clock mode: threads that exited (until their tid is given to a new thread): their
    /// last switches, on the way out of the kernel's exit path, are no waits.
    exited: HashSet<u32>,
    /// A daemon's: when its threads were last seen, to forget those long gone. `None`: a
    /// recording's, which keeps every thread.
    recent: Option<Box<Recent>>,
}

/// When each thread in a [`ProcessFilter`]'s maps was last seen (ns of record time).
#[derive(Default)]
struct Recent {
    /// Threads not seen for this long are forgotten.
    keep_ns: u64,
    seen: HashMap<u32, u64>,
    /// The latest record time seen, and when the maps are next pruned.
    latest: u64,
    next_prune: u64,
}

/// What a thread of the target did at `time`.
struct Switch {
    time: u64,
    tid: u32,
    what: Switched,
}

#[derive(PartialEq)]
enum Switched {
    Left(Regs),
    Back,
    Created,
    Exited,
}

impl ProcessFilter {
    pub fn new(pid: u32) -> ProcessFilter {
        ProcessFilter {
            pid,
            ..ProcessFilter::default()
        }
    }

    /// A filter that forgets a thread (its name, that it was sampled) once no record of it has
    /// come for `keep_ns` of record time: a daemon that runs for weeks sees every thread that
    /// ever ran in a long-lived JVM.
    pub fn keeping_threads(pid: u32, keep_ns: u64) -> ProcessFilter {
        ProcessFilter {
            recent: Some(Box::new(Recent {
                keep_ns,
                ..Recent::default()
            })),
            ..ProcessFilter::new(pid)
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn threads_sampled(&self) -> usize {
        self.sampled.len()
    }

    /// Hands `record` to `sink` if it is of this process (names are kept); whether a sample was.
    pub fn take(&mut self, record: &ParsedRecord<'_>, sink: &mut dyn FnMut(&Sample<'_>)) -> bool {
        let (tid, time) = match record {
            ParsedRecord::Sample(s) if s.pid == self.pid => (s.tid, Some(s.time)),
            ParsedRecord::SwitchIn { pid, tid, time }
            | ParsedRecord::Task { pid, tid, time, .. }
                if *pid == self.pid =>
            {
                (*tid, Some(*time))
            }
            ParsedRecord::Comm { pid, tid, .. } if *pid == self.pid => (*tid, None),
            _ => return false,
        };
        let took = self.take_own(record, sink);
        if let Some(recent) = self.recent.as_mut() {
            // A COMM record's time is not parsed: it counts as seen at the latest record's.
            recent.latest = recent.latest.max(time.unwrap_or(0));
            recent.seen.insert(tid, recent.latest);
            self.prune();
        }
        took
    }

    /// Forgets the threads not seen for `keep_ns`, every quarter of it.
    fn prune(&mut self) {
        let Some(recent) = self.recent.as_mut() else {
            return;
        };
        if recent.latest < recent.next_prune {
            return;
        }
        recent.next_prune = recent.latest.saturating_add(recent.keep_ns / 4);
        let cutoff = recent.latest.saturating_sub(recent.keep_ns);
        recent.seen.retain(|_, &mut last| last >= cutoff);
        let seen = &recent.seen;
        self.sampled.retain(|tid| seen.contains_key(tid));
        self.names.retain(|tid, _| seen.contains_key(tid));
        self.exited.retain(|tid| seen.contains_key(tid));
    }

    fn take_own(&mut self, record: &ParsedRecord<'_>, sink: &mut dyn FnMut(&Sample<'_>)) -> bool {
        match record {
            ParsedRecord::Sample(s) if s.pid == self.pid && s.kind == SampleKind::LeftCpu => {
                self.switches.push(Switch {
                    time: s.time,
                    tid: s.tid,
                    what: Switched::Left(s.regs),
                });
                true
            }
            ParsedRecord::Sample(s) if s.pid == self.pid => {
                self.sampled.insert(s.tid);
                sink(s);
                true
            }
            ParsedRecord::Comm { pid, tid, name } if *pid == self.pid => {
                self.names
                    .insert(*tid, String::from_utf8_lossy(name).into_owned());
                false
            }
            ParsedRecord::SwitchIn { pid, tid, time } if *pid == self.pid => {
                self.switches.push(Switch {
                    time: *time,
                    tid: *tid,
                    what: Switched::Back,
                });
                false
            }
            ParsedRecord::Task {
                exit,
                pid,
                tid,
                time,
            } if *pid == self.pid => {
                self.switches.push(Switch {
                    time: *time,
                    tid: *tid,
                    what: if *exit {
                        Switched::Exited
                    } else {
                        Switched::Created
                    },
                });
                false
            }
            _ => false,
        }
    }

    /// Hands the switches held with a time before `until` to `sink`, in time order (at one
    /// instant a thread's switch out before its switch in), and the exits of threads; the
    /// switches of a thread between its exit and the end are dropped.
    pub fn release(&mut self, until: u64, sink: &mut dyn FnMut(&Sample<'_>)) {
        if self.switches.is_empty() {
            return;
        }
        self.switches
            .sort_by_key(|s| (s.time, !matches!(s.what, Switched::Left(_))));
        let ready = self.switches.partition_point(|s| s.time < until);
        for s in self.switches.drain(..ready) {
            let kind = match s.what {
                Switched::Created => {
                    self.exited.remove(&s.tid);
                    continue;
                }
                Switched::Exited => {
                    self.exited.insert(s.tid);
                    SampleKind::Exited
                }
                _ if self.exited.contains(&s.tid) => continue,
                Switched::Left(_) => SampleKind::LeftCpu,
                Switched::Back => SampleKind::SwitchIn,
            };
            sink(&Sample {
                kind,
                pid: self.pid,
                tid: s.tid,
                time: s.time,
                regs: match s.what {
                    Switched::Left(regs) => regs,
                    _ => Regs::default(),
                },
                stack: &[],
                kernel_ips: &[],
                in_kernel: kind == SampleKind::LeftCpu,
            });
        }
    }
}

impl CpuSampler {
    /// Opens an event, enabled, on every online CPU. Fails with [`ErrorKind::Permission`] where
    /// per-CPU events are not allowed.
    pub fn open(config: &SamplerConfig, epoll: Epoll) -> Result<CpuSampler> {
        let cpus = online_cpus()?;
        let mut plan = config.ring_plan(cpus.len(), super::Host::current().budget());
        let mut available = budget::available(&plan.budget);
        let mut attr = attr::event_attr(config);
        attr.sample_period = config.period_ns();
        // One event per ring: no identifier to tell events apart (see `attr::cpu_switch_attr`).
        attr.sample_type &= !u64::from(perf_event_open_sys::bindings::PERF_SAMPLE_IDENTIFIER);
        attr.set_comm(1);
        let mut switch_attr = config.wall.then(|| attr::cpu_switch_attr(&attr));
        // Switch rings come out of the same budget as the sampling rings.
        let mut switch_pages = 0;
        if switch_attr.is_some() {
            switch_pages = plan.switch_pages_per_cpu(SWITCH_RING_BYTES, cpus.len(), available);
            available = available.saturating_sub(cpus.len() * (switch_pages + 1));
        }
        let min_pages = plan.min_pages;
        let mut switches = Vec::new();
        let mut index = 0;
        let (events, pages) = map_cpu_rings(&mut plan, &cpus, available, |cpu, pages| {
            let layout = RecordLayout {
                kernel_callchain: config.kernel_callchain,
                switch_event: None,
                switch_ring: false,
            };
            let (fd, ring) = open_mapped(&mut attr, cpu, pages, min_pages, config)?;
            watch(&epoll, &fd, index)?;
            index += 1;
            let event = MappedEvent::new(fd, ring, *pages, layout);
            if let Some(switch_attr) = switch_attr.as_mut() {
                let layout = RecordLayout {
                    switch_ring: true,
                    ..layout
                };
                let (fd, ring) =
                    open_mapped(switch_attr, cpu, &mut switch_pages, min_pages, config)?;
                watch(&epoll, &fd, index)?;
                index += 1;
                switches.push(MappedEvent::new(fd, ring, switch_pages, layout));
            }
            Ok(event)
        })?;
        Ok(CpuSampler {
            config: config.clone(),
            attr,
            cpus: events,
            switches,
            enabled: true,
            plan,
            pages,
            epoll,
            stats: SamplerStats::default(),
            scratch: Vec::new(),
            kernel_ips: Vec::new(),
        })
    }

    pub fn samples_kernel_time(&self) -> bool {
        self.attr.exclude_kernel() == 0
    }

    pub fn epoll(&self) -> &Epoll {
        &self.epoll
    }

    /// Drains every CPU's ring, handing each sample, switch-in and thread name to `on_record`,
    /// which says whether it took a sample (the others are dropped: other processes').
    pub fn drain_all(&mut self, on_record: &mut dyn FnMut(&ParsedRecord<'_>) -> bool) {
        let CpuSampler {
            cpus,
            stats,
            scratch,
            kernel_ips,
            ..
        } = self;
        for event in cpus.iter_mut().chain(self.switches.iter_mut()) {
            let drained = event.drain(scratch, kernel_ips, stats, on_record);
            stats.lost += drained.lost;
        }
    }

    pub fn stats(&self) -> SamplerStats {
        self.stats
    }

    /// The period of every CPU's event from now on.
    pub fn set_period(&mut self, config: SamplerConfig) {
        let period = config.period_ns();
        self.config = config;
        for event in &self.cpus {
            let _ = attr::set_period(&event.fd, period);
        }
    }

    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        for event in self.cpus.iter().chain(&self.switches) {
            let _ = attr::set_enabled(&event.fd, enabled);
        }
        if !enabled {
            let counts_lost = attr::counts_lost(&self.attr);
            for event in self.cpus.iter_mut().chain(self.switches.iter_mut()) {
                self.stats.lost += event.unreported_lost(counts_lost, &[]);
            }
        }
    }

    /// Switches before this time can be handed out once every ring was drained (see
    /// [`ProcessFilter::release`]); after the events were disabled, all of them.
    pub fn ordered_until(&self, drain_started: u64) -> u64 {
        match self.enabled {
            true => drain_started.saturating_sub(ORDER_MARGIN_NS),
            false => u64::MAX,
        }
    }

    /// One line saying that the rings are smaller than wanted, and why.
    pub fn ring_note(&self) -> Option<String> {
        cpu_ring_note(&self.plan, self.pages, self.config.frequency_hz)
    }

    /// Online CPUs with an event.
    pub fn cpu_count(&self) -> usize {
        self.cpus.len()
    }
}

/// One line saying that the per-CPU rings of `pages` data pages are smaller than `plan` wants,
/// and why: the kernel refused larger ones, or the budget (the kernel's limit, or jvmperf's own
/// ceiling where the kernel sets none) did not allow them.
fn cpu_ring_note(plan: &RingPlan, pages: usize, frequency_hz: u64) -> Option<String> {
    if pages >= plan.cpu_pages {
        return None;
    }
    let budget = &plan.budget;
    let why = match (plan.refused, budget.kernel_limited) {
        (true, _) => format!(
            "the kernel refused larger ones ({}; other perf buffers of this user count too)",
            budget.source
        ),
        (false, true) => format!(
            "the kernel's locked-memory limit for perf buffers is short ({})",
            budget.source
        ),
        (false, false) => format!(
            "jvmperf's locked-memory budget is short ({})",
            budget.source
        ),
    };
    let fix = match budget.kernel_limited {
        true => {
            "raise `sysctl kernel.perf_event_mlock_kb` or `ulimit -l`, or lower -F or --stack-size"
        }
        false => "lower -F or --stack-size",
    };
    Some(format!(
        "perf ring buffers of {} KiB per CPU hold {} ms of a busy CPU's samples at {frequency_hz} Hz \
         ({} ms wanted): {why}; samples are lost when a drain comes later than that ({fix})",
        pages * plan.page_size / 1024,
        plan.hold_ms(pages),
        budget::CPU_HOLD_MS,
    ))
}

/// Maps a ring on each of `cpus` with `map`, asking for the budget's share of `available`
/// pages; `map` may get fewer (the kernel refused them), and later CPUs then ask for no more.
/// Returns the rings and the data pages of the last.
fn map_cpu_rings<T>(
    plan: &mut RingPlan,
    cpus: &[u32],
    available: usize,
    mut map: impl FnMut(u32, &mut usize) -> Result<T>,
) -> Result<(Vec<T>, usize)> {
    // Asked is what the budget allows: fewer pages than wanted is no refusal by the kernel.
    let asked = plan.pages_per_cpu(cpus.len(), available);
    let mut pages = asked;
    let mut rings = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        rings.push(map(cpu, &mut pages)?);
        plan.mapped(pages, asked, true);
    }
    Ok((rings, pages))
}

/// Opens `attr`'s event on CPU `cpu`, enabled, and maps its ring of `pages` data pages, halved
/// while the kernel refuses them down to `min_pages`.
fn open_mapped(
    attr: &mut perf_event_attr,
    cpu: u32,
    pages: &mut usize,
    min_pages: usize,
    config: &SamplerConfig,
) -> Result<(OwnedFd, RingBuffer)> {
    let page_size = super::ring::page_size();
    loop {
        let fd = match attr::open(attr, *pages * page_size / 4, -1, cpu as i32) {
            Ok(Some(fd)) => fd,
            Ok(None) => return Err(offline(cpu)),
            Err(e) => return Err(attr::cpu_open_error(&e, cpu, config)),
        };
        match RingBuffer::map(&fd, *pages) {
            Ok(ring) => return Ok((fd, ring)),
            Err(e)
                if *pages > min_pages
                    && matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOMEM)) =>
            {
                *pages /= 2;
            }
            Err(e) => {
                let bytes = *pages * page_size;
                return Err(attr::mmap_error(&e, &format!("CPU {cpu}"), bytes));
            }
        }
    }
}

fn watch(epoll: &Epoll, fd: &OwnedFd, index: usize) -> Result<()> {
    epoll
        .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, index as u64))
        .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_ctl: {e}")))
}

/// The online CPUs (`/sys/devices/system/cpu/online`: ranges such as `0-3,6`).
pub(super) fn online_cpus() -> Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").map_err(|e| {
        Error::new(
            ErrorKind::Sampling,
            format!("cannot read /sys/devices/system/cpu/online: {e} (is /sys mounted?)"),
        )
    })?;
    parse_cpu_list(&text).ok_or_else(|| {
        Error::new(
            ErrorKind::Sampling,
            format!(
                "cannot parse /sys/devices/system/cpu/online: {:?}",
                text.trim()
            ),
        )
    })
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?);
                if hi < lo || hi - lo >= 65536 {
                    return None;
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

fn offline(cpu: u32) -> Error {
    Error::new(
        ErrorKind::Sampling,
        format!("CPU {cpu} went offline while its perf event was opened: run again"),
    )
}

#[cfg(test)]
mod tests {
    use super::super::Budget;
    use super::*;

    fn left(tid: u32, time: u64) -> Sample<'static> {
        Sample {
            kind: SampleKind::LeftCpu,
            pid: 9,
            tid,
            time,
            regs: Regs::default(),
            stack: &[],
            kernel_ips: &[],
            in_kernel: true,
        }
    }

    #[test]
    fn switches_drained_from_several_rings_go_out_in_time_order() {
        let mut filter = ProcessFilter::new(9);
        let mut sink_none = |_: &Sample<'_>| {};
        // CPU 0's ring first: thread 1 back at 30; then CPU 1's: it left at 20. Another
        // process's switch, and one of ours too recent to hand out yet.
        filter.take(
            &ParsedRecord::SwitchIn {
                pid: 9,
                tid: 1,
                time: 30,
            },
            &mut sink_none,
        );
        filter.take(&ParsedRecord::Sample(left(1, 20)), &mut sink_none);
        filter.take(
            &ParsedRecord::Sample(Sample {
                pid: 8,
                ..left(2, 10)
            }),
            &mut sink_none,
        );
        filter.take(&ParsedRecord::Sample(left(3, 50)), &mut sink_none);
        let mut out = Vec::new();
        filter.release(40, &mut |s| out.push((s.kind, s.tid, s.time)));
        assert_eq!(
            out,
            [(SampleKind::LeftCpu, 1, 20), (SampleKind::SwitchIn, 1, 30)]
        );
        out.clear();
        filter.release(u64::MAX, &mut |s| out.push((s.kind, s.tid, s.time)));
        assert_eq!(out, [(SampleKind::LeftCpu, 3, 50)]);
    }

    #[test]
    fn a_thread_that_exited_leaves_no_wait_until_its_tid_is_reused() {
        let mut filter = ProcessFilter::new(9);
        let mut none = |_: &Sample<'_>| {};
        let task = |exit, time| ParsedRecord::Task {
            exit,
            pid: 9,
            tid: 4,
            time,
        };
        filter.take(&task(true, 10), &mut none);
        // Its last switch, on the way out of the kernel's exit path.
        filter.take(&ParsedRecord::Sample(left(4, 12)), &mut none);
        // A new thread given the same tid.
        filter.take(&task(false, 20), &mut none);
        filter.take(&ParsedRecord::Sample(left(4, 25)), &mut none);
        let mut out = Vec::new();
        filter.release(u64::MAX, &mut |s| out.push((s.kind, s.time)));
        assert_eq!(out, [(SampleKind::Exited, 10), (SampleKind::LeftCpu, 25)]);
    }

    fn sample(tid: u32, time: u64) -> Sample<'static> {
        Sample {
            kind: SampleKind::OnCpu,
            ..left(tid, time)
        }
    }

    /// A daemon's filter holds the threads seen lately only: a thread that ran once, long ago,
    /// leaves the maps; one seen since stays with its name.
    #[test]
    fn threads_not_seen_for_a_while_are_forgotten() {
        let sec = 1_000_000_000;
        let mut filter = ProcessFilter::keeping_threads(9, 10 * sec);
        let mut none = |_: &Sample<'_>| {};
        let comm = |tid| ParsedRecord::Comm {
            pid: 9,
            tid,
            name: b"worker",
        };
        for tid in [1, 2] {
            filter.take(&comm(tid), &mut none);
            filter.take(&ParsedRecord::Sample(sample(tid, sec)), &mut none);
        }
        filter.take(&ParsedRecord::Sample(sample(2, 9 * sec)), &mut none);
        assert_eq!(filter.threads_sampled(), 2);
        // A thread per second, each sampled once, for a while.
        for second in 10..100 {
            let tid = 100 + second as u32;
            filter.take(&comm(tid), &mut none);
            filter.take(&ParsedRecord::Sample(sample(tid, second * sec)), &mut none);
            filter.take(&ParsedRecord::Sample(sample(2, second * sec)), &mut none);
        }
        assert!(!filter.names.contains_key(&1));
        assert_eq!(filter.names.get(&2).map(String::as_str), Some("worker"));
        // Those of the last 10 s, and up to a quarter of that more before the next pruning.
        let kept = filter.threads_sampled();
        assert!((11..=15).contains(&kept), "{kept} threads kept");
        assert!(filter.names.len() <= kept && filter.recent.unwrap().seen.len() == kept);
    }

    /// A recording's filter keeps every thread: its names are the profile's.
    #[test]
    fn a_recording_keeps_every_thread() {
        let mut filter = ProcessFilter::new(9);
        for second in 0..100 {
            let s = sample(second as u32, second * 1_000_000_000);
            filter.take(&ParsedRecord::Sample(s), &mut |_| {});
        }
        assert_eq!(filter.threads_sampled(), 100);
    }

    fn plan(budget: Budget) -> RingPlan {
        let config = SamplerConfig {
            frequency_hz: 999,
            ..SamplerConfig::default()
        };
        config.ring_plan_with(2, budget, usize::MAX)
    }

    /// Rings cut short by jvmperf's own ceiling are not said to be refused by the kernel, and
    /// rings the kernel refused are.
    #[test]
    fn the_ring_note_names_the_cause_of_small_rings() {
        let page = super::super::ring::page_size();
        let own = Budget {
            pages: 4 << 20 >> page.trailing_zeros(),
            kernel_limited: false,
            source: "jvmperf's own ceiling of 4 MiB (the kernel sets none with CAP_IPC_LOCK)"
                .to_string(),
        };
        let mut short = plan(own.clone());
        let available = own.pages;
        let (_, pages) =
            map_cpu_rings(&mut short, &[0, 1], available, |_, pages| Ok(*pages)).unwrap();
        assert!(pages < short.cpu_pages, "the ceiling is short");
        let note = cpu_ring_note(&short, pages, 999).unwrap();
        assert!(!note.contains("kernel refused"), "{note}");
        assert!(
            note.contains("jvmperf's locked-memory budget is short (jvmperf's own ceiling"),
            "{note}"
        );
        assert!(note.ends_with("(lower -F or --stack-size)"), "{note}");

        let mut refused = plan(Budget::unlimited());
        let (_, pages) = map_cpu_rings(&mut refused, &[0, 1], usize::MAX, |_, pages| {
            *pages /= 4;
            Ok(())
        })
        .unwrap();
        let note = cpu_ring_note(&refused, pages, 999).unwrap();
        assert!(note.contains("the kernel refused larger ones"), "{note}");

        let mut ample = plan(Budget::unlimited());
        let (_, pages) =
            map_cpu_rings(&mut ample, &[0, 1], usize::MAX, |_, pages| Ok(*pages)).unwrap();
        assert_eq!(cpu_ring_note(&ample, pages, 999), None);
    }

    #[test]
    fn cpu_lists_as_sysfs_writes_them() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("0-x"), None);
        assert_eq!(parse_cpu_list("0-4294967295"), None);
    }
}
