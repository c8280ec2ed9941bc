//! `cargo xtask bench footprint`: what one `jvmperf record` costs a host — wall time against the
//! requested duration, peak RSS (jvmperf's own, and a child that builds a symbol cache), anonymous
//! RSS, and CPU split into one-off (native debug info) and steady — for a first run on a host
//! (empty symbol cache) and a warm run, at `-d 8 -F 499` and `-d 60 -F 999` on a 2-thread
//! `bench.Phases` (both cores busy).

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::bench_jvm::{self, BenchJvm};
use crate::paths;

/// (seconds, Hz) of each recording.
const RUNS: [(u64, u64); 2] = [(8, 499), (60, 999)];
const GOAL_RSS_MB: f64 = 100.0;
const GOAL_ONE_OFF_CPU_S: f64 = 0.3;

/// One `jvmperf record` run, measured from outside.
struct Footprint {
    wall_s: f64,
    peak_rss_mb: f64,
    peak_anon_mb: f64,
    /// Peak RSS of jvmperf's children (the symbol cache builder), if any ran.
    child_peak_rss_mb: f64,
    /// CPU of jvmperf and its children, from `getrusage(RUSAGE_CHILDREN)` around the run.
    cpu_s: f64,
    /// What jvmperf reports as its one-off debug-info cost.
    one_off_cpu_s: f64,
    summary: String,
}

fn children_cpu_s() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// A field of `/proc/<pid>/status` in MB (0 once the process is gone).
fn status_mb(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Child processes of `pid`, whichever of its threads started them.
fn children_of(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn record(jvmperf: &Path, pid: u32, (secs, hz): (u64, u64), out: &Path) -> Result<Footprint> {
    let cpu_before = children_cpu_s();
    let started = Instant::now();
    let mut child = bench_jvm::spawn_record(jvmperf, pid, (secs, hz), &[], out)?;
    let mut stderr = child.stderr.take().context("jvmperf stderr")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let me = child.id();
    let (mut peak_rss_mb, mut peak_anon_mb, mut child_peak_rss_mb) = (0.0f64, 0.0f64, 0.0f64);
    let status = loop {
        peak_rss_mb = peak_rss_mb.max(status_mb(me, "VmHWM:"));
        peak_anon_mb = peak_anon_mb.max(status_mb(me, "RssAnon:"));
        for c in children_of(me) {
            child_peak_rss_mb = child_peak_rss_mb.max(status_mb(c, "VmHWM:"));
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(secs + 300),
            "jvmperf record did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall_s = started.elapsed().as_secs_f64();
    let err = reader.join().unwrap_or_default();
    ensure!(status.success(), "jvmperf record failed: {err}");
    let one_off_cpu_s = err
        .split("loading native debug info took ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no one-off CPU in jvmperf's summary: {err}"))?;
    let summary = err
        .lines()
        .find(|l| l.contains(" samples in "))
        .unwrap_or_default()
        .trim_start_matches("jvmperf: ")
        .to_string();
    Ok(Footprint {
        wall_s,
        peak_rss_mb,
        peak_anon_mb,
        child_peak_rss_mb,
        cpu_s: children_cpu_s() - cpu_before,
        one_off_cpu_s,
        summary,
    })
}

pub fn main(args: &[String]) -> Result<()> {
    ensure!(
        args.is_empty(),
        "usage: cargo xtask bench footprint (no options)"
    );
    let jvmperf = bench_jvm::prepare()?;
    let dir = paths::target_dir().join("footprint");
    let cache = dir.join("symbol-cache");
    std::fs::create_dir_all(&dir)?;
    // A cache of its own: the first run of each pair starts from an empty one, as on a new host.
    std::env::set_var("JVMPERF_CACHE_DIR", &cache);
    let jvm = BenchJvm::start(
        &[],
        &bench_jvm::classes(),
        "bench.Phases",
        &["--threads", "2"],
    )?;
    println!(
        "footprint: jvmperf record of bench.Phases --threads 2 (pid {}, both cores busy); libjvm debug info {}",
        jvm.pid(),
        if Path::new("/usr/lib/debug/.build-id").is_dir() {
            "installed"
        } else {
            "NOT installed (the first-run figures then mean little)"
        }
    );
    println!(
        "{:<16} {:<6} {:>10} {:>10} {:>9} {:>9} {:>11} {:>8} {:>9}",
        "run",
        "cache",
        "wall s",
        "over d s",
        "peak MB",
        "anon MB",
        "builder MB",
        "CPU s",
        "1-off s"
    );
    for (secs, hz) in RUNS {
        let _ = std::fs::remove_dir_all(&cache);
        for cache_state in ["first", "warm"] {
            let out = dir.join(format!("d{secs}-{cache_state}.collapsed"));
            let f = record(&jvmperf, jvm.pid(), (secs, hz), &out)?;
            println!(
                "{:<16} {:<6} {:>10.1} {:>+10.1} {:>9.1} {:>9.1} {:>11.1} {:>8.2} {:>9.2}",
                format!("-d {secs} -F {hz}"),
                cache_state,
                f.wall_s,
                f.wall_s - secs as f64,
                f.peak_rss_mb,
                f.peak_anon_mb,
                f.child_peak_rss_mb,
                f.cpu_s,
                f.one_off_cpu_s
            );
            println!("    {}", f.summary);
            if cache_state == "warm" {
                println!(
                    "    warm: wall over -d {:+.1} s (goal ≤ +1), peak RSS {:.0}% of the {GOAL_RSS_MB} MB goal, one-off CPU {:.0}% of the {GOAL_ONE_OFF_CPU_S} s goal, steady CPU {:.2} s",
                    f.wall_s - secs as f64,
                    100.0 * f.peak_rss_mb / GOAL_RSS_MB,
                    100.0 * f.one_off_cpu_s / GOAL_ONE_OFF_CPU_S,
                    f.cpu_s - f.one_off_cpu_s
                );
            }
        }
    }
    let cache_mb: f64 = std::fs::read_dir(cache.join("symbols"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len() as f64 / 1e6)
                .sum()
        })
        .unwrap_or(0.0);
    println!(
        "footprint: symbol cache after the runs: {cache_mb:.1} MB in {}",
        cache.display()
    );
    Ok(())
}
