//! Per-thread sampling, the fallback where per-CPU events are not allowed (the JVM's own user
//! without CAP_PERFMON): one CPU-clock event per thread of the target (no inherit), each with its
//! own ring buffer, all watched by one epoll.
//!
//! Such an event counts its own thread's CPU time, and the kernel starts it a full period away
//! from its first sample (`perf_swevent_init_hrtimer`, kernel/events/core.c): a thread that runs
//! less than a period would never be sampled. So each thread's first period is drawn at random in
//! (0, P], and set to P once its first sample came; samples taken at the short first period count
//! for their share of P only (see [`ThreadEvent::take`]). Each context switch of a sampled thread
//! stops and restarts the event's hrtimer, which is this strategy's cost.

use super::attr;
use super::budget::{self, RingPlan};
use super::event::{switch_in, MappedEvent};
use super::record::{RecordLayout, Sample, SampleKind};
use super::ring::RingBuffer;
use super::{ParsedRecord, SamplerConfig, SamplerStats};
use crate::error::{Error, ErrorKind, Result};
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};
use perf_event_open_sys::bindings::perf_event_attr;
use std::collections::HashMap;
use std::os::fd::OwnedFd;

/// A thread whose event failed to open is tried this many times in all (a thread may be caught
/// mid-exit, or fds may be short for a moment).
const OPEN_TRIES: u8 = 2;

/// Time spent opening threads' events per turn of the engine (between drains): ~150 µs a thread
/// (perf_event_open, the ring's mmap, epoll).
const OPEN_BATCH: std::time::Duration = std::time::Duration::from_millis(25);

/// A thread's first period is at least the full period divided by this.
const FIRST_PERIOD_MAX_SPEEDUP: u64 = 32;

struct ThreadEvent {
    /// More events writing into `event`'s ring: wall-clock mode's context-switch event, or the
    /// other uprobes.
    more: Vec<OwnedFd>,
    event: MappedEvent,
    /// Found busy, but the budget had no room for a larger ring.
    no_room: bool,
    pacing: Pacing,
}

/// Which of a thread's on-CPU samples are handed out.
#[derive(Debug, Clone, Copy)]
struct Pacing {
    /// The random first period, and when the event was set to the full period (`None`: not yet).
    first_period: u64,
    period_set_at: Option<u64>,
    /// Nanoseconds of the thread's CPU time its samples stand for and not yet handed out: a sample
    /// is handed out for each full period (see [`Pacing::take`]).
    credit: u64,
}

impl ThreadEvent {
    /// Its descriptors, rings unmapped.
    fn into_fds(self) -> Vec<OwnedFd> {
        let mut fds = self.more;
        fds.push(self.event.into_fd());
        fds
    }

    /// Every event of the thread writing into its ring.
    fn fds(&self) -> impl Iterator<Item = &OwnedFd> {
        std::iter::once(&self.event.fd).chain(&self.more)
    }

    fn set_enabled(&self, enabled: bool) -> std::io::Result<()> {
        self.fds().try_for_each(|fd| attr::set_enabled(fd, enabled))
    }

    /// Counts the drops no LOST record reported (see [`MappedEvent::unreported_lost`]; the
    /// other events' counts too).
    fn count_unreported_lost(&mut self, counts_lost: bool, period: u64, stats: &mut SamplerStats) {
        let lost = self.event.unreported_lost(counts_lost, &self.more);
        stats.lost += self.pacing.lost_share(lost, period);
    }
}

impl Pacing {
    fn new(first_period: u64, period: u64) -> Pacing {
        Pacing {
            first_period,
            period_set_at: (first_period == period).then_some(0),
            credit: period - first_period,
        }
    }

    /// Of `lost` samples dropped, those that would have been handed out: a share of those taken
    /// at the short first period (while it lasted), all of the others.
    fn lost_share(&self, lost: u64, period: u64) -> u64 {
        match self.period_set_at {
            Some(_) => lost,
            None => lost.saturating_mul(self.first_period) / period.max(1),
        }
    }

