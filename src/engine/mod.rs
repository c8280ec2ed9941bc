//! The recording engine, one per target JVM: attach, sample every thread, walk mixed Java/native
//! stacks as samples arrive, and name them about two seconds later (late code-load records still
//! arrive in time) against the time-versioned code map. `record` drives one; so will the daemon
//! and the live view.
//!
//! Use: [`Engine::start`], then [`Engine::poll`] in a loop (each call drains the ring buffers and
//! does a slice of naming), then [`Engine::finish`] for the profile and what the summary reports.
//! A long-running user (the daemon) takes the profile of each interval on the way with
//! [`Engine::take_interval`].

pub mod alloc;
mod collect;
mod early;
pub mod lock;
mod naming;
mod off_cpu_reads;
pub mod probes;
mod wall;

use crate::error::{ErrorKind, Result};
use crate::live_jvm::LiveJvm;
use crate::native::NativeUnwinder;
use crate::output::SampleSpill;
use crate::process::{freeze, TargetProcess};
use crate::profile::Profile;
use crate::sampler::{
    HeldSample, HostSampler, Sample, SampleKind, Sampler, SamplerConfig, SamplerStats, Sampling,
    Strategy,
};
use crate::shim::protocol::{self, ShimStats};
use crate::symbolize::{Symbolizer, WarmingSymbols};
use crate::walker::StackWalker;
use collect::Collected;
use foldhash::HashMap;
use naming::Named;
pub use off_cpu_reads::OffCpuStackStats;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct EngineOptions {
    pub pid: u32,
    pub frequency_hz: u64,
    pub stack_size: u32,
    /// Distinct stacks kept; new ones past it are cut after their longest known prefix.
    pub max_stacks: usize,
    /// Kernel call chains (else time in the kernel ends in one `[kernel]` leaf).
    pub kernel: bool,
    /// Recompile hot code compiled before the attach, so its inlined frames are exact.
    pub precise_inlining: bool,
    /// Where named samples go one by one, keeping each one's time (else samples of the same
    /// stack and thread are merged into one weighted sample).
    pub spill: Option<SampleSpill>,
    /// Keep every sample with its time in memory (without a spill), for intervals written as
    /// `.jvmperf` files.
    pub keep_sample_times: bool,
    pub agent: Agent,
    /// Wall-clock mode: threads count at the rate whether on a CPU or not (see [`wall`]).
    pub wall: Option<Wall>,
    /// Per CPU or per thread ([`Sampling::Auto`]: per CPU where allowed).
    pub sampling: Sampling,
    /// Per-CPU events shared with other engines (the daemon's), instead of events of its own.
    pub host: Option<Arc<HostSampler>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wall {
    /// Keep threads that were blocked for the whole recording.
    pub idle: bool,
}

/// Whether the shim is loaded into the JVM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Attach; if the JVM cannot be attached (stuck before a safepoint, attach disabled), profile
    /// it without the agent.
    Fallback,
    /// Never attach: compiled frames are named from the JVM's own tables.
    Off,
}

/// Naming work per turn of the sampling loop: the ring buffers hold ~50 ms of samples.
const NAMING_SLICE: Duration = Duration::from_millis(15);

/// How long a sample waits before it is named: the shim's load record for the code it hit may be
/// a little behind.
const NAMING_DELAY_NS: u64 = 2_000_000_000;

/// Threads are rescanned, and the target's liveness checked, this often.
const RESCAN_EVERY: Duration = Duration::from_millis(200);

