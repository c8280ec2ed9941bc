//! `jvmperf record`: run the recording engine on one JVM for a duration (or until Ctrl-C / SIGTERM
//! / the target's exit), then write the profile in the format asked for and a summary.

use super::event_args::{Event, EventArgs};
use crate::engine::alloc::AllocSummary;
use crate::engine::lock::LockSummary;
use crate::engine::probes::ProbeSummary;
use crate::engine::{Agent, Engine, EngineOptions, Recording};
use crate::error::{Error, ErrorKind, Result};
use crate::output::{self, Format, OutputOptions, SampleSpill};
use crate::profile::WallInterval;
use crate::sampler::{SamplerStats, Sampling};
use crate::shim::protocol::ShimStats;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the progress line is redrawn on a terminal.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

#[derive(clap::Args)]
pub struct RecordOptions {
    /// Process id of the JVM.
    #[arg(short, long)]
    pub pid: u32,
    /// Seconds to record; without it, until Ctrl-C or SIGTERM.
    #[arg(short, long, value_name = "SECONDS", value_parser = crate::cli::seconds)]
    pub duration: Option<Duration>,
    /// Samples per second per thread.
    #[arg(
        short = 'F',
        long = "frequency",
        value_name = "HZ",
        default_value_t = 99
    )]
    pub frequency_hz: u64,
    /// Bytes of user stack the kernel copies per sample (multiple of 8, at most 65528); frames
    /// beyond it are read from the live stack while it still matches the copy.
    #[arg(long, default_value_t = crate::sampler::DEFAULT_STACK_SIZE)]
    pub stack_size: u32,
    /// Keep at most this many distinct stacks: past it, a new stack is cut after its longest
    /// known prefix and ends in a `[truncated: --max-stacks]` frame, so memory stays bounded
    /// however long the recording runs.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_stacks: u32,
    /// Output file; the format follows the extension (.collapsed, .txt, .svg, .html, .iprof,
    /// .pb.gz, .speedscope.json, .jfr, .jvmperf) unless --format.
    #[arg(short, long, default_value = "profile.svg")]
    pub output: PathBuf,
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Add the thread name as each stack's root frame.
    #[arg(long)]
    pub threads: bool,
    #[command(flatten)]
    pub events: EventArgs,
    /// With -e wall, keep threads that were blocked for the whole recording.
    #[arg(long)]
    pub idle: bool,
    /// Include kernel frames (needs perf_event_paranoid <= 1 or CAP_PERFMON).
    #[arg(long)]
    pub kernel: bool,
    /// Recompile hot code compiled before the attach so inlined frames are exact.
    #[arg(long)]
    pub precise_inlining: bool,
    /// Do not attach: name compiled frames (and their inlined methods) from the JVM's own tables,
    /// as jvmperf does by itself when the JVM cannot be attached (stuck before a safepoint,
    /// attach disabled).
    #[arg(long, conflicts_with = "precise_inlining")]
    pub no_agent: bool,
    /// How samples are taken: per CPU (one event per CPU; nothing per thread or per context
    /// switch; needs root, CAP_PERFMON or kernel.perf_event_paranoid <= 0), per thread (one
    /// event per thread; each context switch of a sampled thread costs ~2 µs), or auto: per CPU
    /// where allowed.
    #[arg(long, value_enum, env = "JVMPERF_SAMPLING", default_value = "auto")]
    pub sampling: Sampling,
    /// Print a status line to stderr every this many seconds: samples, lost, distinct stacks,
    /// jvmperf's memory and the shim's memory inside the JVM.
    #[arg(long, value_name = "SECONDS", value_parser = crate::cli::seconds)]
    pub status_every: Option<Duration>,
}

impl RecordOptions {
    /// The event asked for; `--idle` only with it `wall`.
    fn event(&self) -> Result<Event> {
        let event = self.events.event()?;
        if self.idle && event != Event::Wall {
            return Err(Error::new(ErrorKind::Usage, "--idle goes with -e wall"));
        }
        Ok(event)
    }
}

