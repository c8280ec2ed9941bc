//! `cargo xtask bench soak [--minutes N] [--hz H] [--every S] [-- jvmperf record options]`: a
//! long `jvmperf record` of `bench.CodeChurn` (class loading and code-cache churn) to a raw
//! `.jvmperf` file with `--status-every`, printing jvmperf's and the shim's memory, samples and
//! lost samples per status line, then how flat the memory stayed and whether every sample the
//! target's CPU time calls for was either taken or reported lost by the kernel.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use crate::bench_jvm::{self, BenchJvm};
use crate::paths;

struct Args {
    minutes: u64,
    hz: u64,
    every: u64,
    /// Options passed on to `jvmperf record`, after `--`.
    record: Vec<String>,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut out = Args {
        minutes: 30,
        hz: 999,
        every: 60,
        record: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || -> Result<u64> {
            let v = it.next().with_context(|| format!("{a} needs a value"))?;
            v.parse().with_context(|| format!("{a} {v}"))
        };
        match a.as_str() {
            "--minutes" => out.minutes = value()?.max(1),
            "--hz" => out.hz = value()?.max(1),
            "--every" => out.every = value()?.max(1),
            "--" => out.record.extend(it.by_ref().cloned()),
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask bench soak [--minutes N (30)] [--hz H (999)] [--every SECONDS (60)] [-- jvmperf record options]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown option {other} (see --help)"),
        }
    }
    Ok(out)
}

/// One `jvmperf: status` line, with the target's CPU time read when it arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Status {
    elapsed_s: f64,
    samples: u64,
    lost: u64,
    stacks: u64,
    cut_samples: u64,
    rss_kib: u64,
    rss_anon_kib: u64,
    shim_kib: Option<u64>,
    target_cpu_s: f64,
}

/// The `key=value` fields of a status line (`None` for other lines); `?` values are `None`.
fn parse_status(line: &str, target_cpu_s: f64) -> Option<Status> {
    let rest = line.strip_prefix("jvmperf: status ")?;
    let field = |key: &str| -> Option<&str> {
        rest.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    let num = |key: &str| field(key)?.parse::<u64>().ok();
    Some(Status {
        elapsed_s: field("elapsed_s")?.parse().ok()?,
        samples: num("samples")?,
        lost: num("lost")?,
        stacks: num("stacks")?,
        cut_samples: num("cut_samples")?,
        rss_kib: num("rss_kib")?,
        rss_anon_kib: num("rss_anon_kib")?,
        shim_kib: num("shim_kib"),
        target_cpu_s,
    })
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

/// Mean of the second half over the mean of the first half (1.0 = flat).
fn growth(v: &[u64]) -> f64 {
    let half = v.len() / 2;
    mean(&v[v.len() - half..]) / mean(&v[..half]).max(1.0)
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    let jvmperf = bench_jvm::prepare()?;
    let out_dir = paths::target_dir().join("soak");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out = out_dir.join("soak.jvmperf");
    // Every iteration loads a new class (new loader, new method ids, new code) under the same
    // name: memory may grow with distinct stacks, and with one name their number is bounded.
    let jvm = BenchJvm::start(
        &["-XX:ReservedCodeCacheSize=16m", "-XX:+UseSerialGC"],
        &bench_jvm::classes(),
        "bench.CodeChurn",
        &["--same-name"],
    )?;
    let rows = record(&jvmperf, &args, jvm.pid(), &out)?;
    drop(jvm);
    report(&args, &rows)?;
    read_back(&jvmperf, &out)
}

/// Runs `jvmperf record` and collects its status lines.
fn record(jvmperf: &Path, args: &Args, pid: u32, out: &Path) -> Result<Vec<Status>> {
    // A little past the last status line, so it is printed.
    let seconds = args.minutes * 60 + args.every.min(5);
    println!(
        "soak: recording bench.CodeChurn (pid {pid}) for {} min at {} Hz into {}{}",
        args.minutes,
        args.hz,
        out.display(),
        args.record
            .iter()
            .map(|a| format!(" {a}"))
            .collect::<String>()
    );
    let every = args.every.to_string();
    let mut extra = vec!["--status-every", &every];
    extra.extend(args.record.iter().map(String::as_str));
    let mut child = bench_jvm::spawn_record(jvmperf, pid, (seconds, args.hz), &extra, out)?;
    let stderr = child.stderr.take().context("jvmperf stderr")?;
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut rows = Vec::new();
    let mut log = Vec::new();
    let timeout = Duration::from_secs(seconds + 300);
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let cpu = bench_jvm::proc_cpu_secs(pid).unwrap_or(f64::NAN);
                match parse_status(&line, cpu) {
                    Some(s) => {
                        print_row(&s, rows.last(), args.hz);
                        rows.push(s);
                    }
                    None => log.push(line),
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("jvmperf record did not finish within {timeout:?}");
            }
        }
    }
    let status = child.wait().context("waiting for jvmperf")?;
    for line in &log {
        println!("  {line}");
    }
    ensure!(status.success(), "jvmperf record failed");
    ensure!(
        rows.len() >= 3,
        "only {} status lines (need 3: a warm-up one and two to compare)",
        rows.len()
    );
    Ok(rows)
}

