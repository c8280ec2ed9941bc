//! `cargo xtask bench record`: what one sample of `jvmperf record -F 5000` costs on a busy 2-thread
//! JVM, with JFR's method sampling measured the same way as the peer.
//!
//! One `bench.Throughput` JVM (2 threads of fixed-size work units, a `WORK <nanoTime> <units>`
//! line every 100 ms) runs `ROUNDS` x (unprofiled, jvmperf, unprofiled, JFR) plus a final
//! unprofiled run, `RUN_SECS` each, so every profiled run sits between two unprofiled ones. Only
//! the steady state counts: the work done between two WORK lines inside the sampling window
//! (after the first sample / `JFR.start` returned, up to the last sample / `JFR.stop`).
//!
//! Work is measured per CPU-second of the JVM process, not per wall second: the machine is shared,
//! and other load changes how much CPU the JVM gets far more than a profiler does. The CPU a
//! profiler costs the JVM (perf interrupts and stack copies are charged to the interrupted
//! thread; JFR's sampler thread is a JVM thread) lowers the work per JVM CPU-second; jvmperf's own
//! CPU is measured separately, so the two add up without counting anything twice.

use std::io::Read;
use std::os::raw::{c_int, c_long};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};

use crate::bench_jvm::{self, proc_cpu_secs, thread_cpu_secs, BenchJvm};
use crate::jdk;

const ROUNDS: usize = 5;
const RUN_SECS: u64 = 6;
const FREQUENCY: u64 = 5000;
const GOAL_US: f64 = 8.0;
/// Start-of-window margin (after attach or `JFR.start`).
const SETTLE: Duration = Duration::from_millis(300);
const JFC: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="jvmperf-bench" description="Method sampling only, 1 ms">
  <event name="jdk.ExecutionSample"><setting name="enabled">true</setting><setting name="period">1 ms</setting></event>
  <event name="jdk.NativeMethodSample"><setting name="enabled">true</setting><setting name="period">1 ms</setting></event>
</configuration>
"#;

/// One `WORK` line: the app's clock and count, when it arrived, and the CPU seconds of the JVM
/// and of the probed process (jvmperf) then.
struct Work {
    nanos: u64,
    units: u64,
    at: Instant,
    wall_ns: i128,
    jvm_cpu: f64,
    probe_cpu: Option<f64>,
    /// CPU seconds of the probed process's main thread (jvmperf samples, walks and names there;
    /// its debug-info loader is another thread).
    probe_main_cpu: Option<f64>,
}

/// Work done between two WORK lines, and the CPU seconds used meanwhile.
struct Window {
    secs: f64,
    units: f64,
    jvm_cpu: f64,
    probe_cpu: f64,
    probe_main_cpu: f64,
    wall_ns: (i128, i128),
}

impl Window {
    /// Work units per JVM CPU-second.
    fn efficiency(&self) -> f64 {
        self.units / self.jvm_cpu
    }
}

