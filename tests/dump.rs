//! `jvmperf dump` against real JVMs: a healthy one, and one stuck before a safepoint where jstack
//! hangs. Neither is attached to; both run on afterwards.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn dump_json(pid: u32) -> Value {
    let started = Instant::now();
    let out = run_jvmperf(&["dump", "-p", &pid.to_string(), "--json"]);
    assert!(out.status.success(), "dump failed: {}", stderr_of(&out));
    eprintln!("dump took {:?}", started.elapsed());
    serde_json::from_slice(&out.stdout).expect("dump --json is JSON")
}

/// Threads whose name starts with `name` (kernel thread names are cut at 15 characters).
fn threads_named<'a>(dump: &'a Value, name: &str) -> Vec<&'a Value> {
    dump["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with(name)))
        .collect()
}

fn frame_names(thread: &Value) -> Vec<(&str, &str)> {
    thread["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["kind"].as_str().unwrap()))
        .collect()
}

fn is_java(kind: &str) -> bool {
    matches!(kind, "compiled" | "inlined" | "interpreted")
}

/// No thread of the JVM may be left in a ptrace stop.
fn assert_no_thread_held(pid: u32) {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .map(|(_, s)| s.trim_start().chars().next());
        assert_ne!(
            state,
            Some(Some('t')),
            "thread {:?} left stopped",
            task.file_name()
        );
    }
}

#[test]
fn dump_of_a_healthy_jvm_lists_every_worker_with_its_java_frames() {
    let jvm = Jvm::start(&[], "bench.Phases", &["--threads", "2"]);
    let dump = dump_json(jvm.pid);
    let workers = threads_named(&dump, "phases-worker");
    assert_eq!(workers.len(), 2, "{dump:#}");
    for w in workers {
        let frames = frame_names(w);
        assert!(
            frames
                .iter()
                .any(|(name, kind)| is_java(kind) && name.starts_with("bench.Phases")),
            "no bench.Phases frame in {w:#}"
        );
        assert!(
            w["java_state"].is_string(),
            "a Java thread's HotSpot state: {w:#}"
        );
    }
    assert!(jvm.is_alive());
    assert_no_thread_held(jvm.pid);
    // It runs on: the app keeps reporting its phases' CPU time.
    let reports = || {
        jvm.stdout_lines()
            .iter()
            .filter(|l| l.starts_with("GT "))
            .count()
    };
    let before = reports();
    let deadline = Instant::now() + Duration::from_secs(20);
    while reports() <= before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        reports() > before,
        "the JVM stopped reporting after the dump"
    );
}

#[test]
fn dump_of_a_jvm_stuck_before_a_safepoint_shows_every_thread() {
    let jvm = Jvm::start(
        &["-XX:-UseCountedLoopSafepoints", "-XX:LoopStripMiningIter=0"],
        "bench.Stuck",
        &[],
    );
    jvm.wait_for_line("STUCK", Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(1));

    let jstack = java_home().join("bin/jstack");
    if jstack.exists() {
        let mut child = Command::new(&jstack)
            .arg(jvm.pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(5));
        let finished = child.try_wait().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            finished.is_none(),
            "jstack finished on a stuck JVM: {finished:?}"
        );
    }

    let dump = dump_json(jvm.pid);
    let spinner = threads_named(&dump, "spinner");
    assert_eq!(spinner.len(), 1, "{dump:#}");
    let frames = frame_names(spinner[0]);
    let top_java = frames.iter().find(|(_, kind)| is_java(kind));
    assert_eq!(
        top_java.map(|f| f.0),
        Some("bench.Stuck.spin"),
        "{frames:?}"
    );
    assert_eq!(spinner[0]["java_state"], "in Java");

    let gc_caller = threads_named(&dump, "gc-caller");
    assert_eq!(gc_caller.len(), 1, "{dump:#}");
    assert!(frame_names(gc_caller[0])
        .iter()
        .any(|(name, _)| name.contains("java.lang.System.gc") || name.contains("Runtime.gc")));

    let vm_thread = threads_named(&dump, "VM Thread");
    assert_eq!(vm_thread.len(), 1, "{dump:#}");
    let vm_frames = frame_names(vm_thread[0]);
    // With libjvm's symbols (JDK 17 with its debug info), the VM thread is seen waiting for the
    // safepoint; JDKs without them name few of libjvm's functions.
    if vm_frames
        .iter()
        .any(|(name, _)| name.starts_with("VMThread::"))
    {
        assert!(
            vm_frames
                .iter()
                .any(|(name, _)| name.starts_with("SafepointSynchronize::")),
            "{vm_frames:?}"
        );
    }
    let threads = dump["threads"].as_array().unwrap().len();
    let tasks = std::fs::read_dir(format!("/proc/{}/task", jvm.pid))
        .unwrap()
        .count();
    assert_eq!(threads, tasks, "every thread is in the dump");
    assert!(jvm.is_alive());
    assert_no_thread_held(jvm.pid);
}
