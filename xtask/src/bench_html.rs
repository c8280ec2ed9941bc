//! `cargo xtask bench html [--recording FILE] [--runs N]`: the HTML page of a big recording (by
//! default `bench soak`'s, target/soak/soak.jvmperf: ~165k distinct stacks after 30 minutes):
//! the page's size and the speedscope export's, and how long headless Chromium takes from
//! navigation to the page drawn and for one redraw (what a new time window or thread filter
//! costs), as the page itself measures them (`performance.now()`, read back with `--dump-dom`).
//! Goals: the page opens in at most 2 s and stays under 10 MB.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{bench_convert, bench_jvm, paths};

const GOAL_LOAD_MS: f64 = 2000.0;
const GOAL_MB: f64 = 10.0;

struct Args {
    recording: PathBuf,
    runs: usize,
}

fn parse_args(args: &[String]) -> Result<Args> {
    let mut out = Args {
        recording: paths::target_dir().join("soak/soak.jvmperf"),
        runs: 3,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--recording" => out.recording = PathBuf::from(value()?),
            "--runs" => out.runs = value()?.parse::<usize>().context("--runs")?.max(1),
            "-h" | "--help" => {
                println!("usage: cargo xtask bench html [--recording FILE (target/soak/soak.jvmperf)] [--runs N (3)]");
                std::process::exit(0);
            }
            other => bail!("unknown option {other} (see --help)"),
        }
    }
    Ok(out)
}

/// (ms to the page drawn, ms of one redraw) in a fresh headless Chromium.
fn load(page: &Path) -> Result<(f64, f64)> {
    let out = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,1000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", page.display()))
        .output()
        .context(
            "running chromium (apt-get install chromium, see scripts/setup-debian.sh --tests)",
        )?;
    let dom = String::from_utf8_lossy(&out.stdout);
    let attr = |name: &str| -> Option<f64> {
        let at = dom.find(&format!("{name}=\""))? + name.len() + 2;
        dom[at..].split('"').next()?.parse().ok()
    };
    match (attr("data-ready-ms"), attr("data-recompute-ms")) {
        (Some(ready), Some(redraw)) => Ok((ready, redraw)),
        _ => bail!(
            "the page did not finish drawing in chromium: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| l.contains("CONSOLE") || l.contains("rror"))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

pub fn main(args: &[String]) -> Result<()> {
    let args = parse_args(args)?;
    if !args.recording.exists() {
        bail!(
            "{} does not exist: run `cargo xtask bench soak` first, or give --recording FILE",
            args.recording.display()
        );
    }
    let jvmperf = bench_jvm::prepare()?;
    let dir = paths::target_dir().join("bench-html");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let page = dir.join("soak.html");
    let (convert_s, samples) = bench_convert::convert(&jvmperf, &args.recording, &page)?;
    let speedscope = dir.join("soak.speedscope.json");
    bench_convert::convert(&jvmperf, &args.recording, &speedscope)?;
    let text = std::fs::read_to_string(&page).context("reading the page")?;
    // The page's own counts (its data block: `"stacks":{…"n":…}`, `"nodes":{…"n":…}`).
    let count = |key: &str| -> String {
        text.split_once(&format!("\"{key}\":{{"))
            .and_then(|(_, rest)| rest.split_once("\"n\":"))
            .and_then(|(_, rest)| rest.split([',', '}']).next())
            .unwrap_or("?")
            .to_string()
    };
    let mb = |p: &Path| std::fs::metadata(p).map_or(0.0, |m| m.len() as f64 / 1e6);
    let (page_mb, speedscope_mb) = (mb(&page), mb(&speedscope));
    let mut loads = Vec::new();
    let mut redraws = Vec::new();
    for _ in 0..args.runs {
        let (ready, redraw) = load(&page)?;
        loads.push(ready);
        redraws.push(redraw);
    }
    loads.sort_by(f64::total_cmp);
    redraws.sort_by(f64::total_cmp);
    let (load_ms, redraw_ms) = (loads[loads.len() / 2], redraws[redraws.len() / 2]);
    println!(
        "html: {} ({:.1} MB, {samples} samples, {} distinct stacks, {} trie nodes): page {page_mb:.1} MB (goal <= {GOAL_MB} MB), written in {convert_s:.2} s; speedscope export {speedscope_mb:.1} MB",
        args.recording.display(),
        mb(&args.recording),
        count("stacks"),
        count("nodes"),
    );
    println!(
        "html: headless Chromium, median of {} runs: drawn {load_ms:.0} ms after navigation (goal <= {GOAL_LOAD_MS} ms), a redraw (new window or threads) {redraw_ms:.0} ms",
        args.runs
    );
    if page_mb > GOAL_MB || load_ms > GOAL_LOAD_MS {
        bail!("the page misses its goals");
    }
    Ok(())
}
