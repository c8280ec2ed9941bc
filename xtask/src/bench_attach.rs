//! `cargo xtask bench attach`: time from `jvmperf jitmap` start to a complete code map on a small
//! bench app, and the replay rate on a JVM with more than 20k nmethods.

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::bench_jvm::{self, BenchJvm};

const RUNS: usize = 5;

/// The numbers `jitmap` prints about its attach (see `src/cmd/jitmap.rs`).
struct AttachReport {
    to_code_map: f64,
    nmethods: u64,
    replay_rate: f64,
}

fn jitmap(jvmperf: &std::path::Path, pid: u32) -> Result<AttachReport> {
    let out = Command::new(jvmperf)
        .args(["jitmap", "-p", &pid.to_string(), "-o", "/dev/null"])
        .output()
        .context("running jvmperf jitmap")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("jvmperf jitmap failed: {err}");
    }
    let number_after = |needle: &str| -> Result<f64> {
        let at = err
            .find(needle)
            .with_context(|| format!("no `{needle}` in: {err}"))?;
        let rest = &err[at + needle.len()..];
        let num: String = rest
            .trim_start_matches(['(', ' '])
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        num.parse()
            .with_context(|| format!("bad number after `{needle}`"))
    };
    Ok(AttachReport {
        to_code_map: number_after("code map complete")?,
        nmethods: number_after("replayed")? as u64,
        replay_rate: number_after("s (")?,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn main(_args: &[String]) -> Result<()> {
    let jvmperf = bench_jvm::prepare()?;

    let small = BenchJvm::start(&[], &bench_jvm::classes(), "bench.InlineHot", &[])?;
    let mut times = Vec::new();
    for _ in 0..RUNS {
        times.push(jitmap(&jvmperf, small.pid())?.to_code_map);
    }
    drop(small);
    let first = times[0];
    let med = median(times);
    println!(
        "attach: start -> complete code map on bench.InlineHot: first {first:.3} s, median of {RUNS} {med:.3} s (goal <= 0.200 s; ratio to goal {:.2})",
        med / 0.2
    );

    let many = BenchJvm::start(
        &["-XX:TieredStopAtLevel=1", "-XX:-BackgroundCompilation"],
        &bench_jvm::many_classpath(),
        "bench.ManyMethods",
        &[],
    )?;
    let mut rates = Vec::new();
    let mut count = 0;
    for _ in 0..3 {
        let r = jitmap(&jvmperf, many.pid())?;
        count = r.nmethods;
        rates.push(r.replay_rate);
    }
    let rate = median(rates);
    println!(
        "attach: replay of {count} nmethods on bench.ManyMethods: median {rate:.0} nmethods/s (goal >= 50000; ratio to goal {:.2})",
        rate / 50_000.0
    );
    if count < 20_000 {
        bail!("bench.ManyMethods had only {count} nmethods (expected >= 20000)");
    }
    Ok(())
}
