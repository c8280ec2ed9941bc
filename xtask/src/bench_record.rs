//! `cargo xtask bench record`: what one sample costs a busy 2-thread JVM, all-in, for a 6 s
//! `jvmperf record -F 5000` with its one-off costs, and for peers measured in the same run: bare
//! `perf record -e cpu-clock` (no stacks), `perf record --call-graph dwarf,8192` and JFR.
//!
//! The cost is measured by wall-clock throughput. One `bench.Throughput` JVM (2 threads of
//! fixed-size work units, a `WORK <nanoTime> <units>` line every 100 ms) runs rounds of
//! (idle, jvmperf, idle, perf, idle, perf dwarf, idle, JFR) and a last idle window, so every
//! profiled window has an unprofiled (idle) window on both sides. Profilers and JVM share the
//! machine's 2 cores, unpinned. A profiled window is the whole time the profiler runs: from
//! spawning it to its exit (JFR: from spawning `jcmd JFR.start` to the exit of `jcmd JFR.stop`
//! 6 s later), so attach, debug-info loading, naming and writing are inside it. The first round
//! pays per-JVM one-offs (jvmperf loads its agent, the first `JFR.start` initializes JFR): it is
//! printed but not in the medians.
//!
//! Work is counted per wall second, never per JVM CPU-second: this VM's tick-based CPU
//! accounting distorts the JVM's CPU time far more than a profiler costs.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::bench_jvm::{self, BenchJvm};
use crate::jdk;

const DEFAULT_PAIRS: usize = 8;
/// `-d` of jvmperf, `sleep` of perf, time between `JFR.start` and `JFR.stop`.
const RECORD_SECS: u64 = 6;
const FREQUENCY: u64 = 5000;
/// Worker threads of `bench.Throughput`: each keeps a core busy.
const BUSY_THREADS: u32 = 2;
const GOAL_US: f64 = 8.0;
/// Length of each idle (unprofiled) window.
const IDLE: Duration = Duration::from_secs(4);
/// Left out between a profiler's exit and the next idle window (its output file is deleted then).
const SETTLE: Duration = Duration::from_millis(500);
const PERF: &str = "perf";
const JFC: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="jvmperf-bench" description="Method sampling only, 1 ms">
  <event name="jdk.ExecutionSample"><setting name="enabled">true</setting><setting name="period">1 ms</setting></event>
  <event name="jdk.NativeMethodSample"><setting name="enabled">true</setting><setting name="period">1 ms</setting></event>
</configuration>
"#;

#[derive(Clone, Copy, PartialEq)]
enum Profiler {
    Jvmperf,
    Perf,
    PerfDwarf,
    Jfr,
}

impl Profiler {
    /// The order within a round.
    const ALL: [Profiler; 4] = [
        Profiler::Jvmperf,
        Profiler::Perf,
        Profiler::PerfDwarf,
        Profiler::Jfr,
    ];

    fn name(self) -> &'static str {
        match self {
            Profiler::Jvmperf => "jvmperf",
            Profiler::Perf => "perf",
            Profiler::PerfDwarf => "perf dwarf",
            Profiler::Jfr => "JFR",
        }
    }
}

/// A span of CLOCK_MONOTONIC time (ns), the clock of `System.nanoTime` and of the WORK lines.
#[derive(Clone, Copy)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
}

impl Span {
    pub fn secs(&self) -> f64 {
        (self.end - self.start) as f64 / 1e9
    }
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec, which is valid for the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One `WORK` line: the app's clock and the units all its workers completed so far.
struct Work {
    nanos: u64,
    units: u64,
}

/// Every WORK line of the run, in order.
#[derive(Default)]
pub(crate) struct WorkLog(Vec<Work>);

impl WorkLog {
    /// Units completed at `ns`, interpolated between the WORK lines around it (a unit takes
    /// microseconds, so the count grows smoothly).
    fn units_at(&self, ns: u64) -> Result<f64> {
        let i = self.0.partition_point(|w| w.nanos <= ns);
        ensure!(
            i > 0 && i < self.0.len(),
            "no WORK lines on both sides of {ns} (the log spans {:?} to {:?})",
            self.0.first().map(|w| w.nanos),
            self.0.last().map(|w| w.nanos)
        );
        let (a, b) = (&self.0[i - 1], &self.0[i]);
        let f = (ns - a.nanos) as f64 / (b.nanos - a.nanos) as f64;
        Ok(a.units as f64 + f * (b.units - a.units) as f64)
    }