    /// Whether an on-CPU sample taken at `time` is handed out. Until the event is set to the full
    /// period `period`, it samples every `first_period` ns: each such sample stands for that much
    /// CPU time, and one is handed out per full period of it, the first one always.
    fn take(&mut self, time: u64, period: u64) -> bool {
        let short = self.period_set_at.is_none_or(|at| time < at);
        self.credit += if short { self.first_period } else { period };
        if self.credit >= period {
            self.credit -= period;
            true
        } else {
            false
        }
    }
}

pub(super) struct ThreadSampler {
    pid: u32,
    config: SamplerConfig,
    attr: perf_event_attr,
    /// More events per thread: wall-clock mode's context-switch event, or the other uprobes.
    more_attrs: Vec<perf_event_attr>,
    pub plan: RingPlan,
    enabled: bool,
    epoll: Epoll,
    threads: HashMap<u32, ThreadEvent>,
    /// Threads whose event could not be opened, with the tries so far.
    failed: HashMap<u32, u8>,
    last_error: Option<Error>,
    stats: SamplerStats,
    /// Seeds the first periods.
    random: u64,
    /// Reused buffers: a record that wraps around, decoded kernel ips, busy tids.
    scratch: Vec<u8>,
    kernel_ips: Vec<u64>,
    busy: Vec<u32>,
    /// Threads found and not yet opened.
    pending: std::collections::VecDeque<u32>,
    /// When threads were last listed, and what that took.
    rescanned: std::time::Instant,
    rescan_cost: std::time::Duration,
    // Last: closes what the sampler handed it, once the rings are closed.
    closer: Closer,
}

