//! One set of per-CPU events for the whole host, shared by the engines of every JVM the daemon
//! profiles: its cost does not grow with the number of JVMs or threads (each per-CPU event samples
//! whatever runs on its CPU, so one event per JVM per CPU would sample every CPU once per JVM).
//!
//! One drain thread waits on the rings, drains every CPU's ring and routes each record into the
//! queue of its JVM, copied out of the ring, then wakes that JVM's engine; records of processes
//! no engine profiles are dropped. Engines wait on their own queue only: no lock is held while
//! anyone sleeps. A JVM is a pid and the time its process started: a record goes to the latest
//! process of its pid that started before it, so a JVM that exited and another one given its
//! pid each get their own samples.

use super::per_cpu::{CpuSampler, ProcessFilter};
use super::record::{HeldSample, Sample, SampleKind};
use super::{ParsedRecord, RingPlan, SamplerConfig, SamplerStats};
use crate::error::{Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::sys::epoll::{EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The drain thread drains every ring at least this often, besides when one fills a quarter.
const DRAIN_EVERY: Duration = Duration::from_millis(100);

/// A poll without a timeout waits at most this long for the drain it asks for.
const FLUSH_WAIT: Duration = Duration::from_millis(500);

/// Threads of a JVM not seen for this long are forgotten, unless the daemon says otherwise
/// ([`HostSampler::keep_threads_for`]).
const KEEP_THREADS: Duration = Duration::from_secs(600);

/// The epoll token of the drain thread's wakeup (the rings' are their index).
const WAKE_TOKEN: u64 = u64::MAX;

pub struct HostSampler {
    hub: Arc<Hub>,
    plan: RingPlan,
    kernel_time: bool,
    ring_note: Option<String>,
    drainer: Option<JoinHandle<()>>,
}

/// What the drain thread shares with the engines.
struct Hub {
    routes: Mutex<Routes>,
    /// Host-wide counts after the last drain.
    stats: Mutex<SamplerStats>,
    /// A period asked for and not yet set.
    period: Mutex<Option<SamplerConfig>>,
    /// Drains asked for (polls without a timeout), and the last of them a drain has finished.
    flushes_asked: AtomicU64,
    flushed: Mutex<u64>,
    flushed_cv: Condvar,
    /// Why the drain thread stopped, if it failed.
    failed: Mutex<Option<String>>,
    stop: AtomicBool,
    wake: EventFd,
    /// Stack bytes a JVM's queue may hold: beyond them (its engine stalled), samples are dropped
    /// and counted lost.
    queue_max_bytes: usize,
    keep_threads_ns: AtomicU64,
    next_token: AtomicU64,
}

#[derive(Default)]
struct Routes {
    /// The JVMs profiled per pid, oldest process first.
    by_pid: HashMap<u32, Vec<Arc<Registration>>>,
    /// Changed with every registration and removal: the drain thread copies the table then.
    generation: u64,
}

/// One JVM's queue.
struct Registration {
    token: u64,
    /// When its process started, CLOCK_MONOTONIC ns (the samples' clock), rounded down.
    start_ns: u64,
    queue: Mutex<Queue>,
    /// Samples were queued.
    ready: Condvar,
}

struct Queue {
    filter: ProcessFilter,
    samples: VecDeque<HeldSample>,
    bytes: usize,
    /// Samples dropped for a full queue.
    dropped: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl HostSampler {
    /// Opens an event on every online CPU and starts the thread that drains them. Fails with
    /// [`ErrorKind::Permission`] where per-CPU events are not allowed.
    pub fn open(config: &SamplerConfig) -> Result<Arc<HostSampler>> {
        config.validate()?;
        let internal =
            |what: &str, e: Errno| Error::new(ErrorKind::Internal, format!("{what}: {e}"));
        let epoll = nix::sys::epoll::Epoll::new(nix::sys::epoll::EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| internal("epoll_create1", e))?;
        let cpus = CpuSampler::open(config, epoll)?;
        let wake = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| internal("eventfd", e))?;
        cpus.epoll()
            .add(&wake, EpollEvent::new(EpollFlags::EPOLLIN, WAKE_TOKEN))
            .map_err(|e| internal("epoll_ctl", e))?;
        let hub = Arc::new(Hub {
            routes: Mutex::default(),
            stats: Mutex::default(),
            period: Mutex::default(),
            flushes_asked: AtomicU64::new(0),
            flushed: Mutex::new(0),
            flushed_cv: Condvar::new(),
            failed: Mutex::default(),
            stop: AtomicBool::new(false),
            wake,
            queue_max_bytes: cpus.plan.queue_bytes(cpus.cpu_count()),
            keep_threads_ns: AtomicU64::new(KEEP_THREADS.as_nanos() as u64),
            next_token: AtomicU64::new(0),
        });
        let (plan, kernel_time, ring_note) = (
            cpus.plan.clone(),
            cpus.samples_kernel_time(),
            cpus.ring_note(),
        );
        let drainer = {
            let hub = hub.clone();
            std::thread::Builder::new()
                .name("jvmperf-drain".to_string())
                .spawn(move || drain_loop(&hub, cpus))
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Internal,
                        format!("cannot start the drain thread: {e}"),
                    )
                })?
        };
        Ok(Arc::new(HostSampler {
            hub,
            plan,
            kernel_time,
            ring_note,
            drainer: Some(drainer),
        }))
    }

    /// Samples and losses of the whole host's rings: every process's samples, not only those
    /// of the JVMs profiled.
    pub fn stats(&self) -> SamplerStats {
        *lock(&self.hub.stats)
    }

    /// Threads of a JVM are forgotten (their names, whether they were sampled) once they have
    /// not been seen for `keep`: for JVMs registered from now on.
    pub fn keep_threads_for(&self, keep: Duration) {
        let ns = u64::try_from(keep.as_nanos()).unwrap_or(u64::MAX);
        self.hub.keep_threads_ns.store(ns, Ordering::Relaxed);
    }

    /// Stack bytes each JVM's queue may hold.
    pub fn queue_max_bytes(&self) -> usize {
        self.hub.queue_max_bytes
    }

    /// One line saying the rings are smaller than wanted, and why.
    pub fn ring_note(&self) -> Option<String> {
        self.ring_note.clone()
    }

    fn wake(&self) {
        let _ = self.hub.wake.write(1);
    }
}

