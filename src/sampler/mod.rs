//! Stack sampling with `perf_event_open` CPU-clock events, per CPU where the host allows it
//! ([`per_cpu`]), else per thread of the target ([`per_thread`]); the engine does not know which
//! runs. Samples carry the user registers and a copy of the top of the user stack for unwinding,
//! and optionally the kernel callchain. They are handed out borrowed from the ring buffers, without
//! copying.

mod attr;
mod budget;
mod event;
mod host;
mod per_cpu;
mod per_thread;
mod record;
mod ring;
#[cfg(test)]
mod tests;

pub use budget::{Budget, Host, RingPlan};
pub use host::HostSampler;
pub use record::{HeldSample, RecordLayout, Regs, Sample, SampleKind};

use crate::error::{err, Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use record::Record;
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
    /// Samples per second of CPU time (a fixed period of 1e9/F ns of each thread's CPU time, or of
    /// each CPU's time).
    pub frequency_hz: u64,
    /// Bytes of user stack copied from the sampled SP (multiple of 8, at most [`MAX_STACK_SIZE`]).
    pub stack_size: u32,
    /// Also record the kernel callchain (needs `perf_event_paranoid` ≤ 1 or CAP_PERFMON).
    pub kernel_callchain: bool,
    /// Data pages per thread's ring buffer (rounded up to a power of two); `None` sizes it from
    /// the frequency, the stack size and the locked-memory budget (see [`RingPlan`]).
    pub ring_pages: Option<usize>,
    /// Wall-clock mode: each thread's stack taken when it leaves a CPU, with the time it comes
    /// back ([`SampleKind`]).
    pub wall: bool,
    /// Uprobes instead of the CPU clock, every thread's probes writing into one ring (samples of
    /// the probes told apart by their ip, the probed address); opened per thread.
    pub uprobes: Option<Uprobes>,
    pub sampling: Sampling,
}

/// Functions of one file to probe, on entry or on return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uprobes {
    /// The file as this process reaches it (the target's root prefixed), shared by every clone:
    /// the events' attributes point at it.
    pub path: std::sync::Arc<std::ffi::CString>,
    pub probes: Vec<Uprobe>,
    /// A sample every this many hits.
    pub period: u64,
}

/// One probed function of [`Uprobes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uprobe {
    /// File offset of the function's first instruction.
    pub offset: u64,
    /// A return probe: its samples carry the registers at the return address, and no stack.
    pub on_return: bool,
    /// Each sample wakes the drain at once (not when the ring fills up): the target's memory it
    /// points at is read while it still holds what the sample is about.
    pub prompt: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            frequency_hz: 99,
            stack_size: DEFAULT_STACK_SIZE,
            kernel_callchain: false,
            ring_pages: None,
            wall: false,
            uprobes: None,
            sampling: Sampling::Auto,
        }
    }
}

impl SamplerConfig {
    /// Nanoseconds of CPU time between samples.
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
    /// Per-CPU wall-clock mode: a thread was created or exited.
    Task {
        exit: bool,
        pid: u32,
        tid: u32,
        time: u64,
    },
    /// A thread took a name (per-CPU events: any process's thread).
    Comm {
        pid: u32,
        tid: u32,
        name: &'a [u8],
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
        Record::Comm { pid, tid, name } => ParsedRecord::Comm { pid, tid, name },
        Record::Task {
            exit,
            pid,
            tid,
            time,
        } => ParsedRecord::Task {
            exit,
            pid,
            tid,
            time,
        },
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

/// How the samples are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Sampling {
    /// Per CPU where the host allows it, else per thread.
    #[default]
    Auto,
    /// One event per online CPU: nothing per thread or per context switch (needs root,
    /// CAP_PERFMON or kernel.perf_event_paranoid <= 0).
    PerCpu,
    /// One event per thread of the JVM: each context switch of a sampled thread costs it the
    /// restart of the event's timer.
    PerThread,
}

/// The strategy that runs, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strategy {
    pub kind: Sampling,
    pub why: String,
}

impl Strategy {
    /// One line for the summary: what runs, why, and what the other strategy would cost or need.
    pub fn describe(&self) -> String {
        match self.kind {
            Sampling::PerCpu => format!(
                "sampling per CPU ({}): nothing is done per thread or per context switch \
                 (per-thread sampling, the fallback without root or CAP_PERFMON, costs every \
                 context switch of a sampled thread ~2 µs)",
                self.why
            ),
            _ => format!(
                "sampling per thread ({}): every context switch of a sampled thread restarts its \
                 event's timer (~2 µs here), and a thread is sampled from when jvmperf finds it; \
                 per-CPU sampling costs neither (it needs root, CAP_PERFMON or \
                 `sysctl kernel.perf_event_paranoid=0`)",
                self.why
            ),
        }
    }
}