pub fn run(opts: &RecordOptions) -> Result<()> {
    let event = opts.event()?;
    let _priority = crate::priority::raise(&[opts.pid]);
    let format = match opts.format {
        Some(f) => f,
        None => Format::from_path(&opts.output)?,
    };
    output::check_writable(&opts.output)?;
    crate::interrupt::install()?;
    let spill = (format == Format::Raw)
        .then(|| {
            SampleSpill::create(
                &output::spill_dir(&opts.output),
                crate::profile::monotonic_now_ns(),
            )
        })
        .transpose()?;
    let real_time = crate::priority::real_time();
    let mut engine = Engine::start_events(
        EngineOptions {
            pid: opts.pid,
            frequency_hz: opts.frequency_hz,
            stack_size: opts.stack_size,
            max_stacks: opts.max_stacks as usize,
            kernel: opts.kernel,
            precise_inlining: opts.precise_inlining,
            spill,
            agent: if opts.no_agent {
                Agent::Off
            } else {
                Agent::Fallback
            },
            // JFR holds one event per sample, at its time.
            keep_sample_times: format == Format::Jfr,
            wall: event.wall(opts.idle),
            sampling: opts.sampling,
            host: None,
        },
        opts.events.sampled(event),
    )?;
    if let Some(why) = engine.agentless() {
        eprintln!(
            "jvmperf: profiling JVM {} without the agent ({why}): compiled frames and the methods \
             inlined into them are named from the JVM's own tables as each sample is walked (no \
             attach, nothing loaded into the JVM); a method whose class is unloaded before naming \
             is [unknown Method*]",
            opts.pid
        );
    }
    let progress = std::io::stderr().is_terminal();
    let console = super::console::Console::start();
    let mut last_status = Instant::now();
    let mut last_progress: Option<Instant> = None;
    while engine.ended().is_none() {
        engine.poll(Duration::from_millis(20))?;
        let st = engine.stats();
        if opts
            .status_every
            .is_some_and(|every| last_status.elapsed() >= every)
        {
            last_status = Instant::now();
            console.line(status_line(
                engine.elapsed(),
                &st,
                engine.stacks(),
                engine.shim_stats(),
            ));
        }
        if progress && last_progress.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
            last_progress = Some(Instant::now());
            console.progress(format!(
                "jvmperf: recording pid {} — {:.1} s, {} samples, {} lost   ",
                opts.pid,
                engine.elapsed().as_secs_f64(),
                st.samples,
                st.lost
            ));
        }
        if crate::interrupt::requested() || opts.duration.is_some_and(|d| engine.elapsed() >= d) {
            break;
        }
    }
    drop(real_time);
    let naming_started = Instant::now();
    let jdk = engine.jdk_version();
    let mut recording = engine.finish(|activity| {
        if progress {
            console.progress(format!(
                "jvmperf: sampling ended; naming waits: {activity} — {:.0} s   ",
                naming_started.elapsed().as_secs_f64()
            ));
        }
    });
    console.finish();
    if recording.samples == 0 {
        return Err(Error::new(
            ErrorKind::Sampling,
            format!(
                "no samples were collected from JVM {}{} ({})",
                opts.pid,
                recording
                    .ended
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default(),
                match (event, &recording.probes) {
                    (Event::Alloc, _) => "does it allocate? a smaller -c samples more often".into(),
                    (Event::Lock, Some(ProbeSummary::Lock(l))) if l.short > 0 => format!(
                        "{} waits were shorter than --lock-threshold: a smaller one counts them",
                        l.short
                    ),
                    (Event::Lock, _) => "do its threads wait for locks? a smaller --lock-threshold counts shorter waits".into(),
                    _ => "is it idle?".to_string(),
                }
            ),
        ));
    }
    recording.profile.labels = target_labels(opts.pid, jdk);
    if let Some((first, last)) = recording.window {
        recording.profile.interval = Some(WallInterval {
            start_unix_ns: crate::profile::unix_ns_of_monotonic(first),
            duration_ns: last.saturating_sub(first),
        });
    }
    match recording.spill.take() {
        Some(spill) => output::save_streamed(&recording.profile, spill, &opts.output)?,
        None => output::save_recording(
            &recording.profile,
            format,
            &OutputOptions {
                threads: opts.threads,
            },
            &opts.output,
        )?,
    }
    print_summary(opts, &recording, naming_started.elapsed());
    Ok(())
}

