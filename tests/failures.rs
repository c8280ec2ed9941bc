//! Failure modes of `jvmperf record` against real JDK 17 JVMs running `bench.Throughput`: a full
//! disk on the output path, another user's JVM, a JVM of our own user as non-root, SIGINT, SIGKILL
//! and a second recording while one runs (refused). Each checks the message and exit code, that
//! what was sampled is kept, and that the target is alive, was never sent a stray SIGQUIT, and runs
//! as fast afterwards as before.

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The JVMs in this file share two cores (and throughput is measured): one scenario at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One worker thread: light on a shared machine, and enough to see damage.
const THROUGHPUT_ARGS: &[&str] = &["--threads", "1"];
/// Throughput is the median rate over this long.
const RATE_WINDOW: Duration = Duration::from_secs(3);
/// `nobody` on Debian.
const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A JVM running `bench.Throughput` and its rate of work before anything happened to it.
fn throughput_jvm() -> (Jvm, f64) {
    let jvm = Jvm::start(&[], "bench.Throughput", THROUGHPUT_ARGS);
    let before = jvm.work_rate(RATE_WINDOW);
    (jvm, before)
}

/// The target survived the scenario untouched: alive, no thread dump (a SIGQUIT it did not take as
/// an attach request), and its throughput back to at least 70% of `before`. Real damage (code left
/// interpreted or deoptimized, JVMTI events left on, threads stuck at a safepoint) costs several
/// times that; load from other processes comes and goes, so the best of a few windows counts.
fn assert_unharmed(jvm: &Jvm, before: f64, scenario: &str) {
    assert!(jvm.is_alive(), "{scenario}: the JVM died");
    let mut after = Vec::new();
    while after.len() < 4 {
        after.push(jvm.work_rate(RATE_WINDOW));
        if after.iter().any(|&a| a >= 0.7 * before) {
            break;
        }
    }
    eprintln!("{scenario}: throughput {before:.0} units/s before, {after:.0?} after");
    assert!(
        after.iter().any(|&a| a >= 0.7 * before),
        "{scenario}: throughput {before:.0} units/s before, only {after:.0?} after"
    );
    assert!(jvm.is_alive(), "{scenario}: the JVM died");
    assert!(
        !jvm.printed_thread_dump(),
        "{scenario}: the JVM printed a thread dump"
    );
}

/// Threads of the shim inside the target (it runs one while a daemon is connected).
fn shim_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.trim_end() == "jvmperf-shim")
                .count()
        })
        .unwrap_or(0)
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An open-ended `jvmperf record` in the background, once it has attached and sampled a while.
/// A 2 s recording at 199 Hz, waited for.
fn record_briefly(jvm: &Jvm, out: &Path) -> Output {
    let pid = jvm.pid.to_string();
    run_jvmperf(&["record", "-p", &pid, "-d", "2", "-F", "199", "-o", s(out)])
}

/// Ctrl-C for a background recording: it ends successfully and writes `out`; returns its stderr.
fn interrupt(child: Child, out: &Path) -> String {
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let res = finish(child, Duration::from_secs(30));
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    assert!(
        err.contains(&format!("written to {}", out.display())),
        "{err}"
    );
    err
}