/// The bench JVM and every WORK line so far. All waiting goes through [`Target::pump_until`], so
/// lines are stamped when they arrive.
struct Target {
    jvm: BenchJvm,
    log: Vec<Work>,
    /// Process whose CPU time is read at each WORK line.
    probe: Option<u32>,
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
            match self.jvm.lines.recv_timeout(Duration::from_millis(10)) {
                Ok(line) => {
                    let mut it = line.split_whitespace();
                    if it.next() != Some("WORK") {
                        continue;
                    }
                    let (Some(Ok(nanos)), Some(Ok(units))) =
                        (it.next().map(str::parse), it.next().map(str::parse))
                    else {
                        bail!("bad line from bench.Throughput: {line}");
                    };
                    let jvm_cpu = proc_cpu_secs(self.jvm.pid()).context("JVM CPU time")?;
                    self.log.push(Work {
                        nanos,
                        units,
                        at: Instant::now(),
                        wall_ns: wall_ns(SystemTime::now()),
                        jvm_cpu,
                        probe_cpu: self.probe.and_then(proc_cpu_secs),
                        probe_main_cpu: self.probe.and_then(|p| thread_cpu_secs(p, p)),
                    });
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => bail!("bench.Throughput exited"),
            }
        }
    }

    fn idle(&mut self, d: Duration) -> Result<()> {
        self.pump_until(d, || Ok(false)).map(drop)
    }

    /// The window between the first and last WORK lines since `from` that satisfy `keep`.
    fn window(&self, from: usize, keep: impl Fn(&Work) -> bool) -> Result<Window> {
        let mut it = self.log[from..].iter().filter(|w| keep(w));
        let (Some(a), Some(b)) = (it.next(), it.last()) else {
            bail!("no WORK lines in the measurement window");
        };
        let secs = (b.nanos - a.nanos) as f64 / 1e9;
        ensure!(secs >= 2.0, "measurement window only {secs:.2} s long");
        Ok(Window {
            secs,
            units: (b.units - a.units) as f64,
            jvm_cpu: b.jvm_cpu - a.jvm_cpu,
            probe_cpu: match (a.probe_cpu, b.probe_cpu) {
                (Some(x), Some(y)) => y - x,
                _ => 0.0,
            },
            probe_main_cpu: match (a.probe_main_cpu, b.probe_main_cpu) {
                (Some(x), Some(y)) => y - x,
                _ => 0.0,
            },
            wall_ns: (a.wall_ns, b.wall_ns),
        })
    }

    /// An unprofiled run.
    fn unprofiled(&mut self) -> Result<Window> {
        let from = self.log.len();
        let began = Instant::now();
        self.idle(Duration::from_secs(RUN_SECS))?;
        self.window(from, |w| w.at >= began + Duration::from_millis(200))
    }
}

fn wall_ns(t: SystemTime) -> i128 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

#[repr(C)]
#[derive(Default)]
struct Rusage {
    utime: [c_long; 2],
    stime: [c_long; 2],
    maxrss: c_long,
    rest: [c_long; 13],
}

extern "C" {
    fn wait4(pid: c_int, status: *mut c_int, options: c_int, rusage: *mut Rusage) -> c_int;
}

struct Reaped {
    status: ExitStatus,
    cpu_secs: f64,
    maxrss_kib: c_long,
}

