//! The agent inside the JVM (`java-agent-shim/`): a reader that stops reading, the capability it
//! gives back, thread churn under `-Xcheck:jni`, and a JVM started with `-agentpath` and no
//! jvmperf. Real JVMs, real attach.

mod common;

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

fn has_shim_thread(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks.flatten().any(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim_end() == "jvmperf-shim")
            })
        })
        .unwrap_or(false)
}

/// The JVM's count of unloaded classes (`jcmd PerfCounter.print`).
fn unloaded_classes(pid: u32) -> u64 {
    let out = Command::new(java_home().join("bin/jcmd"))
        .args([&pid.to_string(), "PerfCounter.print"])
        .output()
        .expect("jcmd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("java.cls.unloadedClasses="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no unloaded-class counter: {out:?}"))
}

/// A `jvmperf record` that stops reading in the middle of the agent's replay (SIGSTOP) loses its
/// session within the agent's write deadline: the JVM is not held (its classes go on unloading)
/// and the next recording is served by the agent while the stopped one still exists.
#[test]
fn a_reader_stopped_mid_replay_loses_its_session_and_the_next_one_is_served() {
    let scratch = Scratch::new("shim", "stalled");
    // Thousands of nmethods to replay, and classes unloading all the time.
    let jvm = Jvm::start(
        &["-XX:ReservedCodeCacheSize=16m", "-XX:+UseSerialGC"],
        "bench.CodeChurn",
        &[],
    );
    let pid = jvm.pid;
    let maps = format!("/proc/{pid}/maps");
    let mut stuck = jvmperf()
        .args(["record", "-p", &pid.to_string(), "-d", "120", "-o"])
        .arg(scratch.path("stuck.collapsed"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Stopped as soon as the JVM has loaded the agent: its replay (megabytes) then meets a reader
    // that reads nothing.
    wait_until("the agent loaded", Duration::from_secs(60), || {
        std::fs::read_to_string(&maps).is_ok_and(|m| m.contains("libjvmperf-shim"))
    });
    kill(Pid::from_raw(stuck.id() as i32), Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let unloaded_at_stop = unloaded_classes(pid);

    // The agent's thread ends with its session: 5 s without progress, plus a margin.
    wait_until(
        "the agent ending the stalled session",
        Duration::from_secs(20),
        || !has_shim_thread(pid),
    );
    let ended_after = stopped.elapsed();
    let unloaded_at_end = unloaded_classes(pid);
    std::thread::sleep(Duration::from_secs(3));
    let unloaded_later = unloaded_classes(pid);
    eprintln!(
        "session ended {ended_after:?} after the reader stopped; unloaded classes: {unloaded_at_stop} at the stop, {unloaded_at_end} at the end, {unloaded_later} 3 s later"
    );
    assert!(
        unloaded_later > unloaded_at_end,
        "class unloading stalled: {unloaded_at_end} then {unloaded_later}"
    );

    let out = scratch.path("next.collapsed");
    let res = run_jvmperf(&["record", "-p", &pid.to_string(), "-d", "2", "-o", s(&out)]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    assert!(!err.contains("without the agent"), "{err}");
    let collapsed = std::fs::read_to_string(&out).unwrap();
    assert!(collapsed.contains("bench.CodeChurn"), "{collapsed}");
    assert!(
        stuck.try_wait().unwrap().is_none(),
        "the stopped reader went away"
    );

    stuck.kill().unwrap();
    stuck.wait().unwrap();
    assert!(jvm.is_alive());
}

/// `--precise-inlining` retransforms classes with the capability it takes for that, then gives it
/// back.
#[test]
fn precise_inlining_gives_the_retransform_capability_back() {
    let scratch = Scratch::new("shim", "retransform");
    let jvm = Jvm::start(&[], "bench.InlineHot", &[]);
    let out = scratch.path("precise.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "4",
        "--precise-inlining",
        "-o",
        s(&out),
    ]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    assert!(
        err.contains("the agent gave can_retransform_classes back"),
        "{err}"
    );
}

/// Thousands of threads started and ended per second while recorded, under `-Xcheck:jni`: the
/// agent's callbacks on those threads make no JNI warning, and the agent accounts for them.
#[test]
fn thread_churn_under_xcheck_jni() {
    let scratch = Scratch::new("shim", "churn");
    let jvm = Jvm::start(&["-Xcheck:jni"], "bench.Throughput", &["--spawn"]);
    let out = scratch.path("churn.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "3",
        "--status-every",
        "1",
        "-o",
        s(&out),
    ]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    let events: u64 = err
        .lines()
        .rev()
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("shim_thread_events=")?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no shim_thread_events in {err}"));
    assert!(events >= 1000, "{events} thread events in 2 s: {err}");
    let collapsed = std::fs::read_to_string(&out).unwrap();
    assert!(
        collapsed.contains("bench.Throughput.recurse"),
        "{collapsed}"
    );
    let jvm_output: Vec<String> = jvm
        .stdout_lines()
        .into_iter()
        .chain(jvm.stderr.lock().unwrap().iter().cloned())
        .filter(|l| l.contains("in native method") || l.contains("JNI"))
        .collect();
    assert!(jvm_output.is_empty(), "{jvm_output:?}");
}

/// A JVM started with the agent on its command line and no jvmperf listening starts anyway,
/// with one line that says so; also with a malformed option.
#[test]
fn a_jvm_started_with_the_agent_and_no_jvmperf_runs() {
    let scratch = Scratch::new("shim", "agentpath");
    let lib = scratch.path("libjvmperf-shim.so");
    std::fs::write(&lib, jvmperf::shim_lib::SHIM_SO).unwrap();
    for (option, said) in [
        (
            format!("={}", s(&scratch.path("nobody.sock"))),
            "jvmperf shim: no jvmperf is listening on its socket; the JVM runs without it",
        ),
        (
            String::new(),
            "jvmperf shim: expects the absolute path of jvmperf's socket as its option; the JVM runs without it",
        ),
    ] {
        let agent = format!("-agentpath:{}{option}", s(&lib));
        let out = java_command(&bench_classes(), &[&agent], "bench.Throughput", &["1"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{agent}: {stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("WORK"));
        assert_eq!(stderr.trim_end(), said, "{agent}");
    }
}

/// A second copy of the agent (another jvmperf version places its own, under another name) that is
/// loaded while the first serves a recording answers BUSY naming that recording, which goes on.
#[test]
fn a_second_copy_of_the_agent_defers_to_the_session_of_the_first() {
    use std::io::Read;
    use std::os::unix::net::UnixListener;
    let scratch = Scratch::new("shim", "two-copies");
    let jvm = Jvm::start(&[], "bench.Throughput", &[]);
    let pid = jvm.pid;
    let first_out = scratch.path("first.collapsed");
    let mut first = jvmperf()
        .args(["record", "-p", &pid.to_string(), "-d", "8", "-o"])
        .arg(&first_out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the first session", Duration::from_secs(60), || {
        has_shim_thread(pid)
    });

    let lib = scratch.path("libjvmperf-shim-another-version.so");
    std::fs::write(&lib, jvmperf::shim_lib::SHIM_SO).unwrap();
    let sock = scratch.path("another.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let load = Command::new(java_home().join("bin/jcmd"))
        .args([&pid.to_string(), "JVMTI.agent_load", s(&lib), s(&sock)])
        .output()
        .unwrap();
    assert!(load.status.success(), "{load:?}");
    listener.set_nonblocking(true).unwrap();
    let mut conn = None;
    wait_until(
        "the second copy connecting",
        Duration::from_secs(10),
        || {
            conn = listener.accept().ok().map(|(c, _)| c);
            conn.is_some()
        },
    );
    let mut conn = conn.unwrap();
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The first frame: u32 len, u16 kind (13 = BUSY), u16 flags, u64 time, u32 version, u32 daemon
    // pid; then the end of the stream.
    let mut said = [0u8; 24];
    conn.read_exact(&mut said[..6]).unwrap();
    assert_eq!(u16::from_le_bytes([said[4], said[5]]), 13, "{said:?}");
    conn.read_exact(&mut said[6..]).unwrap();
    assert_eq!(u32::from_le_bytes(said[..4].try_into().unwrap()), 20);
    let owner = u32::from_le_bytes(said[20..24].try_into().unwrap());
    assert_eq!(owner, first.id());
    assert_eq!(conn.read(&mut [0u8; 1]).unwrap(), 0, "more after BUSY");

    let status = first.wait().unwrap();
    let mut err = String::new();
    first
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
    assert!(!err.contains("ended early"), "{err}");
    let collapsed = std::fs::read_to_string(&first_out).unwrap();
    assert!(
        collapsed.contains("bench.Throughput.recurse"),
        "{collapsed}"
    );
}

/// The agent built with AddressSanitizer and UndefinedBehaviorSanitizer (any report aborts the
/// JVM), in a JVM with the ASan runtime preloaded, through a recording that replays thousands of
/// methods, streams a churning code cache and retransforms classes.
#[test]
fn the_agent_under_address_and_undefined_behaviour_sanitizers() {
    let lib = env!("JVMPERF_SHIM_SANITIZED");
    assert!(
        !lib.is_empty(),
        "build.rs could not build the shim with -fsanitize=address,undefined: install gcc's sanitizer runtimes (libasan, libubsan)"
    );
    let asan = Command::new("gcc")
        .arg("-print-file-name=libasan.so")
        .output()
        .unwrap();
    let asan = String::from_utf8(asan.stdout).unwrap().trim().to_string();
    assert!(Path::new(&asan).is_file(), "no libasan.so: {asan}");
    let scratch = Scratch::new("shim", "sanitized");
    let mut cmd = java_command(
        &bench_classes(),
        &["-XX:ReservedCodeCacheSize=16m", "-XX:+UseSerialGC"],
        "bench.CodeChurn",
        &[],
    );
    // HotSpot takes SIGSEGV and SIGBUS for its own (implicit null checks, safepoint polls).
    cmd.env("LD_PRELOAD", &asan).env(
        "ASAN_OPTIONS",
        "detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:allow_user_segv_handler=1",
    );
    let jvm = Jvm::spawn(cmd);
    let out = scratch.path("sanitized.collapsed");
    let res = jvmperf()
        .args([
            "record",
            "-p",
            &jvm.pid.to_string(),
            "-d",
            "4",
            "--precise-inlining",
            "-o",
        ])
        .arg(&out)
        .env("JVMPERF_SHIM_LIBRARY", lib)
        .output()
        .unwrap();
    let err = stderr_of(&res);
    std::thread::sleep(Duration::from_millis(500));
    let jvm_err = jvm.stderr.lock().unwrap().join("\n");
    assert!(jvm.is_alive(), "the JVM died: {jvm_err}");
    assert!(res.status.success(), "{err}");
    assert!(!err.contains("without the agent"), "{err}");
    assert!(
        std::fs::read_to_string(format!("/proc/{}/maps", jvm.pid))
            .unwrap()
            .contains("libjvmperf-shim-")
            && err.contains("the agent gave can_retransform_classes back"),
        "{err}"
    );
    assert!(
        !jvm_err.contains("Sanitizer") && !jvm_err.contains("runtime error"),
        "{jvm_err}"
    );
    let collapsed = std::fs::read_to_string(&out).unwrap();
    assert!(collapsed.contains("bench.CodeChurn"), "{collapsed}");
}

/// A JVM embedded in a process that destroys it and lives on: at VMDeath the agent ends its
/// session (the recording ends with it) and its thread goes away, rather than waking every 10 ms
/// for the rest of the process's life.
#[test]
fn an_embedded_jvm_destroyed_leaves_no_agent_thread_behind() {
    let scratch = Scratch::new("shim", "embedded");
    let launcher_c = scratch.path("launcher.c");
    std::fs::write(
        &launcher_c,
        r#"#include <jni.h>
#include <stdio.h>
#include <unistd.h>
/* Runs bench.Throughput (argv[2] seconds) in a JVM created here, destroys it, and lives on. */
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    char cp[4096];
    snprintf(cp, sizeof cp, "-Djava.class.path=%s", argv[1]);
    JavaVMOption opt = {.optionString = cp};
    JavaVMInitArgs args = {.version = JNI_VERSION_1_8, .nOptions = 1, .options = &opt};
    JavaVM *vm;
    JNIEnv *env;
    if (JNI_CreateJavaVM(&vm, (void **)&env, &args) != JNI_OK) return 1;
    jclass main_class = (*env)->FindClass(env, "bench/Throughput");
    jmethodID main = main_class ? (*env)->GetStaticMethodID(env, main_class, "main", "([Ljava/lang/String;)V") : NULL;
    if (!main) return 1;
    jobjectArray a = (*env)->NewObjectArray(env, 1, (*env)->FindClass(env, "java/lang/String"),
                                            (*env)->NewStringUTF(env, argv[2]));
    (*env)->CallStaticVoidMethod(env, main_class, main, a);
    (*vm)->DestroyJavaVM(vm);
    printf("DESTROYED\n");
    fflush(stdout);
    sleep(60);
    return 0;
}
"#,
    )
    .unwrap();
    let home = java_home();
    let server = home.join("lib/server");
    let launcher = scratch.path("launcher");
    let cc = Command::new("gcc")
        .arg(&launcher_c)
        .arg("-o")
        .arg(&launcher)
        .arg(format!("-I{}", home.join("include").display()))
        .arg(format!("-I{}", home.join("include/linux").display()))
        .arg(format!("-L{}", server.display()))
        .arg(format!("-Wl,-rpath,{}", server.display()))
        .arg("-ljvm")
        .output()
        .unwrap();
    assert!(cc.status.success(), "{cc:?}");
    let mut cmd = Command::new(&launcher);
    cmd.arg(bench_classes()).arg("6");
    let jvm = Jvm::spawn(cmd);
    let out = scratch.path("embedded.collapsed");
    let record = jvmperf()
        .args(["record", "-p", &jvm.pid.to_string(), "-d", "60", "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the agent's session", Duration::from_secs(30), || {
        has_shim_thread(jvm.pid)
    });
    jvm.wait_for_line("DESTROYED", Duration::from_secs(30));
    let gone = wait_until("the agent's thread ending", Duration::from_secs(5), || {
        !has_shim_thread(jvm.pid)
    });
    eprintln!("the agent's thread was gone {gone:?} after DESTROYED was seen");
    let res = record.wait_with_output().unwrap();
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .contains("bench.Throughput.recurse"),
        "{err}"
    );
    assert!(jvm.is_alive(), "the process should live on");
}
