//! Stack sampling with `perf_event_open`: one CPU-clock event per thread of the target (no
//! inherit), each with its own ring buffer, all watched by one epoll. Samples carry the user
//! registers and a copy of the top of the user stack for unwinding, and optionally the kernel
//! callchain. They are handed out borrowed from the ring buffer, without copying.

mod attr;
mod budget;
mod record;
mod ring;
#[cfg(test)]
mod tests;

pub use budget::{Budget, Host, RingPlan};
pub use record::{RecordLayout, Regs, Sample, SampleKind};

use crate::error::{err, Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use perf_event_open_sys::bindings::perf_event_attr;
use record::Record;
use ring::RingBuffer;
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::time::Duration;

/// Largest `sample_stack_user` the kernel accepts (a multiple of 8 below `USHRT_MAX`).
pub const MAX_STACK_SIZE: u32 = 65528;

/// Bytes of user stack the kernel copies per sample by default. The copy is made in the sampled
/// thread's own time, so it is a cost to the target: 32 KiB cost a busy JVM ~2.4 µs more per
/// sample than 8 KiB (`cargo xtask bench record`: 22.3 against 19.9 µs). Frames past the copy are
/// read from the live stack only while it still ends the copy with the same bytes (see
/// `walker::StackView`), and a thread that has moved on by the time its sample is walked has not:
/// with 8 KiB, 93.8% of Tomcat's request stacks reached their thread root, with 32 KiB all did.
/// Measured on JDK 17: a Java thread's base (TLS, thread start, call stub) takes about 7 KiB and
/// each level of a JIT-compiled call chain about 180 bytes.
pub const DEFAULT_STACK_SIZE: u32 = 32768;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Samples per second of CPU time, per thread.
    pub frequency_hz: u64,
    /// Bytes of user stack copied from the sampled SP (multiple of 8, at most [`MAX_STACK_SIZE`]).
    pub stack_size: u32,
    /// Also record the kernel callchain (needs `perf_event_paranoid` ≤ 1 or CAP_PERFMON).
    pub kernel_callchain: bool,
    /// Data pages per thread's ring buffer (rounded up to a power of two); `None` sizes it from
    /// the frequency, the stack size and the locked-memory budget (see [`RingPlan`]).
    pub ring_pages: Option<usize>,
    /// Wall-clock mode: CPU time sampled at a fixed period, and each thread's stack taken when it
    /// leaves a CPU, with the time it comes back ([`SampleKind`]).
    pub wall: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            frequency_hz: 99,
            stack_size: DEFAULT_STACK_SIZE,
            kernel_callchain: false,
            ring_pages: None,
            wall: false,
        }
    }
}

impl SamplerConfig {
    /// Nanoseconds of CPU time between samples: the period wall-clock mode samples at.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / self.frequency_hz.max(1)
    }

    fn validate(&self) -> Result<()> {
        if self.frequency_hz == 0 {
            return err(
                ErrorKind::Usage,
                "the sampling frequency must be at least 1 Hz",
            );
        }
        if let Some(max) = attr::max_sample_rate() {
            if self.frequency_hz > max {
                return err(
                    ErrorKind::Usage,
                    format!(
                        "sampling frequency {} Hz exceeds kernel.perf_event_max_sample_rate={max} \
                         (lower the frequency or raise the sysctl)",
                        self.frequency_hz
                    ),
                );
            }
        }
        if self.stack_size % 8 != 0 || self.stack_size > MAX_STACK_SIZE {
            return err(
                ErrorKind::Usage,
                format!(
                    "stack size {} must be a multiple of 8 and at most {MAX_STACK_SIZE}",
                    self.stack_size
                ),
            );
        }
        Ok(())
    }

    /// Ring sizes for `threads` threads (and some to come) within `budget`.
    pub fn ring_plan(&self, threads: usize, budget: Budget) -> RingPlan {
        let available = budget::available(&budget);
        self.ring_plan_with(threads, budget, available)
    }

    fn ring_plan_with(&self, threads: usize, budget: Budget, available: usize) -> RingPlan {
        let page = ring::page_size();
        let mut plan = RingPlan::new(
            self.max_record_bytes(),
            self.frequency_hz,
            page,
            threads,
            budget,
            available,
        );
        if let Some(pages) = self.ring_pages {
            let pages = pages.max(1).next_power_of_two();
            plan.busy_pages = pages;
            plan.wanted_base_pages = pages;
            plan.base_pages = pages;
            plan.min_pages = pages;
        }
        plan
    }

    /// The largest sample record these settings produce.
    fn max_record_bytes(&self) -> usize {
        // Header, [identifier], pid/tid, time, regs (abi + 17), stack (size, data, dyn_size).
        let mut bytes = 8 + 8 + 8 + 8 * (1 + record::REG_COUNT) + 8 + self.stack_size as usize + 8;
        if self.wall {
            bytes += 8;
        }
        if self.kernel_callchain {
            // kernel.perf_event_max_stack defaults to 127, plus one context marker.
            bytes += 8 * (1 + 128);
        }
        bytes
    }
}

