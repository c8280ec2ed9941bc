//! `jvmperf record` against a real JDK 17 running the Phases bench app.

mod common;

use common::*;
use std::collections::HashMap;

const PHASES_FLAGS: &[&str] = &[
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=inline,bench.Phases::inlinedHelper",
    "-XX:CompileCommand=exclude,bench.Phases::interpretedPhase",
];

#[test]
fn records_mixed_java_and_native_stacks_of_every_phase() {
    let jvm = Jvm::start(PHASES_FLAGS, "bench.Phases", &[]);
    let dir = std::env::temp_dir().join(format!("jvmperf-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("phases.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "4",
        "-F",
        "499",
        "--threads",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "record failed: {err}");
    assert!(jvm.is_alive());

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

    let text = std::fs::read_to_string(&out).unwrap();
    let mut phase: HashMap<&str, u64> = HashMap::new();
    let (mut worker_total, mut deepest_recursion, mut libz_leaf, mut jni) =
        (0u64, 0usize, 0u64, 0u64);
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        if !stack.starts_with("phases-worker") {
            continue;
        }
        worker_total += n;
        for p in ["hotLoop", "interpretedPhase", "jniPhase", "recursivePhase"] {
            if stack.contains(&format!("bench.Phases.{p}_[")) {
                *phase.entry(p).or_default() += n;
            }
        }
        deepest_recursion = deepest_recursion.max(stack.matches("bench.Phases.recurse_[").count());
        if stack.contains("bench.Phases.jniPhase_[") {
            jni += n;
            let leaf = stack.rsplit(';').next().unwrap();
            if !leaf.ends_with(']') {
                libz_leaf += n;
            }
        }
    }
    assert!(worker_total > 500, "too few worker samples: {worker_total}");
    for p in ["hotLoop", "interpretedPhase", "jniPhase", "recursivePhase"] {
        let share = *phase.get(p).unwrap_or(&0) as f64 / worker_total as f64;
        assert!(
            (0.15..0.35).contains(&share),
            "{p} has {:.1}% of worker samples",
            share * 100.0
        );
    }
    assert!(
        text.contains("bench.Phases.interpretedPhase_[0]"),
        "the never-compiled method is named as interpreted"
    );
    assert!(
        deepest_recursion >= 100,
        "deepest recursion seen: {deepest_recursion}"
    );
    assert!(
        libz_leaf * 2 >= jni,
        "most Deflater samples should end in native code: {libz_leaf} of {jni}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