fn record_in_background(jvm: &Jvm, out: &Path) -> Child {
    let child = jvmperf()
        .args([
            "record",
            "-p",
            &jvm.pid.to_string(),
            "-F",
            "199",
            "-o",
            s(out),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the shim connects", Duration::from_secs(60), || {
        shim_threads(jvm.pid) > 0
    });
    std::thread::sleep(Duration::from_secs(2));
    child
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// Wait for a jvmperf that should end by itself; kill it (and fail) if it does not.
fn finish(mut child: Child, timeout: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > timeout {
            let _ = child.kill();
            panic!(
                "jvmperf did not end within {timeout:?}: {:?}",
                child.wait_with_output().map(|o| stderr_of(&o))
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A collapsed profile that holds samples of the Throughput workers.
fn assert_throughput_stacks(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        text.contains("bench.Throughput.recurse_["),
        "no Throughput frames in {}:\n{text}",
        path.display()
    );
}

#[test]
fn a_full_disk_keeps_the_samples_and_leaves_no_truncated_file() {
    let _serial = serial();
    let scratch = Scratch::new("failures", "disk-full");
    let (jvm, before) = throughput_jvm();
    // An output directory that does not exist is refused before the JVM is touched.
    let missing = scratch.path("missing/profile.svg");
    let res = run_jvmperf(&["record", "-p", &jvm.pid.to_string(), "-o", s(&missing)]);
    assert_one_line_error(
        &res,
        9,
        &format!(
            "cannot write {}: {} is not a directory (create it or choose another -o)",
            missing.display(),
            scratch.path("missing").display()
        ),
    );
    assert_eq!(shim_threads(jvm.pid), 0, "the JVM was attached");
    // A 64 KiB tmpfs with one page left, in a private mount namespace: the flame graph (tens of
    // KiB) starts to be written and then hits ENOSPC.
    let mount = scratch.path("full");
    std::fs::create_dir(&mount).unwrap();
    let script = r#"mount -t tmpfs -o size=64k tmpfs "$1" || exit 99
head -c 61440 /dev/zero > "$1/fill"
"$2" record -p "$3" -d 2 -F 199 -o "$1/profile.svg"
rc=$?
ls -A "$1"
exit $rc"#;
    let res = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .args([
            s(&mount),
            env!("CARGO_BIN_EXE_jvmperf"),
            &jvm.pid.to_string(),
        ])
        .env("TMPDIR", &scratch.0)
        .output()
        .expect("unshare (needs root)");
    assert_ne!(
        res.status.code(),
        Some(99),
        "mount failed: {}",
        stderr_of(&res)
    );
    let output = mount.join("profile.svg");
    assert_one_line_error(
        &res,
        9,
        &format!(
            "cannot write {}: No space left on device (os error 28) (the file system is full: free space there or choose another -o)",
            output.display()
        ),
    );
    let listing = String::from_utf8_lossy(&res.stdout);
    assert_eq!(
        listing.split_whitespace().collect::<Vec<_>>(),
        ["fill"],
        "nothing but the filler may be left on the full file system"
    );

    // The samples were saved where there was room, and convert as the message says.
    let err = stderr_of(&res);
    let rescued = err
        .split("samples collected were saved to ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no rescued recording named in {err}"));
    assert_eq!(rescued.parent(), Some(scratch.0.as_path()), "{err}");
    assert!(
        err.contains(&format!(
            "`jvmperf convert {} -o {}`",
            rescued.display(),
            output.display()
        )),
        "{err}"
    );
    let converted = scratch.path("rescued.collapsed");
    let conv = run_jvmperf(&["convert", s(&rescued), "-o", s(&converted)]);
    assert!(conv.status.success(), "{}", stderr_of(&conv));
    assert_throughput_stacks(&converted);
    assert_unharmed(&jvm, before, "disk full");
}

#[test]
fn another_users_jvm_is_refused_and_our_own_works_without_root() {
    let _serial = serial();
    let scratch = Scratch::new("failures", "users");
    // Everything `nobody` runs or reads lives in the scratch directory (the checkout may not be
    // reachable by other users).
    let bin = scratch.path("jvmperf");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_jvmperf"), &bin).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_jvmperf"), &bin).unwrap();
    }
    let classes = scratch.path("classes");
    std::fs::create_dir_all(classes.join("bench")).unwrap();
    for entry in std::fs::read_dir(bench_classes().join("bench")).unwrap() {
        let entry = entry.unwrap();
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("Throughput")
        {
            std::fs::copy(entry.path(), classes.join("bench").join(entry.file_name())).unwrap();
        }
    }
    let owned = scratch.path("nobody");
    std::fs::create_dir(&owned).unwrap();
    nix::unistd::chown(
        &owned,
        Some(nix::unistd::Uid::from_raw(NOBODY)),
        Some(nix::unistd::Gid::from_raw(NOGROUP)),
    )
    .unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new(&bin)
            .args(args)
            .uid(NOBODY)
            .gid(NOGROUP)
            .output()
            .unwrap()
    };
    // At the default frequency, which `doctor`'s locked-memory check is about.
    let record = |pid: u32, out: &Path| {
        as_nobody(&["record", "-p", &pid.to_string(), "-d", "2", "-o", s(out)])
    };

    // root's JVM: refused before anything touches it; doctor says why.
    let (jvm, before) = throughput_jvm();
    let pid = jvm.pid.to_string();
    let out = owned.join("root.collapsed");
    let res = record(jvm.pid, &out);
    assert_one_line_error(&res, 6, "(run as the JVM's user or root)");
    assert!(!out.exists());
    assert!(
        !Path::new(&format!("/tmp/.attach_pid{pid}")).exists(),
        "no attach trigger file left"
    );
    let doctor = as_nobody(&["doctor", "-p", &pid]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(6), "{report}");
    assert!(
        report.contains(
            "FAIL ptrace             the JVM runs as uid 0, we as 65534: run as that user or root"
        ),
        "{report}"
    );
    assert_unharmed(&jvm, before, "another user's JVM");
    drop(jvm);

    // nobody's JVM, recorded by nobody: works where doctor says it can, fails as it says if not.
    let jvm = Jvm::start_as(
        NOBODY,
        NOGROUP,
        &classes,
        &[],
        "bench.Throughput",
        THROUGHPUT_ARGS,
    );
    let before = jvm.work_rate(RATE_WINDOW);
    let doctor = as_nobody(&["doctor", "-p", &jvm.pid.to_string()]);
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(
        report.contains("warn priority           nice 0 (raising needs root or CAP_SYS_NICE)"),
        "{report}"
    );
    let out = owned.join("own.collapsed");
    let res = record(jvm.pid, &out);
    if report.contains("FAIL perf events") {
        assert_one_line_error(&res, 6, "sysctl kernel.perf_event_paranoid=2");
    } else if report.contains("FAIL locked memory") {
        assert_one_line_error(&res, 8, "cannot lock perf ring-buffer memory");
    } else {
        assert!(doctor.status.success(), "{report}{}", stderr_of(&doctor));
        assert!(res.status.success(), "{report}{}", stderr_of(&res));
        assert_throughput_stacks(&out);
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&out).unwrap();
        assert_eq!(meta.uid(), NOBODY, "the profile belongs to its user");
        let dir = PathBuf::from(format!("/tmp/.jvmperf-{NOBODY}"));
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir() && meta.uid() == NOBODY && meta.mode() & 0o777 == 0o700);
        for f in std::fs::read_dir(&dir).unwrap() {
            let meta = f.unwrap().metadata().unwrap();
            assert!(
                meta.uid() == NOBODY && meta.mode() & 0o022 == 0,
                "{dir:?} holds a file of uid {} mode {:o}",
                meta.uid(),
                meta.mode()
            );
        }
    }
    assert_unharmed(&jvm, before, "own JVM as non-root");
}

