//! `cargo xtask bench switch`: what sampling costs a JVM whose threads hand work to each other
//! (a thread pool, a request server), by the throughput it keeps.
//!
//! `bench.Throughput --handoff` (two threads passing a token after every unit: about one context
//! switch per unit) runs pinned to CPU 0; every profiler runs pinned to CPU 1, so what is lost is
//! the cost inside the JVM's own threads, per context switch, not a share of a core. Rounds of
//! (idle, profiler, idle, profiler, …) with every profiled window between two idle ones; a
//! profiler's window is its steady sampling (start-up and its work after sampling left out).
//! Throughput is work per wall second, never per JVM CPU-second.
//!
//! With `--spawn` the app runs every unit on a thread of its own (`bench.Throughput --spawn`: a
//! thread start and end per unit), which prices what a profiler does per thread: the agent's
//! ThreadStart/ThreadEnd callbacks run on those threads, and jvmperf's `--status-every` lines give
//! the time they spent in them, printed per profiler.
//!
//! Profilers: jvmperf record at 19 and 99 Hz (per CPU where allowed, the default), `jvmperf
//! daemon -F 19`, jvmperf record `--sampling per-thread` at 19 Hz, `perf record -p` (per-thread
//! events) and `perf record -a` (per-CPU events) at 19 Hz, and async-profiler `-e cpu` and `-e
//! itimer` at 19 Hz when `ASPROF` names its `asprof` binary. With `--wall`: jvmperf record
//! `--wall` at 99 Hz per CPU and per thread, with the records each lost.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::bench_jvm::{self, pin_threads, pinned, BenchJvm, JVM_CPU, PROFILER_CPU};
use crate::bench_record::{finish, list, median, monotonic_ns, record_span, Span, Target, WorkLog};

const DEFAULT_PAIRS: usize = 4;
/// Seconds each profiler samples.
const WINDOW_SECS: u64 = 6;
/// Left out at each end of a profiler's sampling.
const MARGIN: Duration = Duration::from_millis(500);
/// Between a profiler's exit and the next idle window.
const SETTLE: Duration = Duration::from_millis(500);

#[derive(Clone, PartialEq)]
enum Profiler {
    Record {
        hz: u64,
        per_thread: bool,
        wall: bool,
    },
    Daemon {
        hz: u64,
    },
    Perf {
        hz: u64,
        all_cpus: bool,
    },
    Asprof {
        hz: u64,
        event: &'static str,
        bin: PathBuf,
    },
}

impl Profiler {
    fn name(&self) -> String {
        match self {
            Profiler::Record {
                hz,
                per_thread,
                wall,
            } => format!(
                "jvmperf record -F {hz}{}{}",
                if *wall { " --wall" } else { "" },
                if *per_thread {
                    " --sampling per-thread"
                } else {
                    " (per CPU)"
                }
            ),
            Profiler::Daemon { hz } => format!("jvmperf daemon -F {hz} (per CPU)"),
            Profiler::Perf { hz, all_cpus } => format!(
                "perf record -e cpu-clock -F {hz} {}",
                if *all_cpus { "-a" } else { "-p PID" }
            ),
            Profiler::Asprof { hz, event, .. } => format!("async-profiler -e {event} ({hz} Hz)"),
        }
    }

    fn all(asprof: Option<PathBuf>, wall: bool) -> Vec<Profiler> {
        if wall {
            return [false, true]
                .into_iter()
                .map(|per_thread| Profiler::Record {
                    hz: 99,
                    per_thread,
                    wall,
                })
                .collect();
        }
        let record = |hz, per_thread| Profiler::Record {
            hz,
            per_thread,
            wall,
        };
        let mut all = vec![
            record(19, false),
            record(99, false),
            Profiler::Daemon { hz: 19 },
            record(19, true),
            Profiler::Perf {
                hz: 19,
                all_cpus: false,
            },
            Profiler::Perf {
                hz: 19,
                all_cpus: true,
            },
        ];
        if let Some(bin) = asprof {
            for event in ["cpu", "itimer"] {
                all.push(Profiler::Asprof {
                    hz: 19,
                    event,
                    bin: bin.clone(),
                });
            }
        }
        all
    }
}

/// What the application threads spent in the agent's ThreadStart/ThreadEnd callbacks: (events,
/// total ns, longest ns).
type ThreadEvents = (u64, u64, u64);

