//! Frames the walker must see through to reach a thread root: the kernel's signal frame (a
//! signal handler running on a Java thread) and HotSpot's arraycopy stubs.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jvmperf-frames-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Record `jvm` for a few seconds with thread names as roots; the collapsed stacks.
fn record(jvm: &Jvm, dir: &Path) -> String {
    let out = dir.join("profile.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "3",
        "-F",
        "499",
        "--threads",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(res.status.success(), "record failed: {}", stderr_of(&res));
    std::fs::read_to_string(&out).unwrap()
}

/// Samples of `thread` whose stack contains `frame`, and how many of them satisfy `ok`.
fn count(profile: &str, thread: &str, frame: &str, ok: impl Fn(&[&str]) -> bool) -> (u64, u64) {
    let (mut all, mut good) = (0, 0);
    for line in profile.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        if frames[0] != thread || !frames.iter().any(|f| f.starts_with(frame)) {
            continue;
        }
        let n: u64 = n.parse().unwrap();
        all += n;
        if ok(&frames) {
            good += n;
        }
    }
    (all, good)
}

/// A thread's stack reaches its root: the thread name, then the thread's native start.
fn rooted(frames: &[&str]) -> bool {
    frames
        .get(1..3)
        .is_some_and(|base| base.contains(&"start_thread"))
}

#[test]
fn a_signal_handler_on_a_java_thread_keeps_the_interrupted_java_frames() {
    let dir = scratch("signal");
    let lib = dir.join("libsignalspin.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-g", "-O1", "-o"])
        .arg(&lib)
        .arg(workspace().join("tests/fixtures/signal_spin.c"))
        .status()
        .expect("cc (apt-get install gcc)");
    assert!(built.success(), "cc failed");
    let jvm = Jvm::start(&[], "bench.SignalSpin", &[lib.to_str().unwrap()]);
    let profile = record(&jvm, &dir);
    let (in_handler, through) = count(&profile, "signal-worker", "jvmperf_spin_handler", |f| {
        let at = |name: &str| f.iter().position(|x| x.starts_with(name));
        rooted(f)
            && matches!(
                (at("bench.SignalSpin.recurse_["), at("__restore_rt"), at("jvmperf_spin_handler")),
                (Some(java), Some(trampoline), Some(handler)) if java < trampoline && trampoline < handler
            )
    });
    assert!(
        in_handler >= 50,
        "{in_handler} samples in the handler:\n{profile}"
    );
    assert!(
        through * 100 >= in_handler * 99,
        "{through} of {in_handler} handler samples reach the root through the interrupted Java frames:\n{profile}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