pub struct Engine {
    pid: u32,
    frequency_hz: u64,
    sampler: Sampler,
    live: LiveJvm,
    walker: StackWalker,
    collected: Collected,
    /// Native debug info being opened; the symbolizer once it is ready.
    warming: Option<WarmingSymbols>,
    symbolizer: Option<Symbolizer>,
    named: Named,
    started: Instant,
    start_ns: u64,
    last_naming: Instant,
    naming_unfinished: bool,
    last_rescan: Instant,
    /// `threads_started` of the shim's state when new threads were last followed.
    known_threads: u64,
    precise_requested: bool,
    /// Why sampling cannot go on (the target exited, its shim stopped serving us).
    ended: Option<String>,
    /// Why the JVM is profiled without the agent, if it is.
    agentless: Option<String>,
    /// Where the interval not yet taken starts (sample time), and the sampler's counts then.
    interval_start_ns: u64,
    interval_base: SamplerStats,
    wall: Option<Wall>,
    /// Probes' samples: what the profile's weights count.
    probe_clock: Option<crate::profile::Clock>,
    /// Some probes are prompt ([`crate::sampler::Uprobe::prompt`]).
    prompt_probes: bool,
    /// The target's CPU time, for the coverage of the samples.
    cpu_time: CpuTime,
    /// Thread names read from /proc when a thread was first sampled (it may end before the
    /// recording does), and threads sampled for the first time in this turn.
    comms: HashMap<u32, String>,
    /// Sampled while the attach ran, walked in the first turn ([`early`]).
    held: Vec<HeldSample>,
    new_tids: Vec<u32>,
    comms_unread: Vec<u32>,
    /// The target's CPU time where the interval not yet taken starts.
    interval_cpu: Option<u64>,
}

/// Where an engine's samples come from.
enum Events {
    /// Events of its own, of this strategy.
    Own(Strategy),
    /// Per-CPU events shared with other engines.
    Shared(Arc<HostSampler>),
}

/// The target's CPU time (all threads, ended ones included) when sampling started, and when last
/// read while it was alive.
#[derive(Debug, Clone, Copy)]
struct CpuTime {
    start: Option<u64>,
    last: Option<u64>,
    read: Instant,
}

/// The longest wait for samples of prompt probes.
const PROMPT_POLL: Duration = Duration::from_millis(1);

/// Probe samples per second of a busy thread the rings are sized for.
const PROBE_RING_RATE_HZ: u64 = 1000;

/// Names of newly sampled threads read from /proc per turn.
const COMMS_PER_TURN: usize = 64;

/// Per-CPU wall-clock mode: how long after a period boundary the engine wakes to read the stacks
/// of the threads off a CPU across it.
const BOUNDARY_LATE_NS: u64 = 200_000;

/// The target's CPU time is read this often (and at the end), so that a JVM that exits leaves
/// its last reading; reading it sums over every thread.
const CPU_TIME_EVERY: Duration = Duration::from_secs(2);

/// The profile of the samples taken in `[start_ns, end_ns)` (CLOCK_MONOTONIC), and its counts.
pub struct Interval {
    pub profile: Profile,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Samples named into the profile (merged ones count by weight).
    pub samples: u64,
    /// Samples the kernel reported lost (ring buffer full) while the interval was sampled.
    pub lost: u64,
    /// The sampling rate in effect at its end.
    pub frequency_hz: u64,
}

/// How a wall-clock recording's periods were spent.
pub struct WallSummary {
    /// Periods sampled on a CPU, and counted off one (blocked, or waiting for a CPU).
    pub on_cpu: u64,
    pub off_cpu: u64,
    /// Threads blocked for the whole recording, left out (without `--idle`) or kept.
    pub idle_threads: usize,
    pub idle_kept: bool,
    /// Per-CPU sampling: how the stacks of the waits were found (read from outside).
    pub stacks: Option<OffCpuStackStats>,
}

/// Which events an engine samples besides its options' CPU or wall-clock time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampledEvents {
    /// Allocations (uprobes) instead of CPU time.
    pub alloc: Option<alloc::AllocOptions>,
    /// Lock waits (uprobes) instead of CPU time.
    pub lock: Option<lock::LockOptions>,
}