/// [`ThreadEvents`] from the last `--status-every` line of a jvmperf record.
fn shim_thread_events(err: &str) -> Option<ThreadEvents> {
    let line = err
        .lines()
        .rev()
        .find(|l| l.contains("shim_thread_events="))?;
    let field = |key: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
    };
    Some((
        field("shim_thread_events")?,
        field("shim_thread_event_ns")?,
        field("shim_thread_event_max_ns")?,
    ))
}

/// Records jvmperf record's summary says it lost.
fn lost_records(err: &str) -> Option<u64> {
    let line = err.lines().find(|l| l.contains(" samples in "))?;
    let before = line.split(" lost").next()?;
    before
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Runs `p` once; returns its steady sampling span, and for jvmperf record its stderr.
fn run(t: &mut Target, p: &Profiler, jvmperf: &Path, dir: &Path) -> Result<(Span, Option<String>)> {
    let pid = t.jvm.pid().to_string();
    let window = WINDOW_SECS.to_string();
    let start = monotonic_ns();
    // Each arm: the command, and how long after its spawn it samples (start-up).
    let (mut cmd, startup) = match p {
        Profiler::Record {
            hz,
            per_thread,
            wall,
        } => {
            let mut cmd = pinned(jvmperf);
            cmd.args(["record", "-p", &pid, "-d", &window, "-F", &hz.to_string()])
                .args(["--status-every", "1"])
                .arg("-o")
                .arg(dir.join("out.collapsed"));
            if *per_thread {
                cmd.args(["--sampling", "per-thread"]);
            }
            if *wall {
                cmd.arg("--wall");
            }
            let child = cmd.spawn().context("starting jvmperf record")?;
            let err = finish(
                t,
                child,
                "jvmperf record",
                Duration::from_secs(WINDOW_SECS + 120),
            )?;
            return Ok((record_span(&err)?, Some(err)));
        }
        Profiler::Daemon { hz } => {
            let mut cmd = pinned(jvmperf);
            cmd.args(["daemon", "--pid", &pid, "-F", &hz.to_string(), "--dir"])
                .arg(dir.join("daemon"));
            // It looks for JVMs every 2 s and attaches to those it finds.
            (cmd, Duration::from_secs(4))
        }
        Profiler::Perf { hz, all_cpus } => {
            let mut cmd = pinned("perf");
            cmd.args(["record", "-e", "cpu-clock", "-F", &hz.to_string()]);
            if *all_cpus {
                cmd.arg("-a");
            } else {
                cmd.args(["-p", &pid]);
            }
            // perf samples from shortly after its start until `sleep` exits.
            cmd.arg("-o").arg(dir.join("perf.data")).args([
                "--",
                "sleep",
                &(WINDOW_SECS + 1).to_string(),
            ]);
            (cmd, Duration::from_secs(1))
        }
        Profiler::Asprof { hz, event, bin } => {
            let mut cmd = pinned(bin);
            cmd.args(["-e", event, "-i", &(1_000_000_000 / hz).to_string()])
                .args(["-o", "collapsed", "-f"])
                .arg(dir.join("asprof.collapsed"));
            (cmd, Duration::from_secs(1))
        }
    };
    let sampling = Duration::from_secs(WINDOW_SECS);
    match p {
        Profiler::Daemon { .. } => {
            // Runs until SIGTERM, after the window.
            let child = cmd.spawn().context("starting jvmperf daemon")?;
            t.idle(startup + sampling)?;
            // taskset execs the profiler: the child is the daemon itself.
            // SAFETY: kill with a pid we spawned and a valid signal number.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            finish(t, child, &p.name(), Duration::from_secs(60))?;
        }
        _ => {
            if let Profiler::Asprof { .. } = p {
                cmd.args(["-d", &window, &pid]);
            }
            let child = cmd
                .spawn()
                .with_context(|| format!("starting {}", p.name()))?;
            finish(t, child, &p.name(), Duration::from_secs(WINDOW_SECS + 60))?;
        }
    }
    let begin = start + (startup + MARGIN).as_nanos() as u64;
    let span = Span {
        start: begin,
        end: begin + (sampling - 2 * MARGIN).as_nanos() as u64,
    };
    Ok((span, None))
}

struct Args {
    pairs: usize,
    spawn: bool,
    wall: bool,
}

fn parse_args(args: &[String]) -> Result<Args> {
    const USAGE: &str = "usage: cargo xtask bench switch [--pairs N (default 4)] [--spawn] [--wall]; ASPROF=/path/to/asprof adds async-profiler";
    let mut parsed = Args {
        pairs: DEFAULT_PAIRS,
        spawn: false,
        wall: false,
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
            "--spawn" => parsed.spawn = true,
            "--wall" => parsed.wall = true,
            _ => bail!("{USAGE}"),
        }
    }
    Ok(parsed)
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    bench_jvm::run_pinned("switch", |jvmperf, dir| measure(jvmperf, &args, dir))
}

