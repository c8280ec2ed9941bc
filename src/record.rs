//! `jvmperf record`: attach, sample every thread, walk mixed Java/native stacks as samples arrive,
//! and name the frames at the end against the time-versioned code map.

use crate::codemap::CodeMap;
use crate::error::{Error, ErrorKind, Result};
use crate::live_jvm::LiveJvm;
use crate::native::NativeUnwinder;
use crate::output::raw::{self, SampleSpill};
use crate::output::{self, Format, OutputOptions};
use crate::profile::{Frame, FrameId, FrameKind, Profile, Sample};
use crate::sampler::{Sampler, SamplerConfig, SamplerStats};
use crate::shim::protocol::{self, ShimStats};
use crate::symbolize::{Symbolizer, WarmingSymbols};
use crate::target::TargetProcess;
use crate::unwind::{RawFrame, StackWalker};
use foldhash::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct RecordOptions {
    pub pid: u32,
    pub duration: Option<Duration>,
    pub frequency_hz: u64,
    pub stack_size: u32,
    /// Distinct stacks kept; new ones past it are cut after their longest known prefix.
    pub max_stacks: usize,
    pub output: PathBuf,
    pub format: Option<Format>,
    pub threads: bool,
    pub kernel: bool,
    pub precise_inlining: bool,
    /// Print a status line (samples, lost, stacks, memory) to stderr this often.
    pub status_every: Option<Duration>,
}

/// A sample as walked, before symbolization.
struct RawSample {
    time: u64,
    tid: u32,
    stack: u32,
    kernel: Vec<u64>,
    in_kernel: bool,
}

/// Walked stacks, interned (raw frames are stable per code address; names depend on time), and
/// the samples that point at them.
#[derive(Default)]
struct Collected {
    stacks: Vec<Vec<RawFrame>>,
    ids: HashMap<Vec<RawFrame>, u32>,
    samples: Vec<RawSample>,
    walked: u64,
    rooted: u64,
}

impl Collected {
    fn add(&mut self, walker: &mut StackWalker, s: &crate::sampler::Sample<'_>) {
        let walk = walker.walk(&s.regs, s.stack);
        self.walked += 1;
        self.rooted += u64::from(walk.rooted);
        let stack = match self.ids.get(&walk.frames) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                self.stacks.push(walk.frames.clone());
                self.ids.insert(walk.frames, id);
                id
            }
        };
        self.samples.push(RawSample {
            time: s.time,
            tid: s.tid,
            stack,
            kernel: s.kernel_ips.to_vec(),
            in_kernel: s.in_kernel,
        });
    }

    /// Forget the raw stacks no waiting sample uses: they are named already, and code churn makes
    /// new ones (new pcs) without end.
    fn forget_named_stacks(&mut self) {
        let mut old = std::mem::take(&mut self.stacks);
        self.ids.clear();
        let mut renumbered: HashMap<u32, u32> = HashMap::default();
        for s in &mut self.samples {
            s.stack = *renumbered.entry(s.stack).or_insert_with(|| {
                let frames = std::mem::take(&mut old[s.stack as usize]);
                let id = self.stacks.len() as u32;
                self.ids.insert(frames.clone(), id);
                self.stacks.push(frames);
                id
            });
        }
    }
}

/// Samples already named, and what the summary reports about them. Samples are named about a second
/// after they were taken (late code-load records still arrive in time) and their raw form dropped, so
/// memory follows the number of distinct stacks; unless the output keeps every sample's time (the
/// raw format, whose samples go to a spill file on disk), samples of the same stack and thread are
/// merged into one weighted sample.
struct Named {
    profile: Profile,
    merged: Option<HashMap<(u32, u32), usize>>,
    spill: Option<SampleSpill>,
    count: u64,
    first: Option<u64>,
    last: u64,
    jit_top: u64,
    precise_hits: u64,
    /// The `[kernel]` leaf of samples in kernel code without a callchain.
    kernel_leaf: Option<FrameId>,
    max_stacks: usize,
    /// The frame that ends stacks cut at `max_stacks`, and how many samples were cut.
    cut_marker: Option<FrameId>,
    cut: u64,
}

impl Named {
    fn new(spill: Option<SampleSpill>, max_stacks: usize) -> Self {
        Named {
            profile: Profile::default(),
            merged: spill.is_none().then(HashMap::default),
            spill,
            count: 0,
            first: None,
            last: 0,
            jit_top: 0,
            precise_hits: 0,
            kernel_leaf: None,
            max_stacks,
            cut_marker: None,
            cut: 0,
        }
    }