/// Closes the descriptors of events the sampler is done with on a thread of its own: closing a
/// uprobe event waits for an RCU grace period under the kernel's trace event lock
/// (`perf_uprobe_destroy`, `uprobe_unregister_sync`; some 80 ms each on a busy 2-CPU VM, one
/// after another), which must not hold up the thread that drains the rings.
struct Closer {
    to_close: Option<std::sync::mpsc::Sender<Vec<OwnedFd>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Closer {
    fn start() -> Closer {
        let (to_close, closing) = std::sync::mpsc::channel::<Vec<OwnedFd>>();
        let thread = std::thread::Builder::new()
            .name("jvmperf-close".into())
            .spawn(move || closing.into_iter().for_each(drop))
            .ok();
        Closer {
            to_close: thread.is_some().then_some(to_close),
            thread,
        }
    }

    /// Closes `fds` soon; here where there is no closing thread.
    fn close(&self, fds: Vec<OwnedFd>) {
        if let Some(to_close) = &self.to_close {
            let _ = to_close.send(fds);
        }
    }
}

impl Drop for Closer {
    /// Returns once everything handed over is closed.
    fn drop(&mut self) {
        self.to_close = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ThreadSampler {
    /// Opens an event, enabled, on every current thread of `pid`.
    pub fn open(pid: u32, config: &SamplerConfig, epoll: Epoll) -> Result<ThreadSampler> {
        let tids = super::list_threads(pid)?;
        raise_fd_limit();
        let plan = config.ring_plan(tids.len(), super::Host::current().budget());
        let (attr, more) = match &config.uprobes {
            Some(probes) => {
                let pmu = super::uprobe_pmu()?;
                let more = (1..probes.probes.len())
                    .map(|i| attr::uprobe_attr(config, pmu, probes, i))
                    .collect();
                (attr::uprobe_attr(config, pmu, probes, 0), more)
            }
            None => {
                let attr = attr::event_attr(config);
                let switch = config.wall.then(|| attr::switch_attr(&attr));
                (attr, switch.into_iter().collect())
            }
        };
        let mut sampler = ThreadSampler {
            pid,
            config: config.clone(),
            attr,
            more_attrs: more,
            plan,
            enabled: true,
            epoll,
            threads: HashMap::new(),
            failed: HashMap::new(),
            last_error: None,
            stats: SamplerStats::default(),
            random: crate::profile::monotonic_now_ns() ^ u64::from(pid) << 32,
            scratch: Vec::new(),
            kernel_ips: Vec::new(),
            busy: Vec::new(),
            pending: busiest_first(pid, tids).into(),
            rescanned: std::time::Instant::now(),
            rescan_cost: std::time::Duration::ZERO,
            closer: Closer::start(),
        };
        // The first batch now, the rest turn by turn between drains: the events sample from
        // their open, and their rings must be drained while the others open.
        while sampler.threads.is_empty() && !sampler.pending.is_empty() {
            if let Err(e) = sampler.open_pending() {
                // Nothing can be sampled: say why (permissions, the kernel).
                if sampler.threads.is_empty() {
                    return Err(e);
                }
            }
        }
        if sampler.threads.is_empty() {
            return Err(Error::new(
                ErrorKind::NoProcess,
                format!("process {pid} has no threads left to sample (has it exited?)"),
            ));
        }
        Ok(sampler)
    }

    pub fn samples_kernel_time(&self) -> bool {
        self.attr.exclude_kernel() == 0
    }

    pub fn thread_ring_bytes(&self, tid: u32) -> Option<usize> {
        self.threads
            .get(&tid)
            .map(|t| t.event.pages * self.plan.page_size)
    }

    pub fn epoll(&self) -> &Epoll {
        &self.epoll
    }

    pub fn threads_open(&self) -> usize {
        self.threads.len()
    }

    pub fn last_error(&self) -> Option<&Error> {
        self.last_error.as_ref()
    }

    /// Starts sampling thread `tid`. `Ok(false)`: already sampled, not a thread of the target
    /// (any more), or failed as often as it may.
    pub fn add_thread(&mut self, tid: u32) -> Result<bool> {
        if self.threads.contains_key(&tid)
            || self.failed.get(&tid).is_some_and(|&n| n >= OPEN_TRIES)
        {
            return Ok(false);
        }
        if !std::path::Path::new(&format!("/proc/{}/task/{tid}", self.pid)).exists() {
            return Ok(false);
        }
        let pages = self
            .plan
            .pages_for_new(budget::available(&self.plan.budget));
        let first_period = self.first_period();
        let opened = self.open_event(tid, pages, self.plan.min_pages, false, first_period);
        match opened.map_err(OpenError::into_error) {
            Ok(Some(event)) => {
                self.failed.remove(&tid);
                self.threads.insert(tid, event);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                *self.failed.entry(tid).or_default() += 1;
                self.last_error = Some(Error::new(e.kind, e.message.clone()));
                Err(e)
            }
        }
    }

    /// A first period drawn uniformly in [P/32, P] (splitmix64). From (0, P] every thread would be
    /// sampled exactly in proportion to its CPU time; but until the drain sets the full period, a
    /// thread that drew a short one samples at P/first times the rate (see [`Pacing`]), so the
    /// draw stops at 32 times. Threads that run less than P/32 in their whole life (0.3 ms at 99
    /// Hz) are left unsampled, and a thread with c < P of CPU time is sampled with probability
    /// (c − P/32)/(P − P/32) instead of c/P.
    fn first_period(&mut self) -> u64 {
        self.random = self.random.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.random;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let period = self.config.period_ns();
        if self.config.uprobes.is_some() {
            // Every hit counts from the first: nothing to stagger.
            return period;
        }
        let shortest = (period / FIRST_PERIOD_MAX_SPEEDUP).max(1);
        shortest + z % (period - shortest + 1)
    }

    /// Opens thread `tid`'s event sampling first after `first_period` ns, enabled unless sampling
    /// is disabled or the thread gets a larger ring (`busy`: its old event is disabled first),
    /// with a ring of `wanted` data pages, or of fewer, down to `min_pages`, when the kernel
    /// refuses them (other perf buffers of the user share its limit); later rings are then
    /// planned no larger. `Ok(None)`: the thread is gone.
    fn open_event(
        &mut self,
        tid: u32,
        wanted: usize,
        min_pages: usize,
        busy: bool,
        first_period: u64,
    ) -> std::result::Result<Option<ThreadEvent>, OpenError> {
        let mut pages = wanted;
        let enabled = self.enabled && !busy;
        self.attr.set_disabled(u64::from(!enabled));
        self.attr.sample_period = match &self.config.uprobes {
            Some(probes) => probes.period.max(1),
            None => first_period,
        };
        let (fd, ring) = loop {
            // Epoll reports the buffer readable once a quarter full.
            let wakeup = pages * self.plan.page_size / 4;
            let opened = attr::open(&mut self.attr, wakeup, tid as i32, -1);
            let opened = opened.map_err(|e| {
                OpenError::Other(attr::open_error(
                    &e,
                    attr::Target::Thread(tid),
                    &self.config,
                ))
            });
            let Some(fd) = opened? else {
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
                Err(e) => {
                    let bytes = pages * self.plan.page_size;
                    return Err(OpenError::Refused(attr::mmap_error(
                        &e,
                        &format!("thread {tid}"),
                        bytes,
                    )));
                }
            }
        };
        // `None`: the thread exited between the opens; its first event alone would write
        // records laid out unlike the ring's layout says.
        let Some(more) = self
            .open_more_events(tid, &fd, enabled)
            .map_err(OpenError::Other)?
        else {
            return Ok(None);
        };
        let layout = RecordLayout {
            kernel_callchain: self.config.kernel_callchain,
            // Uprobe samples are told apart by their ip, all of them taken at the probes.
            switch_event: more.first().filter(|_| self.config.wall).map(|(_, id)| *id),
            switch_ring: false,
        };
        self.plan.mapped(pages, wanted, busy);
        self.epoll
            .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, u64::from(tid)))
            .map_err(|e| {
                OpenError::Other(Error::new(ErrorKind::Internal, format!("epoll_ctl: {e}")))
            })?;
        let period = self.config.period_ns();
        Ok(Some(ThreadEvent {
            more: more.into_iter().map(|(fd, _)| fd).collect(),
            event: MappedEvent::new(fd, ring, pages, layout),
            no_room: false,
            pacing: Pacing::new(first_period, period),
        }))
    }

