//! `cargo xtask bench alloc`: what allocation profiling costs an allocation-heavy JVM, by the
//! throughput it keeps (issue 30: ≥ 98% with `jvmperf record -e alloc` at its defaults).
//!
//! `bench.AllocRate` (2 threads building lists of small objects and small arrays, a large array
//! outside TLABs now and then, and some work with each unit; it prints the bytes allocated per
//! unit as the JVM counts them) runs pinned to CPU 0; every profiler runs pinned to CPU 1, as in
//! `bench switch`, so what is lost is the cost inside the JVM's own threads (the uprobe's trap
//! and stack copy at each TLAB refill, a JVMTI callback, JFR's sampler), not a share of a core.
//! Rounds of (idle, profiler, idle, profiler, …), every profiled window between two idle ones;
//! the first round pays per-JVM one-offs (jvmperf loads its agent, async-profiler its library,
//! the first `JFR.start` initializes JFR) and is left out of the medians. Throughput is work per
//! wall second.
//!
//! Each run gives two figures: the throughput kept in its steady window (sampling only, start-up
//! and the work after sampling left out), against the mean of the idle windows on both sides;
//! and its one-off cost, the JVM's work lost over the whole run (spawn to exit) beyond what the
//! steady rate loses while sampling, in milliseconds of the JVM's idle throughput: attaching,
//! opening and closing the probes, and whatever the profiler does to the JVM after sampling.
//!
//! Profilers: `jvmperf record -e alloc` (the default interval: every hit), `-e alloc -c 10`,
//! `jvmperf record` (`-e cpu`, the default), async-profiler `-e alloc` (its default interval)
//! when `ASPROF` names its `asprof` binary, and JFR with `settings=default`
//! (`jdk.ObjectAllocationSample` throttled to 150 a second). And bare perf on the same two
//! functions (tracefs uprobes that `perf probe` adds for the run and removes after it), a sample
//! at every hit: `perf record -p` with registers only, the same with `--call-graph dwarf` and
//! jvmperf's default stack copy, and `perf record -a`: the floor of what a uprobe per TLAB refill
//! costs, and what the stack copy adds to it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use crate::bench_jvm::{self, pin_threads, pinned, BenchJvm, JVM_CPU, PROFILER_CPU};
use crate::bench_record::{
    finish, inner, jfr_window, list, median, monotonic_ns, number_before, record_span, Span,
    Target, WorkLog, MARGIN_NS,
};
use crate::jdk;

const DEFAULT_PAIRS: usize = 5;
/// `bench.AllocRate --work`: hash rounds per unit. At 400 the JVM allocates some 4 GB/s on one
/// core of the VM this was written on, some 3,000 TLAB refills and outside-TLAB allocations a
/// second (`--work 0`, nothing but allocation: some 15 GB/s).
const DEFAULT_WORK: u32 = 400;
/// Seconds each profiler samples.
const WINDOW_SECS: u64 = 6;
/// How long after its spawn async-profiler may still be attaching (it says `Profiling for 6
/// seconds` some 0.1 s after it starts, the first time too); with the margins left out at both
/// ends its steady window begins 1 s after its spawn and ends 0.5 s before its exit.
const ASPROF_STARTUP: Duration = Duration::from_millis(500);
/// Between a profiler's exit and the next idle window.
const SETTLE: Duration = Duration::from_millis(500);
/// How long after its spawn `perf record` samples from (it then samples until `sleep` exits).
const PERF_STARTUP: Duration = Duration::from_secs(1);
/// The tracefs group of the perf peers' uprobes, and their events.
const PERF_GROUP: &str = "jvmperf_bench";
const PERF_EVENTS: &str = "jvmperf_bench:in_new_tlab,jvmperf_bench:outside_tlab";
/// jvmperf record's default `--stack-size`, for perf's `--call-graph dwarf`.
const STACK_SIZE: &str = "32768";

#[derive(Clone, PartialEq)]
enum Profiler {
    Jvmperf { alloc: bool, period: Option<u64> },
    Perf { stacks: bool, all_cpus: bool },
    Asprof(PathBuf),
    Jfr,
}

impl Profiler {
    fn name(&self) -> String {
        match self {
            Profiler::Jvmperf { alloc: false, .. } => "jvmperf record (-e cpu)".into(),
            Profiler::Jvmperf {
                alloc: true,
                period,
            } => format!(
                "jvmperf record -e alloc{}",
                period.map(|c| format!(" -c {c}")).unwrap_or_default()
            ),
            Profiler::Perf { stacks, all_cpus } => format!(
                "perf record -e uprobes {}{}",
                if *all_cpus { "-a" } else { "-p" },
                if *stacks { " --call-graph dwarf" } else { "" }
            ),
            Profiler::Asprof(_) => "async-profiler -e alloc".into(),
            Profiler::Jfr => "JFR settings=default".into(),
        }
    }