/// One ring-buffer record as the sampler reads it.
#[derive(Debug)]
pub enum ParsedRecord<'a> {
    /// A sample; its `kernel_ips` borrow the vector passed to [`parse_record`].
    Sample(Sample<'a>),
    /// Wall-clock mode: the thread went back on a CPU.
    SwitchIn {
        pid: u32,
        tid: u32,
        time: u64,
    },
    /// The kernel dropped this many samples (buffer full).
    Lost(u64),
    Throttle,
    Unthrottle,
    /// A kind the sampler ignores.
    Other,
}

/// Parses one complete ring-buffer record (header included), laid out for the sample type the
/// sampler configures ([IDENTIFIER in wall mode], TID, TIME, [CALLCHAIN when
/// `kernel_callchain`], REGS_USER, STACK_USER). Kernel return addresses are decoded into
/// `kernel_ips`. `None`: the record is malformed.
///
/// This is exactly what [`Sampler::poll`] runs on every record; it is public for the fuzz targets.
pub fn parse_record<'a>(
    bytes: &'a [u8],
    layout: RecordLayout,
    kernel_ips: &'a mut Vec<u64>,
) -> Option<ParsedRecord<'a>> {
    Some(match record::parse(bytes, layout)? {
        Record::Sample { sample, callchain } => {
            record::kernel_ips(callchain, kernel_ips);
            ParsedRecord::Sample(Sample {
                kernel_ips,
                ..sample
            })
        }
        Record::SwitchIn { pid, tid, time } => ParsedRecord::SwitchIn { pid, tid, time },
        Record::Lost(n) => ParsedRecord::Lost(n),
        Record::Throttle => ParsedRecord::Throttle,
        Record::Unthrottle => ParsedRecord::Unthrottle,
        Record::Other => ParsedRecord::Other,
    })
}

/// Counters since [`Sampler::open`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Samples handed to the sink (switch-out samples of wall-clock mode included).
    pub samples: u64,
    /// Wall-clock mode: switch-out samples among them.
    pub switches: u64,
    /// Samples the kernel dropped because a ring buffer was full: the sum of LOST records, and
    /// for events disabled or closed since, the drops no LOST record reported (the kernel
    /// writes one only with the next record that fits).
    pub lost: u64,
    /// THROTTLE records: the kernel lowered the rate (`perf_event_max_sample_rate`).
    pub throttled: u64,
    pub unthrottled: u64,
    /// Threads with an open event now.
    pub threads_open: usize,
    /// Distinct threads whose event could not be opened or mapped.
    pub threads_failed: usize,
    /// Threads whose event was closed after they exited.
    pub threads_exited: u64,
    /// Bytes of records read from the ring buffers.
    pub bytes: u64,
    /// Threads whose ring buffer was enlarged because the drain found them busy.
    pub rings_grown: u64,
    /// The fullest a ring buffer was found when drained, in percent of its size: how close the
    /// sampler came to losing samples (100: it did, or nearly).
    pub peak_fill_percent: u8,
    /// Malformed records (and stretches of a ring buffer skipped because of them).
    pub malformed: u64,
}

struct ThreadEvent {
    /// Wall-clock mode's context-switch event, writing into `ring`.
    switch: Option<OwnedFd>,
    /// How this ring's records are laid out (the switch event's id among them).
    layout: RecordLayout,
    // Declared before `fd`: unmap before closing (and only then give back the locked pages).
    ring: RingBuffer,
    _locked: budget::Locked,
    fd: OwnedFd,
    /// Data pages of `ring`.
    pages: usize,
    /// Found busy, but the budget had no room for a larger ring.
    no_room: bool,
    /// Samples its LOST records reported, and those counted in [`SamplerStats::lost`] (more
    /// when the kernel's count was read before a LOST record came).
    lost_records: u64,
    lost_counted: u64,
}

