//! Other tools in the same JVM: a read-only mapping of libjvm.so (as async-profiler's ELF parser
//! makes while it starts) and attaches by jcmd in flight at the same moment as jvmperf's.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn a_second_read_only_mapping_of_libjvm_is_not_taken_for_the_loaded_one() {
    let jvm = Jvm::start(&[], "bench.MapsLibjvm", &[]);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", jvm.pid)).unwrap();
    let at_zero = maps
        .lines()
        .filter(|l| l.ends_with("/libjvm.so") && l.split_whitespace().nth(2) == Some("00000000"))
        .count();
    assert!(at_zero >= 2, "the app did not map libjvm.so:\n{maps}");
    let pid = jvm.pid.to_string();
    let doctor = run_jvmperf(&["doctor", "-p", &pid]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report.contains("ok   HotSpot"),
        "{report}{}",
        stderr_of(&doctor)
    );
    let out = run_jvmperf(&["jitmap", "-p", &pid]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Interpreter"));
}

/// `jcmd <pid> <command>` from the test JDK, in a loop until `stop`; returns how many ran.
fn jcmd_loop(
    pid: u32,
    command: Vec<String>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut runs = 0;
        while !stop.load(Ordering::Relaxed) {
            let _ = Command::new(java_home().join("bin/jcmd"))
                .arg(pid.to_string())
                .args(&command)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            runs += 1;
        }
        runs
    })
}

/// jvmperf and jcmd attach to a JVM whose Attach Listener is not running yet, at the same moment:
/// both create trigger files and send SIGQUIT, and their requests share the listener.
#[test]
fn attaches_while_jcmd_attaches_too() {
    const ROUNDS: usize = 3;
    let dir = std::env::temp_dir().join(format!("jvmperf-other-agents-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let recorded = AtomicUsize::new(0);
    for round in 0..ROUNDS {
        let jvm = Jvm::start(&[], "bench.InlineHot", &[]);
        assert!(!std::path::Path::new(&format!("/tmp/.java_pid{}", jvm.pid)).exists());
        let stop = Arc::new(AtomicBool::new(false));
        let versions = jcmd_loop(jvm.pid, vec!["VM.version".into()], stop.clone());
        // The recordings go to the test's directory, not the JVM's working directory.
        let jfr_file = format!(
            "filename={}",
            dir.join(format!("round{round}.jfr")).display()
        );
        let jfr = jcmd_loop(
            jvm.pid,
            vec!["JFR.start".into(), "duration=2s".into(), jfr_file],
            stop.clone(),
        );
        let out_file = dir.join(format!("round{round}.collapsed"));
        let out = run_jvmperf(&[
            "record",
            "-p",
            &jvm.pid.to_string(),
            "-d",
            "1",
            "-o",
            out_file.to_str().unwrap(),
        ]);
        stop.store(true, Ordering::Relaxed);
        let runs = versions.join().unwrap() + jfr.join().unwrap();
        assert!(
            out.status.success(),
            "round {round} ({runs} jcmd runs): {}",
            stderr_of(&out)
        );
        let profile = std::fs::read_to_string(&out_file).unwrap();
        assert!(
            profile.contains("bench.InlineHot"),
            "round {round}: {profile}"
        );
        assert!(jvm.is_alive());
        recorded.fetch_add(1, Ordering::Relaxed);
    }
    assert_eq!(recorded.load(Ordering::Relaxed), ROUNDS);
    let _ = std::fs::remove_dir_all(&dir);
}