    /// Opens thread `tid`'s other events (wall-clock mode's context-switch event, the other
    /// uprobes) writing into the ring of `first`; returns them with their ids. `Ok(None)` if the
    /// thread is gone.
    fn open_more_events(
        &mut self,
        tid: u32,
        first: &OwnedFd,
        enabled: bool,
    ) -> Result<Option<Vec<(OwnedFd, u64)>>> {
        let mut opened = Vec::with_capacity(self.more_attrs.len());
        for more in &mut self.more_attrs {
            more.set_disabled(u64::from(!enabled));
            // The ring's fill level wakes epoll through the first event.
            let fd = attr::open(more, 0, tid as i32, -1);
            let Some(fd) =
                fd.map_err(|e| attr::open_error(&e, attr::Target::Thread(tid), &self.config))?
            else {
                return Ok(None);
            };
            let id = attr::set_output(&fd, first).and_then(|()| attr::event_id(&fd));
            let id = id.map_err(|e| {
                Error::new(
                    ErrorKind::Sampling,
                    format!("cannot route thread {tid}'s other events' samples to its ring: {e}"),
                )
            })?;
            opened.push((fd, id));
        }
        Ok(Some(opened))
    }

    /// Moves busy thread `tid` to a larger ring, if the budget has room: its samples go to the
    /// new ring from the moment the old one is disabled, and what the old one holds is drained
    /// to `sink` before it is closed, so the thread's samples stay in order.
    fn grow(&mut self, tid: u32, sink: &mut dyn FnMut(&Sample<'_>)) {
        let Some(current) = self.threads.get(&tid).map(|t| t.event.pages) else {
            return;
        };
        let available = budget::available(&self.plan.budget);
        let pages = self
            .plan
            .pages_for_busy(current, available, self.threads.len());
        if pages <= current {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.no_room = true;
            }
            return;
        }
        // The new event samples at the full period from its start.
        let period = self.config.period_ns();
        let mut new = match self.open_event(tid, pages, current * 2, true, period) {
            Ok(Some(new)) => new,
            Ok(None) => return,
            Err(OpenError::Refused(_)) => {
                // The kernel refused even twice the ring: busy rings stay this size.
                self.plan.mapped(current, pages, true);
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.no_room = true;
                }
                return;
            }
            // Out of descriptors or the like: tried again when the thread is found busy again.
            Err(OpenError::Other(_)) => return,
        };
        let Some(mut old) = self.threads.remove(&tid) else {
            return;
        };
        new.pacing.credit = old.pacing.credit;
        // Disabling returns once the event can no longer write (an IPI to the thread's CPU).
        let _ = old.set_enabled(false);
        if self.enabled {
            let _ = new.set_enabled(true);
        }
        self.threads.insert(tid, new);
        self.drain_thread(&mut old, sink);
        old.count_unreported_lost(
            attr::counts_lost(&self.attr),
            self.config.period_ns(),
            &mut self.stats,
        );
        let _ = self.epoll.delete(&old.event.fd);
        self.closer.close(old.into_fds());
        self.stats.rings_grown += 1;
    }