/// One table row: memory now, and samples, kernel-reported lost samples and the samples the
/// target's CPU time since the previous row calls for.
fn print_row(s: &Status, prev: Option<&Status>, hz: u64) {
    if prev.is_none() {
        println!(
            "{:>7} {:>10} {:>10} {:>10} {:>9} {:>8} {:>8} {:>9} {:>9}",
            "time_s",
            "rss_MiB",
            "anon_MiB",
            "shim_KiB",
            "stacks",
            "samples",
            "lost",
            "expected",
            "ratio"
        );
    }
    let (samples, lost) = prev.map_or((s.samples, s.lost), |p| {
        (s.samples - p.samples, s.lost - p.lost)
    });
    // The first row has no CPU time to compare with: jvmperf started sampling during it.
    let (expected, ratio) = prev.map_or(("-".into(), "-".into()), |p| {
        let expected = (s.target_cpu_s - p.target_cpu_s) * hz as f64;
        (
            format!("{expected:.0}"),
            format!("{:.3}", (samples + lost) as f64 / expected),
        )
    });
    println!(
        "{:>7.0} {:>10.1} {:>10.1} {:>10} {:>9} {:>8} {:>8} {:>9} {:>9}",
        s.elapsed_s,
        s.rss_kib as f64 / 1024.0,
        s.rss_anon_kib as f64 / 1024.0,
        s.shim_kib.map_or("?".into(), |k| k.to_string()),
        s.stacks,
        samples,
        lost,
        expected,
        ratio
    );
}

/// The verdict, leaving out the first row (warm-up: attach, debug info, first compiles).
fn report(args: &Args, rows: &[Status]) -> Result<()> {
    let measured = &rows[1..];
    let shim: Vec<u64> = rows.iter().filter_map(|s| s.shim_kib).collect();
    let (first, last) = (&rows[0], &rows[rows.len() - 1]);
    let expected = (last.target_cpu_s - first.target_cpu_s) * args.hz as f64;
    let taken = (last.samples - first.samples) as f64;
    let lost = (last.lost - first.lost) as f64;
    for (what, kib) in [
        (
            "RSS",
            measured.iter().map(|s| s.rss_kib).collect::<Vec<u64>>(),
        ),
        (
            "anonymous RSS (its own memory, without mapped files)",
            measured.iter().map(|s| s.rss_anon_kib).collect(),
        ),
    ] {
        println!(
            "soak: daemon {what} after the warm-up row: first {:.1} MiB, last {:.1} MiB, max {:.1} MiB; second half / first half {:.3} (1.000 = flat)",
            kib[0] as f64 / 1024.0,
            kib[kib.len() - 1] as f64 / 1024.0,
            kib.iter().max().copied().unwrap_or(0) as f64 / 1024.0,
            growth(&kib)
        );
    }
    let (m0, m1) = (&measured[0], &measured[measured.len() - 1]);
    println!(
        "soak: distinct stacks {} -> {} after the warm-up row; anonymous memory per new stack {:.0} bytes; {} samples cut at --max-stacks",
        m0.stacks,
        m1.stacks,
        (m1.rss_anon_kib as f64 - m0.rss_anon_kib as f64) * 1024.0
            / (m1.stacks.saturating_sub(m0.stacks)).max(1) as f64,
        m1.cut_samples
    );
    println!(
        "soak: shim memory in the target: min {} KiB, max {} KiB over {} rows",
        shim.iter().min().copied().unwrap_or(0),
        shim.iter().max().copied().unwrap_or(0),
        shim.len()
    );
    println!(
        "soak: samples from {:.0} s to {:.0} s: {taken:.0} taken + {lost:.0} lost (kernel) = {:.0}; expected from the target's CPU time x {} Hz: {expected:.0}; ratio {:.3}",
        first.elapsed_s,
        last.elapsed_s,
        taken + lost,
        args.hz,
        (taken + lost) / expected
    );
    Ok(())
}

/// The recording must read back whole.
fn read_back(jvmperf: &Path, file: &Path) -> Result<()> {
    let out = Command::new(jvmperf)
        .args(["report", "--top", "3"])
        .arg(file)
        .output()
        .context("running jvmperf report")?;
    ensure!(
        out.status.success(),
        "jvmperf report {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let size = std::fs::metadata(file).map_or(0, |m| m.len());
    let text = String::from_utf8_lossy(&out.stdout);
    println!(
        "soak: {} ({:.1} MiB) reads back: {}",
        file.display(),
        size as f64 / (1 << 20) as f64,
        text.lines().next().unwrap_or("")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse() {
        let line = "jvmperf: status elapsed_s=60 samples=59940 lost=3 stacks=812 cut_samples=7 rss_kib=70000 rss_peak_kib=71000 rss_anon_kib=65000 shim_kib=4368 shim_queue_peak_kib=10";
        let s = parse_status(line, 1.5).unwrap();
        assert_eq!(
            (s.samples, s.lost, s.stacks, s.cut_samples),
            (59940, 3, 812, 7)
        );
        assert_eq!(
            (s.rss_kib, s.rss_anon_kib, s.shim_kib, s.target_cpu_s),
            (70000, 65000, Some(4368), 1.5)
        );
        let no_shim = line.replace("shim_kib=4368", "shim_kib=?");
        assert_eq!(parse_status(&no_shim, 0.0).unwrap().shim_kib, None);
        assert!(parse_status("jvmperf: 10 samples in 1.0 s", 0.0).is_none());
        assert!((growth(&[100, 100, 110, 110]) - 1.1).abs() < 1e-9);
    }
}