enum Strategies {
    PerCpu(Box<per_cpu::CpuSampler>, per_cpu::ProcessFilter),
    PerThread(Box<per_thread::ThreadSampler>),
    /// The daemon's per-CPU events, shared with the other JVMs it profiles.
    Shared(host::SharedSource),
}

pub struct Sampler {
    pid: u32,
    config: SamplerConfig,
    strategy: Strategy,
    sampler: Strategies,
    /// Reused buffers: epoll results, exited threads.
    events: Vec<EpollEvent>,
    hung_up: Vec<u32>,
}

impl Sampler {
    /// Opens the events of the strategy `config.sampling` asks for (per CPU where allowed),
    /// enabled.
    pub fn open(pid: u32, config: &SamplerConfig) -> Result<Sampler> {
        let strategy = Sampler::choose(pid, config)?;
        Sampler::open_as(pid, config, strategy)
    }

    /// The strategy `config` asks for, where this process may use it: a per-CPU event is opened
    /// on one CPU (and closed) to find out, a per-thread one on the main thread. Nothing is
    /// mapped; the target is left as it was.
    pub fn choose(pid: u32, config: &SamplerConfig) -> Result<Strategy> {
        config.validate()?;
        // The target must exist (per-CPU events open whether it does or not).
        list_threads(pid)?;
        let per_thread = |why: String| -> Result<Strategy> {
            let mut attr = match &config.uprobes {
                Some(probes) => attr::uprobe_attr(config, uprobe_pmu()?, probes, 0),
                None => attr::event_attr(config),
            };
            attr.set_disabled(1);
            match attr::open(&mut attr, 0, pid as i32, -1) {
                Ok(Some(_)) => Ok(Strategy {
                    kind: Sampling::PerThread,
                    why,
                }),
                Ok(None) => err(ErrorKind::NoProcess, format!("process {pid} has exited")),
                Err(e) if config.uprobes.is_some() => Err(uprobe_open_error(&e, config)),
                Err(e) => Err(attr::open_error(&e, attr::Target::Thread(pid), config)),
            }
        };
        if config.uprobes.is_some() {
            return per_thread("uprobes are opened on each thread".to_string());
        }
        match config.sampling {
            Sampling::PerThread => per_thread("--sampling per-thread".to_string()),
            kind => {
                let cpu = per_cpu::online_cpus()?[0];
                let mut attr = attr::event_attr(config);
                attr.set_disabled(1);
                match attr::open(&mut attr, 0, -1, cpu as i32) {
                    Ok(_) => Ok(Strategy {
                        kind: Sampling::PerCpu,
                        why: match kind {
                            Sampling::PerCpu => "--sampling per-cpu".to_string(),
                            _ => format!("allowed with {}", attr::privilege()),
                        },
                    }),
                    Err(e) if kind == Sampling::Auto && attr::denied(&e) => per_thread(format!(
                        "per-CPU events are not allowed: {}",
                        attr::privilege()
                    )),
                    Err(e) => Err(attr::cpu_open_error(&e, cpu, config)),
                }
            }
        }
    }

    /// Opens the events of `strategy` (from [`Sampler::choose`]), enabled.
    pub fn open_as(pid: u32, config: &SamplerConfig, strategy: Strategy) -> Result<Sampler> {
        config.validate()?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_create1: {e}")))?;
        let sampler = match strategy.kind {
            Sampling::PerThread => Strategies::PerThread(Box::new(
                per_thread::ThreadSampler::open(pid, config, epoll)?,
            )),
            _ => Strategies::PerCpu(
                Box::new(per_cpu::CpuSampler::open(config, epoll)?),
                per_cpu::ProcessFilter::new(pid),
            ),
        };
        Ok(Sampler {
            pid,
            config: config.clone(),
            strategy,
            sampler,
            events: vec![EpollEvent::empty(); 64],
            hung_up: Vec::new(),
        })
    }