fn measure(jvmperf: &Path, args: &Args, dir: &Path) -> Result<()> {
    let asprof = std::env::var_os("ASPROF").map(PathBuf::from);
    let profilers = Profiler::all(asprof.clone(), args.wall);
    let jvm = BenchJvm::start(
        &[],
        &bench_jvm::classes(),
        "bench.Throughput",
        &[if args.spawn { "--spawn" } else { "--handoff" }],
    )?;
    pin_threads(jvm.pid(), JVM_CPU.parse()?)?;
    let mut t = Target {
        jvm,
        log: WorkLog::default(),
    };
    println!(
        "switch: bench.Throughput {} pinned to CPU {JVM_CPU}, profilers pinned to CPU {PROFILER_CPU}; {} rounds of idle ({} s) / profiler ({WINDOW_SECS} s) windows{}",
        if args.spawn { "--spawn" } else { "--handoff" },
        args.pairs,
        4,
        if asprof.is_none() {
            "; async-profiler skipped (set ASPROF to its asprof binary)"
        } else {
            ""
        }
    );
    t.idle(Duration::from_millis(300))?;
    let mut idle = vec![t.idle_window()?];
    let mut runs: Vec<(usize, Span)> = Vec::new();
    let mut thread_events: Vec<ThreadEvents> = vec![(0, 0, 0); profilers.len()];
    let mut lost: Vec<Vec<u64>> = vec![Vec::new(); profilers.len()];
    for _ in 0..args.pairs {
        for (i, p) in profilers.iter().enumerate() {
            let (span, err) = run(&mut t, p, jvmperf, dir)?;
            if let Some((n, ns, max)) = err.as_deref().and_then(shim_thread_events) {
                let sum = &mut thread_events[i];
                *sum = (sum.0 + n, sum.1 + ns, sum.2.max(max));
            }
            if let Some(n) = err.as_deref().and_then(lost_records).filter(|_| args.wall) {
                lost[i].push(n);
            }
            let _ = std::fs::remove_dir_all(dir.join("daemon"));
            let _ = std::fs::remove_file(dir.join("perf.data"));
            t.idle(SETTLE)?;
            runs.push((i, span));
            idle.push(t.idle_window()?);
        }
    }
    t.wait_for_work_after(idle.last().map_or(0, |s| s.end))?;
    let idle_rates = idle
        .iter()
        .map(|&s| t.log.throughput(s))
        .collect::<Result<Vec<_>>>()?;
    let base = median(idle_rates.clone());
    println!(
        "switch: idle windows: {} units/s (median {base:.0}; each unit is {})",
        list(&idle_rates, 0),
        if args.spawn {
            "a thread started, run and joined"
        } else {
            "about one context switch"
        }
    );
    for (i, p) in profilers.iter().enumerate() {
        let mut kept = Vec::new();
        for (k, (_, span)) in runs.iter().enumerate().filter(|(_, (j, _))| *j == i) {
            let neighbours = (idle_rates[k] + idle_rates[k + 1]) / 2.0;
            kept.push(t.log.throughput(*span)? / neighbours);
        }
        let kept_median = median(kept.clone());
        // Time per unit profiled less time per unit idle: the cost per context switch.
        let per_unit_us = (1.0 / kept_median - 1.0) / base * 1e6;
        let (n, ns, max) = thread_events[i];
        let callbacks = if n > 0 {
            format!(
                "; agent's thread callbacks: {n} events, {:.2} us each on average, longest {:.1} us",
                ns as f64 / n as f64 / 1e3,
                max as f64 / 1e3
            )
        } else {
            String::new()
        };
        let lost = match lost[i].is_empty() {
            true => String::new(),
            false => format!(
                "; records lost per run: {}",
                list(&lost[i].iter().map(|&n| n as f64).collect::<Vec<_>>(), 0)
            ),
        };
        println!(
            "switch: {:<48} throughput kept {:.1}% (per pair {} %), {per_unit_us:.2} us per {}{callbacks}{lost}",
            p.name(),
            kept_median * 100.0,
            list(&kept.iter().map(|k| k * 100.0).collect::<Vec<_>>(), 1),
            if args.spawn { "thread" } else { "context switch" },
        );
    }
    Ok(())
}