    /// Work units per wall second over `span`.
    pub fn throughput(&self, span: Span) -> Result<f64> {
        Ok((self.units_at(span.end)? - self.units_at(span.start)?) / span.secs())
    }
}

/// The bench JVM and every WORK line so far. All waiting goes through [`Target::pump_until`], so
/// no line is left unread.
pub(crate) struct Target {
    pub jvm: BenchJvm,
    pub log: WorkLog,
}

impl Target {
    /// Reads WORK lines until `done()` or `timeout`; returns whether `done()` became true.
    fn pump_until(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            if done()? {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            match self.jvm.lines.recv_timeout(Duration::from_millis(5)) {
                Ok(line) => self.log.0.extend(parse_work(&line)?),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => bail!("bench.Throughput exited"),
            }
        }
    }

    pub fn idle(&mut self, d: Duration) -> Result<()> {
        self.pump_until(d, || Ok(false)).map(drop)
    }

    /// Waits (up to 30 s) for a WORK line after `end`, so that throughput can be interpolated up
    /// to it.
    pub fn wait_for_work_after(&mut self, end: u64) -> Result<()> {
        let mut waited = Duration::ZERO;
        while self.log.0.last().is_none_or(|w| w.nanos <= end) && waited < Duration::from_secs(30) {
            self.idle(SETTLE)?;
            waited += SETTLE;
        }
        Ok(())
    }

    /// An idle window of [`IDLE`].
    pub fn idle_window(&mut self) -> Result<Span> {
        let start = monotonic_ns();
        self.idle(IDLE)?;
        Ok(Span {
            start,
            end: monotonic_ns(),
        })
    }
}

/// A `WORK` line's clock and count; `None` for any other line.
fn parse_work(line: &str) -> Result<Option<Work>> {
    let mut it = line.split_whitespace();
    if it.next() != Some("WORK") {
        return Ok(None);
    }
    let mut num = || -> Option<u64> { it.next()?.parse().ok() };
    let (Some(nanos), Some(units)) = (num(), num()) else {
        bail!("bad line from bench.Throughput: {line}");
    };
    Ok(Some(Work { nanos, units }))
}

fn read_all(r: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    })
}

/// Waits for `child` (killed after `timeout`) while pumping WORK lines; returns its stdout and
/// stderr together.
pub(crate) fn finish(
    t: &mut Target,
    mut child: Child,
    what: &str,
    timeout: Duration,
) -> Result<String> {
    let (out, err) = (read_all(child.stdout.take()), read_all(child.stderr.take()));
    let mut status = None;
    let done = t.pump_until(timeout, || {
        status = child.try_wait()?;
        Ok(status.is_some())
    });
    if !matches!(done, Ok(true)) {
        let waiting = kernel_waits(child.id());
        let _ = child.kill();
        let _ = child.wait();
        done?;
        let text = out.join().unwrap_or_default() + &err.join().unwrap_or_default();
        bail!("{what} did not finish within {timeout:?} (its threads waiting in: {waiting}); it printed: {text}");
    }
    let text = out.join().unwrap_or_default() + &err.join().unwrap_or_default();
    ensure!(status.is_some_and(|s| s.success()), "{what} failed: {text}");
    Ok(text)
}