impl ThreadEvent {
    /// Every event of the thread writing into its ring.
    fn fds(&self) -> impl Iterator<Item = &OwnedFd> {
        std::iter::once(&self.fd).chain(self.switch.as_ref())
    }

    fn set_enabled(&self, enabled: bool) -> std::io::Result<()> {
        self.fds().try_for_each(|fd| attr::set_enabled(fd, enabled))
    }

    /// Counts in `stats` the samples the event dropped that no LOST record reported yet (none
    /// will while it is disabled or after its thread exited).
    fn count_unreported_lost(&mut self, counts_lost: bool, stats: &mut SamplerStats) {
        if !counts_lost {
            return;
        }
        if let Ok(total) = attr::read_lost(&self.fd) {
            if total > self.lost_counted {
                stats.lost += total - self.lost_counted;
                self.lost_counted = total;
            }
        }
    }
}

pub struct Sampler {
    pid: u32,
    config: SamplerConfig,
    attr: perf_event_attr,
    /// Wall-clock mode's context-switch event.
    switch_attr: Option<perf_event_attr>,
    plan: RingPlan,
    enabled: bool,
    epoll: Epoll,
    threads: HashMap<u32, ThreadEvent>,
    failed: HashSet<u32>,
    last_error: Option<Error>,
    stats: SamplerStats,
    /// Reused buffers: a record that wraps around, decoded kernel ips, epoll results, exited tids.
    scratch: Vec<u8>,
    kernel_ips: Vec<u64>,
    events: Vec<EpollEvent>,
    hung_up: Vec<u32>,
    busy: Vec<u32>,
}

impl Sampler {
    /// Opens and enables an event on every current thread of `pid`.
    pub fn open(pid: u32, config: &SamplerConfig) -> Result<Sampler> {
        config.validate()?;
        let tids = list_threads(pid).map_err(|e| {
            Error::new(
                ErrorKind::NoProcess,
                format!("cannot list the threads of process {pid}: {e} (has it exited?)"),
            )
        })?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_create1: {e}")))?;
        let plan = config.ring_plan(tids.len(), Host::current().budget());
        let attr = attr::event_attr(config);
        let mut sampler = Sampler {
            pid,
            config: config.clone(),
            attr,
            switch_attr: config.wall.then(|| attr::switch_attr(&attr)),
            plan,
            enabled: true,
            epoll,
            threads: HashMap::new(),
            failed: HashSet::new(),
            last_error: None,
            stats: SamplerStats::default(),
            scratch: Vec::new(),
            kernel_ips: Vec::new(),
            events: vec![EpollEvent::empty(); 64],
            hung_up: Vec::new(),
            busy: Vec::new(),
        };
        for tid in tids {
            sampler.add_thread(tid)?;
        }
        if sampler.threads.is_empty() {
            return err(
                ErrorKind::NoProcess,
                format!("process {pid} has no threads left to sample (has it exited?)"),
            );
        }
        Ok(sampler)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether samples also land in kernel code (system calls, page faults); false when
    /// `perf_event_paranoid` restricts us to user time, which then goes unsampled.
    pub fn samples_kernel_time(&self) -> bool {
        self.attr.exclude_kernel() == 0
    }

    /// Bytes of a new thread's ring buffer (data pages only) as planned; threads past the plan
    /// may get smaller ones when the budget runs short, busy threads larger ones.
    pub fn ring_buffer_bytes(&self) -> usize {
        self.plan.base_pages * self.plan.page_size
    }

    /// Bytes of thread `tid`'s ring buffer now (data pages only).
    pub fn thread_ring_bytes(&self, tid: u32) -> Option<usize> {
        self.threads
            .get(&tid)
            .map(|event| event.pages * self.plan.page_size)
    }

    /// How the ring buffers were sized.
    pub fn ring_plan(&self) -> &RingPlan {
        &self.plan
    }

    /// One line saying that the ring buffers are smaller than a busy thread needs, and why;
    /// `None` when they are as large as wanted.
    pub fn ring_note(&self) -> Option<String> {
        self.plan
            .note(budget::available(&self.plan.budget), self.threads.len())
    }

    /// Threads with an open event, in no particular order.
    pub fn thread_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.threads.keys().copied()
    }

