//! `jvmperf daemon`: continuous profiling of every HotSpot JVM on the host (or those chosen by
//! pid or pattern), in the foreground. Each JVM gets a recording engine on a thread of its own and
//! a file per interval in `DIR/<main class or jar>-<pid>/`; new JVMs are found every couple of
//! seconds; a CPU budget lowers the sampling rate when the daemon costs more than allowed;
//! retention limits delete the oldest files. SIGUSR1 prints a status; SIGTERM/SIGINT write every
//! JVM's current interval and exit.

mod budget;
pub(crate) mod discovery;
mod jvm;
mod push;
mod retention;

use crate::error::{Error, ErrorKind, Result};
use crate::output::Format;
use crate::sampler::{HostSampler, SamplerConfig, Sampling};
use discovery::{Seen, Selection};
use jvm::Shared;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DaemonFormat {
    /// Gzipped pprof `profile.proto` with labels and the interval's start and duration.
    Pprof,
    /// jvmperf's own recording: every sample with its time and thread.
    Jvmperf,
    /// Folded stacks.
    Collapsed,
}

#[derive(clap::Args)]
pub struct DaemonOptions {
    /// Directory of the profiles: one subdirectory per JVM, `<main class or jar>-<pid>`, with a
    /// file per interval named by its UTC start.
    #[arg(long)]
    pub dir: PathBuf,
    /// Seconds per interval (one file per JVM each).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = crate::cli::seconds)]
    pub interval: Duration,
    /// Samples per second per thread. The default, 19 Hz, costs a busy JVM thread ~0.05% of a
    /// core in jvmperf, still gives ~1100 samples per busy thread per minute, and being prime it
    /// does not beat with periodic work at round rates.
    #[arg(
        short = 'F',
        long = "frequency",
        value_name = "HZ",
        default_value_t = 19
    )]
    pub frequency_hz: u64,
    #[arg(long, value_enum, default_value = "pprof")]
    pub format: DaemonFormat,
    /// Profile only this JVM (repeatable); by default every HotSpot JVM the daemon may profile.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Profile only JVMs whose command line (main class, jar, options) matches this regular
    /// expression.
    #[arg(long = "match", value_name = "REGEX")]
    pub pattern: Option<regex::Regex>,
    /// Delete files older than this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = crate::cli::seconds)]
    pub max_age: Option<Duration>,
    /// Delete the oldest files while all of them take more than this many MiB.
    #[arg(long, value_name = "MIB")]
    pub max_size: Option<u64>,
    /// CPU the daemon may use, in percent of one core: over it, the sampling rate is lowered
    /// (and raised again, up to -F, when well under).
    #[arg(long, value_name = "PERCENT", default_value_t = 1.0)]
    pub max_cpu: f64,
    /// Also send each interval's pprof to this Grafana Pyroscope-compatible server
    /// (`URL/ingest`), e.g. http://pyroscope:4040; files are still written.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,
    /// MiB of profiles kept on disk while the --push server is unreachable (oldest dropped past it).
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub push_queue: u64,
    /// Bytes of user stack copied per sample (multiple of 8, at most 65528).
    #[arg(long, default_value_t = 32768)]
    pub stack_size: u32,
    /// Distinct stacks kept per JVM and interval: past it, a new stack is cut after its longest
    /// known prefix.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_stacks: u32,
    /// Per CPU, per thread, or per CPU where allowed (as `record --sampling`).
    #[arg(long, value_enum, env = "JVMPERF_SAMPLING", default_value = "auto")]
    pub sampling: Sampling,
}

/// How often new JVMs are looked for.
const SCAN_EVERY: Duration = Duration::from_secs(2);
/// SIGTERM/SIGINT: JVM threads get this long to write their last interval.
const FLUSH_DEADLINE: Duration = Duration::from_millis(4500);