/// `comm:wchan` of each thread of `pid`: where a hung tool waits in the kernel.
fn kernel_waits(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "?".into();
    };
    let read = |task: &Path, file: &str| {
        std::fs::read_to_string(task.join(file))
            .map_or_else(|_| "?".into(), |s| s.trim().to_string())
    };
    tasks
        .flatten()
        .map(|t| format!("{}:{}", read(&t.path(), "comm"), read(&t.path(), "wchan")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a tool to completion while pumping WORK lines; returns stdout and stderr together.
pub(crate) fn run_tool(t: &mut Target, cmd: &mut Command) -> Result<String> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    finish(t, child, &format!("{cmd:?}"), Duration::from_secs(120))
}

/// A profiled window and the samples the profiler took in it.
struct Profiled {
    span: Span,
    /// The part of the window where the profiler only samples (its start-up and its work after
    /// sampling left out), and how long it sampled in all: the steady cost per sample.
    steady: (Span, f64),
    samples: Samples,
    /// jvmperf only: the span of its samples' timestamps (s) and the samples it lost.
    sampled: Option<(f64, u64)>,
}

enum Samples {
    Counted(f64),
    /// Counted after the run ([`jfr_samples`]), so reading the recording stays out of the idle
    /// windows.
    InJfr(PathBuf),
}

impl Samples {
    fn count(&self) -> Result<f64> {
        match self {
            Samples::Counted(n) => Ok(*n),
            Samples::InJfr(file) => jfr_samples(file),
        }
    }
}

/// `jvmperf record -F 5000 -d 6`, spawn to exit.
fn run_jvmperf(t: &mut Target, jvmperf: &Path, extra: &[&str], out: &Path) -> Result<Profiled> {
    let start = monotonic_ns();
    let child =
        bench_jvm::spawn_record(jvmperf, t.jvm.pid(), (RECORD_SECS, FREQUENCY), extra, out)?;
    let err = finish(
        t,
        child,
        "jvmperf record",
        Duration::from_secs(RECORD_SECS + 120),
    )?;
    let span = Span {
        start,
        end: monotonic_ns(),
    };
    ensure!(
        !err.contains("recording ended early"),
        "jvmperf record ended early: {err}"
    );
    let summary = err
        .lines()
        .find(|l| l.contains(" samples in "))
        .with_context(|| format!("no `N samples in` summary from jvmperf: {err}"))?;
    let samples = number_before(summary, " samples in ")?;
    let lost = number_before(summary, " lost")? as u64;
    let (first, last) = sample_window(&err)?;
    Ok(Profiled {
        span,
        steady: (inner(first, last), (last - first) as f64 / 1e9),
        samples: Samples::Counted(samples),
        sampled: Some(((last - first) as f64 / 1e9, lost)),
    })
}

/// The first and last sample times `jvmperf record` printed (CLOCK_MONOTONIC ns).
pub(crate) fn sample_window(err: &str) -> Result<(u64, u64)> {
    let window: Vec<u64> = err
        .lines()
        .find_map(|l| l.split_once("sample window (CLOCK_MONOTONIC ns, as System.nanoTime):"))
        .map(|(_, v)| {
            v.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [first, last] = window[..] else {
        bail!("no sample window in jvmperf's output: {err}");
    };
    Ok((first, last))
}

/// The steady span of a `jvmperf record` run: its sample window less the margins.
pub(crate) fn record_span(err: &str) -> Result<Span> {
    ensure!(
        !err.contains("recording ended early"),
        "jvmperf record ended early: {err}"
    );
    let (first, last) = sample_window(err)?;
    Ok(inner(first, last))
}

/// Left out at each end of a sampling span for the steady cost.
pub(crate) const MARGIN_NS: u64 = 500_000_000;

/// `[start, end]` less [`MARGIN_NS`] at each end.
pub(crate) fn inner(start: u64, end: u64) -> Span {
    Span {
        start: start + MARGIN_NS,
        end: end - MARGIN_NS,
    }
}

/// The number that ends right before `needle` in `line`.
pub(crate) fn number_before(line: &str, needle: &str) -> Result<f64> {
    let (head, _) = line
        .split_once(needle)
        .with_context(|| format!("no `{needle}` in: {line}"))?;
    let num = head.rsplit([' ', '(']).next().unwrap_or_default();
    num.parse()
        .with_context(|| format!("bad number before `{needle}` in: {line}"))
}

/// `perf record -e cpu-clock -F 5000 [stack options] -p PID -o FILE -- sleep 6`, spawn to exit;
/// samples from its `Captured and wrote … (N samples)` line. With `--call-graph dwarf` perf
/// copies 8 KiB of stack per sample and unwinds later, in `perf report`, outside the window.
fn run_perf(t: &mut Target, stacks: &[&str], file: &Path) -> Result<Profiled> {
    let start = monotonic_ns();
    let out = run_tool(
        t,
        Command::new(PERF)
            .args(["record", "-e", "cpu-clock", "-F", &FREQUENCY.to_string()])
            .args(stacks)
            .args(["-p", &t.jvm.pid().to_string(), "-o"])
            .arg(file)
            .args(["--", "sleep", &RECORD_SECS.to_string()]),
    )?;
    let span = Span {
        start,
        end: monotonic_ns(),
    };
    let line = out
        .lines()
        .find(|l| l.contains("Captured and wrote"))
        .with_context(|| format!("no `Captured and wrote` line from perf record: {out}"))?;
    // perf samples from shortly after its start until `sleep` exits.
    let sampling = start + 1_000_000_000;
    Ok(Profiled {
        span,
        steady: (
            inner(sampling, sampling + RECORD_SECS * 1_000_000_000 - MARGIN_NS),
            RECORD_SECS as f64,
        ),
        samples: Samples::Counted(number_before(line, " samples)")?),
        sampled: None,
    })
}

/// `jcmd PID JFR.start settings=…`, 6 s, `jcmd PID JFR.stop filename=…`: spawn of the first to
/// exit of the second.
fn run_jfr(t: &mut Target, jfc: &Path, file: PathBuf) -> Result<Profiled> {
    let jcmd = jdk::tool("jcmd")?;
    let settings = jfc.display().to_string();
    let (span, steady) = jfr_window(t, &|| Command::new(&jcmd), &settings, RECORD_SECS, &file)?;
    Ok(Profiled {
        span,
        steady: (steady, RECORD_SECS as f64),
        samples: Samples::InJfr(file),
        sampled: None,
    })
}

/// `jcmd PID JFR.start settings=SETTINGS` (a .jfc file, or `default`, `profile`), `secs` s,
/// `jcmd PID JFR.stop filename=FILE`: the span from the spawn of the first to the exit of the
/// second, and its steady part (recording, less the margins). `jcmd()` is the command that runs
/// jcmd (pinned to a CPU, or not).
pub(crate) fn jfr_window(
    t: &mut Target,
    jcmd: &dyn Fn() -> Command,
    settings: &str,
    secs: u64,
    file: &Path,
) -> Result<(Span, Span)> {
    let pid = t.jvm.pid().to_string();
    let start = monotonic_ns();
    let out = run_tool(
        t,
        jcmd()
            .args([&pid, "JFR.start", "name=jvmperf-bench"])
            .arg(format!("settings={settings}")),
    )?;
    ensure!(out.contains("Started recording"), "JFR.start: {out}");
    let started = monotonic_ns();
    t.idle(Duration::from_secs(secs))?;
    let steady = inner(started, monotonic_ns());
    let out = run_tool(
        t,
        jcmd()
            .args([&pid, "JFR.stop", "name=jvmperf-bench"])
            .arg(format!("filename={}", file.display())),
    )?;
    ensure!(out.contains("Stopped recording"), "JFR.stop: {out}");
    let span = Span {
        start,
        end: monotonic_ns(),
    };
    Ok((span, steady))
}

/// `jdk.ExecutionSample` events in a recording, from `jfr summary`. The recording holds only
/// the profiled window.
fn jfr_samples(file: &Path) -> Result<f64> {
    let out = Command::new(jdk::tool("jfr")?)
        .arg("summary")
        .arg(file)
        .stderr(Stdio::inherit())
        .output()
        .context("running jfr summary")?;
    ensure!(
        out.status.success(),
        "jfr summary {} failed",
        file.display()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let count = text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some("jdk.ExecutionSample")).then(|| it.next()?.parse().ok())?
    });
    count.with_context(|| format!("no jdk.ExecutionSample count in jfr summary: {text}"))
}

/// One profiled window against the idle windows on both sides of it.
struct Pair {
    profiler: Profiler,
    /// From the first round: per-JVM one-offs, not in the medians.
    first: bool,
    secs: f64,
    samples: f64,
    /// Work units per wall second in the idle windows before and after, and in the profiled one.
    idle: (f64, f64),
    profiled: f64,
    /// Work per wall second in the steady part of the window, and the seconds sampled in all.
    steady: (f64, f64),
    /// jvmperf only: the span of its samples' timestamps (s) and the samples it lost.
    sampled: Option<(f64, u64)>,
}

impl Pair {
    /// The unprofiled throughput: the mean of the idle windows on both sides.
    fn base(&self) -> f64 {
        (self.idle.0 + self.idle.1) / 2.0
    }

    /// The share of the JVM's work lost while the profiler ran.
    fn lost(&self) -> f64 {
        (self.base() - self.profiled) / self.base()
    }

    /// How much the two idle windows disagree, as a share of their mean: other load on the
    /// machine changed during the pair, and the pair's cost is that much less certain.
    fn drift(&self) -> f64 {
        (self.idle.1 - self.idle.0).abs() / self.base()
    }

    /// Cost per sample, µs of CPU time: lost core-seconds / samples =
    /// `lost() * BUSY_THREADS * secs / samples * 1e6`.
    ///
    /// Unprofiled, the JVM's 2 busy threads keep both cores busy: a wall second of its work is 2
    /// core-seconds. Losing the share `lost()` of it costs `lost() * 2` core-seconds per wall
    /// second; divided by the samples per wall second (`samples / secs`) that is CPU time per
    /// sample. The profiler's own CPU competes for the same 2 cores, so it is already in the
    /// lost work ("all-in"); adding it would count it twice.
    fn micros(&self) -> f64 {
        self.lost() * f64::from(BUSY_THREADS) * self.secs / self.samples * 1e6
    }

    /// The same over the steady part of the window: what sampling alone costs, one-offs left
    /// out (samples spread evenly over the seconds sampled).
    fn steady_micros(&self) -> f64 {
        let (work, sampled_secs) = self.steady;
        let lost = (self.base() - work) / self.base();
        lost * f64::from(BUSY_THREADS) * sampled_secs / self.samples * 1e6
    }
}

/// Command-line options: `[--pairs N] [-- MORE JVMPERF RECORD OPTIONS]`.
struct Args {
    pairs: usize,
    extra: Vec<String>,
}

fn parse_args(args: &[String]) -> Result<Args> {
    const USAGE: &str = "usage: cargo xtask bench record [--pairs N (default 8)] [-- MORE JVMPERF RECORD OPTIONS, e.g. --stack-size 16384]";
    let mut parsed = Args {
        pairs: DEFAULT_PAIRS,
        extra: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--pairs" => {
                parsed.pairs = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .context(USAGE)?
            }
            "--" => parsed.extra = it.by_ref().cloned().collect(),
            _ => bail!("{USAGE}"),
        }
    }
    Ok(parsed)
}