    /// Name the collected samples taken before `before` and drop them from `collected`, within
    /// `budget` if given (the ring buffers must be drained meanwhile); true when all were named.
    fn take(
        &mut self,
        collected: &mut Collected,
        before: u64,
        symbolizer: &mut Symbolizer,
        code: &CodeMap,
        walker: &mut StackWalker,
        budget: Option<Duration>,
    ) -> bool {
        let deadline = budget.map(|b| Instant::now() + b);
        let mut stopped_at = None;
        let mut leaf_first: Vec<FrameId> = Vec::new();
        // Raw stack ids are stable within a pass, and most samples of a pass repeat a stack
        // named moments before: its named stack holds for samples in the same code versions.
        let mut named_stacks: HashMap<(u32, bool), NamedStack> = HashMap::default();
        for (i, s) in collected.samples.iter().enumerate() {
            if i % 64 == 63 && deadline.is_some_and(|d| Instant::now() >= d) {
                stopped_at = Some(i + 1);
                break;
            }
            if s.time >= before {
                continue;
            }
            let key = (s.stack, s.in_kernel);
            let cached = named_stacks
                .get(&key)
                .filter(|n| s.kernel.is_empty() && n.same_names.contains(&s.time));
            let named = match cached {
                Some(n) => n.clone(),
                None => {
                    let n =
                        self.name_stack(collected, s, symbolizer, code, walker, &mut leaf_first);
                    if s.kernel.is_empty() {
                        named_stacks.insert(key, n.clone());
                    }
                    n
                }
            };
            if let Some(precise) = named.top_compiled {
                self.jit_top += 1;
                self.precise_hits += u64::from(precise);
            }
            let stack = named.stack;
            self.cut += u64::from(named.cut);
            self.count += 1;
            self.first = Some(self.first.map_or(s.time, |f| f.min(s.time)));
            self.last = self.last.max(s.time);
            let samples = &mut self.profile.samples;
            let merged_into = self.merged.as_mut().map(|m| {
                *m.entry((stack, s.tid)).or_insert_with(|| {
                    samples.push(Sample {
                        time: s.time,
                        tid: s.tid,
                        stack,
                        weight: 0,
                    });
                    samples.len() - 1
                })
            });
            match merged_into {
                Some(i) => samples[i].weight += 1,
                None => samples.push(Sample {
                    time: s.time,
                    tid: s.tid,
                    stack,
                    weight: 1,
                }),
            }
        }
        let named_up_to = stopped_at.unwrap_or(collected.samples.len());
        let mut index = 0;
        collected.samples.retain(|s| {
            index += 1;
            index > named_up_to || s.time >= before
        });
        if let Some(spill) = self.spill.as_mut() {
            self.profile.samples.drain(..).for_each(|s| spill.push(&s));
        }
        if stopped_at.is_some() {
            return false;
        }
        collected.forget_named_stacks();
        true
    }

    /// Name one sample's stack and intern it (cut at `max_stacks`).
    fn name_stack(
        &mut self,
        collected: &Collected,
        s: &RawSample,
        symbolizer: &mut Symbolizer,
        code: &CodeMap,
        walker: &mut StackWalker,
        leaf_first: &mut Vec<FrameId>,
    ) -> NamedStack {
        leaf_first.clear();
        for ip in &s.kernel {
            leaf_first.push(symbolizer.kernel_frame(&mut self.profile, *ip));
        }
        if s.in_kernel && s.kernel.is_empty() {
            // Time in a system call or fault, without --kernel's callchain.
            let profile = &mut self.profile;
            let kernel = *self.kernel_leaf.get_or_insert_with(|| {
                profile.intern_frame(Frame::named("[kernel]", FrameKind::Kernel))
            });
            leaf_first.push(kernel);
        }
        let mut top_compiled = None;
        let mut same_names = 0..u64::MAX;
        for f in &collected.stacks[s.stack as usize] {
            let precise = symbolizer.frames(
                &mut self.profile,
                code,
                walker,
                (f, s.time),
                &mut same_names,
                leaf_first,
            );
            top_compiled = top_compiled.or(precise);
        }
        leaf_first.reverse();
        // The marker frame exists only in profiles that reached the limit.
        let marker = if self.profile.stacks.len() >= self.max_stacks {
            let profile = &mut self.profile;
            *self.cut_marker.get_or_insert_with(|| {
                profile.intern_frame(Frame::named("[truncated: --max-stacks]", FrameKind::Stub))
            })
        } else {
            FrameId::MAX
        };
        let (stack, cut) = self
            .profile
            .intern_stack_within(leaf_first, self.max_stacks, marker);
        NamedStack {
            stack,
            cut,
            top_compiled,
            same_names,
        }
    }
}