    /// Finds threads that appeared since the last scan and opens a batch of those waiting (see
    /// [`Self::open_pending`]); returns how many were added.
    pub fn rescan_threads(&mut self) -> usize {
        // Listing /proc/<pid>/task takes the kernel time quadratic in the threads (~0.2 s for
        // 3000): at most a tenth of the time goes to it.
        if self.rescanned.elapsed() < self.rescan_cost * 10 {
            return self.open_pending().unwrap_or(0);
        }
        let started = std::time::Instant::now();
        let Ok(tids) = super::list_threads(self.pid) else {
            return 0;
        };
        self.rescan_cost = started.elapsed();
        self.rescanned = std::time::Instant::now();
        // Forget failures of threads that are gone, so a reused tid gets a fresh try.
        self.failed.retain(|tid, _| tids.binary_search(tid).is_ok());
        // Memory freed since (threads exited) lets busy threads grow again.
        if budget::available(&self.plan.budget) > self.plan.busy_pages * 2 {
            self.threads.values_mut().for_each(|t| t.no_room = false);
        }
        let pending: std::collections::HashSet<u32> = self.pending.iter().copied().collect();
        let new = tids
            .into_iter()
            .filter(|tid| !self.threads.contains_key(tid) && !pending.contains(tid));
        self.pending.extend(new);
        self.open_pending().unwrap_or(0)
    }

    /// Opens events for the threads found and not yet opened, for up to [`OPEN_BATCH`]; returns
    /// how many were added, or the batch's last failure when none was.
    pub fn open_pending(&mut self) -> Result<usize> {
        let mut added = 0;
        let mut error = None;
        let started = std::time::Instant::now();
        while started.elapsed() < OPEN_BATCH {
            let Some(tid) = self.pending.pop_front() else {
                break;
            };
            match self.add_thread(tid) {
                Ok(true) => added += 1,
                Ok(false) => {}
                Err(e) => error = Some(e),
            }
        }
        match error {
            Some(e) if added == 0 => Err(e),
            _ => Ok(added),
        }
    }

