//! `cargo xtask demo`: start a bundled bench app and run jvmperf against it, for people without a
//! JVM at hand: target/demo.svg and target/demo.html from one recording, and a JIT code map.

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
    let pid = jvm.pid().to_string();
    println!("demo: bench.InlineHot runs as pid {pid}");
    // One recording, written out as the SVG flame graph and the HTML page.
    let recording = paths::target_dir().join("demo.jvmperf");
    let status = Command::new(&jvmperf)
        .args(["record", "-p", &pid, "-d", "5", "--precise-inlining", "-o"])
        .arg(&recording)
        .status()?;
    anyhow::ensure!(status.success(), "jvmperf record failed");
    let svg = paths::target_dir().join("demo.svg");
    let html = paths::target_dir().join("demo.html");
    for out in [&svg, &html] {
        let status = Command::new(&jvmperf)
            .arg("convert")
            .arg(&recording)
            .arg("-o")
            .arg(out)
            .status()?;
        anyhow::ensure!(status.success(), "jvmperf convert failed");
    }
    let map = paths::target_dir().join("demo-jitmap.txt");
    let status = Command::new(&jvmperf)
        .args(["jitmap", "-p", &pid, "-o"])
        .arg(&map)
        .status()?;
    anyhow::ensure!(status.success(), "jvmperf jitmap failed");
    println!(
        "demo: flame graph in {}, the page (timeline, threads, search, callers) in {}, JIT code map with inline trees in {}",
        svg.display(),
        html.display(),
        map.display()
    );
    Ok(())
}