/// A finished recording: the named profile and what the summary reports about it.
pub struct Recording {
    pub profile: Profile,
    /// Samples named (merged samples count by weight), and the first and last sample times.
    pub samples: u64,
    pub window: Option<(u64, u64)>,
    pub sampled_for: Duration,
    pub stats: SamplerStats,
    pub samples_kernel_time: bool,
    /// Percent of walked stacks that reached a thread root.
    pub rooted_percent: f64,
    pub unresolved_compiled: u64,
    /// Share of samples in JIT code that hit code compiled after the attach (exact inline info).
    pub precise_percent: f64,
    pub debug_non_safepoints: bool,
    /// CPU spent on native debug info (symbol caches built included), and where it came from.
    pub debug_info_cpu: Duration,
    pub symbol_caches: String,
    /// Samples cut at `max_stacks`.
    pub cut: u64,
    /// Why the ring buffers are smaller than a busy thread needs, when they are.
    pub ring_note: Option<String>,
    pub wall: Option<WallSummary>,
    /// `-e alloc`, `-e lock`: how it sampled, and what.
    pub probes: Option<probes::ProbeSummary>,
    pub spill: Option<SampleSpill>,
    pub ended: Option<String>,
    /// Samples taken on a CPU against what the target's CPU time predicts.
    pub coverage: Option<Coverage>,
    /// How the samples were taken.
    pub strategy: Strategy,
    /// Records the shim dropped (its queue in the JVM was full) and their bytes.
    pub shim_dropped: (u64, u64),
    /// What the shim last said of itself.
    pub shim_stats: Option<ShimStats>,
}

/// Samples taken on a CPU against those the target's CPU time over the window predicts (its
/// CPU time divided by the period).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coverage {
    pub samples: u64,
    pub expected: f64,
}

impl Coverage {
    pub fn ratio(&self) -> f64 {
        self.samples as f64 / self.expected.max(1.0)
    }
}

fn profile_coverage(samples: u64, cpu_time_ns: Option<u64>, period_ns: u64) -> Option<Coverage> {
    let cpu = cpu_time_ns?;
    (period_ns > 0).then(|| Coverage {
        samples,
        expected: cpu as f64 / period_ns as f64,
    })
}

impl CpuTime {
    /// CPU time from `from` to the last reading.
    fn since(&self, from: Option<u64>) -> Option<u64> {
        Some(self.last?.saturating_sub(from?))
    }
}

impl Engine {
    /// Check permissions (a probe event for sampling), attach, and open the perf events: per CPU
    /// for a CPU profile before the attach, else after it.
    pub fn start(opts: EngineOptions) -> Result<Self> {
        Self::start_events(opts, SampledEvents::default())
    }

