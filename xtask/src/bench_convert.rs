//! `cargo xtask bench convert`: record `bench.Phases` with 2 worker threads at 1 kHz for 60 s into
//! a `.jvmperf` file (about 120k samples), then time `jvmperf convert` from it to every output
//! format. Goal: at most 1 s per format (release build, the whole process: read, convert, write).
//! Then reads an hour of JFR: the `.jfr` it wrote, one chunk, repeated to an hour (a JFR file is a
//! sequence of self-contained chunks; the JDK starts a new one every few MB), converted to
//! collapsed stacks, with the converter's peak RSS (goal: seconds, and memory that follows the
//! distinct stacks, not the file).
//!
//! Options: `--seconds N` (recording length, default 60), `--recording FILE` (time an existing
//! recording instead of making one), `--runs N` (timed runs per format, default 3).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::bench_jvm::{self, BenchJvm};
use crate::paths;

const GOAL_SECONDS: f64 = 1.0;
const OUTPUTS: [&str; 8] = [
    "collapsed",
    "svg",
    "html",
    "iprof",
    "pb.gz",
    "speedscope.json",
    "jfr",
    "jvmperf",
];

struct Args {
    seconds: u32,
    recording: Option<PathBuf>,
    runs: usize,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut out = Args {
        seconds: 60,
        recording: None,
        runs: 3,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--seconds" => out.seconds = value()?.parse().context("--seconds")?,
            "--recording" => out.recording = Some(PathBuf::from(value()?)),
            "--runs" => out.runs = value()?.parse::<usize>().context("--runs")?.max(1),
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask bench convert [--seconds N] [--recording FILE] [--runs N]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown option {other} (see --help)"),
        }
    }
    Ok(out)
}

fn record(jvmperf: &std::path::Path, seconds: u32, out: &std::path::Path) -> Result<()> {
    let jvm = BenchJvm::start(
        &[
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=inline,bench.Phases::inlinedHelper",
            "-XX:CompileCommand=exclude,bench.Phases::interpretedPhase",
        ],
        &bench_jvm::classes(),
        "bench.Phases",
        &["--threads", "2"],
    )?;
    eprintln!("bench convert: recording bench.Phases (2 workers) at 1 kHz for {seconds} s");
    let res = Command::new(jvmperf)
        .args(["record", "-p", &jvm.pid().to_string(), "-F", "1000", "-d"])
        .arg(seconds.to_string())
        .arg("-o")
        .arg(out)
        .output()
        .context("running jvmperf record")?;
    drop(jvm);
    if !res.status.success() {
        bail!(
            "jvmperf record failed: {}",
            String::from_utf8_lossy(&res.stderr)
        );
    }
    Ok(())
}

/// Wall time of one `jvmperf convert`, and the sample count it reports.
pub fn convert(
    jvmperf: &std::path::Path,
    input: &std::path::Path,
    out: &std::path::Path,
) -> Result<(f64, u64)> {
    let t = Instant::now();
    let res = Command::new(jvmperf)
        .arg("convert")
        .arg(input)
        .arg("-o")
        .arg(out)
        .output()
        .context("running jvmperf convert")?;
    let elapsed = t.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&res.stderr);
    if !res.status.success() {
        bail!("jvmperf convert to {} failed: {err}", out.display());
    }
    let samples = err
        .split_once("jvmperf: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no sample count in {err:?}"))?;
    Ok((elapsed, samples))
}

/// Convert an hour of JFR (`chunk`, `seconds` long, repeated) to collapsed stacks: prints the
/// wall time and the converter's peak RSS.
fn read_an_hour_of_jfr(jvmperf: &Path, chunk: &Path, seconds: u32, dir: &Path) -> Result<()> {
    let bytes = std::fs::read(chunk).with_context(|| format!("reading {}", chunk.display()))?;
    let copies = (3600 / seconds.max(1)).max(1);
    let hour = dir.join("hour.jfr");
    let mut f = std::fs::File::create(&hour).context("creating hour.jfr")?;
    for _ in 0..copies {
        f.write_all(&bytes).context("writing hour.jfr")?;
    }
    drop(f);
    let size = copies as f64 * bytes.len() as f64 / 1e6;
    let t = Instant::now();
    let mut child = Command::new(jvmperf)
        .arg("convert")
        .arg(&hour)
        .arg("-o")
        .arg(dir.join("hour.collapsed"))
        .stderr(Stdio::piped())
        .spawn()
        .context("running jvmperf convert")?;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).context("reading its stderr")?;
    }
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 only writes the structs it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, which `child` never waits for itself.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let elapsed = t.elapsed().as_secs_f64();
    if pid < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("jvmperf convert of an hour of JFR failed: {err}");
    }
    let samples = err
        .split_once("jvmperf: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    println!(
        "convert: an hour of JFR ({copies} chunks, {size:.1} MB, {samples} samples) -> .collapsed: {elapsed:.3} s, peak RSS {:.1} MB",
        usage.ru_maxrss as f64 / 1024.0
    );
    let _ = std::fs::remove_file(&hour);
    Ok(())
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    let jvmperf = bench_jvm::prepare()?;
    let dir = paths::target_dir().join("bench-convert");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let recording = match args.recording {
        Some(r) => r,
        None => {
            let r = dir.join("recording.jvmperf");
            record(&jvmperf, args.seconds, &r)?;
            r
        }
    };
    let size = std::fs::metadata(&recording)
        .with_context(|| format!("reading {}", recording.display()))?
        .len();
    let mut over = Vec::new();
    let mut warned = false;
    for ext in OUTPUTS {
        let out = dir.join(format!("converted.{ext}"));
        let mut times = Vec::new();
        let mut samples = 0;
        for _ in 0..args.runs {
            let (t, n) = convert(&jvmperf, &recording, &out)?;
            times.push(t);
            samples = n;
        }
        if samples < 100_000 && !warned {
            warned = true;
            println!(
                "convert: note: the recording has {samples} samples, fewer than the ~120k of a 60 s, 2-thread, 1 kHz recording on an idle machine (samples follow CPU time: is the machine busy?); `--seconds` records longer"
            );
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let out_size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        println!(
            "convert: {samples} samples, .jvmperf ({:.1} MB) -> .{ext} ({:.1} MB): median {median:.3} s of {} runs, max {:.3} s (goal <= {GOAL_SECONDS:.3} s; ratio to goal {:.2})",
            size as f64 / 1e6,
            out_size as f64 / 1e6,
            args.runs,
            times[times.len() - 1],
            median / GOAL_SECONDS
        );
        if median > GOAL_SECONDS {
            over.push(ext);
        }
    }
    read_an_hour_of_jfr(&jvmperf, &dir.join("converted.jfr"), args.seconds, &dir)?;
    let _ = std::fs::remove_file(dir.join("converted.jvmperf"));
    if !over.is_empty() {
        bail!(
            "converting to {} took longer than {GOAL_SECONDS} s",
            over.join(", ")
        );
    }
    Ok(())
}