/// One set of per-CPU events for every JVM (their cost does not grow with the JVMs), where the
/// host allows them and `--sampling` does not ask for per-thread events.
fn host_events(opts: &DaemonOptions) -> Result<Option<Arc<HostSampler>>> {
    if opts.sampling == Sampling::PerThread {
        return Ok(None);
    }
    let config = SamplerConfig {
        frequency_hz: opts.frequency_hz,
        stack_size: opts.stack_size,
        ..SamplerConfig::default()
    };
    match HostSampler::open(&config) {
        Ok(host) => {
            log("sampling per CPU: one event per CPU for every JVM");
            // A thread's name is needed until the interval of its last sample is written.
            host.keep_threads_for(2 * opts.interval + Duration::from_secs(10));
            Ok(Some(host))
        }
        Err(e) if opts.sampling == Sampling::Auto && e.kind == ErrorKind::Permission => {
            log(&format!("sampling per thread: {e}"));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub(crate) fn log(line: &str) {
    eprintln!("jvmperf daemon: {line}");
}

pub fn run(opts: &DaemonOptions) -> Result<()> {
    // Not the session's autogroup: JVMs found later may share it (see `priority`).
    crate::priority::raise_process_only();
    if !opts.max_cpu.is_finite() || opts.max_cpu <= 0.0 {
        return Err(Error::new(
            ErrorKind::Usage,
            "--max-cpu must be a positive percentage of one core (e.g. 1 or 0.5)",
        ));
    }
    if opts.interval < Duration::from_secs(1) {
        return Err(Error::new(
            ErrorKind::Usage,
            "--interval must be at least 1 second",
        ));
    }
    jvm::check_dir(&opts.dir)?;
    let stop = Arc::new(AtomicBool::new(false));
    let status_asked = Arc::new(AtomicBool::new(false));
    let signals = [
        (signal_hook::consts::SIGINT, &stop),
        (signal_hook::consts::SIGTERM, &stop),
        (signal_hook::consts::SIGUSR1, &status_asked),
    ];
    for (sig, flag) in signals {
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot handle signals: {e}")))?;
    }
    let shared = Arc::new(Shared {
        dir: opts.dir.clone(),
        interval: opts.interval,
        format: match opts.format {
            DaemonFormat::Pprof => Format::Pprof,
            DaemonFormat::Jvmperf => Format::Raw,
            DaemonFormat::Collapsed => Format::Collapsed,
        },
        stack_size: opts.stack_size,
        max_stacks: opts.max_stacks as usize,
        sampling: opts.sampling,
        events: host_events(opts)?,
        host: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into()),
        rate_hz: AtomicU64::new(opts.frequency_hz),
        flushing: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        attaches: AtomicU64::new(0),
        status: Mutex::new(Default::default()),
        push: match &opts.push {
            Some(_) => Some(push::Queue::open(&opts.dir, opts.push_queue << 20)?),
            None => None,
        },
    });
    let pusher = opts.push.clone().map(|url| {
        let shared = shared.clone();
        std::thread::spawn(move || {
            if let Some(queue) = &shared.push {
                push::run(queue, &url, &shared.stop, FLUSH_DEADLINE / 3);
            }
        })
    });
    let selection = Selection {
        pids: opts.pids.clone(),
        pattern: opts.pattern.clone(),
    };
    let limits = retention::Limits {
        max_age: opts.max_age,
        max_bytes: opts.max_size.map(|m| m << 20),
    };
    log(&format!(
        "writing a profile per JVM every {} s into {} ({:?}, {} Hz, --max-cpu {}%)",
        opts.interval.as_secs_f64(),
        opts.dir.display(),
        opts.format,
        opts.frequency_hz,
        opts.max_cpu
    ));
    let mut seen = Seen::default();
    let mut threads: Vec<(u32, JoinHandle<()>)> = Vec::new();
    let mut budget = budget::CpuBudget::new(opts.max_cpu, opts.frequency_hz);
    let mut last_scan: Option<Instant> = None;
    let mut last_review = Instant::now();
    let mut host_lost = 0;
    while !stop.load(Ordering::Relaxed) {
        if last_scan.is_none_or(|t| t.elapsed() >= SCAN_EVERY) {
            last_scan = Some(Instant::now());
            threads.retain(|(_, t)| !t.is_finished());
            for found in seen.scan(&selection) {
                let pid = found.pid;
                let shared = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("jvm-{pid}"))
                    .spawn(move || jvm::run(found, shared));
                match spawned {
                    Ok(t) => threads.push((pid, t)),
                    Err(e) => log(&format!("cannot start a thread for JVM {pid}: {e}")),
                }
            }
        }
        if last_review.elapsed() >= opts.interval {
            last_review = Instant::now();
            let one_off = shared.attaches.swap(0, Ordering::Relaxed) > 0;
            if let Some(change) = budget.review(one_off) {
                log(&change);
                shared.rate_hz.store(budget.rate_hz(), Ordering::Relaxed);
            }
            if let Some(note) = host_losses(&shared, &mut host_lost) {
                log(&note);
            }
            for gone in retention::enforce(&opts.dir, limits, std::time::SystemTime::now()) {
                log(&format!("retention: deleted {}", gone.display()));
            }
        }
        if status_asked.swap(false, Ordering::Relaxed) {
            print_status(&shared, &budget);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + FLUSH_DEADLINE;
    // JVM threads write their last interval first, then the pusher gets its last pass.
    shared.flushing.store(true, Ordering::Relaxed);
    while threads.iter().any(|(_, t)| !t.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    shared.stop.store(true, Ordering::Relaxed);
    while pusher.as_ref().is_some_and(|p| !p.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let unfinished: Vec<String> = threads
        .iter()
        .filter(|(_, t)| !t.is_finished())
        .map(|(pid, _)| pid.to_string())
        .collect();
    if unfinished.is_empty() {
        log("stopped; every JVM's last interval was written");
    } else {
        log(&format!(
            "stopped; JVMs {} did not finish writing their last interval in time",
            unfinished.join(", ")
        ));
    }
    Ok(())
}

/// A line saying how many samples the per-CPU rings lost since `*seen` (which it updates),
/// when they lost any: those are every process's samples, not one JVM's.
fn host_losses(shared: &Shared, seen: &mut u64) -> Option<String> {
    let host = shared.events.as_ref()?;
    let lost = host.stats().lost;
    let since = lost.saturating_sub(*seen);
    *seen = lost;
    if since == 0 {
        return None;
    }
    let why = host
        .ring_note()
        .unwrap_or_else(|| "the daemon drained them too late".to_string());
    Some(format!(
        "host_lost={since}: the per-CPU rings lost {since} samples of the host's processes \
         (JVMs or not) since the last interval; {why}"
    ))
}

/// The status report (SIGUSR1): the daemon's CPU and memory, then one line per JVM.
fn print_status(shared: &Shared, budget: &budget::CpuBudget) {
    let kib = crate::cmd::record::own_memory_kib();
    // With per-CPU events: samples the rings lost, of every process on the host.
    let host_lost = shared
        .events
        .as_ref()
        .map(|h| format!(" host_lost={}", h.stats().lost))
        .unwrap_or_default();
    let jvms = shared.status.lock().unwrap_or_else(|e| e.into_inner());
    log(&format!(
        "status jvms={} rate_hz={} cpu_percent_last_window={:.2} rss_kib={} rss_anon_kib={}{host_lost}",
        jvms.len(),
        budget.rate_hz(),
        budget.last_percent,
        kib("VmRSS:"),
        kib("RssAnon:")
    ));
    for ((pid, _), s) in jvms.iter() {
        log(&format!("status {}", s.line(*pid)));
    }
}
