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

/// Samples in the frames under test that a test waits for (recording a few seconds at a time).
const MIN_SAMPLES: u64 = 30;

/// Recordings in this file need the CPU: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Recordings of `jvm` for a few seconds each, thread names as roots, until `enough` holds of
/// their collapsed stacks together (at most 5 on a busy machine); the stacks.
fn record_until(jvm: &Jvm, dir: &Path, enough: impl Fn(&str) -> bool) -> String {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = dir.join("profile.collapsed");
    let mut profile = String::new();
    for _ in 0..5 {
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
        profile += &std::fs::read_to_string(&out).unwrap();
        if enough(&profile) {
            break;
        }
    }
    profile
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
    const HANDLER: &str = "jvmperf_spin_handler";
    let profile = record_until(&jvm, &dir, |p| {
        count(p, "signal-worker", HANDLER, |_| true).0 >= MIN_SAMPLES
    });
    let (in_handler, through) = count(&profile, "signal-worker", HANDLER, |f| {
        // The signal interrupts whichever of the worker's methods runs: `recurse` mostly, at
        // times the lambda's loop around it, so the frame under the trampoline is any of them.
        let at = |name: &str| f.iter().position(|x| x.starts_with(name));
        rooted(f)
            && matches!(
                (at("__restore_rt"), at("jvmperf_spin_handler")),
                (Some(trampoline), Some(handler))
                    if trampoline < handler
                        && trampoline > 0
                        && f[trampoline - 1].starts_with("bench.SignalSpin.")
            )
    });
    assert!(
        in_handler >= MIN_SAMPLES,
        "{in_handler} samples in the handler:\n{profile}"
    );
    assert!(
        through * 100 >= in_handler * 99,
        "{through} of {in_handler} handler samples reach the root through the interrupted Java frames:\n{profile}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn arraycopy_stubs_have_their_java_caller_below_them() {
    let dir = scratch("arraycopy");
    let jvm = Jvm::start(&[], "bench.ArrayCopy", &[]);
    const STUBS: [&str; 2] = ["jshort_disjoint_arraycopy", "jbyte_disjoint_arraycopy"];
    let profile = record_until(&jvm, &dir, |p| {
        STUBS
            .iter()
            .all(|stub| count(p, "copy-worker", stub, |_| true).0 >= MIN_SAMPLES)
    });
    for stub in STUBS {
        let (in_stub, with_caller) = count(&profile, "copy-worker", stub, |f| {
            let at = f.iter().position(|x| x.starts_with(stub)).unwrap();
            rooted(f)
                && f[at - 1].starts_with("bench.ArrayCopy.")
                && (f[at - 1].ends_with("_[j]") || f[at - 1].ends_with("_[i]"))
        });
        assert!(
            in_stub >= MIN_SAMPLES,
            "{in_stub} samples in {stub}:\n{profile}"
        );
        assert!(
            with_caller * 100 >= in_stub * 99,
            "{with_caller} of {in_stub} samples in {stub} have their Java caller below and reach the root:\n{profile}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
