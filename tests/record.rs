//! `jvmperf record` against a real JDK 17 running the Phases bench app, checked against the app's
//! own per-phase CPU time (ThreadMXBean) over exactly the recorded window.

mod common;

use common::*;
use std::collections::HashMap;

/// Accuracy needs the CPU: recordings in this file run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const PHASES: [&str; 4] = ["hotLoop", "interpretedPhase", "jniPhase", "recursivePhase"];
const GT_KEYS: [&str; 4] = ["hotLoop", "interpreted", "jni", "recursive"];

fn phases_flags(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec![
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=inline,bench.Phases::inlinedHelper",
        "-XX:CompileCommand=exclude,bench.Phases::interpretedPhase",
    ];
    v.extend_from_slice(extra);
    v
}

fn record_phases(extra_jvm_flags: &[&'static str], extra_record_args: &[&str]) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let jvm = Jvm::start(&phases_flags(extra_jvm_flags), "bench.Phases", &[]);
    let dir = std::env::temp_dir().join(format!("jvmperf-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!(
        "phases-{}-{}.collapsed",
        extra_jvm_flags.len(),
        extra_record_args.len()
    ));
    let pid = jvm.pid.to_string();
    let mut args = vec![
        "record",
        "-p",
        &pid,
        "-d",
        "12",
        "-F",
        "999",
        "--threads",
        "--precise-inlining",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra_record_args);
    let res = run_jvmperf(&args);
    let err = stderr_of(&res);
    assert!(res.status.success(), "record failed: {err}");
    assert!(jvm.is_alive());
    std::thread::sleep(std::time::Duration::from_millis(300));

    let rooted: f64 = err
        .split("% unwound to a thread root")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no rooted percentage in {err}"));
    assert!(
        rooted >= 98.0,
        "only {rooted}% of stacks reached a thread root"
    );
    let window = sample_window(&err);

    let text = std::fs::read_to_string(&out).unwrap();
    let mut phase: HashMap<&str, u64> = HashMap::new();
    let (mut worker_total, mut deepest, mut libz_leaf, mut jni, mut hot, mut hot_inlined) =
        (0u64, 0usize, 0u64, 0u64, 0u64, 0u64);
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        if !stack.starts_with("phases-worker") {
            continue;
        }
        worker_total += n;
        for p in PHASES {
            if stack.contains(&format!("bench.Phases.{p}_[")) {
                *phase.entry(p).or_default() += n;
            }
        }
        deepest = deepest.max(stack.matches("bench.Phases.recurse_[").count());
        if stack.contains("bench.Phases.jniPhase_[") {
            jni += n;
            let leaf = stack.rsplit(';').next().unwrap();
            if leaf.starts_with("libz.so") || (!leaf.ends_with(']') && stack.contains("deflate")) {
                libz_leaf += n;
            }
        }
        if stack.contains("bench.Phases.hotLoop_[j]") {
            hot += n;
            if stack.contains("bench.Phases.inlinedHelper_[i]") {
                hot_inlined += n;
            }
        }
    }
    assert!(
        worker_total >= 5000,
        "too few worker samples: {worker_total}"
    );

    let (g0, g1) = (
        ground_truth_at(&jvm.stdout_lines(), GT_KEYS, window[0]),
        ground_truth_at(&jvm.stdout_lines(), GT_KEYS, window[1]),
    );
    let truth: Vec<f64> = (0..4).map(|i| g1[i] - g0[i]).collect();
    let truth_total: f64 = truth.iter().sum();
    for (i, p) in PHASES.iter().enumerate() {
        let measured = 100.0 * *phase.get(p).unwrap_or(&0) as f64 / worker_total as f64;
        let expected = 100.0 * truth[i] / truth_total;
        eprintln!("{p}: {measured:.2}% of {worker_total} samples, ground truth {expected:.2}%");
        assert!(
            (measured - expected).abs() <= 1.5,
            "{p}: {measured:.2}% of samples vs {expected:.2}% of CPU time (ground truth)"
        );
    }
    assert!(
        text.contains("bench.Phases.interpretedPhase_[0]"),
        "interpreted method named"
    );
    assert!(deepest >= 100, "deepest recursion seen: {deepest}");
    assert!(
        10 * libz_leaf >= 7 * jni,
        "Deflater samples ending in libz: {libz_leaf} of {jni}"
    );
    assert!(
        2 * hot_inlined >= hot,
        "hot loop samples with the inlined helper: {hot_inlined} of {hot}"
    );
    let _ = std::fs::remove_file(&out);
}

#[test]
fn phases_match_ground_truth() {
    record_phases(&[], &[]);
}

/// Frames past the kernel's stack copy are read from the live stack: a 4 KiB copy still walks
/// the 100-deep recursion (several KiB) to its root and keeps every phase's share.
#[test]
fn phases_match_ground_truth_with_a_small_stack_copy() {
    record_phases(&[], &["--stack-size", "4096"]);
}

#[test]
fn phases_match_ground_truth_with_frame_pointers() {
    record_phases(&["-XX:+PreserveFramePointer"], &[]);
}

#[test]
fn target_exit_and_sigterm_still_write_what_was_collected() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("jvmperf-partial-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // The target exits 3 s after READY while jvmperf records without a duration.
    let jvm = Jvm::start(&[], "bench.InlineHot", &["3"]);
    let out = dir.join("exit.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-F",
        "199",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    assert!(err.contains("recording ended early"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("bench.InlineHot.hotLoop_[j]"), "{text}");

    // SIGTERM ends an open-ended recording cleanly.
    let jvm = Jvm::start(&[], "bench.InlineHot", &[]);
    let out = dir.join("term.svg");
    let child = jvmperf()
        .args([
            "record",
            "-p",
            &jvm.pid.to_string(),
            "-o",
            out.to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let res = child.wait_with_output().unwrap();
    assert!(res.status.success(), "{}", stderr_of(&res));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("bench.InlineHot.hotLoop"));
    assert!(jvm.is_alive());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn past_max_stacks_new_stacks_are_cut_after_their_known_prefix() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("jvmperf-maxstacks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Phases' recursive phase alone makes a new stack per depth.
    let jvm = Jvm::start(&phases_flags(&[]), "bench.Phases", &[]);
    let out = dir.join("cut.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "3",
        "-F",
        "999",
        "--max-stacks",
        "3",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    assert!(err.contains("past --max-stacks 3"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (cut, whole): (Vec<&str>, Vec<&str>) = lines
        .iter()
        .partition(|l| l.contains("[truncated: --max-stacks]"));
    // Phases has far more than 3 distinct stacks within 3 s at 999 Hz.
    assert!(!cut.is_empty(), "{text}");
    assert!(whole.len() <= 3, "{} whole stacks:\n{text}", whole.len());
    for line in &cut {
        let (stack, _count) = line.rsplit_once(' ').unwrap();
        assert!(
            stack.ends_with("[truncated: --max-stacks]"),
            "the marker ends a cut stack: {line}"
        );
        let prefix = stack.rsplit_once(';').map_or("", |(p, _)| p);
        assert!(
            prefix.is_empty() || whole.iter().any(|w| w.starts_with(prefix)),
            "a cut stack keeps a known prefix: {line}"
        );
    }
    let total: u64 = lines
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert!(err.contains(&format!("jvmperf: {total} samples")), "{err}");
    assert!(jvm.is_alive());
    let _ = std::fs::remove_dir_all(&dir);
}