/// A raw stack as named for samples taken within `same_names`.
#[derive(Clone)]
struct NamedStack {
    stack: u32,
    cut: bool,
    /// Whether the top compiled frame's code was compiled after the attach, if there is one.
    top_compiled: Option<bool>,
    same_names: std::ops::Range<u64>,
}

fn ready_symbolizer(warming: WarmingSymbols, walker: &StackWalker, live: &LiveJvm) -> Symbolizer {
    let (native, cpu) = warming.join();
    let mut symbolizer = Symbolizer::new(walker.method_layout().cloned(), live.hotspot.mem, native);
    symbolizer.debug_info_cpu = cpu;
    symbolizer
}

/// Naming work per turn of the sampling loop: the ring buffers hold ~50 ms of samples.
const NAMING_SLICE: Duration = Duration::from_millis(15);

/// How long a sample waits before it is named: the shim's load record for the code it hit may be
/// a little behind.
const NAMING_DELAY_NS: u64 = 2_000_000_000;

pub fn run(opts: &RecordOptions) -> Result<()> {
    let format = match opts.format {
        Some(f) => f,
        None => Format::from_path(&opts.output)?,
    };
    output::check_writable(&opts.output)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot handle signals: {e}")))?;
    }
    // Permissions first: a user who may not read or sample the JVM is told why before anything
    // is loaded into it. The perf events stay off until the attach is done.
    TargetProcess::open(opts.pid)?.maps()?;
    let mut sampler = Sampler::open(
        opts.pid,
        &SamplerConfig {
            frequency_hz: opts.frequency_hz,
            stack_size: opts.stack_size,
            kernel_callchain: opts.kernel,
            ..Default::default()
        },
    )?;
    sampler.disable();
    let mut live = LiveJvm::attach(opts.pid)?;
    let native = NativeUnwinder::new(&live.process)?;
    let mut walker = StackWalker::new(&live.hotspot, native);
    sampler.enable();
    let started = Instant::now();
    let start_ns = crate::profile::monotonic_now_ns();
    let progress = std::io::stderr().is_terminal();
    let mut collected = Collected::default();
    let mut warming = Some(WarmingSymbols::start(&walker.native));
    let mut symbolizer: Option<Symbolizer> = None;
    let spill = (format == Format::Raw)
        .then(|| SampleSpill::create(&raw::spill_dir(&opts.output), start_ns))
        .transpose()?;
    let mut named = Named::new(spill, opts.max_stacks);
    let mut last_status = Instant::now();
    let mut last_naming = Instant::now();
    let mut naming_unfinished = false;
    let mut last_rescan = Instant::now();
    let mut known_threads = 0usize;
    let mut precise_requested = !opts.precise_inlining;
    let mut ended = None;

    loop {
        let result = sampler.poll(Duration::from_millis(20), &mut |s| {
            collected.add(&mut walker, s)
        });
        if let Err(e) = result {
            ended = Some(e.to_string());
            break;
        }
        let code_before = live.state.code_events;
        if let Err(e) = live.pump(Duration::from_millis(1)) {
            ended = Some(e.to_string());
            break;
        }
        if live.state.code_events != code_before {
            walker.code_changed(&live.hotspot);
        }
        if live.state.thread_names.len() != known_threads {
            known_threads = live.state.thread_names.len();
            // The shim reports tids of the target's pid namespace; perf wants ours.
            let map = live.process.ns_tid_map();
            for tid in live.state.thread_names.keys().filter_map(|t| map.get(t)) {
                let _ = sampler.add_thread(*tid);
            }
        }
        if warming.as_ref().is_some_and(|w| w.is_finished()) {
            symbolizer = warming.take().map(|w| ready_symbolizer(w, &walker, &live));
        }
        if let Some(symbolizer) = symbolizer
            .as_mut()
            .filter(|_| naming_unfinished || last_naming.elapsed() > Duration::from_secs(1))
        {
            let before = crate::profile::monotonic_now_ns().saturating_sub(NAMING_DELAY_NS);
            naming_unfinished = !named.take(
                &mut collected,
                before,
                symbolizer,
                &live.state.code,
                &mut walker,
                Some(NAMING_SLICE),
            );
            last_naming = Instant::now();
            // Code may be forgotten only once every sample that could need it was named.
            let trimmed = if naming_unfinished {
                Ok(())
            } else {
                live.trim(before).map(|()| {
                    symbolizer.forget_stale_versions(&live.state.code, &walker.method_names)
                })
            };
            if let Err(e) = trimmed {
                ended = Some(e.to_string());
                break;
            }
        }
        let rescan = last_rescan.elapsed() > Duration::from_millis(200);
        if rescan {
            sampler.rescan_threads();
            last_rescan = Instant::now();
        }
        if !precise_requested && started.elapsed() > Duration::from_secs(1) {
            precise_requested = true;
            let hot = hot_replayed_methods(&live, &collected);
            if !hot.is_empty() {
                live.session.send(&protocol::encode_retransform(0, &hot))?;
            }
        }
        let st = sampler.stats();
        if opts
            .status_every
            .is_some_and(|every| last_status.elapsed() >= every)
        {
            last_status = Instant::now();
            let stacks = (named.profile.stacks.len(), named.cut);
            let shim = live.state.shim_stats.as_ref();
            eprintln!("{}", status_line(started.elapsed(), &st, stacks, shim));
        }
        if progress {
            eprint!(
                "\rjvmperf: recording pid {} — {:.1} s, {} samples, {} lost   ",
                opts.pid,
                started.elapsed().as_secs_f64(),
                st.samples,
                st.lost
            );
        }
        if stop.load(Ordering::Relaxed) || opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if rescan && !live.process.is_alive() {
            ended = Some(format!("process {} exited", opts.pid));
            break;
        }
    }
    sampler.disable();
    let sampled_for = started.elapsed();
    let naming_started = Instant::now();
    let _ = sampler.poll(Duration::ZERO, &mut |s| collected.add(&mut walker, s));
    // Load records for code sampled at the very end may still be in flight.
    let _ = live.pump(Duration::from_millis(100));
    while let Some(w) = warming.as_ref().filter(|w| !w.is_finished()) {
        crate::native::symcache::hurry_build();
        if progress {
            eprint!(
                "\rjvmperf: sampled {:.1} s; naming waits: {} — {:.0} s   ",
                sampled_for.as_secs_f64(),
                w.activity(),
                naming_started.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if progress {
        eprintln!();
    }
    let mut symbolizer = match (symbolizer, warming) {
        (Some(s), _) => s,
        (None, Some(w)) => ready_symbolizer(w, &walker, &live),
        (None, None) => Symbolizer::new(
            walker.method_layout().cloned(),
            live.hotspot.mem,
            crate::native::NativeSymbolizer::new(),
        ),
    };
    named.take(
        &mut collected,
        u64::MAX,
        &mut symbolizer,
        &live.state.code,
        &mut walker,
        None,
    );
    if named.count == 0 {
        return Err(Error::new(
            ErrorKind::Sampling,
            format!(
                "no samples were collected from JVM {}{} (is it idle?)",
                opts.pid,
                ended.map(|e| format!(": {e}")).unwrap_or_default()
            ),
        ));
    }

    let mut profile = std::mem::take(&mut named.profile);
    profile.period_ns = 1_000_000_000 / opts.frequency_hz.max(1);
    profile.start_ns = start_ns;
    let ns_tids = live.process.ns_tid_map();
    for tid in live.process.threads() {
        if let Some(comm) = live.process.thread_comm(tid) {
            profile.thread_names.insert(tid, comm);
        }
    }
    profile.thread_names.extend(
        live.state
            .thread_names
            .iter()
            .filter_map(|(ns_tid, name)| Some((*ns_tids.get(ns_tid)?, name.clone()))),
    );
    let unresolved = symbolizer.unresolved_compiled;
    let debug_info_cpu = symbolizer.debug_info_cpu;
    let symbol_caches = symbolizer.native_symbol_caches();
    match named.spill.take() {
        Some(spill) => raw::save_streamed(&profile, spill, &opts.output)?,
        None => output::save_recording(
            &profile,
            format,
            &OutputOptions {
                threads: opts.threads,
            },
            &opts.output,
        )?,
    }

    let st = sampler.stats();
    eprintln!(
        "jvmperf: {} samples in {:.1} s written to {} ({:.1} s after sampling ended) — {:.1}% unwound to a thread root, {} lost, {} compiled frames unresolved by the code map",
        named.count,
        sampled_for.as_secs_f64(),
        opts.output.display(),
        naming_started.elapsed().as_secs_f64(),
        100.0 * collected.rooted as f64 / collected.walked.max(1) as f64,
        st.lost,
        unresolved
    );
    eprintln!(
        "jvmperf: precise inlining {}: {:.1}% of samples in JIT code hit code compiled after attach (exact pc→inline info); DebugNonSafepoints {}",
        if opts.precise_inlining { "on" } else { "off" },
        100.0 * named.precise_hits as f64 / named.jit_top.max(1) as f64,
        if live.debug_non_safepoints { "on" } else { "off" }
    );
    eprintln!(
        "jvmperf: one-off: loading native debug info took {:.2} CPU-s (in the background while sampling); {symbol_caches}",
        (debug_info_cpu + crate::native::symcache::children_cpu()).as_secs_f64()
    );
    if !sampler.samples_kernel_time() {
        eprintln!(
            "jvmperf: time the JVM spent in the kernel (system calls, page faults) was not sampled: \
             kernel.perf_event_paranoid allows user time only (run as root or with CAP_PERFMON)"
        );
    }
    if let Some(first) = named.first {
        let last = named.last;
        eprintln!(
            "jvmperf: sample window (CLOCK_MONOTONIC ns, as System.nanoTime): {first} {last}"
        );
    }
    if named.cut > 0 {
        eprintln!(
            "jvmperf: {} samples ({:.2}%) were new stacks past --max-stacks {}: each was cut after its longest known prefix, under a `[truncated: --max-stacks]` frame (raise --max-stacks to keep them whole)",
            named.cut,
            100.0 * named.cut as f64 / named.count.max(1) as f64,
            opts.max_stacks
        );
    }
    if let Some(why) = ended {
        eprintln!(
            "jvmperf: recording ended early: {why}; what was collected ({} samples) was written",
            named.count
        );
    }
    Ok(())
}

/// A `--status-every` line: `key=value` pairs for production logs, memory in KiB. `stacks` are the
/// distinct stacks and `cut_samples` the samples cut at `--max-stacks`. `rss` is ours
/// (VmRSS, VmHWM the peak; `rss_anon` the part that is our own memory, the rest is pages of mapped
/// files such as debug info); `shim` is what the shim holds inside the target.
fn status_line(
    elapsed: Duration,
    st: &SamplerStats,
    (stacks, cut): (usize, u64),
    shim: Option<&ShimStats>,
) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let shim = shim.map_or("shim_kib=? shim_queue_peak_kib=?".to_string(), |s| {
        format!(
            "shim_kib={} shim_queue_peak_kib={}",
            s.total_bytes / 1024,
            s.queue_high_water / 1024
        )
    });
    format!(
        "jvmperf: status elapsed_s={:.0} samples={} lost={} stacks={stacks} cut_samples={cut} rss_kib={} rss_peak_kib={} rss_anon_kib={} {shim}",
        elapsed.as_secs_f64(),
        st.samples,
        st.lost,
        kib("VmRSS:"),
        kib("VmHWM:"),
        kib("RssAnon:"),
    )
}

/// Methods owning replayed (pre-attach) code that is hot in the samples so far.
fn hot_replayed_methods(live: &LiveJvm, collected: &Collected) -> Vec<u64> {
    let mut counts: HashMap<u64, u64> = HashMap::default();
    for s in &collected.samples {
        for f in &collected.stacks[s.stack as usize] {
            if let RawFrame::Compiled { pc, .. } = f {
                if let Some(e) = live.state.code.lookup(*pc, s.time).filter(|e| e.replayed) {
                    if let Some(m) = e.method() {
                        *counts.entry(m).or_default() += 1;
                    }
                }
                break;
            }
        }
    }
    let threshold = (collected.samples.len() as u64 / 200).max(1);
    let mut hot: Vec<(u64, u64)> = counts
        .into_iter()
        .filter(|&(_, c)| c >= threshold)
        .collect();
    hot.sort_by_key(|&(_, c)| std::cmp::Reverse(c));
    hot.into_iter().take(64).map(|(m, _)| m).collect()
}