#[test]
fn sigint_writes_the_partial_profile_and_sigkill_leaves_the_jvm_clean() {
    let _serial = serial();
    let scratch = Scratch::new("failures", "signals");
    let (jvm, before) = throughput_jvm();

    let interrupted = scratch.path("interrupted.collapsed");
    let child = record_in_background(&jvm, &interrupted);
    let err = interrupt(child, &interrupted);
    assert!(!err.contains("panicked"), "{err}");
    assert_throughput_stacks(&interrupted);
    wait_until("the shim goes quiet", Duration::from_secs(10), || {
        shim_threads(jvm.pid) == 0
    });

    // SIGKILL: nothing is written, the shim notices and stops (its thread ends, its events are
    // off), and the next recording attaches as usual.
    let killed = scratch.path("killed.collapsed");
    let child = record_in_background(&jvm, &killed);
    let killed_pid = child.id();
    signal(&child, nix::sys::signal::Signal::SIGKILL);
    let res = finish(child, Duration::from_secs(10));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&res.status),
        Some(9)
    );
    wait_until("the shim goes quiet", Duration::from_secs(10), || {
        shim_threads(jvm.pid) == 0
    });
    let mut left: Vec<String> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["interrupted.collapsed"],
        "no file from the killed run"
    );
    assert_unharmed(&jvm, before, "SIGINT and SIGKILL");

    // The killed recording's socket is left behind, and removed by the next attach.
    let sockets = PathBuf::from(format!("/tmp/.jvmperf-{}", nix::unistd::geteuid()));
    let killed_sockets = || {
        std::fs::read_dir(&sockets)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy()
                    .starts_with(&format!("d{killed_pid}-"))
            })
            .count()
    };
    assert_eq!(killed_sockets(), 1, "the killed recording's socket");

    let again = scratch.path("again.collapsed");
    let res = record_briefly(&jvm, &again);
    assert!(res.status.success(), "{}", stderr_of(&res));
    assert_throughput_stacks(&again);
    assert!(jvm.is_alive());
    assert_eq!(
        killed_sockets(),
        0,
        "stale socket removed at the next attach"
    );
}