/// Reaps child `pid` if it has exited, with `wait4`, which also returns the child's own rusage.
fn try_reap(pid: u32) -> Result<Option<Reaped>> {
    const WNOHANG: c_int = 1;
    let (mut status, mut ru) = (0, Rusage::default());
    // SAFETY: wait4 only writes through the two pointers, which are valid for the call.
    let r = unsafe { wait4(pid as c_int, &mut status, WNOHANG, &mut ru) };
    if r == 0 {
        return Ok(None);
    }
    if r != pid as c_int {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    let tv = |t: [c_long; 2]| t[0] as f64 + t[1] as f64 / 1e6;
    Ok(Some(Reaped {
        status: ExitStatus::from_raw(status),
        cpu_secs: tv(ru.utime) + tv(ru.stime),
        maxrss_kib: ru.maxrss,
    }))
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

/// Runs a tool to completion (killed after `timeout`) while pumping WORK lines; returns stdout
/// and stderr together.
fn run_tool(t: &mut Target, cmd: &mut Command, timeout: Duration) -> Result<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let (out, err) = (read_all(child.stdout.take()), read_all(child.stderr.take()));
    let mut status = None;
    let done = t.pump_until(timeout, || {
        status = child.try_wait()?;
        Ok(status.is_some())
    })?;
    if !done {
        kill(&mut child);
        bail!("{cmd:?} did not finish within {timeout:?}");
    }
    let text = out.join().unwrap_or_default() + &err.join().unwrap_or_default();
    ensure!(
        status.is_some_and(|s| s.success()),
        "{cmd:?} failed: {text}"
    );
    Ok(text)
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// What one `jvmperf record` run reported and cost.
struct JvmperfRun {
    window: Window,
    /// Samples jvmperf reports, and the span of their timestamps (s).
    samples: f64,
    span: f64,
    lost: u64,
    /// Process wall time, the summary's time (sampling + symbolization + output), total CPU.
    wall: f64,
    summary_secs: f64,
    cpu: f64,
    /// CPU-seconds jvmperf reports for loading native debug info (a one-off, on its own thread,
    /// overlapping the start of the steady window).
    debug_info_cpu: f64,
    maxrss_kib: c_long,
}

impl JvmperfRun {
    /// Samples inside the steady window (jvmperf samples CPU time, and the target is CPU-bound,
    /// so the rate is even over the sampling span).
    fn window_samples(&self) -> f64 {
        self.samples * self.window.secs / self.span
    }
}

fn jvmperf_run(t: &mut Target, jvmperf: &Path, extra: &[&str], out: &Path) -> Result<JvmperfRun> {
    let from = t.log.len();
    let started = Instant::now();
    let mut child =
        bench_jvm::spawn_record(jvmperf, t.jvm.pid(), (RUN_SECS, FREQUENCY), extra, out)?;
    let err = read_all(child.stderr.take());
    t.probe = Some(child.id());
    let mut reaped = None;
    let timeout = Duration::from_secs(RUN_SECS + 120);
    let done = t.pump_until(timeout, || {
        reaped = try_reap(child.id())?;
        Ok(reaped.is_some())
    });
    t.probe = None;
    let Some(r) = reaped else {
        kill(&mut child);
        done?;
        bail!("jvmperf record did not finish within {timeout:?}");
    };
    let wall = started.elapsed().as_secs_f64();
    let err = err.join().unwrap_or_default();
    ensure!(r.status.success(), "jvmperf record failed: {err}");
    ensure!(
        !err.contains("recording ended early"),
        "jvmperf record ended early: {err}"
    );

    let summary = err
        .lines()
        .find(|l| l.contains(" samples in "))
        .with_context(|| format!("no `N samples in` summary from jvmperf: {err}"))?;
    let word_before = |needle: &str| -> Result<f64> {
        let head = summary
            .split(needle)
            .next()
            .filter(|h| h.len() < summary.len())
            .with_context(|| format!("no `{needle}` in: {summary}"))?;
        let num = head.rsplit(' ').next().unwrap_or_default();
        num.parse()
            .with_context(|| format!("bad number before `{needle}` in: {summary}"))
    };
    let debug_info_cpu = err
        .lines()
        .find_map(|l| l.split_once("loading native debug info took "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no debug-info loading time from jvmperf: {err}"))?;
    let samples = word_before(" samples in ")?;
    let summary_secs = word_before(" s written")?;
    let lost = word_before(" lost")? as u64;
    let bounds: Vec<u64> = err
        .lines()
        .find_map(|l| l.split_once("sample window (CLOCK_MONOTONIC ns, as System.nanoTime):"))
        .map(|(_, v)| {
            v.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [first, last] = bounds[..] else {
        bail!("no sample window in jvmperf's output: {err}");
    };
    // Up to the WORK line before the last sample: jvmperf symbolizes after that.
    let settle = SETTLE.as_nanos() as u64;
    let window = t.window(from, |w| w.nanos >= first + settle && w.nanos <= last)?;
    ensure!(window.probe_cpu > 0.0, "could not read jvmperf's CPU time");
    Ok(JvmperfRun {
        window,
        samples,
        span: (last - first) as f64 / 1e9,
        lost,
        wall,
        summary_secs,
        cpu: r.cpu_secs,
        debug_info_cpu,
        maxrss_kib: r.maxrss_kib,
    })
}

/// One JFR recording: its steady window and the time `JFR.start` took.
struct JfrRun {
    window: Window,
    start_secs: f64,
    file: PathBuf,
}

fn jfr_run(t: &mut Target, jfc: &Path, file: PathBuf) -> Result<JfrRun> {
    let jcmd = jdk::tool("jcmd")?;
    let pid = t.jvm.pid().to_string();
    let from = t.log.len();
    let started = Instant::now();
    let out = run_tool(
        t,
        Command::new(&jcmd)
            .args([&pid, "JFR.start", "name=jvmperf-bench"])
            .arg(format!("settings={}", jfc.display())),
        Duration::from_secs(60),
    )?;
    ensure!(out.contains("Started recording"), "JFR.start: {out}");
    let began = Instant::now();
    t.idle(Duration::from_secs(RUN_SECS))?;
    let stopping = Instant::now();
    let out = run_tool(
        t,
        Command::new(&jcmd)
            .args([&pid, "JFR.stop", "name=jvmperf-bench"])
            .arg(format!("filename={}", file.display())),
        Duration::from_secs(60),
    )?;
    ensure!(out.contains("Stopped recording"), "JFR.stop: {out}");
    let window = t.window(from, |w| w.at >= began + SETTLE && w.at <= stopping)?;
    Ok(JfrRun {
        window,
        start_secs: (began - started).as_secs_f64(),
        file,
    })
}

/// `jdk.ExecutionSample` events in a recording with a timestamp inside `wall_ns`.
fn jfr_samples(file: &Path, wall_ns: (i128, i128)) -> Result<u64> {
    let out = Command::new(jdk::tool("jfr")?)
        .args(["print", "--json", "--stack-depth", "1", "--events"])
        .arg("jdk.ExecutionSample")
        .arg(file)
        .stderr(Stdio::inherit())
        .output()
        .context("running jfr print")?;
    ensure!(out.status.success(), "jfr print {} failed", file.display());
    let mut inside = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(ts) = line.trim().strip_prefix("\"startTime\": \"") else {
            continue;
        };
        let ns = iso_utc_ns(ts.trim_end_matches(['"', ',', ' ']))
            .with_context(|| format!("bad JFR timestamp {ts}"))?;
        inside += u64::from(ns >= wall_ns.0 && ns <= wall_ns.1);
    }
    Ok(inside)
}

/// `2026-11-21T20:40:54.529903555Z` → ns since the Unix epoch.
fn iso_utc_ns(s: &str) -> Option<i128> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let secs_of_day = t.next()?? * 3600 + t.next()?? * 60 + t.next()??;
    let frac_ns: i64 = format!("{frac:0<9}").get(..9)?.parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + secs_of_day) as i128 * 1_000_000_000 + frac_ns as i128)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn list(v: &[f64], digits: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn main(args: &[String]) -> Result<()> {
    let extra: Vec<&str> = match args.split_first() {
        None => Vec::new(),
        Some((dashes, rest)) if dashes == "--" => rest.iter().map(String::as_str).collect(),
        Some(_) => bail!(
            "usage: cargo xtask bench record [-- MORE JVMPERF RECORD OPTIONS, e.g. --stack-size 16384]"
        ),
    };
    let jvmperf = bench_jvm::prepare()?;
    let dir = std::env::temp_dir().join(format!("jvmperf-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure(&jvmperf, &extra, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(jvmperf: &Path, extra: &[&str], dir: &Path) -> Result<()> {
    let jfc = dir.join("bench.jfc");
    std::fs::write(&jfc, JFC).context("writing the JFR settings")?;
    let max_rate = || std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate");
    let max_rate_before = max_rate().unwrap_or_default();
    let jvm = BenchJvm::start(
        &[],
        &bench_jvm::classes(),
        "bench.Throughput",
        &["--threads", "2"],
    )?;
    let mut t = Target {
        jvm,
        log: Vec::new(),
        probe: None,
    };
    println!(
        "record: bench.Throughput (2 threads, CPU-bound), {ROUNDS} x (unprofiled, jvmperf -F {FREQUENCY}{}, unprofiled, JFR) + unprofiled, {RUN_SECS} s each; steady-state windows only",
        extra.iter().map(|a| format!(" {a}")).collect::<String>()
    );
    let mut unprofiled = vec![t.unprofiled()?];
    let (mut jp, mut jfr) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        jp.push(jvmperf_run(
            &mut t,
            jvmperf,
            extra,
            &dir.join("out.collapsed"),
        )?);
        unprofiled.push(t.unprofiled()?);
        jfr.push(jfr_run(&mut t, &jfc, dir.join(format!("r{i}.jfr")))?);
        unprofiled.push(t.unprofiled()?);
    }
    drop(t);
    let max_rate_after = max_rate().unwrap_or_default();

    // Baseline for profiled run k: the unprofiled runs just before and after it.
    let base = |k: usize| (unprofiled[k].efficiency() + unprofiled[k + 1].efficiency()) / 2.0;
    let jp_costs: Vec<Cost> = jp
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Cost::new(
                &r.window,
                base(2 * i),
                r.window.probe_cpu,
                r.window_samples(),
            )
        })
        .collect();
    let mut jfr_costs = Vec::new();
    for (i, r) in jfr.iter().enumerate() {
        let n = jfr_samples(&r.file, r.window.wall_ns)?;
        ensure!(n > 0, "JFR recorded no execution samples in run {}", i + 1);
        jfr_costs.push(Cost::new(&r.window, base(2 * i + 1), 0.0, n as f64));
    }

    println!(
        "record: unprofiled work per JVM CPU-second: {} (the JVM got {} CPUs; other load on the machine took the rest)",
        list(&unprofiled.iter().map(Window::efficiency).collect::<Vec<_>>(), 0),
        list(&unprofiled.iter().map(|w| w.jvm_cpu / w.secs).collect::<Vec<_>>(), 2),
    );
    for (i, (r, c)) in jp.iter().zip(&jp_costs).enumerate() {
        println!(
            "record: jvmperf run {}: {}, jvmperf CPU {:.2} s; {} lost samples in the run -> {:.1} us/sample",
            i + 1,
            c.describe(),
            c.own_cpu,
            r.lost,
            c.micros()
        );
    }
    for (i, (r, c)) in jfr.iter().zip(&jfr_costs).enumerate() {
        println!(
            "record: JFR run {}: {}; JFR.start took {:.2} s -> {:.1} us/sample",
            i + 1,
            c.describe(),
            r.start_secs,
            c.micros()
        );
    }
    println!(
        "record: cost per sample = (jvm_cpu_lost_s + profiler_cpu_s) / samples x 1e6 over each profiled run's steady window; jvm_cpu_lost_s = jvm_cpu_s x (1 - eff / eff_unprofiled), eff = work units per JVM CPU-second (utime+stime of the JVM process), eff_unprofiled = mean of the unprofiled runs before and after; profiler_cpu_s = jvmperf's utime+stime (JFR: 0, its sampler is a JVM thread); window = WORK lines from {:.1} s after the first sample (JFR: after JFR.start returned) to the last sample (JFR: JFR.stop); samples = jvmperf's count x window_s / sample_span_s (JFR: events by timestamp)",
        SETTLE.as_secs_f64()
    );
    let med = |costs: &[Cost], f: fn(&Cost) -> f64| median(costs.iter().map(f).collect());
    let cost = med(&jp_costs, Cost::micros);
    println!(
        "record: jvmperf -F {FREQUENCY}: median {cost:.1} us/sample (runs: {}) (goal <= {GOAL_US:.0} us; ratio to goal {:.2}); medians of the parts: JVM slowdown {:.1} + jvmperf CPU {:.1} us/sample",
        list(&jp_costs.iter().map(Cost::micros).collect::<Vec<_>>(), 1),
        cost / GOAL_US,
        med(&jp_costs, |c| c.jvm_lost_cpu / c.samples * 1e6),
        med(&jp_costs, |c| c.own_cpu / c.samples * 1e6),
    );
    // The steady state: jvmperf's sampling thread only, without the one-off debug-info load
    // (another thread, which overlaps the window).
    let steady: Vec<Cost> = jp
        .iter()
        .zip(&jp_costs)
        .map(|(r, c)| Cost {
            own_cpu: r.window.probe_main_cpu,
            ..*c
        })
        .collect();
    println!(
        "record: jvmperf -F {FREQUENCY} steady state (sampling thread only; the one-off debug-info load took {} CPU-s per run on its own thread): median {:.1} us/sample (runs: {}) (goal <= {GOAL_US:.0} us; ratio {:.2}); jvmperf CPU {:.1} us/sample",
        list(&jp.iter().map(|r| r.debug_info_cpu).collect::<Vec<_>>(), 2),
        med(&steady, Cost::micros),
        list(&steady.iter().map(Cost::micros).collect::<Vec<_>>(), 1),
        med(&steady, Cost::micros) / GOAL_US,
        med(&steady, |c| c.own_cpu / c.samples * 1e6),
    );
    let rss = jp.iter().map(|r| r.maxrss_kib).max().unwrap_or(0);
    println!(
        "record: jvmperf daemon: CPU in the sampling window (debug-info load included) {} us/sample; peak RSS {:.0} MiB; total CPU per run {} s",
        list(&jp_costs.iter().map(|c| c.own_cpu / c.samples * 1e6).collect::<Vec<_>>(), 1),
        rss as f64 / 1024.0,
        list(&jp.iter().map(|r| r.cpu).collect::<Vec<_>>(), 2)
    );
    let one_off_cpu: Vec<f64> = jp
        .iter()
        .map(|r| r.cpu - r.window.probe_cpu / r.window.secs * r.span)
        .collect();
    let attach: Vec<f64> = jp.iter().map(|r| r.wall - r.summary_secs).collect();
    let finish: Vec<f64> = jp
        .iter()
        .map(|r| r.summary_secs - RUN_SECS as f64)
        .collect();
    println!(
        "record: jvmperf one-off per run (not per sample): CPU outside steady sampling {} s; wall: attach {} s (the first loads the agent), symbolize + write {} s",
        list(&one_off_cpu, 2),
        list(&attach, 2),
        list(&finish, 2)
    );
    let lost: u64 = jp.iter().map(|r| r.lost).sum();
    let recorded: f64 = jp.iter().map(|r| r.samples).sum();
    println!(
        "record: jvmperf samples: {recorded:.0} recorded, {lost} lost (ring buffer full, {:.0}%) over {ROUNDS} runs; per JVM CPU-second {:.0} recorded (-F {FREQUENCY} asks {FREQUENCY} per thread CPU-second)",
        100.0 * lost as f64 / (lost as f64 + recorded),
        med(&jp_costs, |c| c.samples / c.jvm_cpu)
    );
    if max_rate_before != max_rate_after {
        println!(
            "record: the kernel throttled perf: kernel.perf_event_max_sample_rate went from {} to {}",
            max_rate_before.trim(),
            max_rate_after.trim()
        );
    }
    let jfr_cost = med(&jfr_costs, Cost::micros);
    println!(
        "record: JFR (jdk.ExecutionSample period=1 ms): median {jfr_cost:.1} us/sample (runs: {}); first JFR.start {:.2} s (initializes JFR), later ones {:.2} s",
        list(&jfr_costs.iter().map(Cost::micros).collect::<Vec<_>>(), 1),
        jfr[0].start_secs,
        median(jfr[1..].iter().map(|r| r.start_secs).collect())
    );
    println!(
        "record: side by side: jvmperf {cost:.1} us/sample, {:.0} samples/s, JVM slowdown {:.1}% | JFR {jfr_cost:.1} us/sample, {:.0} samples/s, JVM slowdown {:.1}%",
        med(&jp_costs, |c| c.samples / c.secs),
        med(&jp_costs, |c| c.lost_frac * 100.0),
        med(&jfr_costs, |c| c.samples / c.secs),
        med(&jfr_costs, |c| c.lost_frac * 100.0),
    );
    Ok(())
}

/// A profiled run's cost against its unprofiled baseline.
#[derive(Clone, Copy)]
struct Cost {
    secs: f64,
    jvm_cpu: f64,
    efficiency: f64,
    base: f64,
    lost_frac: f64,
    /// JVM CPU seconds beyond what the work took unprofiled.
    jvm_lost_cpu: f64,
    /// The profiler process's CPU seconds.
    own_cpu: f64,
    samples: f64,
}

impl Cost {
    fn new(w: &Window, base: f64, own_cpu: f64, samples: f64) -> Cost {
        let lost_frac = 1.0 - w.efficiency() / base;
        Cost {
            secs: w.secs,
            jvm_cpu: w.jvm_cpu,
            efficiency: w.efficiency(),
            base,
            lost_frac,
            jvm_lost_cpu: lost_frac * w.jvm_cpu,
            own_cpu,
            samples,
        }
    }

    fn micros(&self) -> f64 {
        (self.jvm_lost_cpu + self.own_cpu) / self.samples * 1e6
    }

    fn describe(&self) -> String {
        format!(
            "{:.2} s window, JVM {:.2} CPUs, {:.0} units/CPU-s vs {:.0} unprofiled (lost {:.1}% = {:.2} CPU-s), {:.0} samples ({:.0}/s)",
            self.secs,
            self.jvm_cpu / self.secs,
            self.efficiency,
            self.base,
            self.lost_frac * 100.0,
            self.jvm_lost_cpu,
            self.samples,
            self.samples / self.secs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_timestamps() {
        assert_eq!(iso_utc_ns("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(
            iso_utc_ns("2026-11-21T20:40:54.529903555Z"),
            Some(1_795_293_654_529_903_555)
        );
    }
}