impl Drop for HostSampler {
    fn drop(&mut self) {
        self.hub.stop.store(true, Ordering::Relaxed);
        self.wake();
        if let Some(drainer) = self.drainer.take() {
            let _ = drainer.join();
        }
    }
}

/// The drain thread: waits for a ring to fill a quarter (or [`DRAIN_EVERY`], or a wakeup), then
/// drains every ring into the queues and wakes the engines whose queue got samples.
fn drain_loop(hub: &Hub, mut cpus: CpuSampler) {
    let mut events = vec![EpollEvent::empty(); 64];
    let mut seen_generation = None;
    let mut table: HashMap<u32, Vec<Arc<Registration>>> = HashMap::new();
    let timeout = EpollTimeout::try_from(DRAIN_EVERY).unwrap_or(EpollTimeout::MAX);
    while !hub.stop.load(Ordering::Relaxed) {
        match cpus.epoll().wait(&mut events, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                *lock(&hub.failed) = Some(format!("epoll_wait on the per-CPU events: {e}"));
                // Under the lock a flush waits with, so that it cannot miss the wakeup.
                let _flushed = lock(&hub.flushed);
                hub.flushed_cv.notify_all();
                return;
            }
        }
        let _ = hub.wake.read();
        let flushes = hub.flushes_asked.load(Ordering::Acquire);
        if let Some(config) = lock(&hub.period).take() {
            cpus.set_period(config);
        }
        {
            let routes = lock(&hub.routes);
            if seen_generation != Some(routes.generation) {
                seen_generation = Some(routes.generation);
                table = routes.by_pid.clone();
            }
        }
        let mut queued: Vec<&Arc<Registration>> = Vec::new();
        cpus.drain_all(&mut |record| route(&table, hub.queue_max_bytes, record, &mut queued));
        *lock(&hub.stats) = cpus.stats();
        queued.sort_unstable_by_key(|r| r.token);
        queued.dedup_by_key(|r| r.token);
        for registration in queued {
            registration.ready.notify_all();
        }
        let mut flushed = lock(&hub.flushed);
        if *flushed < flushes {
            *flushed = flushes;
            hub.flushed_cv.notify_all();
        }
    }
}