    /// Starts sampling thread `tid` (a tid of the target as seen from our pid namespace).
    /// `Ok(false)`: already sampled, not a thread of the target (any more), or failed before.
    pub fn add_thread(&mut self, tid: u32) -> Result<bool> {
        if self.threads.contains_key(&tid) || self.failed.contains(&tid) {
            return Ok(false);
        }
        if !std::path::Path::new(&format!("/proc/{}/task/{tid}", self.pid)).exists() {
            return Ok(false);
        }
        match self.open_thread(tid) {
            Ok(Some(event)) => {
                self.threads.insert(tid, event);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                self.failed.insert(tid);
                self.last_error = Some(Error::new(e.kind, e.message.clone()));
                Err(e)
            }
        }
    }

    fn open_thread(&mut self, tid: u32) -> Result<Option<ThreadEvent>> {
        let pages = self
            .plan
            .pages_for_new(budget::available(&self.plan.budget));
        let Some(event) = self.open_event(tid, pages, self.plan.min_pages, false)? else {
            return Ok(None);
        };
        if self.enabled {
            event.set_enabled(true).map_err(|e| {
                Error::new(
                    ErrorKind::Sampling,
                    format!("cannot enable the perf event of thread {tid}: {e}"),
                )
            })?;
        }
        Ok(Some(event))
    }