    /// The order within a round: jvmperf -e alloc first, so that its first run loads the agent.
    fn all(perf: bool, asprof: Option<PathBuf>) -> Vec<Profiler> {
        let mut all = vec![
            Profiler::Jvmperf {
                alloc: true,
                period: None,
            },
            Profiler::Jvmperf {
                alloc: true,
                period: Some(10),
            },
            Profiler::Jvmperf {
                alloc: false,
                period: None,
            },
        ];
        if perf {
            all.extend(
                [(false, false), (true, false), (false, true)]
                    .map(|(stacks, all_cpus)| Profiler::Perf { stacks, all_cpus }),
            );
        }
        all.extend(asprof.map(Profiler::Asprof));
        all.push(Profiler::Jfr);
        all
    }
}

/// One profiler's run: the whole of it and its steady part, and for jvmperf what its summary
/// says.
struct Run {
    full: Span,
    steady: Span,
    jvmperf: Option<Summary>,
}

/// What `jvmperf record` says of its run.
#[derive(Debug, PartialEq)]
struct Summary {
    /// Samples per second of sampling (for `-e alloc` its `alloc:` line's: probe hits taken).
    rate: f64,
    lost: f64,
    /// Seconds from the end of sampling to the output written (closing its events, naming).
    after: f64,
}

/// Runs `p` once, spawn to exit.
fn run(t: &mut Target, p: &Profiler, jvmperf: &Path, dir: &Path) -> Result<Run> {
    let pid = t.jvm.pid().to_string();
    let window = WINDOW_SECS.to_string();
    let start = monotonic_ns();
    let timeout = Duration::from_secs(WINDOW_SECS + 120);
    let (steady, summary) = match p {
        Profiler::Jvmperf { alloc, period } => {
            let mut cmd = pinned(jvmperf);
            cmd.args(["record", "-p", &pid, "-d", &window]);
            if *alloc {
                cmd.args(["-e", "alloc"]);
            }
            if let Some(c) = period {
                cmd.args(["-c", &c.to_string()]);
            }
            let child = cmd
                .arg("-o")
                .arg(dir.join("out.collapsed"))
                .spawn()
                .context("starting jvmperf record")?;
            let err = finish(t, child, &p.name(), timeout)?;
            (record_span(&err)?, Some(summary_of(&err)?))
        }
        Profiler::Perf { stacks, all_cpus } => {
            let mut cmd = pinned("perf");
            cmd.args(["record", "-e", PERF_EVENTS]);
            if *all_cpus {
                cmd.arg("-a");
            } else {
                cmd.args(["-p", &pid]);
            }
            if *stacks {
                cmd.args(["--call-graph", &format!("dwarf,{STACK_SIZE}")]);
            }
            cmd.arg("-o").arg(dir.join("perf.data")).args([
                "--",
                "sleep",
                &(WINDOW_SECS + 1).to_string(),
            ]);
            let child = cmd.spawn().context("starting perf record")?;
            finish(t, child, &p.name(), timeout)?;
            let begin = start + PERF_STARTUP.as_nanos() as u64;
            (inner(begin, begin + WINDOW_SECS * 1_000_000_000), None)
        }
        Profiler::Asprof(bin) => {
            let child = pinned(bin)
                .args(["-e", "alloc", "-d", &window, "-o", "collapsed", "-f"])
                .arg(dir.join("asprof.collapsed"))
                .arg(&pid)
                .spawn()
                .context("starting asprof")?;
            finish(t, child, &p.name(), timeout)?;
            let begin = start + ASPROF_STARTUP.as_nanos() as u64;
            (inner(begin, monotonic_ns()), None)
        }
        Profiler::Jfr => {
            let jcmd = jdk::tool("jcmd")?;
            let file = dir.join("out.jfr");
            let (_, steady) = jfr_window(t, &|| pinned(&jcmd), "default", WINDOW_SECS, &file)?;
            let _ = std::fs::remove_file(&file);
            (steady, None)
        }
    };
    Ok(Run {
        full: Span {
            start,
            end: monotonic_ns(),
        },
        steady,
        jvmperf: summary,
    })
}

/// The perf peers' uprobes, on the functions `jvmperf record -e alloc` probes, in the target's
/// libjvm; removed on drop.
struct PerfProbes;