/// Runs the bench (and so the JVM and the profilers it starts) ahead of other work on the
/// machine: nice -20, and its autogroup too (with `kernel.sched_autogroup_enabled`, nice values
/// compare only within a session, and another session's build would take half the cores). Needs
/// root; without it the bench runs as it is and says so.
pub(crate) fn raise_priority() {
    // SAFETY: setpriority with integer arguments only.
    let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
    let group = std::fs::write("/proc/self/autogroup", "-20");
    if nice != 0 || group.is_err() {
        println!(
            "record: could not run at nice -20 (needs root): other work on the machine adds noise"
        );
    }
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    raise_priority();
    let jvmperf = bench_jvm::prepare()?;
    let dir = std::env::temp_dir().join(format!("jvmperf-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure(&jvmperf, &args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The windows of one run: `idle[k]` and `idle[k + 1]` surround profiled window `runs[k]`.
struct Timeline {
    idle: Vec<Span>,
    runs: Vec<(Profiler, Profiled)>,
}

fn measure(jvmperf: &Path, args: &Args, dir: &Path) -> Result<()> {
    let extra: Vec<&str> = args.extra.iter().map(String::as_str).collect();
    let max_rate = || std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate");
    let max_rate_before = max_rate().unwrap_or_default();
    let jvm = BenchJvm::start(
        &[],
        &bench_jvm::classes(),
        "bench.Throughput",
        &["--threads", &BUSY_THREADS.to_string()],
    )?;
    let mut t = Target {
        jvm,
        log: WorkLog::default(),
    };
    println!(
        "record: bench.Throughput ({BUSY_THREADS} CPU-bound threads), 1 + {} rounds of: idle, jvmperf record -F {FREQUENCY} -d {RECORD_SECS}{}, idle, perf record -e cpu-clock -F {FREQUENCY} -p PID -- sleep {RECORD_SECS}, idle, the same with --call-graph dwarf,8192, idle, JFR (jdk.ExecutionSample 1 ms) for {RECORD_SECS} s; then idle. Idle windows {} s",
        args.pairs,
        extra.iter().map(|a| format!(" {a}")).collect::<String>(),
        IDLE.as_secs_f64()
    );
    let timeline = record_rounds(&mut t, jvmperf, &extra, dir, args.pairs + 1)?;
    let Target { jvm, log } = t;
    drop(jvm);
    let max_rate_after = max_rate().unwrap_or_default();
    let idle = timeline
        .idle
        .iter()
        .map(|&s| log.throughput(s))
        .collect::<Result<Vec<_>>>()?;
    let pairs = pairs(&log, &timeline, &idle)?;
    println!(
        "record: idle windows: {} work units/s (median {:.0})",
        list(&idle, 0),
        median(idle.clone())
    );
    report(&pairs);
    if max_rate_before != max_rate_after {
        println!(
            "record: the kernel throttled perf events during the run: kernel.perf_event_max_sample_rate went from {} to {}",
            max_rate_before.trim(),
            max_rate_after.trim()
        );
    }
    Ok(())
}

/// Runs `rounds` rounds of every profiler, each profiled window followed by an idle one.
fn record_rounds(
    t: &mut Target,
    jvmperf: &Path,
    extra: &[&str],
    dir: &Path,
    rounds: usize,
) -> Result<Timeline> {
    let jfc = dir.join("bench.jfc");
    std::fs::write(&jfc, JFC).context("writing the JFR settings")?;
    let (out, perf_data) = (dir.join("out.collapsed"), dir.join("perf.data"));
    // WORK lines come every 100 ms: the log must begin before the first window does.
    t.idle(Duration::from_millis(300))?;
    let mut timeline = Timeline {
        idle: vec![t.idle_window()?],
        runs: Vec::new(),
    };
    for round in 0..rounds {
        for p in Profiler::ALL {
            let run = match p {
                Profiler::Jvmperf => run_jvmperf(t, jvmperf, extra, &out)?,
                Profiler::Perf => run_perf(t, &[], &perf_data)?,
                Profiler::PerfDwarf => run_perf(t, &["--call-graph", "dwarf,8192"], &perf_data)?,
                Profiler::Jfr => run_jfr(t, &jfc, dir.join(format!("r{round}.jfr")))?,
            };
            // perf's file (hundreds of MB with stacks) goes before it is written back.
            let _ = std::fs::remove_file(&perf_data);
            t.idle(SETTLE)?;
            timeline.runs.push((p, run));
            timeline.idle.push(t.idle_window()?);
        }
    }
    // A WORK line after the last window's end, to interpolate to (the JVM may pause after
    // JFR.stop for longer than its 100 ms between lines).
    t.wait_for_work_after(timeline.idle.last().map_or(0, |s| s.end))?;
    Ok(timeline)
}

/// Every profiled window against the mean throughput of its idle neighbours (`idle`: the
/// throughput of each idle window).
fn pairs(log: &WorkLog, timeline: &Timeline, idle: &[f64]) -> Result<Vec<Pair>> {
    let mut pairs = Vec::new();
    for (k, (profiler, run)) in timeline.runs.iter().enumerate() {
        pairs.push(Pair {
            profiler: *profiler,
            first: k < Profiler::ALL.len(),
            secs: run.span.secs(),
            samples: run.samples.count()?,
            idle: (idle[k], idle[k + 1]),
            profiled: log.throughput(run.span)?,
            steady: (log.throughput(run.steady.0)?, run.steady.1),
            sampled: run.sampled,
        });
    }
    Ok(pairs)
}

fn report(pairs: &[Pair]) {
    let of = |p: Profiler| -> Vec<&Pair> {
        pairs
            .iter()
            .filter(|x| x.profiler == p && !x.first)
            .collect()
    };
    let medians: Vec<(Profiler, f64)> = Profiler::ALL
        .iter()
        .map(|&p| (p, median(of(p).iter().map(|x| x.micros()).collect())))
        .collect();
    let steady: Vec<(Profiler, f64)> = Profiler::ALL
        .iter()
        .map(|&p| (p, median(of(p).iter().map(|x| x.steady_micros()).collect())))
        .collect();
    println!(
        "record: cost per sample = work lost x {BUSY_THREADS} cores x window s / samples in the window (work per wall second, profiled vs the mean of the idle windows before and after; the profiler's CPU is on the same cores, so it is in the lost work); window = profiler spawn to exit (JFR: jcmd JFR.start spawn to jcmd JFR.stop exit); samples: jvmperf's summary, perf record's `(N samples)`, JFR's jdk.ExecutionSample events"
    );
    for &(p, med) in &medians {
        let ps = of(p);
        let field = |f: fn(&Pair) -> f64, digits| {
            list(&ps.iter().map(|x| f(x)).collect::<Vec<_>>(), digits)
        };
        let peers = medians
            .iter()
            .filter(|(q, _)| *q != p)
            .map(|(q, m)| format!("{:.2} x {}", med / m, q.name()))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "record: {}: median {med:.1} us/sample over {} pairs = {:.2} x the {GOAL_US:.0} us goal, {peers}; per pair {} us; samples per window {}; window {} s; work lost {} %; idle windows before/after disagree by {} %",
            p.name(),
            ps.len(),
            med / GOAL_US,
            field(Pair::micros, 1),
            field(|x| x.samples, 0),
            field(|x| x.secs, 2),
            field(|x| x.lost() * 100.0, 2),
            field(|x| x.drift() * 100.0, 1),
        );
    }
    println!(
        "record: steady cost (sampling only: the window less the profiler's start-up and its work after sampling, {:.1} s margins), median us/sample: {}",
        MARGIN_NS as f64 / 1e9,
        steady
            .iter()
            .map(|(p, m)| format!("{} {m:.1} (per pair {})", p.name(), list(&of(*p).iter().map(|x| x.steady_micros()).collect::<Vec<_>>(), 1)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    for first in pairs.iter().filter(|x| x.first) {
        println!(
            "record: {}, first round{} (not in the median): {:.1} us/sample, {:.0} samples, window {:.2} s",
            first.profiler.name(),
            match first.profiler {
                Profiler::Jvmperf => ", loads jvmperf's agent into the JVM",
                Profiler::Jfr => ", initializes JFR in the JVM",
                _ => "",
            },
            first.micros(),
            first.samples,
            first.secs
        );
    }
    let jp = of(Profiler::Jvmperf);
    let sampled: Vec<(f64, u64)> = jp.iter().filter_map(|x| x.sampled).collect();
    println!(
        "record: jvmperf sampled for {} s of each window; lost {} samples in all (kernel ring full)",
        list(&sampled.iter().map(|s| s.0).collect::<Vec<_>>(), 2),
        sampled.iter().map(|s| s.1).sum::<u64>()
    );
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn list(v: &[f64], digits: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_interpolated_between_work_lines() {
        let log = WorkLog(vec![
            Work {
                nanos: 1_000_000_000,
                units: 100,
            },
            Work {
                nanos: 2_000_000_000,
                units: 300,
            },
        ]);
        assert_eq!(log.units_at(1_500_000_000).unwrap(), 200.0);
        let span = Span {
            start: 1_250_000_000,
            end: 1_750_000_000,
        };
        assert_eq!(log.throughput(span).unwrap(), 200.0);
        assert!(log.units_at(2_500_000_000).is_err());
    }

    #[test]
    fn cost_is_lost_core_seconds_per_sample() {
        // 1% of 2 busy cores for 6 s = 0.12 core-s, over 60,000 samples: 2 us each.
        let pair = Pair {
            profiler: Profiler::Perf,
            first: false,
            secs: 6.0,
            samples: 60_000.0,
            idle: (1010.0, 990.0),
            profiled: 990.0,
            steady: (980.0, 5.0),
            sampled: None,
        };
        assert!((pair.micros() - 2.0).abs() < 1e-9);
        // 2% of 2 cores over 5 s of sampling, 60,000 samples: 3.33 us each.
        assert!((pair.steady_micros() - 0.2 / 60_000.0 * 1e6).abs() < 1e-9);
    }

    #[test]
    fn sample_counts_are_read_from_summaries() {
        let perf = "[ perf record: Captured and wrote 0.082 MB /tmp/pt.data (2123 samples) ]";
        assert_eq!(number_before(perf, " samples)").unwrap(), 2123.0);
        let jvmperf = "jvmperf: 59874 samples in 6.0 s written to out.collapsed (0.1 s after sampling ended) — 99.9% unwound to a thread root, 3 lost, 0 compiled frames unresolved";
        assert_eq!(number_before(jvmperf, " samples in ").unwrap(), 59874.0);
        assert_eq!(number_before(jvmperf, " lost").unwrap(), 3.0);
    }
}