#[test]
fn a_second_recording_is_refused_while_the_first_runs_and_works_after_it() {
    let _serial = serial();
    let scratch = Scratch::new("failures", "busy");
    let (jvm, before) = throughput_jvm();
    let pid = jvm.pid.to_string();
    let first = scratch.path("first.collapsed");
    let child = record_in_background(&jvm, &first);

    // The shim serves one jvmperf at a time: the others are told who has it, before sampling.
    let refused = format!(
        "jvmperf: error: another jvmperf (pid {}) is already profiling JVM {pid}; wait for it to finish or stop it",
        child.id()
    );
    let second = scratch.path("second.collapsed");
    let res = record_briefly(&jvm, &second);
    assert_eq!(res.status.code(), Some(5), "{}", stderr_of(&res));
    assert_eq!(stderr_of(&res).trim_end(), refused);
    assert!(!second.exists(), "the refused recording wrote a file");
    let res = run_jvmperf(&["jitmap", "-p", &pid, "-o", "/dev/null"]);
    assert_eq!(res.status.code(), Some(5), "{}", stderr_of(&res));
    assert_eq!(stderr_of(&res).trim_end(), refused);

    // The first one never noticed.
    std::thread::sleep(Duration::from_secs(1));
    let err = interrupt(child, &first);
    assert!(!err.contains("ended early"), "{err}");
    assert_throughput_stacks(&first);

    // Once it is done, the JVM is free for the next one.
    let again = scratch.path("again.collapsed");
    let res = record_briefly(&jvm, &again);
    assert!(res.status.success(), "{}", stderr_of(&res));
    assert_throughput_stacks(&again);
    assert_unharmed(&jvm, before, "second recording refused");
}

/// Ctrl-C while jvmperf waits for the JVM (here a stopped JVM that cannot start its Attach
/// Listener) ends the wait at once with its own message, not the listener timeout's.
#[test]
fn ctrl_c_during_start_up_ends_the_attach() {
    let _serial = serial();
    let scratch = Scratch::new("failures", "ctrl-c");
    let jvm = Jvm::start(&[], "bench.Throughput", THROUGHPUT_ARGS);
    let jvm_pid = nix::unistd::Pid::from_raw(jvm.pid as i32);
    nix::sys::signal::kill(jvm_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let out = scratch.path("never.collapsed");
    let child = jvmperf()
        .args(["record", "-p", &jvm.pid.to_string(), "-o", s(&out)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let trigger = PathBuf::from(format!("/proc/{}/cwd/.attach_pid{}", jvm.pid, jvm.pid));
    wait_until(
        "jvmperf waits for the Attach Listener",
        Duration::from_secs(30),
        || trigger.exists(),
    );
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let res = finish(child, Duration::from_secs(30));
    nix::sys::signal::kill(jvm_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_one_line_error(&res, 130, "interrupted while attaching");
    assert!(!out.exists());
    assert!(!trigger.exists(), "the trigger file is removed");
    std::thread::sleep(Duration::from_millis(300));
    assert!(jvm.is_alive());
}