impl PerfProbes {
    fn add(pid: u32) -> Result<PerfProbes> {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        let libjvm = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|path| path.ends_with("/libjvm.so"))
            .context("no libjvm.so in the JVM's maps")?;
        // Left by an interrupted run, they would make `perf probe -a` fail.
        remove_perf_probes();
        let mut cmd = Command::new("perf");
        cmd.args(["probe", "-x", libjvm]);
        for event in PERF_EVENTS.split(',') {
            let function = event.split_once(':').map_or(event, |(_, f)| f);
            // perf probe reads `::` as a line number unless escaped.
            cmd.args([
                "-a",
                &format!("{event}=AllocTracer\\:\\:send_allocation_{function}"),
            ]);
        }
        let out = cmd.output().context("running perf probe")?;
        ensure!(
            out.status.success(),
            "perf probe on {libjvm}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(PerfProbes)
    }
}

impl Drop for PerfProbes {
    fn drop(&mut self) {
        remove_perf_probes();
    }
}

fn remove_perf_probes() {
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", &format!("{PERF_GROUP}:*")])
        .output();
}

/// The [`Summary`] in jvmperf record's output.
fn summary_of(err: &str) -> Result<Summary> {
    let line = err
        .lines()
        .find(|l| l.contains(" s written to "))
        .with_context(|| format!("no summary from jvmperf record: {err}"))?;
    let samples = match err.lines().find(|l| l.starts_with("jvmperf: alloc: ")) {
        Some(alloc) => number_before(alloc, " samples (")?,
        None => number_before(line, " samples in ")?,
    };
    Ok(Summary {
        rate: samples / number_before(line, " s written to ")?.max(0.1),
        lost: number_before(line, " lost")?,
        after: number_before(line, " s after sampling ended")?,
    })
}

struct Args {
    pairs: usize,
    work: u32,
}

fn parse_args(args: &[String]) -> Result<Args> {
    const USAGE: &str = "usage: cargo xtask bench alloc [--pairs N (default 5)] [--work N (bench.AllocRate's hash rounds per unit, default 400; 0: allocation only)]; ASPROF=/path/to/asprof adds async-profiler";
    let mut parsed = Args {
        pairs: DEFAULT_PAIRS,
        work: DEFAULT_WORK,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = it.next().and_then(|n| n.parse::<usize>().ok());
        match arg.as_str() {
            "--pairs" => parsed.pairs = value.filter(|&n| n > 0).context(USAGE)?,
            "--work" => parsed.work = value.and_then(|n| u32::try_from(n).ok()).context(USAGE)?,
            _ => bail!("{USAGE}"),
        }
    }
    Ok(parsed)
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    bench_jvm::run_pinned("alloc", |jvmperf, dir| measure(jvmperf, &args, dir))
}

