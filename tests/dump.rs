//! Seeing into a JVM without attaching to it, against real JVMs: `jvmperf dump` of a healthy one
//! and of one stuck before a safepoint (where jstack hangs), and `jvmperf record` without the
//! agent (by itself on the stuck JVM, or with `--no-agent`), and the locks threads wait for with
//! a Java-level deadlock found. The JVMs run on afterwards.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// InlineHot with its helper inlined into hotLoop, and debug info at every instruction (code
/// compiled without an attach has it only if the JVM was started so).
const INLINE_HOT_FLAGS: &[&str] = &[
    "-XX:+UnlockDiagnosticVMOptions",
    "-XX:+DebugNonSafepoints",
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=inline,bench.InlineHot::helper",
    "-XX:CompileCommand=dontinline,bench.InlineHot::hotLoop",
];

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
fn dump_shows_the_locks_threads_wait_for_and_finds_the_deadlock() {
    let jvm = Jvm::start(&[], "bench.Deadlock", &[]);
    let dump = dump_json(jvm.pid);
    let one = |name: &str| {
        let threads = threads_named(&dump, name);
        assert_eq!(threads.len(), 1, "threads named {name}");
        threads[0]
    };
    let (left, right, parker) = (one("left"), one("right"), one("parker"));
    let tid = |t: &Value| t["tid"].as_u64().unwrap();
    for (t, class, owner) in [
        (left, "bench.Deadlock$Right", right),
        (right, "bench.Deadlock$Left", left),
    ] {
        let lock = &t["waiting_to_lock"];
        assert_eq!(lock["class"], class, "{t}");
        assert_eq!(lock["owner_tid"].as_u64(), Some(tid(owner)), "{t}");
    }
    assert_eq!(
        parker["parking_for"]["class"], "java.util.concurrent.locks.ReentrantLock$NonfairSync",
        "{parker}"
    );
    let mut cycle: Vec<u64> = dump["deadlocks"][0]
        .as_array()
        .unwrap_or_else(|| panic!("no deadlock in {}", dump["deadlocks"]))
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    cycle.sort_unstable();
    let mut expected = vec![tid(left), tid(right)];
    expected.sort_unstable();
    assert_eq!(cycle, expected);
    assert_eq!(dump["deadlocks"].as_array().unwrap().len(), 1);

    // The text says it as jstack does.
    let out = run_jvmperf(&["dump", "-p", &jvm.pid.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Found one Java-level deadlock:"), "{text}");
    assert!(
        text.contains("- waiting to lock <0x")
            && text.contains("(a bench.Deadlock$Left) owned by \"left\""),
        "{text}"
    );
    assert!(text.contains("- parking to wait for <0x"), "{text}");
    assert_no_thread_held(jvm.pid);
    assert!(jvm.is_alive());
}

#[test]
fn a_jvm_stuck_before_a_safepoint_is_dumped_and_profiled_without_attach() {
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

    // record cannot attach (the Attach Listener never starts) and profiles it without the agent.
    let stacks = record(jvm.pid, &[]);
    let spinner: Vec<&(String, u64)> = stacks
        .iter()
        .filter(|(stack, _)| stack.starts_with("spinner;"))
        .collect();
    let total: u64 = spinner.iter().map(|(_, n)| n).sum();
    let spinning: u64 = spinner
        .iter()
        .filter(|(stack, _)| top_java_frame(stack) == Some("bench.Stuck.spin"))
        .map(|(_, n)| n)
        .sum();
    assert!(total >= 50, "too few spinner samples: {stacks:?}");
    assert!(
        spinning * 10 >= total * 9,
        "bench.Stuck.spin on top in {spinning} of {total} spinner samples"
    );
    assert!(jvm.is_alive());
    // jstack's trigger file remains (it was killed while waiting).
    let _ = std::fs::remove_file(workspace().join(format!(".attach_pid{}", jvm.pid)));
}

/// `record -d 3 --threads` of `pid` with `extra` options: the collapsed stacks and counts, and
/// its stderr must say it profiled without the agent.
fn record(pid: u32, extra: &[&str]) -> Vec<(String, u64)> {
    let out = std::env::temp_dir().join(format!("jvmperf-noagent-{pid}.collapsed"));
    let pid = pid.to_string();
    let mut args = vec![
        "record",
        "-p",
        &pid,
        "-d",
        "3",
        "-F",
        "499",
        "--threads",
        "-o",
    ];
    args.push(out.to_str().unwrap());
    args.extend_from_slice(extra);
    let res = run_jvmperf(&args);
    let err = stderr_of(&res);
    assert!(res.status.success(), "record failed: {err}");
    assert!(err.contains("without the agent"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    text.lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// The leaf-most Java frame of a collapsed stack, without its `_[x]` suffix.
fn top_java_frame(stack: &str) -> Option<&str> {
    stack.split(';').rev().find_map(|f| {
        let (name, kind) = f.rsplit_once("_[")?;
        matches!(kind, "j]" | "1]" | "i]" | "0]").then_some(name)
    })
}

/// `--no-agent` on a healthy JVM: nothing is loaded into it, and the methods inlined into compiled
/// code are still named (from the nmethod's debug info, as each sample is walked).
#[test]
fn record_without_the_agent_names_inlined_frames() {
    let jvm = Jvm::start(INLINE_HOT_FLAGS, "bench.InlineHot", &[]);
    let stacks = record(jvm.pid, &["--no-agent"]);
    let inlined: u64 = stacks
        .iter()
        .filter(|(s, _)| s.contains("bench.InlineHot.hotLoop_[j];bench.InlineHot.helper_[i]"))
        .map(|(_, n)| n)
        .sum();
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    assert!(
        inlined * 2 >= total,
        "helper inlined into hotLoop in {inlined} of {total} samples: {stacks:?}"
    );
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", jvm.pid)).unwrap();
    assert!(!maps.contains("jvmperf-shim"), "the shim was loaded");
    assert!(jvm.is_alive());
}

/// Methods inlined into compiled code are decoded from the nmethod's own debug info: the
/// forced-inline helper shows as an inlined frame over its compiled caller.
#[test]
fn dump_names_inlined_frames_from_the_nmethods_debug_info() {
    let jvm = Jvm::start(INLINE_HOT_FLAGS, "bench.InlineHot", &[]);
    let inlined = (0..5).any(|_| {
        let dump = dump_json(jvm.pid);
        dump["threads"].as_array().unwrap().iter().any(|t| {
            frame_names(t).windows(2).any(|w| {
                w[0] == ("bench.InlineHot.helper", "inlined")
                    && w[1] == ("bench.InlineHot.hotLoop", "compiled")
            })
        })
    });
    assert!(inlined, "no dump showed helper inlined into hotLoop");
    assert!(jvm.is_alive());
}