    /// Opens thread `tid`'s event, disabled, with a ring of `pages` data pages, or of fewer,
    /// down to `min_pages`, when the kernel refuses them (other perf buffers of the user share
    /// its limit); later rings are then planned no larger. `Ok(None)`: the thread is gone.
    fn open_event(
        &mut self,
        tid: u32,
        wanted: usize,
        min_pages: usize,
        busy: bool,
    ) -> Result<Option<ThreadEvent>> {
        let mut pages = wanted;
        let (fd, ring) = loop {
            // Epoll reports the buffer readable once a quarter full.
            let wakeup = pages * self.plan.page_size / 4;
            let opened = attr::open_thread(&mut self.attr, wakeup, tid);
            let Some(fd) = opened.map_err(|e| attr::open_error(&e, tid, &self.config))? else {
                return Ok(None);
            };
            match RingBuffer::map(&fd, pages) {
                Ok(ring) => break (fd, ring),
                Err(e)
                    if pages > min_pages
                        && matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOMEM)) =>
                {
                    pages /= 2;
                }
                Err(e) => return Err(attr::mmap_error(&e, tid, pages * self.plan.page_size)),
            }
        };
        let switch = self.open_switch_event(tid, &fd)?;
        let layout = RecordLayout {
            kernel_callchain: self.config.kernel_callchain,
            switch_event: switch.as_ref().map(|(_, id)| *id),
        };
        self.plan.mapped(pages, wanted, busy);
        let locked = budget::Locked::new(pages);
        self.epoll
            .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, u64::from(tid)))
            .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_ctl: {e}")))?;
        Ok(Some(ThreadEvent {
            switch: switch.map(|(fd, _)| fd),
            layout,
            ring,
            _locked: locked,
            fd,
            pages,
            no_room: false,
            lost_records: 0,
            lost_counted: 0,
        }))
    }

    /// Wall-clock mode: opens thread `tid`'s context-switch event, disabled, writing into the ring
    /// of `cpu_clock`; returns it with its id. `Ok(None)` outside wall mode.
    fn open_switch_event(
        &mut self,
        tid: u32,
        cpu_clock: &OwnedFd,
    ) -> Result<Option<(OwnedFd, u64)>> {
        let Some(switch_attr) = self.switch_attr.as_mut() else {
            return Ok(None);
        };
        // The ring's fill level wakes epoll through the CPU-clock event.
        let opened = attr::open_thread(switch_attr, 0, tid);
        let Some(fd) = opened.map_err(|e| attr::open_error(&e, tid, &self.config))? else {
            // The thread is gone: its CPU-clock event hangs up at the next poll.
            return Ok(None);
        };
        let id = attr::set_output(&fd, cpu_clock).and_then(|()| attr::event_id(&fd));
        let id = id.map_err(|e| {
            Error::new(
                ErrorKind::Sampling,
                format!("cannot route thread {tid}'s context-switch samples to its ring: {e}"),
            )
        })?;
        Ok(Some((fd, id)))
    }

    /// Moves busy thread `tid` to a larger ring, if the budget has room: its samples go to the
    /// new ring from the moment the old one is disabled, and what the old one holds is drained
    /// to `sink` before it is closed, so the thread's samples stay in order.
    fn grow(&mut self, tid: u32, sink: &mut dyn FnMut(&Sample<'_>)) {
        let Some(current) = self.threads.get(&tid).map(|event| event.pages) else {
            return;
        };
        let available = budget::available(&self.plan.budget);
        let pages = self
            .plan
            .pages_for_busy(current, available, self.threads.len());
        let grown = if pages > current {
            self.open_event(tid, pages, current * 2, true)
        } else {
            Ok(None)
        };
        let new = match grown {
            Ok(Some(new)) => new,
            Ok(None) => {
                if let Some(event) = self.threads.get_mut(&tid) {
                    event.no_room = true;
                }
                return;
            }
            Err(_) => {
                // The kernel refused even twice the ring: busy rings stay this size.
                self.plan.mapped(current, pages, true);
                if let Some(event) = self.threads.get_mut(&tid) {
                    event.no_room = true;
                }
                return;
            }
        };
        let Some(mut old) = self.threads.insert(tid, new) else {
            return;
        };
        // Disabling returns once the event can no longer write (an IPI to the thread's CPU).
        let _ = old.set_enabled(false);
        if self.enabled {
            if let Some(new) = self.threads.get(&tid) {
                let _ = new.set_enabled(true);
            }
        }
        drain_ring(
            &mut old,
            &mut self.scratch,
            &mut self.kernel_ips,
            &mut self.stats,
            sink,
        );
        old.count_unreported_lost(attr::counts_lost(&self.attr), &mut self.stats);
        let _ = self.epoll.delete(&old.fd);
        self.stats.rings_grown += 1;
    }

    /// Opens events for threads that appeared since the last scan; returns how many were added.
    /// Failures are counted in [`SamplerStats::threads_failed`] and kept in [`Self::last_error`].
    pub fn rescan_threads(&mut self) -> usize {
        let Ok(tids) = list_threads(self.pid) else {
            return 0;
        };
        // Forget failures of threads that are gone, so a reused tid gets a fresh try.
        self.failed.retain(|tid| tids.binary_search(tid).is_ok());
        tids.into_iter()
            .filter(|&tid| matches!(self.add_thread(tid), Ok(true)))
            .count()
    }

    /// The most recent failure to open or map a thread's event.
    pub fn last_error(&self) -> Option<&Error> {
        self.last_error.as_ref()
    }

    /// Waits up to `timeout` for a ring buffer to fill a quarter or a thread to exit, then drains
    /// every ring buffer, calling `sink` for each sample. Events of exited threads are closed.
    pub fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(&Sample<'_>)) -> Result<()> {
        let millis = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let ready = match self.epoll.wait(
            &mut self.events,
            EpollTimeout::try_from(millis).unwrap_or(EpollTimeout::MAX),
        ) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => return err(ErrorKind::Internal, format!("epoll_wait: {e}")),
        };
        self.hung_up.clear();
        for event in &self.events[..ready] {
            if event
                .events()
                .intersects(EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR)
            {
                self.hung_up.push(event.data() as u32);
            }
        }
        self.drain(sink);
        let hung_up = std::mem::take(&mut self.hung_up);
        for tid in &hung_up {
            if let Some(mut event) = self.threads.remove(tid) {
                event.count_unreported_lost(attr::counts_lost(&self.attr), &mut self.stats);
                let _ = self.epoll.delete(&event.fd);
                self.stats.threads_exited += 1;
            }
        }
        self.hung_up = hung_up;
        Ok(())
    }

    /// Reads every ring buffer once, up to the head seen when starting on it.
    fn drain(&mut self, sink: &mut dyn FnMut(&Sample<'_>)) {
        let counts_lost = attr::counts_lost(&self.attr);
        let Sampler {
            threads,
            scratch,
            kernel_ips,
            stats,
            busy,
            enabled,
            ..
        } = self;
        busy.clear();
        for (tid, event) in threads.iter_mut() {
            let (fill, lost) = drain_ring(event, scratch, kernel_ips, stats, sink);
            if !*enabled {
                // Drained while disabled: all the event will ever report is known.
                event.count_unreported_lost(counts_lost, stats);
            } else if !event.no_room && (4 * fill >= event.ring.data_size() || lost) {
                // A quarter full since the last drain, or overflowing: the thread is busy.
                busy.push(*tid);
            }
        }
        let busy = std::mem::take(&mut self.busy);
        for &tid in &busy {
            if self
                .threads
                .get(&tid)
                .is_some_and(|event| event.pages < self.plan.busy_pages)
            {
                self.grow(tid, sink);
            }
        }
        self.busy = busy;
    }

    pub fn stats(&self) -> SamplerStats {
        SamplerStats {
            threads_open: self.threads.len(),
            threads_failed: self.failed.len(),
            ..self.stats
        }
    }

    /// Samples per second per thread from now on, for every thread (and threads added later).
    pub fn set_frequency(&mut self, hz: u64) -> Result<()> {
        if self.config.wall {
            return err(
                ErrorKind::Usage,
                "the rate of a wall-clock recording is fixed at its start",
            );
        }
        let config = SamplerConfig {
            frequency_hz: hz,
            ..self.config.clone()
        };
        config.validate()?;
        self.config = config;
        self.attr.sample_freq = hz;
        for event in self.threads.values() {
            // Fails only for an event whose thread is gone, which the next poll cleans up.
            let _ = attr::set_frequency(&event.fd, hz);
        }
        Ok(())
    }

    /// Stops sampling on every thread (and on threads added later), e.g. before a final drain.
    pub fn disable(&mut self) {
        self.set_enabled(false);
    }

    /// Resumes sampling after [`Self::disable`].
    pub fn enable(&mut self) {
        self.set_enabled(true);
    }

    fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        for event in self.threads.values() {
            // Fails only for an event whose thread is gone, which the next poll cleans up.
            let _ = event.set_enabled(enabled);
        }
    }
}