fn measure(jvmperf: &Path, args: &Args, dir: &Path) -> Result<()> {
    let asprof = std::env::var_os("ASPROF").map(PathBuf::from);
    let jvm = BenchJvm::start(
        &[],
        &bench_jvm::classes(),
        "bench.AllocRate",
        &["--work", &args.work.to_string()],
    )?;
    let line = jvm
        .lines
        .recv_timeout(Duration::from_secs(10))
        .context("no BYTES_PER_UNIT line from bench.AllocRate")?;
    let bytes_per_unit: f64 = line
        .strip_prefix("BYTES_PER_UNIT ")
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("bench.AllocRate said `{line}`, not BYTES_PER_UNIT"))?;
    pin_threads(jvm.pid(), JVM_CPU.parse()?)?;
    let perf_probes = PerfProbes::add(jvm.pid());
    if let Err(e) = &perf_probes {
        println!("alloc: perf peers skipped: {e:#}");
    }
    let profilers = Profiler::all(perf_probes.is_ok(), asprof.clone());
    let mut t = Target {
        jvm,
        log: WorkLog::default(),
    };
    // Per-thread uprobes cost each probe hit more with each thread they are opened on.
    let threads = std::fs::read_dir(format!("/proc/{}/task", t.jvm.pid()))?.count();
    println!(
        "alloc: bench.AllocRate --work {} (2 allocating threads, {threads} in the JVM) pinned to CPU {JVM_CPU}, profilers pinned to CPU {PROFILER_CPU}; 1 + {} rounds of idle (4 s) / profiler ({WINDOW_SECS} s) windows, the first round's left out of the medians{}",
        args.work,
        args.pairs,
        if asprof.is_none() {
            "; async-profiler skipped (set ASPROF to its asprof binary)"
        } else {
            ""
        }
    );
    // WORK lines come every 100 ms: the log must begin before the first window does.
    t.idle(Duration::from_millis(300))?;
    let mut idle = vec![t.idle_window()?];
    let mut runs: Vec<(usize, Run)> = Vec::new();
    for _ in 0..=args.pairs {
        for (i, p) in profilers.iter().enumerate() {
            let run = run(&mut t, p, jvmperf, dir)?;
            t.idle(SETTLE)?;
            runs.push((i, run));
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
        "alloc: idle windows: {} units/s (median {base:.0}: {:.2} GB/s allocated, {bytes_per_unit:.0} bytes per unit as the JVM counts them)",
        list(&idle_rates, 0),
        base * bytes_per_unit / 1e9
    );
    println!(
        "alloc: kept = work per second in the steady window (sampling only) / the mean of the idle windows on both sides, median and range over the {} pairs after the first round; one-off = the JVM's work lost over the whole run (spawn to exit) beyond what the steady rate loses while sampling, in ms of idle work (noise: about 1% of the run's length), the first run (per-JVM one-offs) and the median of the later ones; run = spawn to exit",
        args.pairs
    );
    println!(
        "alloc: {:<44} {:>6}  {:<13} {:>15} {:>11} {:>7}",
        "profiler", "kept", "range", "one-off: first", "later", "run"
    );
    for (i, p) in profilers.iter().enumerate() {
        let mut kept = Vec::new();
        let mut one_off = Vec::new();
        let mut secs = Vec::new();
        let mut summaries = Vec::new();
        for (k, (_, r)) in runs.iter().enumerate().filter(|(_, (j, _))| *j == i) {
            let neighbours = (idle_rates[k] + idle_rates[k + 1]) / 2.0;
            let steady = t.log.throughput(r.steady)? / neighbours;
            let full = t.log.throughput(r.full)? / neighbours;
            let sampling = r.steady.secs() + 2.0 * MARGIN_NS as f64 / 1e9;
            kept.push(steady * 100.0);
            one_off.push(((1.0 - full) * r.full.secs() - (1.0 - steady) * sampling) * 1e3);
            secs.push(r.full.secs());
            summaries.extend(r.jvmperf.as_ref());
        }
        let later = kept[1..].to_vec();
        let (lo, hi) = later
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &k| (lo.min(k), hi.max(k)));
        let jvmperf = match summaries.get(1..) {
            Some(s) if !s.is_empty() => format!(
                "; {:.0} samples/s, {:.0} lost in all, output written {:.1} s after sampling",
                median(s.iter().map(|s| s.rate).collect()),
                s.iter().map(|s| s.lost).sum::<f64>(),
                median(s.iter().map(|s| s.after).collect()),
            ),
            _ => String::new(),
        };
        println!(
            "alloc: {:<44} {:>5.1}%  {:>5.1}–{:<5.1}%  {:>12.0} ms {:>8.0} ms {:>5.1} s   per pair {} %{jvmperf}",
            p.name(),
            median(later.clone()),
            lo,
            hi,
            one_off[0],
            median(one_off[1..].to_vec()),
            median(secs[1..].to_vec()),
            list(&later, 1),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_read() {
        let err = "jvmperf: 1024000 bytes in 5.0 s written to out.collapsed (4.5 s after sampling ended) — 99.9% unwound to a thread root, 3 lost, 0 compiled frames unresolved by the code map\n\
                   jvmperf: alloc: uprobes on …: 1.0 MiB allocated in 500 samples (490 at TLAB refills, 10 outside TLABs)\n";
        let alloc = Summary {
            rate: 100.0,
            lost: 3.0,
            after: 4.5,
        };
        assert_eq!(summary_of(err).unwrap(), alloc);
        let cpu = "jvmperf: 95 samples in 5.0 s written to out.collapsed (0.1 s after sampling ended) — 99.9% unwound to a thread root, 0 lost, 0 compiled frames unresolved by the code map";
        let cpu_summary = Summary {
            rate: 19.0,
            lost: 0.0,
            after: 0.1,
        };
        assert_eq!(summary_of(cpu).unwrap(), cpu_summary);
        assert!(summary_of("jvmperf: no samples").is_err());
    }

    #[test]
    fn pairs_and_work_are_parsed() {
        let args = |v: &[&str]| parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let a = args(&["--pairs", "3", "--work", "0"]).unwrap();
        assert_eq!((a.pairs, a.work), (3, 0));
        assert!(args(&["--pairs", "0"]).is_err());
        assert!(args(&["--frobnicate"]).is_err());
    }
}