    /// Samples process `pid` through `host`'s per-CPU events (the daemon's, shared by every JVM
    /// it profiles), from now on.
    pub fn shared(pid: u32, config: &SamplerConfig, host: std::sync::Arc<HostSampler>) -> Sampler {
        Sampler {
            pid,
            config: config.clone(),
            strategy: Strategy {
                kind: Sampling::PerCpu,
                why: "the daemon's events, one per CPU for every JVM it profiles".to_string(),
            },
            sampler: Strategies::Shared(host::SharedSource::new(host, pid)),
            events: vec![EpollEvent::empty(); 64],
            hung_up: Vec::new(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Which strategy runs, and why.
    pub fn strategy(&self) -> &Strategy {
        &self.strategy
    }

    /// Whether samples also land in kernel code (system calls, page faults); false when
    /// `perf_event_paranoid` restricts us to user time, which then goes unsampled.
    pub fn samples_kernel_time(&self) -> bool {
        match &self.sampler {
            Strategies::PerCpu(s, _) => s.samples_kernel_time(),
            Strategies::PerThread(s) => s.samples_kernel_time(),
            Strategies::Shared(s) => s.samples_kernel_time(),
        }
    }

    /// How the ring buffers were sized.
    pub fn ring_plan(&self) -> &RingPlan {
        match &self.sampler {
            Strategies::PerCpu(s, _) => &s.plan,
            Strategies::PerThread(s) => &s.plan,
            Strategies::Shared(s) => s.plan(),
        }
    }

    /// Bytes of thread `tid`'s ring buffer now (data pages only), per-thread sampling only.
    pub fn thread_ring_bytes(&self, tid: u32) -> Option<usize> {
        match &self.sampler {
            Strategies::PerCpu(..) | Strategies::Shared(_) => None,
            Strategies::PerThread(s) => s.thread_ring_bytes(tid),
        }
    }

    /// One line saying that the ring buffers are smaller than busy threads need, and why; `None`
    /// when they are as large as wanted.
    pub fn ring_note(&self) -> Option<String> {
        match &self.sampler {
            Strategies::PerCpu(s, _) => s.ring_note(),
            Strategies::Shared(s) => s.ring_note(),
            Strategies::PerThread(s) => s
                .plan
                .note(budget::available(&s.plan.budget), s.threads_open()),
        }
    }

    /// Names the target's threads took while sampled, where the strategy sees them (per CPU:
    /// COMM records, which also name threads that ended since).
    pub fn thread_names(&self) -> std::collections::HashMap<u32, String> {
        match &self.sampler {
            Strategies::PerCpu(_, filter) => filter.names.clone(),
            Strategies::PerThread(_) => Default::default(),
            Strategies::Shared(s) => s.thread_names(),
        }
    }

    /// Starts sampling thread `tid` (a tid of the target as seen from our pid namespace); per CPU,
    /// every thread is sampled already. `Ok(false)`: already sampled, not a thread of the target
    /// (any more), or failed before.
    pub fn add_thread(&mut self, tid: u32) -> Result<bool> {
        match &mut self.sampler {
            Strategies::PerCpu(..) | Strategies::Shared(_) => Ok(false),
            Strategies::PerThread(s) => s.add_thread(tid),
        }
    }

    /// Per thread: finds threads that appeared since the last scan and opens a batch of those
    /// waiting; returns how many were added. Failures are counted in [`SamplerStats::threads_failed`] and kept in
    /// [`Self::last_error`].
    pub fn rescan_threads(&mut self) -> usize {
        match &mut self.sampler {
            Strategies::PerCpu(..) | Strategies::Shared(_) => 0,
            Strategies::PerThread(s) => s.rescan_threads(),
        }
    }

    /// Whether threads must be added as they start ([`Self::add_thread`]): per thread only.
    pub fn follows_threads(&self) -> bool {
        matches!(self.sampler, Strategies::PerThread(_))
    }

    /// Per thread: opens a batch of the threads found and not opened yet (the events sample from
    /// their open: their rings must be drained while the others open). Call it every turn.
    pub fn open_pending_threads(&mut self) {
        if let Strategies::PerThread(s) = &mut self.sampler {
            if s.has_pending() {
                let _ = s.open_pending();
            }
        }
    }

    /// Per thread: threads are found and not opened yet.
    pub fn has_pending_threads(&self) -> bool {
        matches!(&self.sampler, Strategies::PerThread(s) if s.has_pending())
    }

    /// The most recent failure to open or map a thread's event.
    pub fn last_error(&self) -> Option<&Error> {
        match &self.sampler {
            Strategies::PerCpu(..) | Strategies::Shared(_) => None,
            Strategies::PerThread(s) => s.last_error(),
        }
    }

    /// Waits up to `timeout` for a ring buffer to fill a quarter or a thread to exit, then drains
    /// every ring buffer, calling `sink` for each sample of the target. Events of exited threads
    /// are closed.
    pub fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(&Sample<'_>)) -> Result<()> {
        let millis = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let epoll = match &mut self.sampler {
            Strategies::PerCpu(s, _) => s.epoll(),
            Strategies::PerThread(s) => s.epoll(),
            Strategies::Shared(s) => return s.poll(timeout, sink),
        };
        let ready = match epoll.wait(
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
        match &mut self.sampler {
            Strategies::PerCpu(s, filter) => {
                let until = s.ordered_until(crate::profile::monotonic_now_ns());
                s.drain_all(&mut |r| filter.take(r, sink));
                filter.release(until, sink);
            }
            Strategies::PerThread(s) => s.drain_all(&self.hung_up, sink),
            Strategies::Shared(_) => {}
        }
        Ok(())
    }

    pub fn stats(&self) -> SamplerStats {
        match &self.sampler {
            Strategies::PerCpu(s, filter) => SamplerStats {
                threads_open: filter.threads_sampled(),
                ..s.stats()
            },
            Strategies::PerThread(s) => s.stats(),
            Strategies::Shared(s) => s.stats(),
        }
    }

    /// Samples per second of CPU time from now on (per thread, or per CPU), for every event (and
    /// those opened later).
    pub fn set_frequency(&mut self, hz: u64) -> Result<()> {
        if self.config.wall || self.config.uprobes.is_some() {
            return err(
                ErrorKind::Usage,
                "the rate of a wall-clock or uprobe recording is fixed at its start",
            );
        }
        let config = SamplerConfig {
            frequency_hz: hz,
            ..self.config.clone()
        };
        config.validate()?;
        self.config = config.clone();
        match &mut self.sampler {
            Strategies::PerCpu(s, _) => s.set_period(config),
            Strategies::PerThread(s) => s.set_period(config),
            Strategies::Shared(s) => s.set_period(config),
        }
        Ok(())
    }

    /// Stops sampling (also on threads added later), e.g. before a final drain.
    pub fn disable(&mut self) {
        self.set_enabled(false);
    }

    /// Resumes sampling after [`Self::disable`].
    pub fn enable(&mut self) {
        self.set_enabled(true);
    }

    fn set_enabled(&mut self, enabled: bool) {
        match &mut self.sampler {
            Strategies::PerCpu(s, _) => s.set_enabled(enabled),
            Strategies::PerThread(s) => s.set_enabled(enabled),
            // Other JVMs go on: this one's samples are taken until its engine ends.
            Strategies::Shared(_) => {}
        }
    }
}

/// The `uprobe` PMU's type, or a one-line error saying the kernel has none.
pub(crate) fn uprobe_pmu() -> Result<u32> {
    attr::uprobe_pmu_type().map_err(|e| {
        Error::new(
            ErrorKind::Sampling,
            format!(
                "this kernel offers no uprobe PMU (/sys/bus/event_source/devices/uprobe/type: {e}): \
                 it needs CONFIG_UPROBE_EVENTS (Linux 4.17 or later)"
            ),
        )
    })
}

/// A one-line error for a uprobe that could not be opened.
fn uprobe_open_error(e: &std::io::Error, config: &SamplerConfig) -> Error {
    let path = config
        .uprobes
        .as_ref()
        .map_or(String::new(), |p| p.path.to_string_lossy().into_owned());
    match e.raw_os_error() {
        // perf_uprobe_event_init (kernel/events/core.c) asks for perfmon_capable().
        Some(libc::EACCES | libc::EPERM) => Error::new(
            ErrorKind::Permission,
            format!(
                "uprobes on {path} denied ({}): uprobe perf events need root or CAP_PERFMON \
                 whatever kernel.perf_event_paranoid says",
                attr::privilege()
            ),
        ),
        _ => Error::new(
            ErrorKind::Sampling,
            format!("cannot open a uprobe on {path}: {e}"),
        ),
    }
}

/// Thread ids in `/proc/<pid>/task`, sorted. Read by hand, not by `procfs`: its task iterator
/// opens every thread's directory, 6 to 15 times the cost of this, every rescan.
fn list_threads(pid: u32) -> Result<Vec<u32>> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| {
            Error::new(
                ErrorKind::NoProcess,
                format!("cannot list the threads of process {pid}: {e} (has it exited?)"),
            )
        })?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}