/// The JVM whose process `pid` was at `time` (`None`: the latest one of `pid`): the latest to
/// start before it.
fn owner(
    table: &HashMap<u32, Vec<Arc<Registration>>>,
    pid: u32,
    time: Option<u64>,
) -> Option<&Arc<Registration>> {
    let registrations = table.get(&pid)?;
    match time {
        Some(time) => registrations.iter().rev().find(|r| r.start_ns <= time),
        None => registrations.last(),
    }
}

/// Copies `record` into the queue of its JVM, if one is profiled, noting that queue in
/// `queued` when a sample was; whether a sample was taken.
fn route<'a>(
    table: &'a HashMap<u32, Vec<Arc<Registration>>>,
    max_bytes: usize,
    record: &ParsedRecord<'_>,
    queued: &mut Vec<&'a Arc<Registration>>,
) -> bool {
    let (pid, time) = match record {
        ParsedRecord::Sample(s) => (s.pid, Some(s.time)),
        ParsedRecord::SwitchIn { pid, time, .. } | ParsedRecord::Task { pid, time, .. } => {
            (*pid, Some(*time))
        }
        ParsedRecord::Comm { pid, .. } => (*pid, None),
        _ => return false,
    };
    let Some(registration) = owner(table, pid, time) else {
        return false;
    };
    let mut queue = lock(&registration.queue);
    let Queue {
        filter,
        samples,
        bytes,
        dropped,
    } = &mut *queue;
    let took = filter.take(record, &mut |s| {
        // Every entry counts, a switch's or an exit's without a stack too.
        let size = std::mem::size_of::<HeldSample>() + s.stack.len();
        if *bytes + size > max_bytes {
            *dropped += 1;
            return;
        }
        *bytes += size;
        samples.push_back(s.hold());
    });
    if took {
        queued.push(registration);
    }
    took
}

/// CLOCK_MONOTONIC ns at which process `pid` started, rounded down to a clock tick (0 if it
/// cannot be read). `/proc/<pid>/stat` counts ticks of CLOCK_BOOTTIME (proc(5)); the two
/// clocks differ by the time the host was suspended.
fn process_start_ns(pid: u32) -> u64 {
    let Some(ticks) = crate::process::identity::start_time(pid) else {
        return 0;
    };
    let per_second = procfs::ticks_per_second().max(1);
    let boot_ns = u128::from(ticks) * 1_000_000_000 / u128::from(per_second);
    let now = |id| {
        nix::time::clock_gettime(id)
            .map(|t| t.tv_sec() as i128 * 1_000_000_000 + i128::from(t.tv_nsec()))
            .unwrap_or(0)
    };
    let suspended =
        now(nix::time::ClockId::CLOCK_BOOTTIME) - now(nix::time::ClockId::CLOCK_MONOTONIC);
    u64::try_from((boot_ns as i128 - suspended.max(0)).max(0)).unwrap_or(0)
}

/// One JVM's view of a [`HostSampler`]: its samples from the moment it was registered.
pub(super) struct SharedSource {
    host: Arc<HostSampler>,
    registration: Arc<Registration>,
    delivered: u64,
}

impl SharedSource {
    /// Registers process `pid`, as it is now (its start time tells it from a later process
    /// given the same pid).
    pub fn new(host: Arc<HostSampler>, pid: u32) -> SharedSource {
        SharedSource::starting_at(host, pid, process_start_ns(pid))
    }

    fn starting_at(host: Arc<HostSampler>, pid: u32, start_ns: u64) -> SharedSource {
        let hub = &host.hub;
        let keep = hub.keep_threads_ns.load(Ordering::Relaxed);
        let registration = Arc::new(Registration {
            token: hub.next_token.fetch_add(1, Ordering::Relaxed),
            start_ns,
            queue: Mutex::new(Queue {
                filter: ProcessFilter::keeping_threads(pid, keep),
                samples: VecDeque::new(),
                bytes: 0,
                dropped: 0,
            }),
            ready: Condvar::new(),
        });
        {
            let mut routes = lock(&hub.routes);
            let of_pid = routes.by_pid.entry(pid).or_default();
            of_pid.push(registration.clone());
            of_pid.sort_by_key(|r| (r.start_ns, r.token));
            routes.generation += 1;
        }
        SharedSource {
            host,
            registration,
            delivered: 0,
        }
    }

