//! `cargo xtask bench tomcat [--window S] [--pairs N] [--connections C]`: Debian's Tomcat 10
//! serving its JSP examples under wrk, its request rate while `jvmperf record` samples it at 19,
//! 99 and 999 Hz (and async-profiler `-e cpu` at 99 Hz when `ASPROF` names its `asprof`), each
//! against the idle windows on both sides of it, in one run: idle, 19 Hz, idle, 99 Hz, idle,
//! 999 Hz, idle, … so that drift and load from elsewhere hit every profiler alike.
//!
//! Tomcat runs pinned to CPU 0, wrk and the profilers to CPU 1: the rate is then bounded by one
//! CPU's worth of Tomcat, and what a profiler costs is what it costs inside Tomcat's own
//! threads. All of wrk's requests belong to one session (see `Tomcat::wrk`). A profiler's window
//! is measured after its attach: it starts `ATTACH_LEAD` seconds before the load.

#[path = "../../tests/common/tomcat.rs"]
#[allow(dead_code)]
mod tomcat;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::{bench_jvm, jdk};
use tomcat::Tomcat;

struct Args {
    warm_up: u64,
    window: u64,
    pairs: usize,
    connections: u32,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut out = Args {
        warm_up: 20,
        window: 5,
        pairs: 8,
        connections: 4,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || -> Result<u64> {
            let v = it.next().with_context(|| format!("{a} needs a value"))?;
            v.parse().with_context(|| format!("{a} {v}"))
        };
        match a.as_str() {
            "--warm-up" => out.warm_up = value()?,
            "--window" => out.window = value()?.max(1),
            "--pairs" | "--rounds" => out.pairs = value()?.max(1) as usize,
            "--connections" => out.connections = value()?.max(1) as u32,
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask bench tomcat [--warm-up SECONDS (20)] [--window SECONDS (5)] [--pairs N (8)] [--connections C (4)]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown option {other} (see --help)"),
        }
    }
    Ok(out)
}

/// Seconds a recording starts before its window's load (attach), and ends after it.
const ATTACH_LEAD: u64 = 2;

const TOMCAT_CPU: &str = "0";
const LOAD_CPU: &str = "1";

/// `seconds` of wrk load; requests per second.
fn window_rate(tomcat: &Tomcat, args: &Args, seconds: u64) -> Result<f64> {
    let out = tomcat
        .wrk(seconds, args.connections, Some(LOAD_CPU))
        .map_err(|e| anyhow!(e))?
        .wait_with_output()?;
    let report = String::from_utf8_lossy(&out.stdout);
    tomcat::wrk_rate(&report).with_context(|| format!("no request rate from wrk: {report}"))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[derive(Clone)]
enum Profiler {
    Record { hz: u64 },
    Asprof { hz: u64, bin: PathBuf },
}

impl Profiler {
    fn name(&self) -> String {
        match self {
            Profiler::Record { hz } => format!("jvmperf record -F {hz}"),
            Profiler::Asprof { hz, .. } => format!("async-profiler -e cpu ({hz} Hz)"),
        }
    }

    /// Starts sampling `pid` for `secs`, pinned to the load's CPU.
    fn spawn(&self, jvmperf: &Path, pid: u32, secs: u64, out: &Path) -> Result<Child> {
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", LOAD_CPU]);
        match self {
            Profiler::Record { hz } => {
                cmd.arg(jvmperf)
                    .args(["record", "-p", &pid.to_string()])
                    .args(["-d", &secs.to_string(), "-F", &hz.to_string(), "-o"])
                    .arg(out.with_extension("jvmperf"));
            }
            Profiler::Asprof { hz, bin } => {
                cmd.arg(bin)
                    .args(["-d", &secs.to_string(), "-e", "cpu"])
                    .args(["-i", &(1_000_000_000 / hz).to_string()])
                    .args(["-o", "collapsed", "-f"])
                    .arg(out.with_extension("collapsed"))
                    .arg(pid.to_string());
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", self.name()))
    }
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    let jvmperf = bench_jvm::prepare()?;
    let java = jdk::tool("java")?;
    let java_home = java
        .parent()
        .and_then(Path::parent)
        .context("JAVA_HOME of java")?;
    let dir = std::env::temp_dir().join(format!("jvmperf-bench-tomcat-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tomcat = Tomcat::start(java_home, &dir).map_err(|e| anyhow!(e))?;
    tomcat.pin(TOMCAT_CPU).map_err(|e| anyhow!(e))?;
    eprintln!(
        "bench tomcat: Tomcat (pid {}) on 127.0.0.1:{}, pinned to CPU {TOMCAT_CPU} (wrk and the profilers on CPU {LOAD_CPU}); warming up for {} s",
        tomcat.pid, tomcat.port, args.warm_up
    );
    if args.warm_up > 0 {
        window_rate(&tomcat, &args, args.warm_up)?;
    }
    let mut profilers: Vec<Profiler> = [19, 99, 999]
        .into_iter()
        .map(|hz| Profiler::Record { hz })
        .collect();
    if let Some(bin) = std::env::var_os("ASPROF").map(PathBuf::from) {
        profilers.push(Profiler::Asprof { hz: 99, bin });
    }
    // idle, p1, idle, p2, …, idle: each profiled window between two idle ones.
    let mut idle = vec![window_rate(&tomcat, &args, args.window)?];
    let mut kept: Vec<Vec<f64>> = vec![Vec::new(); profilers.len()];
    for pair in 0..args.pairs {
        for (i, p) in profilers.iter().enumerate() {
            let out = dir.join(format!("p{pair}-{i}"));
            let child = p.spawn(&jvmperf, tomcat.pid, args.window + 2 * ATTACH_LEAD, &out)?;
            std::thread::sleep(Duration::from_secs(ATTACH_LEAD));
            let rate = window_rate(&tomcat, &args, args.window)?;
            let out = child.wait_with_output()?;
            ensure!(
                out.status.success(),
                "{} failed: {}",
                p.name(),
                String::from_utf8_lossy(&out.stderr)
            );
            let after = window_rate(&tomcat, &args, args.window)?;
            let before = *idle.last().expect("an idle window came first");
            idle.push(after);
            let ratio = rate / ((before + after) / 2.0);
            eprintln!(
                "bench tomcat: pair {pair} {:<28} {rate:>8.0} requests/s, idle around {before:.0} / {after:.0}: {:.1}%",
                p.name(),
                100.0 * ratio
            );
            kept[i].push(ratio);
        }
    }
    let steps: Vec<f64> = idle
        .windows(2)
        .map(|w| 100.0 * (w[1] / w[0] - 1.0).abs())
        .collect();
    let lowest = idle.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = idle.iter().copied().fold(0.0, f64::max);
    println!(
        "tomcat (pinned to one CPU), {} connections, {} s windows: idle {:.0} requests/s (median of {}; {:.0}–{:.0}; consecutive idle windows differ by {:.1}% at the median)",
        args.connections,
        args.window,
        median(&idle),
        idle.len(),
        lowest,
        highest,
        median(&steps)
    );
    for (p, ratios) in profilers.iter().zip(&kept) {
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        println!(
            "  {:<28} keeps {:>6.1}% of the rate (median of {} pairs; {:.1}–{:.1}%)",
            p.name(),
            100.0 * median(ratios),
            ratios.len(),
            100.0 * lo,
            100.0 * hi
        );
    }
    drop(tomcat);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
