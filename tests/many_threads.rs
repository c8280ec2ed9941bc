//! JVMs whose threads run briefly (`bench.ManyThreads`): thousands of pool threads that wake every
//! ~200 ms for a 50 µs burst, threads that live 20–50 ms. Both sampling strategies take samples in
//! proportion to the threads' CPU time; per CPU, even threads that live 20 ms are sampled.

mod common;

use common::*;
use std::path::Path;

/// The groups of threads whose CPU time `bench.ManyThreads` measures (its `GT` lines).
const GROUPS: [&str; 3] = ["pool", "busy", "short"];

/// Samples of the collapsed stacks in `file` whose frames contain each of `methods`.
fn samples_in(file: &Path, methods: &[&str]) -> Vec<f64> {
    let text = std::fs::read_to_string(file).unwrap();
    methods
        .iter()
        .map(|m| {
            text.lines()
                .filter(|l| l.contains(m))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        })
        .collect()
}

/// The percentage `record` printed as its coverage.
fn coverage(stderr: &str) -> f64 {
    stderr
        .lines()
        .find_map(|l| l.split_once("coverage ")?.1.split_once('%'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no coverage in: {stderr}"))
}

/// Shares (percent) of `values` in their sum.
fn shares(values: &[f64]) -> Vec<f64> {
    let total: f64 = values.iter().sum::<f64>().max(1.0);
    values.iter().map(|v| 100.0 * v / total).collect()
}

/// Records `jvm` with `sampling` and checks coverage (within `coverage` percent), and that each
/// group's share of the samples in its work method is within `tolerance` percentage points of its
/// share of the CPU time the threads measured themselves.
fn check(
    jvm: &Jvm,
    sampling: &str,
    groups: &[(&str, &str)],
    coverage_range: std::ops::RangeInclusive<f64>,
    tolerance: f64,
) {
    let dir = tempfile_dir(sampling);
    let out = dir.join("p.collapsed");
    let run = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "6",
        "-F",
        "499",
        "--sampling",
        sampling,
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr_of(&run);
    assert!(run.status.success(), "{err}");
    let strategy = match sampling {
        "per-cpu" => "sampling per CPU",
        _ => "sampling per thread",
    };
    assert!(err.contains(strategy), "{err}");
    let cov = coverage(&err);
    assert!(
        coverage_range.contains(&cov),
        "{sampling}: coverage {cov}%: {err}"
    );
    let [first, last] = sample_window(&err);
    let lines = jvm.stdout_lines();
    let (start, end) = (
        ground_truth_at(&lines, GROUPS, first),
        ground_truth_at(&lines, GROUPS, last),
    );
    let cpu: Vec<f64> = groups
        .iter()
        .map(|(group, _)| {
            let i = GROUPS.iter().position(|g| g == group).unwrap();
            end[i] - start[i]
        })
        .collect();
    let methods: Vec<&str> = groups.iter().map(|g| g.1).collect();
    let sampled = shares(&samples_in(&out, &methods));
    let truth = shares(&cpu);
    for (i, (group, _)) in groups.iter().enumerate() {
        assert!(
            (sampled[i] - truth[i]).abs() <= tolerance,
            "{sampling}: {group} has {:.1}% of the samples, {:.1}% of the CPU time ({groups:?}: \
             sampled {sampled:?}, measured {truth:?})",
            sampled[i],
            truth[i]
        );
    }
    eprintln!("{sampling}: coverage {cov}%, shares sampled {sampled:.1?} measured {truth:.1?}");
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "jvmperf-many-threads-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// 3000 pool threads that each run 50 µs every ~200 ms (1.5 ms of CPU in the recording: 3/4 of
/// a period at 499 Hz) and 4 busy threads: per CPU, samples follow CPU time.
#[test]
fn a_3000_thread_jvm_is_sampled_in_proportion_per_cpu() {
    let _turn = one_at_a_time();
    let jvm = Jvm::start(&[], "bench.ManyThreads", &["--pool", "3000", "--busy", "4"]);
    let groups = [
        ("pool", "ManyThreads.poolWork"),
        ("busy", "ManyThreads.busyWork"),
    ];
    check(&jvm, "per-cpu", &groups, 97.0..=103.0, 2.5);
}

/// Per thread, each event counts its own thread's CPU time: 3000 pool threads that each run 3/4 of
/// a period in the recording are sampled in proportion only because each thread's first period is
/// drawn at random (with a full first period they would be sampled about never), and because the
/// window starts once every thread has its event. Coverage stays a few points short: a per-thread
/// event's timer stops while it is cancelled and restarted at each of the ~15,000 switches a
/// second here, time its own count includes (the kernel sampled 94% of it, see docs/sampling.md).
/// Shares within 3.5 points: on the 2-CPU CI machine the 4 busy threads' share of the CPU time
/// swings from 2% to 12% between runs, and the sampled shares were 0.3–3.0 points off it.
#[test]
fn a_3000_thread_jvm_is_sampled_in_proportion_per_thread() {
    let _turn = one_at_a_time();
    let jvm = Jvm::start(&[], "bench.ManyThreads", &["--pool", "3000", "--busy", "4"]);
    let groups = [
        ("pool", "ManyThreads.poolWork"),
        ("busy", "ManyThreads.busyWork"),
    ];
    check(&jvm, "per-thread", &groups, 90.0..=103.0, 3.5);
}

/// Threads that live 20–50 ms of CPU time, one started every 40 ms: per CPU they are sampled from
/// their first instruction, so their share of the samples is their share of the CPU time.
#[test]
fn threads_that_live_tens_of_milliseconds_are_sampled_per_cpu() {
    let _turn = one_at_a_time();
    let jvm = Jvm::start(
        &[],
        "bench.ManyThreads",
        &["--pool", "0", "--busy", "1", "--short-lived"],
    );
    let groups = [
        ("busy", "ManyThreads.busyWork"),
        ("short", "ManyThreads.shortLivedWork"),
    ];
    check(&jvm, "per-cpu", &groups, 97.0..=103.0, 2.5);
}