    pub fn plan(&self) -> &RingPlan {
        &self.host.plan
    }

    pub fn samples_kernel_time(&self) -> bool {
        self.host.kernel_time
    }

    pub fn ring_note(&self) -> Option<String> {
        self.host.ring_note()
    }

    pub fn thread_names(&self) -> HashMap<u32, String> {
        lock(&self.registration.queue).filter.names.clone()
    }

    /// Hands this JVM's queued samples to `sink`, waiting up to `timeout` for some when none
    /// wait. Without a timeout, a drain of every ring is asked for and waited for: what was
    /// sampled up to now comes out.
    pub fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(&Sample<'_>)) -> Result<()> {
        if let Some(why) = lock(&self.host.hub.failed).as_ref() {
            return Err(Error::new(ErrorKind::Internal, why.clone()));
        }
        if timeout.is_zero() {
            self.flush();
        }
        let taken = {
            let registration = &self.registration;
            let mut queue = lock(&registration.queue);
            if queue.samples.is_empty() && !timeout.is_zero() {
                queue = registration
                    .ready
                    .wait_timeout_while(queue, timeout, |q| q.samples.is_empty())
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            queue.bytes = 0;
            std::mem::take(&mut queue.samples)
        };
        for held in &taken {
            let s = held.sample();
            self.delivered += u64::from(s.kind != SampleKind::SwitchIn);
            sink(&s);
        }
        Ok(())
    }

    /// Asks the drain thread for a drain that starts after now, and waits for it (at most
    /// [`FLUSH_WAIT`]).
    fn flush(&self) {
        let hub = &self.host.hub;
        let ticket = hub.flushes_asked.fetch_add(1, Ordering::AcqRel) + 1;
        self.host.wake();
        let deadline = Instant::now() + FLUSH_WAIT;
        let mut flushed = lock(&hub.flushed);
        while *flushed < ticket && lock(&hub.failed).is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            flushed = hub
                .flushed_cv
                .wait_timeout(flushed, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// This JVM's counts: `lost` is what its own queue dropped; the rings' losses are the
    /// host's ([`HostSampler::stats`]).
    pub fn stats(&self) -> SamplerStats {
        let queue = lock(&self.registration.queue);
        SamplerStats {
            samples: self.delivered,
            lost: queue.dropped,
            threads_open: queue.filter.threads_sampled(),
            ..SamplerStats::default()
        }
    }

    /// The period of every CPU's event from now on, for every JVM the host samples: set by the
    /// drain thread on its next turn.
    pub fn set_period(&mut self, config: SamplerConfig) {
        *lock(&self.host.hub.period) = Some(config);
        self.host.wake();
    }
}

impl Drop for SharedSource {
    /// Removes this registration only: another for the same pid (a later process) stays.
    fn drop(&mut self) {
        let mut routes = lock(&self.host.hub.routes);
        let pid = lock(&self.registration.queue).filter.pid();
        if let Some(of_pid) = routes.by_pid.get_mut(&pid) {
            of_pid.retain(|r| r.token != self.registration.token);
            if of_pid.is_empty() {
                routes.by_pid.remove(&pid);
            }
        }
        routes.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::record::Regs;

    fn sample(pid: u32, tid: u32, time: u64) -> Sample<'static> {
        Sample {
            kind: SampleKind::OnCpu,
            pid,
            tid,
            time,
            regs: Regs::default(),
            stack: &[0; 64],
            kernel_ips: &[],
            in_kernel: false,
        }
    }

    fn registration(token: u64, pid: u32, start_ns: u64) -> Arc<Registration> {
        Arc::new(Registration {
            token,
            start_ns,
            queue: Mutex::new(Queue {
                filter: ProcessFilter::new(pid),
                samples: VecDeque::new(),
                bytes: 0,
                dropped: 0,
            }),
            ready: Condvar::new(),
        })
    }

    fn queued(r: &Registration) -> Vec<u64> {
        lock(&r.queue)
            .samples
            .iter()
            .map(|s| s.sample().time)
            .collect()
    }

    /// A JVM that exited and a later process given its pid, both registered: each gets the
    /// samples taken while it ran; samples of a process of that pid before both go nowhere.
    #[test]
    fn samples_go_to_the_process_of_their_pid_that_ran_then() {
        let (old, new) = (registration(0, 7, 1_000), registration(1, 7, 5_000));
        let table = HashMap::from([(7, vec![old.clone(), new.clone()])]);
        let mut touched = Vec::new();
        for time in [500, 2_000, 4_999, 5_000, 9_000] {
            route(
                &table,
                usize::MAX,
                &ParsedRecord::Sample(sample(7, 7, time)),
                &mut touched,
            );
        }
        assert_eq!(queued(&old), [2_000, 4_999]);
        assert_eq!(queued(&new), [5_000, 9_000]);
        assert_eq!(touched.len(), 4);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let r = registration(0, 7, 0);
        let table = HashMap::from([(7, vec![r.clone()])]);
        // Room for two samples of 64 stack bytes.
        let max = 2 * (std::mem::size_of::<HeldSample>() + 64) + 10;
        for time in 0..5 {
            route(
                &table,
                max,
                &ParsedRecord::Sample(sample(7, 7, time)),
                &mut Vec::new(),
            );
        }
        assert_eq!(queued(&r).len(), 2);
        assert_eq!(lock(&r.queue).dropped, 3);
        // Samples without a stack (none copied) count too: the queue is bounded in entries.
        lock(&r.queue).samples.clear();
        lock(&r.queue).bytes = 0;
        for time in 0..100_000 {
            let empty = Sample {
                stack: &[],
                ..sample(7, 7, time)
            };
            route(&table, max, &ParsedRecord::Sample(empty), &mut Vec::new());
        }
        assert!(lock(&r.queue).samples.len() < 100);
    }

    fn host() -> Option<Arc<HostSampler>> {
        // At 1 Hz a ring fills a quarter in seconds: a wait is a whole timeout.
        let config = SamplerConfig {
            frequency_hz: 1,
            stack_size: 1024,
            sampling: super::super::Sampling::PerCpu,
            ..SamplerConfig::default()
        };
        HostSampler::open(&config)
            .inspect_err(|e| eprintln!("skipped: no per-CPU events here ({e})"))
            .ok()
    }

    /// Two registrations of one pid (a JVM whose last interval is still being written, and a
    /// new process given its pid): dropping the first leaves the second registered.
    #[test]
    fn dropping_one_registration_of_a_pid_keeps_the_others() {
        let Some(host) = host() else { return };
        let first = SharedSource::starting_at(host.clone(), 7, 1_000);
        let second = SharedSource::starting_at(host.clone(), 7, 5_000);
        drop(first);
        let routes = lock(&host.hub.routes);
        let tokens: Vec<u64> = routes.by_pid[&7].iter().map(|r| r.token).collect();
        assert_eq!(tokens, [second.registration.token]);
        drop(routes);
        drop(second);
        assert!(lock(&host.hub.routes).by_pid.is_empty());
    }

    /// Waiting engines hold no lock the others need: while one engine waits for samples that
    /// never come, another's stats, names and rate change return at once, and the drain thread
    /// ends with the host.
    #[test]
    fn an_engine_waiting_blocks_no_one() {
        let Some(host) = host() else { return };
        let mut waiting = SharedSource::starting_at(host.clone(), u32::MAX - 1, 0);
        let mut other = SharedSource::starting_at(host.clone(), u32::MAX - 2, 0);
        let waiter = std::thread::spawn(move || {
            let started = Instant::now();
            waiting.poll(Duration::from_secs(3), &mut |_| {}).unwrap();
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        for _ in 0..10 {
            other.stats();
            other.thread_names();
            other.set_period(SamplerConfig {
                frequency_hz: 49,
                ..SamplerConfig::default()
            });
            host.stats();
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?} for 10 rounds of stats, names and rate while another engine waits",
            started.elapsed()
        );
        assert!(waiter.join().unwrap() >= Duration::from_secs(3));
        drop(other);
        let hub = Arc::downgrade(&host.hub);
        drop(host);
        assert!(hub.upgrade().is_none(), "the drain thread holds the hub");
    }
}
