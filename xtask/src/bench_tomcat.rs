//! `cargo xtask bench tomcat [--window S] [--rounds N] [--connections C]`: Debian's Tomcat 10
//! serving its JSP examples under wrk, its request rate while `jvmperf record` samples it at
//! 99 Hz and at 999 Hz against the rate without a recording, in alternating windows of one run
//! (none, 99 Hz, 999 Hz, repeated), so load from elsewhere on the machine hits all three alike.

#[path = "../../tests/common/tomcat.rs"]
#[allow(dead_code)]
mod tomcat;

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::{bench_jvm, jdk};
use tomcat::Tomcat;

struct Args {
    warm_up: u64,
    window: u64,
    rounds: usize,
    connections: u32,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut out = Args {
        warm_up: 20,
        window: 10,
        rounds: 3,
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
            "--rounds" => out.rounds = value()?.max(1) as usize,
            "--connections" => out.connections = value()?.max(1) as u32,
            "-h" | "--help" => {
                println!(
                    "usage: cargo xtask bench tomcat [--warm-up SECONDS (20)] [--window SECONDS (10)] [--rounds N (3)] [--connections C (4)]"
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

/// `seconds` of wrk load; requests per second.
fn window_rate(tomcat: &Tomcat, args: &Args, seconds: u64) -> Result<f64> {
    let out = tomcat
        .wrk(seconds, args.connections)
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
    eprintln!(
        "bench tomcat: Tomcat (pid {}) on 127.0.0.1:{}; warming up for {} s",
        tomcat.pid, tomcat.port, args.warm_up
    );
    if args.warm_up > 0 {
        window_rate(&tomcat, &args, args.warm_up)?;
    }

    const MODES: [Option<u64>; 3] = [None, Some(99), Some(999)];
    let mut rates: [Vec<f64>; 3] = Default::default();
    for round in 0..args.rounds {
        for (m, mode) in MODES.iter().enumerate() {
            let recording = match mode {
                Some(hz) => {
                    let out = dir.join(format!("r{round}-{hz}.jvmperf"));
                    let child = bench_jvm::spawn_record(
                        &jvmperf,
                        tomcat.pid,
                        (args.window + 2 * ATTACH_LEAD, *hz),
                        &[],
                        &out,
                    )?;
                    std::thread::sleep(Duration::from_secs(ATTACH_LEAD));
                    Some(child)
                }
                None => None,
            };
            let rate = window_rate(&tomcat, &args, args.window)?;
            if let Some(child) = recording {
                let out = child.wait_with_output()?;
                ensure!(
                    out.status.success(),
                    "jvmperf record failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let label = mode.map_or("none".to_string(), |hz| format!("{hz} Hz"));
            eprintln!("bench tomcat: round {round} {label:>7}: {rate:.0} requests/s");
            rates[m].push(rate);
        }
    }
    let base = median(&rates[0]);
    println!(
        "tomcat requests/s (median of {} windows of {} s, {} connections):",
        args.rounds, args.window, args.connections
    );
    for (m, mode) in MODES.iter().enumerate() {
        let label = mode.map_or("no recording".to_string(), |hz| {
            format!("recording at {hz} Hz")
        });
        let rate = median(&rates[m]);
        println!(
            "  {label:<22} {rate:>9.0}   {:>6.1}% of the rate without",
            100.0 * rate / base
        );
    }
    drop(tomcat);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