fn print_summary(opts: &RecordOptions, r: &Recording, naming_took: Duration) {
    eprintln!(
        "jvmperf: {} {} in {:.1} s written to {} ({:.1} s after sampling ended) — {:.1}% unwound to a thread root, {} lost, {} compiled frames unresolved by the code map",
        r.samples,
        r.profile.clock.unit(),
        r.sampled_for.as_secs_f64(),
        opts.output.display(),
        naming_took.as_secs_f64(),
        r.rooted_percent,
        r.stats.lost,
        r.unresolved_compiled
    );
    let capability = match r.shim_stats.and_then(|s| s.extra) {
        Some(x) if opts.precise_inlining && x.holds_retransform => {
            "; the agent still holds can_retransform_classes"
        }
        Some(_) if opts.precise_inlining => "; the agent gave can_retransform_classes back",
        _ => "",
    };
    eprintln!(
        "jvmperf: precise inlining {}: {:.1}% of samples in JIT code hit code compiled after attach (exact pc→inline info); DebugNonSafepoints {}{capability}",
        if opts.precise_inlining { "on" } else { "off" },
        r.precise_percent,
        if r.debug_non_safepoints { "on" } else { "off" }
    );
    if r.shim_dropped.0 > 0 {
        eprintln!(
            "jvmperf: the agent dropped {} code records ({} KiB): its queue in the JVM was full because jvmperf read too slowly; code they describe may be unnamed",
            r.shim_dropped.0,
            r.shim_dropped.1.div_ceil(1024)
        );
    }
    eprintln!(
        "jvmperf: one-off: loading native debug info took {:.2} CPU-s (in the background while sampling); {}",
        r.debug_info_cpu.as_secs_f64(),
        r.symbol_caches
    );
    match &r.probes {
        None => eprintln!("jvmperf: {}", r.strategy.describe()),
        Some(ProbeSummary::Alloc(a)) => alloc_summary(a, r),
        Some(ProbeSummary::Lock(l)) => lock_summary(l),
    }
    if let Some(line) = coverage_line(r) {
        eprintln!("jvmperf: {line}");
    }
    if let Some(w) = &r.wall {
        let periods = (w.on_cpu + w.off_cpu).max(1) as f64;
        let idle = match (w.idle_threads, w.idle_kept) {
            (0, _) => String::new(),
            (n, true) => format!("; {n} threads blocked all along are kept (--idle)"),
            (n, false) => {
                format!("; {n} threads blocked all along are left out (--idle keeps them)")
            }
        };
        eprintln!(
            "jvmperf: wall clock: {:.1}% of the threads' time on a CPU, {:.1}% off one (blocked, or waiting for a CPU), from {} context switches{idle}",
            100.0 * w.on_cpu as f64 / periods,
            100.0 * w.off_cpu as f64 / periods,
            r.stats.switches
        );
        if let Some(st) = &w.stacks {
            eprintln!(
                "jvmperf: wall clock: stacks of the waits that counted: {} read while the thread waited, {} from an earlier wait at the same place, {} with their innermost frame only (ended before they could be read); {} reads raced with the thread waking",
                st.read, st.reused, st.unread, st.raced
            );
        }
        if r.stats.lost > 0 {
            let switches = (r.stats.switches + r.stats.lost) as f64 / r.sampled_for.as_secs_f64();
            let why = match w.stacks {
                Some(_) => "the per-CPU rings filled before they were drained (jvmperf was kept off the CPUs)",
                None => "at this switch rate the stack copies cannot keep up (a smaller --stack-size helps; see docs/wall-clock.md)",
            };
            eprintln!(
                "jvmperf: wall clock: {} records were lost ({:.1}%), ~{switches:.0} context switches/s: time off a CPU whose switch was lost is not counted, so the off-CPU share is low; {why}",
                r.stats.lost,
                100.0 * r.stats.lost as f64 / (r.stats.samples + r.stats.lost).max(1) as f64
            );
        }
    }
    if let Some(note) = r.ring_note.as_ref().filter(|_| r.stats.lost > 0) {
        eprintln!("jvmperf: {note}");
    }
    if !r.samples_kernel_time {
        eprintln!(
            "jvmperf: time the JVM spent in the kernel (system calls, page faults) was not sampled: \
             kernel.perf_event_paranoid allows user time only (run as root or with CAP_PERFMON)"
        );
    }
    if let Some((first, last)) = r.window {
        eprintln!(
            "jvmperf: sample window (CLOCK_MONOTONIC ns, as System.nanoTime): {first} {last}"
        );
    }
    if r.cut > 0 {
        eprintln!(
            "jvmperf: {} samples ({:.2}%) were new stacks past --max-stacks {}: each was cut after its longest known prefix, under a `[truncated: --max-stacks]` frame (raise --max-stacks to keep them whole)",
            r.cut,
            100.0 * r.cut as f64 / r.samples.max(1) as f64,
            opts.max_stacks
        );
    }
    if let Some(why) = &r.ended {
        eprintln!(
            "jvmperf: recording ended early: {why}; what was collected ({} samples) was written",
            r.samples
        );
    }
}

