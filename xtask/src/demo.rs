//! `cargo xtask demo`: start a bundled bench app and run jvmperf against it, for people without a
//! JVM at hand.

use anyhow::Result;
use std::process::Command;

use crate::bench_jvm::{self, BenchJvm};
use crate::paths;

pub fn main(_args: &[String]) -> Result<()> {
    let jvmperf = bench_jvm::prepare()?;
    let jvm = BenchJvm::start(
        &[
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=inline,bench.InlineHot::helper",
            "-XX:CompileCommand=dontinline,bench.InlineHot::hotLoop",
        ],
        &bench_jvm::classes(),
        "bench.InlineHot",
        &[],
    )?;
    let out = paths::target_dir().join("demo-jitmap.txt");
    println!("demo: bench.InlineHot runs as pid {}", jvm.pid());
    let status = Command::new(&jvmperf)
        .args([
            "jitmap",
            "-p",
            &jvm.pid().to_string(),
            "--precise-inlining",
            "--perf-map",
            "-o",
        ])
        .arg(&out)
        .status()?;
    anyhow::ensure!(status.success(), "jvmperf jitmap failed");
    println!(
        "demo: JIT code map with inline trees written to {}",
        out.display()
    );
    Ok(())
}