/// Reads one thread's ring buffer up to the head seen when starting on it. Returns how many
/// bytes it held then and whether it reported lost samples.
fn drain_ring(
    event: &mut ThreadEvent,
    scratch: &mut Vec<u8>,
    kernel_ips: &mut Vec<u64>,
    stats: &mut SamplerStats,
    sink: &mut dyn FnMut(&Sample<'_>),
) -> (usize, bool) {
    let mut lost = 0;
    let layout = event.layout;
    let drained = event.ring.drain(scratch, |bytes| {
        match parse_record(bytes, layout, kernel_ips) {
            Some(ParsedRecord::Sample(sample)) => {
                stats.samples += 1;
                stats.switches += u64::from(sample.kind == SampleKind::SwitchOut);
                sink(&sample);
            }
            Some(ParsedRecord::SwitchIn { pid, tid, time }) => sink(&Sample {
                kind: SampleKind::SwitchIn,
                pid,
                tid,
                time,
                regs: Regs::default(),
                stack: &[],
                kernel_ips: &[],
                in_kernel: false,
            }),
            Some(ParsedRecord::Lost(n)) => lost += n,
            Some(ParsedRecord::Throttle) => stats.throttled += 1,
            Some(ParsedRecord::Unthrottle) => stats.unthrottled += 1,
            Some(ParsedRecord::Other) => {}
            None => stats.malformed += 1,
        }
    });
    event.lost_records += lost;
    if event.lost_records > event.lost_counted {
        stats.lost += event.lost_records - event.lost_counted;
        event.lost_counted = event.lost_records;
    }
    stats.bytes += drained.bytes;
    stats.malformed += u64::from(drained.resynced);
    let size = event.ring.data_size();
    let fill = usize::try_from(drained.fill)
        .unwrap_or(usize::MAX)
        .min(size);
    let percent = u8::try_from(fill * 100 / size).unwrap_or(100);
    stats.peak_fill_percent = stats.peak_fill_percent.max(percent);
    (fill, lost > 0)
}

/// Thread ids in `/proc/<pid>/task`, sorted. Read by hand, not by `procfs`: its task iterator
/// opens every thread's directory, 6 to 15 times the cost of this, every rescan.
fn list_threads(pid: u32) -> std::io::Result<Vec<u32>> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}