fn alloc_summary(a: &AllocSummary, r: &Recording) {
    let unnamed = match a.unnamed {
        0 => String::new(),
        n => format!("; {n} samples without their class (unreadable Klass*)"),
    };
    eprintln!(
            "jvmperf: alloc: {}: {:.1} MiB allocated in {} samples ({} at TLAB refills, {} outside TLABs){unnamed}",
            a.mechanism,
            a.bytes as f64 / f64::from(1 << 20),
            a.samples[0] + a.samples[1],
            a.samples[0],
            a.samples[1]
        );
    if r.stats.lost > 0 {
        eprintln!(
                "jvmperf: alloc: {} samples were lost (ring buffers full) and their bytes are missing: a larger -c samples fewer hits",
                r.stats.lost
            );
    }
}

fn lock_summary(l: &LockSummary) {
    let ms = |ns: u64| ns as f64 / 1e6;
    eprintln!(
        "jvmperf: lock: {}: {} waits on monitors ({:.1} ms), {} on java.util.concurrent locks ({:.1} ms; {} of them woken before jvmperf read their blocker, named by their stack's lock); left out: {} shorter waits, {} parks not for a lock, {} without a blocker at a stack not seen waiting for one",
        l.mechanism,
        l.waits[0],
        ms(l.waited_ns[0]),
        l.waits[1],
        ms(l.waited_ns[1]),
        l.by_stack,
        l.short,
        l.other_parks,
        l.unset_parks
    );
    if l.unread_parks + l.unnamed > 0 {
        eprintln!(
            "jvmperf: lock: {} parks whose blocker could not be read were left out, and {} waits have no class leaf (the JVM's objects moved or its VMStructs lack a field)",
            l.unread_parks, l.unnamed
        );
    }
}

