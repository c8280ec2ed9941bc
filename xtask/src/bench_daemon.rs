//! `cargo xtask bench daemon [--minutes N] [--interval S]`: `jvmperf daemon` at its default rate
//! on three bench JVMs (Throughput with 2 threads, Phases, InlineHot) for N minutes (10): the
//! daemon's CPU in percent of one core (all of it, and after its first interval, which holds the
//! attaches), its RSS (now and peak), and per JVM the files written and the samples in them.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench_jvm::{self, BenchJvm};
use crate::paths;

struct Args {
    minutes: f64,
    interval: u64,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut out = Args {
        minutes: 10.0,
        interval: 60,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--minutes" => out.minutes = value()?.parse().context("--minutes")?,
            "--interval" => out.interval = value()?.parse().context("--interval")?,
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask bench daemon [--minutes N (10)] [--interval SECONDS (60)]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown option {other} (see --help)"),
        }
    }
    Ok(out)
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    let jvmperf = bench_jvm::prepare()?;
    let dir = paths::target_dir().join("bench-daemon");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    // Only these JVMs: other JVMs on the host are left alone.
    let marker = format!("-Djvmperf.bench.daemon={}", std::process::id());
    let cp = bench_jvm::classes();
    let jvms = [
        BenchJvm::start(&[&marker], &cp, "bench.Throughput", &["--threads", "2"])?,
        BenchJvm::start(&[&marker], &cp, "bench.Phases", &[])?,
        BenchJvm::start(&[&marker], &cp, "bench.InlineHot", &[])?,
    ];
    let mut daemon = Command::new(&jvmperf)
        .arg("daemon")
        .arg("--dir")
        .arg(&dir)
        .args(["--interval", &args.interval.to_string()])
        .arg(format!("--match={marker}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting jvmperf daemon")?;
    let pid = daemon.id();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = log.clone();
    let stderr = daemon.stderr.take().context("daemon stderr")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            sink.lock().unwrap().push(line);
        }
    });
    let started = Instant::now();
    let jvm_cpu_start: Vec<(u32, f64)> = jvms
        .iter()
        .map(|j| (j.pid(), bench_jvm::proc_cpu_secs(j.pid()).unwrap_or(0.0)))
        .collect();
    let run_for = Duration::from_secs_f64(args.minutes * 60.0);
    let first_interval = Duration::from_secs(args.interval);
    let mut after_first: Option<(Instant, f64)> = None;
    while started.elapsed() < run_for {
        std::thread::sleep(Duration::from_millis(500));
        if after_first.is_none() && started.elapsed() >= first_interval {
            after_first = Some((Instant::now(), bench_jvm::proc_cpu_secs(pid).unwrap_or(0.0)));
        }
    }
    let cpu = bench_jvm::proc_cpu_secs(pid).context("daemon exited early")?;
    let wall = started.elapsed().as_secs_f64();
    let (rss, peak) = (status_kib(pid, "VmRSS:"), status_kib(pid, "VmHWM:"));
    // What the JVMs ran while profiled: at -F 19, each CPU-second should give ~19 samples.
    let jvm_cpu: Vec<(u32, f64)> = jvm_cpu_start
        .iter()
        .map(|&(p, c)| (p, bench_jvm::proc_cpu_secs(p).unwrap_or(c) - c))
        .collect();
    nix_kill(pid, libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(500));
    nix_kill(pid, libc::SIGTERM);
    let status = daemon.wait()?;
    drop(jvms);
    println!("bench daemon: 3 JVMs (Throughput x2 threads, Phases, InlineHot), {:.1} min, --interval {} s, default rate", wall / 60.0, args.interval);
    println!(
        "daemon CPU: {:.3}% of one core overall ({:.2} CPU-s in {:.0} s, attaches included)",
        100.0 * cpu / wall,
        cpu,
        wall
    );
    if let Some((t, c)) = after_first {
        let w = t.elapsed().as_secs_f64();
        println!(
            "daemon CPU after the first interval: {:.3}% of one core (goal <= 1%)",
            100.0 * (cpu - c) / w.max(1e-9)
        );
    }
    println!(
        "daemon RSS: {} MiB now, {} MiB peak (goal <= 100 MB)",
        rss / 1024,
        peak / 1024
    );
    println!("daemon exit: {status}");
    for line in log.lock().unwrap().iter() {
        if line.contains(" status ")
            || line.contains("rate lowered")
            || line.contains("not profiling")
        {
            println!("  {line}");
        }
    }
    for entry in std::fs::read_dir(&dir)? {
        let jvm_dir = entry?.path();
        let files: Vec<_> = std::fs::read_dir(&jvm_dir)?
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
            .collect();
        let name = jvm_dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let cpu = name
            .rsplit('-')
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .and_then(|p| jvm_cpu.iter().find(|(q, _)| *q == p))
            .map_or(0.0, |(_, c)| *c);
        println!(
            "{name}: {} files, {} (the JVM ran {cpu:.1} CPU-s while profiled: ~{:.0} samples at 19 Hz)",
            files.len(),
            samples_in(&jvmperf, &files),
            cpu * 19.0
        );
    }
    Ok(())
}

/// "N samples" of the merged report of `files`.
fn samples_in(jvmperf: &Path, files: &[std::path::PathBuf]) -> String {
    if files.is_empty() {
        return "0 samples".into();
    }
    let out = Command::new(jvmperf).arg("report").args(files).output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.lines()
        .next()
        .and_then(|l| l.split(", ").find(|p| p.ends_with(" samples")))
        .unwrap_or("samples unreadable")
        .to_string()
}

fn nix_kill(pid: u32, sig: i32) {
    // SAFETY: kill with integer arguments only.
    unsafe { libc::kill(pid as i32, sig) };
}
