//! `jvmperf record --wall` against a real JDK running the WallPhases bench app, whose workers time
//! their own compute / `Thread.sleep` / `LockSupport.parkNanos` phases with `System.nanoTime`:
//! each phase's share of the workers' samples must match its share of the recorded window.

mod common;

use common::*;
use std::time::Duration;

const PHASES: [&str; 3] = ["computePhase", "sleepPhase", "parkPhase"];
const GT_KEYS: [&str; 3] = ["compute", "sleep", "park"];

/// Samples per (thread name, phase) of a collapsed `--threads` profile; the phase is `None` for
/// stacks in none of them.
fn phase_samples(text: &str) -> Vec<(String, Option<usize>, u64)> {
    text.lines()
        .map(|line| {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let thread = stack.split(';').next().unwrap().to_string();
            let phase = PHASES
                .iter()
                .position(|p| stack.contains(&format!("bench.WallPhases.{p}_[")));
            (thread, phase, n.parse().unwrap())
        })
        .collect()
}

#[test]
fn wall_clock_shares_match_the_phases_the_app_timed() {
    let jvm = Jvm::start(&[], "bench.WallPhases", &["--threads", "2"]);
    let dir = std::env::temp_dir().join(format!("jvmperf-wall-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("wall.collapsed");
    let pid = jvm.pid.to_string();
    let res = run_jvmperf(&[
        "record",
        "-p",
        &pid,
        "-d",
        "10",
        "-F",
        "199",
        "--wall",
        "--threads",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "record --wall failed: {err}");
    assert!(err.contains("jvmperf: wall clock: "), "{err}");
    // Per CPU, nothing is copied per switch: no record may be lost.
    if err.contains("jvmperf: sampling per CPU") {
        assert!(err.contains(", 0 lost,"), "{err}");
        assert!(err.contains("stacks of the waits that counted: "), "{err}");
    }
    let window = sample_window(&err);
    // A GT line after the window's end.
    std::thread::sleep(Duration::from_millis(300));
    let lines = jvm.stdout_lines();
    let (g0, g1) = (
        ground_truth_at(&lines, GT_KEYS, window[0]),
        ground_truth_at(&lines, GT_KEYS, window[1]),
    );
    let truth: Vec<f64> = (0..3).map(|i| g1[i] - g0[i]).collect();
    let truth_total: f64 = truth.iter().sum();

    let samples = phase_samples(&std::fs::read_to_string(&out).unwrap());
    let workers: Vec<_> = samples
        .iter()
        .filter(|(thread, ..)| thread.starts_with("wall-worker-"))
        .collect();
    let total: u64 = workers.iter().map(|s| s.2).sum();
    // Every worker is counted at the rate all the time, on a CPU or not: 2 x 10 s x 199 Hz.
    let expected_total = 2.0 * (window[1] - window[0]) as f64 / 1e9 * 199.0;
    assert!(
        (total as f64 - expected_total).abs() <= 0.03 * expected_total,
        "{total} worker samples, {expected_total:.0} expected at the rate"
    );
    for (i, p) in PHASES.iter().enumerate() {
        let n: u64 = workers.iter().filter(|s| s.1 == Some(i)).map(|s| s.2).sum();
        let measured = 100.0 * n as f64 / total as f64;
        let expected = 100.0 * truth[i] / truth_total;
        eprintln!("{p}: {measured:.2}% of {total} samples, ground truth {expected:.2}%");
        assert!(
            (measured - expected).abs() <= 3.0,
            "{p}: {measured:.2}% of wall samples vs {expected:.2}% of the window (ground truth)"
        );
    }
    // Threads blocked all along (e.g. the Reference Handler waiting for work) are left out
    // without --idle, and said so.
    assert!(err.contains("blocked all along are left out"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn idle_keeps_threads_blocked_for_the_whole_recording() {
    let jvm = Jvm::start(&[], "bench.WallPhases", &["--threads", "1"]);
    let dir = std::env::temp_dir().join(format!("jvmperf-wall-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid = jvm.pid.to_string();
    let threads_of = |idle: bool| {
        let out = dir.join(format!("idle-{idle}.collapsed"));
        let mut args = vec![
            "record",
            "-p",
            &pid,
            "-d",
            "3",
            "--wall",
            "--threads",
            "-o",
            out.to_str().unwrap(),
        ];
        if idle {
            args.push("--idle");
        }
        let res = run_jvmperf(&args);
        assert!(res.status.success(), "{}", stderr_of(&res));
        let text = std::fs::read_to_string(&out).unwrap();
        let mut threads: Vec<String> = phase_samples(&text).into_iter().map(|s| s.0).collect();
        threads.sort();
        threads.dedup();
        threads
    };
    let without = threads_of(false);
    let with = threads_of(true);
    // The Reference Handler waits for references to enqueue: none in this app. (Threads started
    // before the attach are named by their comm, cut at 15 characters.)
    let reference_handler =
        |threads: &[String]| threads.iter().any(|t| t.starts_with("Reference Handl"));
    assert!(!reference_handler(&without), "{without:?}");
    assert!(reference_handler(&with), "{with:?}");
    for t in &without {
        assert!(with.contains(t), "{t} missing with --idle: {with:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