/// Samples on a CPU against what the JVM's CPU time over the window predicts, with a warning
/// naming the likely cause below 90%.
fn coverage_line(r: &Recording) -> Option<String> {
    let c = r.coverage?;
    let line = format!(
        "coverage {:.1}%: {} samples on a CPU where the JVM's CPU time over the window predicts {:.0}",
        100.0 * c.ratio(),
        c.samples,
        c.expected
    );
    // Below a few periods of CPU time the ratio says nothing.
    if c.ratio() >= 0.9 || c.expected < 20.0 {
        return Some(line);
    }
    let cause = if r.stats.lost > 0 {
        format!("{} samples were lost (ring buffers full)", r.stats.lost)
    } else if r.stats.throttled > 0 {
        "the kernel lowered the rate (kernel.perf_event_max_sample_rate)".to_string()
    } else if !r.samples_kernel_time {
        "time in the kernel is not sampled (kernel.perf_event_paranoid)".to_string()
    } else if r.strategy.kind == Sampling::PerThread {
        let failed = match r.stats.threads_failed {
            0 => String::new(),
            n => format!("; {n} threads could not be sampled at all"),
        };
        format!(
            "per-thread sampling starts on a thread when jvmperf finds it (at its start, or \
             within 200 ms){failed}; per-CPU sampling covers every thread from its first \
             instruction (root or CAP_PERFMON)"
        )
    } else {
        "the JVM used CPU outside the sampled window (attach, shutdown)".to_string()
    };
    Some(format!("{line} — WARNING: low coverage: {cause}"))
}

/// What the profile is of (host, pid, main class or jar, JDK), as the daemon labels its files.
fn target_labels(pid: u32, jdk: Option<String>) -> Vec<(String, String)> {
    use crate::cmd::daemon::discovery;
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let main = procfs::process::Process::new(pid as i32)
        .ok()
        .and_then(|p| discovery::main_name(&discovery::command_line(&p)))
        .unwrap_or_else(|| "java".to_string());
    discovery::target_labels(&host, pid, &main, jdk)
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
    let kib = own_memory_kib();
    let shim = shim.map_or("shim_kib=? shim_queue_peak_kib=?".to_string(), |s| {
        let extra = s.extra.map_or(String::new(), |x| {
            format!(
                " shim_dropped={} shim_thread_events={} shim_thread_event_ns={} shim_thread_event_max_ns={}",
                x.dropped_records, x.thread_events, x.thread_event_ns, x.thread_event_max_ns
            )
        });
        format!(
            "shim_kib={} shim_queue_peak_kib={}{extra}",
            s.total_bytes / 1024,
            s.queue_high_water / 1024
        )
    });
    format!(
        "jvmperf: status elapsed_s={:.0} samples={} lost={} ring_peak_fill_pct={} rings_grown={} stacks={stacks} cut_samples={cut} rss_kib={} rss_peak_kib={} rss_anon_kib={} {shim}",
        elapsed.as_secs_f64(),
        st.samples,
        st.lost,
        st.peak_fill_percent,
        st.rings_grown,
        kib("VmRSS:"),
        kib("VmHWM:"),
        kib("RssAnon:"),
    )
}

/// A reader of this process's memory figures in KiB (`VmRSS:`, `VmHWM:`, `RssAnon:` of
/// `/proc/self/status`, read once), 0 for one missing.
pub(crate) fn own_memory_kib() -> impl Fn(&str) -> u64 {
    let status = procfs::process::Process::myself().and_then(|me| me.status());
    move |key: &str| {
        let Ok(status) = &status else { return 0 };
        match key {
            "VmRSS:" => status.vmrss,
            "VmHWM:" => status.vmhwm,
            "RssAnon:" => status.rssanon,
            _ => None,
        }
        .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        record: RecordOptions,
    }

    fn event(args: &[&str]) -> Result<Event> {
        let cli = Cli::try_parse_from(["record", "-p", "1"].iter().chain(args)).unwrap();
        cli.record.event()
    }

    #[test]
    fn idle_goes_with_wall_only() {
        assert_eq!(event(&["--wall", "--idle"]).unwrap(), Event::Wall);
        assert_eq!(event(&["-e", "wall", "--idle"]).unwrap(), Event::Wall);
        assert!(event(&["-e", "alloc", "--idle"]).is_err());
        assert!(event(&["--idle"]).is_err());
    }
}