    /// [`Engine::start`], sampling `sampled` (allocations instead of CPU time).
    pub fn start_events(opts: EngineOptions, sampled: SampledEvents) -> Result<Self> {
        // Permissions first: a user who may not read or sample the JVM is told why before
        // anything is loaded into it; a probe event checks sampling.
        let target = TargetProcess::open(opts.pid)?;
        target.maps()?;
        let probes = match (sampled.alloc, sampled.lock) {
            (Some(a), _) => Some(probes::Probes::Alloc(alloc::AllocProbes::find(&target, a)?)),
            (None, Some(l)) => Some(probes::Probes::Lock(lock::LockProbes::find(&target, l)?)),
            (None, None) => None,
        };
        let config = SamplerConfig {
            // Rings are sized for this many samples per second of a busy thread.
            frequency_hz: match probes {
                Some(_) => PROBE_RING_RATE_HZ,
                None => opts.frequency_hz,
            },
            stack_size: opts.stack_size,
            // A uprobe's kernel callchain is the breakpoint handler's.
            kernel_callchain: opts.kernel && probes.is_none(),
            wall: opts.wall.is_some(),
            uprobes: probes.as_ref().map(|p| p.uprobes().clone()),
            sampling: opts.sampling,
            ..Default::default()
        };
        let events = match opts.host {
            // Uprobes are opened per thread, whatever the daemon shares.
            Some(host) if probes.is_none() => Events::Shared(host),
            _ => Events::Own(Sampler::choose(opts.pid, &config)?),
        };
        // Per CPU, a CPU profile's events open before the attach ([`early`]).
        let mut early = match &events {
            Events::Own(strategy)
                if strategy.kind == Sampling::PerCpu
                    && opts.wall.is_none()
                    && opts.agent == Agent::Fallback =>
            {
                Some(early::Early::open(opts.pid, &config, strategy.clone())?)
            }
            _ => None,
        };
        let (live, agentless) = match opts.agent {
            Agent::Off => (
                LiveJvm::without_agent(opts.pid)?,
                Some("--no-agent".to_string()),
            ),
            Agent::Fallback => {
                let attached = match early.as_mut() {
                    Some(early) => early.attach(opts.pid),
                    None => LiveJvm::attach(opts.pid),
                };
                match attached {
                    Ok(live) => (live, None),
                    Err(e) if e.kind == ErrorKind::Attach => {
                        (LiveJvm::without_agent(opts.pid)?, Some(e.message))
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let native = NativeUnwinder::new(&live.process)?;
        let mut walker = StackWalker::new(&live.hotspot, native);
        let mut collected = match agentless {
            Some(_) => Collected::decoding_scopes(&live.hotspot),
            None => Collected::default(),
        };
        let period_ns = 1_000_000_000 / opts.frequency_hz.max(1);
        let (sampler, started, start_ns, cpu_at_start, held) = match early {
            Some(e) => (e.sampler, e.started, e.start_ns, e.cpu_at_start, e.held),
            None => {
                // Opened after the attach, enabled: no enable per thread.
                let mut sampler = match events {
                    Events::Shared(host) => Sampler::shared(opts.pid, &config, host),
                    Events::Own(strategy) => Sampler::open_as(opts.pid, &config, strategy)?,
                };
                // Per thread, sampling starts once every thread found has its event (a JVM of
                // thousands of threads takes a while): events open in batches between drains,
                // and what they sample before the start is dropped, so that every thread is
                // sampled over the whole window.
                while sampler.has_pending_threads() {
                    sampler.open_pending_threads();
                    sampler.poll(Duration::ZERO, &mut |_| {})?;
                }
                let start_ns = crate::profile::monotonic_now_ns();
                let cpu = live.process.cpu_time_ns();
                (sampler, Instant::now(), start_ns, cpu, Vec::new())
            }
        };
        collected.probes = probes
            .as_ref()
            .map(|p| p.source(&live.hotspot, &live.process));
        let per_cpu = sampler.strategy().kind == Sampling::PerCpu;
        collected.wall = opts.wall.map(|_| wall::OffCpu::new(period_ns, per_cpu));
        if opts.wall.is_some() && per_cpu {
            collected.off_cpu_reads = Some(off_cpu_reads::OffCpuReads::new(
                opts.pid,
                period_ns,
                opts.stack_size,
            ));
        }
        // Threads sampled before the engine's first turn, named at the end.
        let mut comms = HashMap::default();
        if opts.wall.is_some() {
            let blocked = read_blocked_threads(
                &live.process,
                &mut collected,
                &mut walker,
                opts.stack_size,
                start_ns,
            );
            comms.extend(blocked.into_iter().map(|tid| (tid, String::new())));
        }
        let warming = Some(WarmingSymbols::start(&walker.native));
        Ok(Engine {
            pid: opts.pid,
            frequency_hz: opts.frequency_hz,
            sampler,
            live,
            walker,
            collected,
            warming,
            symbolizer: None,
            named: Named::new(opts.spill, opts.keep_sample_times, opts.max_stacks),
            started,
            start_ns,
            last_naming: Instant::now(),
            naming_unfinished: false,
            last_rescan: Instant::now(),
            known_threads: 0,
            precise_requested: !opts.precise_inlining,
            ended: None,
            agentless,
            interval_start_ns: start_ns,
            interval_base: SamplerStats::default(),
            wall: opts.wall,
            probe_clock: probes.as_ref().map(|p| p.clock()),
            prompt_probes: probes
                .as_ref()
                .is_some_and(|p| p.uprobes().probes.iter().any(|u| u.prompt)),
            cpu_time: CpuTime {
                start: cpu_at_start,
                last: cpu_at_start,
                read: Instant::now(),
            },
            comms,
            held,
            new_tids: Vec::new(),
            comms_unread: Vec::new(),
            interval_cpu: cpu_at_start,
        })
    }

    /// One turn: wait up to `timeout` for samples, walk them, read the shim's records, name a
    /// slice of the samples old enough, follow new threads. Trouble that ends sampling is kept
    /// in [`Engine::ended`]; the caller then finishes.
    pub fn poll(&mut self, timeout: Duration) -> Result<()> {
        if self.ended.is_some() {
            return Ok(());
        }
        // Threads still to open are opened between drains: no waiting meanwhile.
        let mut timeout = match self.sampler.has_pending_threads() {
            true => Duration::ZERO,
            false => timeout,
        };
        // Prompt probes' samples point at what the target changes soon after: they are read
        // within a millisecond or two, whether or not the kernel wakes the poll for them.
        if self.prompt_probes {
            timeout = timeout.min(PROMPT_POLL);
        }
        // Per-CPU wall-clock mode: threads whose wait crosses a period boundary are read as
        // soon after it as can be, before they wake.
        if let Some(reads) = &self.collected.off_cpu_reads {
            let now = crate::profile::monotonic_now_ns();
            let until = reads.next_boundary(now) - now + BOUNDARY_LATE_NS;
            timeout = timeout.min(Duration::from_nanos(until));
        }
        let (collected, walker) = (&mut self.collected, &mut self.walker);
        let (comms, new_tids) = (&self.comms, &mut self.new_tids);
        let start_ns = self.start_ns;
        let mut sink = |s: &Sample<'_>| {
            if s.time < start_ns {
                return;
            }
            if !comms.contains_key(&s.tid) && !new_tids.contains(&s.tid) {
                new_tids.push(s.tid);
            }
            collected.add(walker, s)
        };
        for s in std::mem::take(&mut self.held) {
            sink(&s.sample());
        }
        let polled = self.sampler.poll(timeout, &mut sink);
        if let Err(e) = polled {
            self.ended = Some(e.to_string());
            return Ok(());
        }
        for tid in self.new_tids.drain(..) {
            self.comms.insert(tid, String::new());
            self.comms_unread.push(tid);
        }
        // A bounded number a turn: a JVM's first turn may bring thousands of threads.
        let unread = self.comms_unread.len();
        for tid in self
            .comms_unread
            .drain(unread.saturating_sub(COMMS_PER_TURN)..)
        {
            if let Some(comm) = self.live.process.thread_comm(tid) {
                self.comms.insert(tid, comm);
            }
        }
        let now = crate::profile::monotonic_now_ns();
        self.collected.read_off_cpu_stacks(&mut self.walker, now);
        self.collected
            .count_off_cpu(now.saturating_sub(wall::LAG_NS));
        let code_before = self.live.state.code_events;
        if let Err(e) = self.live.pump(Duration::from_millis(1)) {
            self.ended = Some(e.to_string());
            return Ok(());
        }
        // Without the agent nothing says when code is freed and its addresses reused: what was
        // learned about code is forgotten every turn.
        if self.live.state.code_events != code_before || self.agentless.is_some() {
            self.walker.code_changed(&self.live.hotspot);
            self.collected.code_changed();
        }
        self.follow_new_threads();
        self.sampler.open_pending_threads();
        if self.warming.as_ref().is_some_and(|w| w.is_finished()) {
            self.symbolizer = self.warming.take().map(|w| self.ready_symbolizer(w));
        }
        if self.naming_unfinished || self.last_naming.elapsed() > Duration::from_secs(1) {
            self.name_a_slice();
        }
        if self.last_rescan.elapsed() > RESCAN_EVERY {
            self.last_rescan = Instant::now();
            self.sampler.rescan_threads();
            if self.cpu_time.read.elapsed() > CPU_TIME_EVERY {
                self.cpu_time.read = Instant::now();
                if let Some(cpu) = self.live.process.cpu_time_ns() {
                    self.cpu_time.last = Some(cpu);
                }
            }
            if !self.live.process.is_alive() {
                self.ended = Some(format!("process {} exited", self.pid));
            }
        }
        if !self.precise_requested && self.started.elapsed() > Duration::from_secs(1) {
            self.precise_requested = true;
            let hot = self.collected.hot_replayed_methods(&self.live);
            if !hot.is_empty() {
                self.live.send(&protocol::encode_retransform(0, &hot))?;
            }
        }
        Ok(())
    }

    /// The shim reports tids of the target's pid namespace; perf wants ours.
    /// Per CPU every thread is sampled already. Outside a pid namespace the tids are ours, and
    /// the map is not read: that lists every thread (~0.2 s for 3000 threads).
    fn follow_new_threads(&mut self) {
        let state = &self.live.state;
        if state.threads_started == self.known_threads || !self.sampler.follows_threads() {
            return;
        }
        self.known_threads = state.threads_started;
        let process = &self.live.process;
        let map = (process.nspid != process.pid).then(|| process.ns_tid_map());
        for &ns_tid in state.thread_names.keys() {
            let tid = match &map {
                Some(map) => map.get(&ns_tid).copied(),
                None => Some(ns_tid),
            };
            if let Some(tid) = tid {
                let _ = self.sampler.add_thread(tid);
            }
        }
    }

    fn name_a_slice(&mut self) {
        let before = crate::profile::monotonic_now_ns().saturating_sub(NAMING_DELAY_NS);
        self.name_before(before, Some(NAMING_SLICE));
    }

    /// Name the samples taken before `before` (within `budget` if given); false without a
    /// symbolizer yet.
    fn name_before(&mut self, before: u64, budget: Option<Duration>) -> bool {
        let Some(symbolizer) = self.symbolizer.as_mut() else {
            return false;
        };
        self.naming_unfinished = !self.named.take(
            &mut self.collected,
            before,
            symbolizer,
            &self.live.state.code,
            &mut self.walker,
            budget,
        );
        self.last_naming = Instant::now();
        // Code may be forgotten only once every sample that could need it was named.
        if !self.naming_unfinished {
            match self.live.trim(before) {
                Ok(()) => symbolizer
                    .forget_stale_versions(&self.live.state.code, &self.walker.method_names),
                Err(e) => self.ended = Some(e.to_string()),
            }
        }
        true
    }

    /// The profile of the samples taken since the last interval up to [`NAMING_DELAY_NS`] ago
    /// (later ones may still wait for their code's load record); sampling goes on. `None` while
    /// native debug info is still opening: the samples wait for the next interval.
    pub fn take_interval(&mut self) -> Option<Interval> {
        let end_ns = crate::profile::monotonic_now_ns().saturating_sub(NAMING_DELAY_NS);
        if end_ns <= self.interval_start_ns || !self.name_before(end_ns, None) {
            return None;
        }
        let profile = self.named.take_profile();
        if let Some(symbolizer) = self.symbolizer.as_mut() {
            symbolizer.forget_frames();
        }
        Some(self.close_interval(profile, end_ns))
    }

    /// The interval from the last one to `end_ns` holding `profile`; the next starts there.
    fn close_interval(&mut self, mut profile: Profile, end_ns: u64) -> Interval {
        self.finish_profile(&mut profile, self.interval_start_ns);
        profile.cpu_time_ns = self.cpu_time.since(self.interval_cpu);
        self.interval_cpu = self.cpu_time.last;
        let stats = self.sampler.stats();
        let interval = Interval {
            samples: profile.total_weight(),
            profile,
            start_ns: self.interval_start_ns,
            end_ns,
            lost: stats.lost - self.interval_base.lost,
            frequency_hz: self.frequency_hz,
        };
        self.interval_start_ns = end_ns;
        self.interval_base = stats;
        interval
    }

    /// Samples per second per thread from now on (the first samples at the new rate may come a
    /// moment later: the kernel adjusts the period as it goes).
    pub fn set_frequency(&mut self, hz: u64) -> Result<()> {
        self.sampler.set_frequency(hz)?;
        self.frequency_hz = hz;
        Ok(())
    }

    /// The JVM's release string, if VMStructs tell it.
    pub fn jdk_version(&self) -> Option<String> {
        self.live.hotspot.vm_release()
    }

    pub fn frequency_hz(&self) -> u64 {
        self.frequency_hz
    }

    fn ready_symbolizer(&self, warming: WarmingSymbols) -> Symbolizer {
        let (native, cpu) = warming.join();
        let mut symbolizer = Symbolizer::new(
            self.walker.method_layout().cloned(),
            self.live.hotspot.mem,
            native,
        );
        symbolizer.debug_info_cpu = cpu;
        symbolizer
    }

    /// Why the JVM is profiled without the agent, if it is.
    pub fn agentless(&self) -> Option<&str> {
        self.agentless.as_deref()
    }

    /// Why sampling cannot go on, if it cannot.
    pub fn ended(&self) -> Option<&str> {
        self.ended.as_deref()
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn stats(&self) -> SamplerStats {
        self.sampler.stats()
    }

    /// Distinct stacks so far and samples cut at `max_stacks`.
    pub fn stacks(&self) -> (usize, u64) {
        (self.named.profile.stacks.len(), self.named.cut)
    }

    /// What the shim last reported about its memory in the target.
    pub fn shim_stats(&self) -> Option<&ShimStats> {
        self.live.state.shim_stats.as_ref()
    }

    /// Stop sampling and name everything. Native debug info may still be opening (a first run
    /// building symbol caches): `waiting` is called every 100 ms meanwhile with what it is doing.
    pub fn finish(mut self, mut waiting: impl FnMut(&str)) -> Recording {
        self.sampler.disable();
        let end_ns = crate::profile::monotonic_now_ns();
        if let Some(cpu) = self.live.process.cpu_time_ns() {
            self.cpu_time.last = Some(cpu);
        }
        let sampled_for = self.started.elapsed();
        let (collected, walker) = (&mut self.collected, &mut self.walker);
        let _ = self
            .sampler
            .poll(Duration::ZERO, &mut |s| collected.add(walker, s));
        // Threads still off are still where they left: their waits are read now.
        collected.read_off_cpu_stacks(walker, end_ns);
        let idle_kept = self.wall.is_some_and(|w| w.idle);
        let idle_threads = self.collected.wall.as_ref().map_or(0, |w| w.idle_threads());
        self.collected.finish_off_cpu(end_ns, idle_kept);
        self.collected.finish_waits(end_ns);
        // Load records for code sampled at the very end may still be in flight.
        let _ = self.live.pump(Duration::from_millis(100));
        while let Some(w) = self.warming.as_ref().filter(|w| !w.is_finished()) {
            crate::native::symcache::hurry_build();
            waiting(&w.activity());
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut symbolizer = match (self.symbolizer.take(), self.warming.take()) {
            (Some(s), _) => s,
            (None, Some(w)) => self.ready_symbolizer(w),
            (None, None) => Symbolizer::new(
                self.walker.method_layout().cloned(),
                self.live.hotspot.mem,
                crate::native::NativeSymbolizer::new(),
            ),
        };
        self.named.take(
            &mut self.collected,
            u64::MAX,
            &mut symbolizer,
            &self.live.state.code,
            &mut self.walker,
            None,
        );
        let mut profile = std::mem::take(&mut self.named.profile);
        self.finish_profile(&mut profile, self.start_ns);
        profile.cpu_time_ns = self.cpu_time.since(self.cpu_time.start);
        let named = &mut self.named;
        let on_cpu = match &self.collected.wall {
            Some(w) => w.on_cpu,
            None => named.count,
        };
        let coverage = profile_coverage(on_cpu, profile.cpu_time_ns, profile.period_ns);
        Recording {
            profile,
            samples: named.count,
            // Off-CPU periods are counted from the start to the end of sampling.
            window: match self.wall {
                Some(_) => Some((self.start_ns, end_ns)),
                None => named.first.map(|first| (first, named.last)),
            },
            sampled_for,
            stats: self.sampler.stats(),
            samples_kernel_time: self.sampler.samples_kernel_time(),
            rooted_percent: 100.0 * self.collected.rooted as f64
                / self.collected.walked.max(1) as f64,
            unresolved_compiled: symbolizer.unresolved_compiled,
            precise_percent: 100.0 * named.precise_hits as f64 / named.jit_top.max(1) as f64,
            debug_non_safepoints: self.live.debug_non_safepoints,
            debug_info_cpu: symbolizer.debug_info_cpu + crate::native::symcache::children_cpu(),
            symbol_caches: symbolizer.native_symbol_caches(),
            cut: named.cut,
            ring_note: self.sampler.ring_note(),
            wall: self.collected.wall.as_ref().map(|w| WallSummary {
                on_cpu: w.on_cpu,
                off_cpu: w.off_cpu,
                idle_threads,
                idle_kept,
                stacks: self.collected.off_cpu_reads.as_ref().map(|r| r.stats),
            }),
            probes: self.collected.probes.as_ref().map(|p| p.summary()),
            spill: named.spill.take(),
            ended: self.ended.take(),
            coverage,
            strategy: self.sampler.strategy().clone(),
            shim_dropped: (
                self.live.state.dropped_records,
                self.live.state.dropped_bytes,
            ),
            shim_stats: self.live.state.shim_stats,
        }
    }

    /// Stop sampling and name everything: the last interval, up to now.
    pub fn finish_interval(mut self) -> Interval {
        self.sampler.disable();
        let end_ns = crate::profile::monotonic_now_ns();
        let start_ns = self.interval_start_ns;
        let base = self.interval_base;
        let frequency_hz = self.frequency_hz;
        let recording = self.finish(|_| {});
        let mut profile = recording.profile;
        profile.start_ns = start_ns;
        Interval {
            samples: profile.total_weight(),
            lost: recording.stats.lost - base.lost,
            profile,
            start_ns,
            end_ns,
            frequency_hz,
        }
    }

    /// Period, start and thread names of a profile named from this engine.
    fn finish_profile(&self, profile: &mut Profile, start_ns: u64) {
        profile.period_ns = 1_000_000_000 / self.frequency_hz.max(1);
        if self.wall.is_some() {
            profile.clock = crate::profile::Clock::Wall;
        }
        if let Some(clock) = self.probe_clock {
            // Weights are bytes or nanoseconds, not periods.
            profile.period_ns = 0;
            profile.clock = clock;
        }
        profile.start_ns = start_ns;
        self.name_threads(profile);
    }

    /// Names of the threads sampled: from `/proc` (comm) when first sampled, or now, and as they
    /// changed (per CPU: COMM records), overridden by the JVM's own (from the shim).
    fn name_threads(&self, profile: &mut Profile) {
        let process = &self.live.process;
        for (&tid, comm) in &self.comms {
            let comm = match comm.is_empty() {
                true => process.thread_comm(tid),
                false => Some(comm.clone()),
            };
            if let Some(comm) = comm {
                profile.thread_names.insert(tid, comm);
            }
        }
        profile.thread_names.extend(self.sampler.thread_names());
        // The shim names threads by their tid in the target's pid namespace. Ended threads' tids
        // are no longer there: they are ours only outside a pid namespace, where they are the
        // same (and the map, which lists every thread, is not read).
        let ns_tids = (process.nspid != process.pid).then(|| process.ns_tid_map());
        let state = &self.live.state;
        let ended = state.ended_thread_names.iter().map(|(t, n)| (*t, n));
        profile.thread_names.extend(
            ended
                .chain(state.thread_names.iter().map(|(t, n)| (*t, n)))
                .filter_map(|(ns_tid, name)| {
                    let tid = match &ns_tids {
                        Some(map) => *map.get(&ns_tid)?,
                        None => ns_tid,
                    };
                    Some((tid, name.clone()))
                }),
        );
    }
}

/// Wall-clock mode: the stacks of the target's threads blocked at `start_ns` (just after the
/// events were enabled), read from outside without stopping them; a thread woken since is left
/// to its switch records. Returns the threads read.
fn read_blocked_threads(
    process: &TargetProcess,
    collected: &mut Collected,
    walker: &mut StackWalker,
    stack_size: u32,
    start_ns: u64,
) -> Vec<u32> {
    let mut read = Vec::new();
    for tid in process.threads() {
        let Some(snapshot) = freeze::blocked(process.pid, tid, stack_size as usize) else {
            continue;
        };
        let sample = Sample {
            kind: SampleKind::SwitchOut,
            pid: process.pid,
            tid,
            time: start_ns,
            regs: snapshot.regs,
            stack: &snapshot.stack,
            kernel_ips: &[],
            in_kernel: true,
        };
        collected.add_blocked_at_start(walker, &sample);
        read.push(tid);
    }
    read
}