    /// Threads found and not opened yet.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Drains every ring buffer, calling `sink` for each sample; events of the threads in
    /// `hung_up` (exited) are closed.
    pub fn drain_all(&mut self, hung_up: &[u32], sink: &mut dyn FnMut(&Sample<'_>)) {
        let counts_lost = attr::counts_lost(&self.attr);
        let mut busy = std::mem::take(&mut self.busy);
        busy.clear();
        let tids: Vec<u32> = self.threads.keys().copied().collect();
        for tid in tids {
            let Some(mut thread) = self.threads.remove(&tid) else {
                continue;
            };
            let drained = self.drain_thread(&mut thread, sink);
            if !self.enabled {
                // Drained while disabled: all the event will ever report is known.
                thread.count_unreported_lost(counts_lost, self.config.period_ns(), &mut self.stats);
            } else if !thread.no_room
                && (4 * drained.fill >= thread.event.ring.data_size() || drained.lost > 0)
            {
                // A quarter full since the last drain, or overflowing: the thread is busy.
                busy.push(tid);
            }
            self.threads.insert(tid, thread);
        }
        for &tid in &busy {
            if self
                .threads
                .get(&tid)
                .is_some_and(|t| t.event.pages < self.plan.busy_pages)
            {
                self.grow(tid, sink);
            }
        }
        self.busy = busy;
        for tid in hung_up {
            if let Some(mut thread) = self.threads.remove(tid) {
                thread.count_unreported_lost(counts_lost, self.config.period_ns(), &mut self.stats);
                let _ = self.epoll.delete(&thread.event.fd);
                self.closer.close(thread.into_fds());
                self.stats.threads_exited += 1;
            }
        }
    }

    /// Drains one thread's ring; once its first sample came, sets its event to the full period.
    fn drain_thread(
        &mut self,
        thread: &mut ThreadEvent,
        sink: &mut dyn FnMut(&Sample<'_>),
    ) -> super::event::Drained {
        let period = self.config.period_ns();
        let mut sampled = false;
        let pacing = &mut thread.pacing;
        let drained = thread.event.drain(
            &mut self.scratch,
            &mut self.kernel_ips,
            &mut self.stats,
            &mut |record| match record {
                ParsedRecord::Sample(s) => {
                    let take = s.kind != SampleKind::OnCpu || {
                        sampled = true;
                        pacing.take(s.time, period)
                    };
                    if take {
                        sink(s);
                    }
                    take
                }
                ParsedRecord::SwitchIn { pid, tid, time } => {
                    sink(&switch_in(*pid, *tid, *time));
                    false
                }
                _ => false,
            },
        );
        self.stats.lost += thread.pacing.lost_share(drained.lost, period);
        if sampled && thread.pacing.period_set_at.is_none() {
            // Fails only for an event whose thread is gone, which the next poll cleans up.
            if attr::set_period(&thread.event.fd, period).is_ok() {
                thread.pacing.period_set_at = Some(crate::profile::monotonic_now_ns());
            }
        }
        drained
    }

    pub fn stats(&self) -> SamplerStats {
        SamplerStats {
            threads_open: self.threads.len(),
            threads_failed: self.failed.len(),
            ..self.stats
        }
    }

    /// The period of every thread's event from now on (and of threads added later).
    pub fn set_period(&mut self, config: SamplerConfig) {
        let period = config.period_ns();
        self.config = config;
        for thread in self.threads.values_mut() {
            // Fails only for an event whose thread is gone, which the next poll cleans up.
            if attr::set_period(&thread.event.fd, period).is_ok() {
                thread.pacing.period_set_at = Some(crate::profile::monotonic_now_ns());
                thread.pacing.credit = thread.pacing.credit.min(period);
            }
        }
    }

    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        for thread in self.threads.values() {
            // Fails only for an event whose thread is gone, which the next poll cleans up.
            let _ = thread.set_enabled(enabled);
        }
    }
}

/// `tids` with those that used the most CPU so far first (`/proc/<pid>/task/<tid>/schedstat`:
/// ns on a CPU), so that where opening every thread's event takes a while, the busy threads are
/// sampled from the start.
fn busiest_first(pid: u32, mut tids: Vec<u32>) -> Vec<u32> {
    if tids.len() <= 64 {
        return tids;
    }
    let runtime = |tid: &u32| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    tids.sort_by_cached_key(|tid| std::cmp::Reverse(runtime(tid)));
    tids
}

/// Why a thread's event could not be opened.
enum OpenError {
    /// The kernel would not lock even the smallest ring asked for.
    Refused(Error),
    Other(Error),
}

impl OpenError {
    fn into_error(self) -> Error {
        match self {
            OpenError::Refused(e) | OpenError::Other(e) => e,
        }
    }
}

/// One event per thread needs one descriptor per thread (two in wall mode): the soft limit is
/// raised to the hard one, as far as the kernel allows.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_at_the_short_first_period_count_for_their_share() {
        let period = 10_000_000;
        let mut pacing = Pacing::new(2_500_000, period);
        // The first sample always; then one in four at the short period; then every one.
        let taken: Vec<bool> = (0..9).map(|t| pacing.take(t, period)).collect();
        assert_eq!(
            taken,
            [true, false, false, false, true, false, false, false, true]
        );
        pacing.period_set_at = Some(100);
        assert!((100..105).all(|t| pacing.take(t, period)));
        // A sample taken before the period was set, drained after, is still a short one.
        assert!(!pacing.take(99, period));
        // A thread that drew the full period hands out every sample.
        let mut full = Pacing::new(period, period);
        assert!((0..5).all(|t| full.take(t, period)));
    }
}
