//! Attach and code-map tests against real JDK 17 processes started without special flags.

mod common;

use common::*;
use jvmperf::live_jvm::LiveJvm;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INLINE_FLAGS: &[&str] = &[
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=inline,bench.InlineHot::helper",
    "-XX:CompileCommand=dontinline,bench.InlineHot::hotLoop",
];

fn jitmap(pid: u32, extra: &[&str]) -> String {
    let pid = pid.to_string();
    let mut args = vec!["jitmap", "-p", &pid];
    args.extend_from_slice(extra);
    let out = run_jvmperf(&args);
    assert!(out.status.success(), "jitmap failed: {}", stderr_of(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The pc lines of the newest live nmethod of `method` (a qualified name) in a jitmap listing.
fn nmethod_pcs<'a>(map: &'a str, method: &str) -> Vec<&'a str> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in map.lines() {
        if line.starts_with("nmethod ") {
            if let Some(b) = current.take() {
                blocks.push(b);
            }
            if line.contains(&format!(" {method}(")) {
                current = Some(Vec::new());
            }
        } else if let Some(b) = current.as_mut() {
            if line.starts_with("  pc ") {
                b.push(line);
            }
        }
    }
    blocks.extend(current);
    blocks
        .into_iter()
        .max_by_key(|b| b.len())
        .unwrap_or_default()
}

#[test]
fn attaches_twice_and_maps_inlined_helper_with_lines() {
    let jvm = Jvm::start(INLINE_FLAGS, "bench.InlineHot", &[]);
    let doctor = run_jvmperf(&["doctor", "-p", &jvm.pid.to_string()]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{report}{}", stderr_of(&doctor));
    assert!(
        report.contains("ok   HotSpot") && report.contains("ok   attach"),
        "{report}"
    );
    let first = jitmap(jvm.pid, &[]);
    let second = jitmap(jvm.pid, &[]);
    assert!(jvm.is_alive());
    for map in [&first, &second] {
        assert!(map.contains("blob "), "code blobs replayed");
        assert!(map.contains("Interpreter"), "interpreter blob named");
        assert!(
            map.contains("nmethod ") && map.contains("bench.InlineHot.hotLoop(long, int)"),
            "hotLoop nmethod replayed"
        );
    }
    // The helper is inlined into hotLoop at the call site's bci, and both ends have line numbers.
    let bci = call_site_bci("bench.InlineHot", "hotLoop", "helper");
    let pcs = nmethod_pcs(&second, "bench.InlineHot.hotLoop");
    let inlined: Vec<&&str> = pcs
        .iter()
        .filter(|l| l.contains("bench.InlineHot.helper:"))
        .collect();
    assert!(
        !inlined.is_empty(),
        "helper not in hotLoop's inline records:\n{}",
        pcs.join("\n")
    );
    for line in &inlined {
        let chain = line.split_once(": ").unwrap().1;
        let frames: Vec<&str> = chain.split(" < ").collect();
        // The helper may itself have inlined callees (e.g. Long.rotateLeft) below it.
        let at = frames
            .iter()
            .position(|f| f.starts_with("bench.InlineHot.helper:"))
            .unwrap();
        let caller = frames[at + 1];
        assert!(
            caller.starts_with("bench.InlineHot.hotLoop:") && caller.ends_with(&format!("@{bci}")),
            "caller frame {caller} should be hotLoop at bci {bci}"
        );
        // `name:line@bci`: the line resolved from the line table.
        let line_no: u32 = frames[at]
            .split(':')
            .nth(1)
            .unwrap()
            .split('@')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(line_no > 0);
    }
}

#[test]
fn non_jvm_dead_pid_and_disabled_attach_fail_cleanly_and_record_goes_without_the_agent() {
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let out = run_jvmperf(&["jitmap", "-p", &sleeper.id().to_string()]);
    assert_one_line_error(&out, 4, "is not a HotSpot JVM");
    assert!(std::fs::metadata(format!("/proc/{}/stat", sleeper.id())).is_ok());
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();

    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let out = run_jvmperf(&["jitmap", "-p", &dead.to_string()]);
    assert_one_line_error(&out, 3, "does not exist");

    let jvm = Jvm::start(&["-XX:+DisableAttachMechanism"], "bench.InlineHot", &[]);
    let out = run_jvmperf(&["jitmap", "-p", &jvm.pid.to_string()]);
    assert_one_line_error(&out, 5, "DisableAttachMechanism");
    let doctor = run_jvmperf(&["doctor", "-p", &jvm.pid.to_string()]);
    assert_eq!(doctor.status.code(), Some(5));
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report.contains("FAIL attach")
            && report.contains("DisableAttachMechanism")
            && report.contains("work without the agent"),
        "{report}"
    );
    // record profiles it without the agent, and says why.
    let out = std::env::temp_dir().join(format!("jvmperf-noattach-{}.collapsed", jvm.pid));
    let rec = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "2",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr_of(&rec);
    assert!(rec.status.success(), "{err}");
    assert!(
        err.contains("without the agent") && err.contains("DisableAttachMechanism"),
        "{err}"
    );
    let stacks = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    assert!(stacks.contains("bench.InlineHot.hotLoop"), "{stacks}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(jvm.is_alive());
    assert!(!jvm.printed_thread_dump(), "the JVM was signalled");
}

#[test]
fn xrs_jvm_is_never_sent_sigquit() {
    // With -Xrs HotSpot starts the Attach Listener at startup, so attach works through its socket.
    let jvm = Jvm::start(&["-Xrs"], "bench.InlineHot", &[]);
    let map = jitmap(jvm.pid, &[]);
    assert!(map.contains("bench.InlineHot.hotLoop"));
    // Without the socket, SIGQUIT would kill it: jvmperf must refuse instead.
    std::fs::remove_file(format!("/tmp/.java_pid{}", jvm.pid)).unwrap();
    let out = run_jvmperf(&["jitmap", "-p", &jvm.pid.to_string()]);
    assert_one_line_error(&out, 5, "does not handle SIGQUIT");
    std::thread::sleep(Duration::from_millis(200));
    assert!(jvm.is_alive());
}

#[test]
fn address_reuse_resolves_by_time() {
    let jvm = Jvm::start(
        &["-XX:ReservedCodeCacheSize=16m", "-XX:+UseSerialGC"],
        "bench.CodeChurn",
        &[],
    );
    let mut live = LiveJvm::attach(jvm.pid).expect("attach");
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        live.pump(Duration::from_millis(500)).expect("shim stream");
        let code = &live.state.code;
        let entries = code.entries();
        // Two nmethods of different methods over the same address, the first unloaded before the
        // second was loaded.
        let pair = entries.iter().enumerate().find_map(|(i, a)| {
            let unload = a.unload_time?;
            a.method()?;
            entries[i + 1..]
                .iter()
                .find(|b| {
                    b.method().is_some()
                        && b.method() != a.method()
                        && b.start < a.end
                        && a.start < b.end
                        && b.load_time >= unload
                        && code.method(b.method().unwrap()).map(|m| m.qualified_name())
                            != code.method(a.method().unwrap()).map(|m| m.qualified_name())
                })
                .map(|b| (a.clone(), b.clone()))
        });
        if let Some(p) = pair {
            break p;
        }
        assert!(Instant::now() < deadline, "no address reuse seen in 60 s");
    };
    let (old, new) = found;
    let addr = old.start.max(new.start);
    let code = &live.state.code;
    let before = code.lookup(addr, old.unload_time.unwrap() - 1).unwrap();
    assert_eq!(
        before.method(),
        old.method(),
        "lookup before the unload finds the old owner"
    );
    let after = code.lookup(addr, new.load_time + 1).unwrap();
    assert_eq!(
        after.method(),
        new.method(),
        "lookup after the load finds the new owner"
    );
    assert_ne!(
        code.method(old.method().unwrap()).unwrap().qualified_name(),
        code.method(new.method().unwrap()).unwrap().qualified_name()
    );
    assert!(jvm.is_alive());
}

#[test]
fn precise_inlining_maps_the_loop_body_of_code_compiled_before_attach() {
    let jvm = Jvm::start(INLINE_FLAGS, "bench.InlineHot", &[]);
    let before = jitmap(jvm.pid, &[]);
    let count = |map: &str| {
        nmethod_pcs(map, "bench.InlineHot.hotLoop")
            .iter()
            .filter(|l| {
                l.split_once(": ")
                    .unwrap()
                    .1
                    .starts_with("bench.InlineHot.helper:")
            })
            .count()
    };
    let precise = jitmap(jvm.pid, &["--precise-inlining"]);
    let (n_before, n_after) = (count(&before), count(&precise));
    assert!(
        n_after >= 4 && n_after > n_before,
        "helper should own many pcs of the recompiled loop body: before {n_before}, after {n_after}"
    );
    assert!(jvm.is_alive());
}

#[test]
fn shim_survives_the_daemon_being_killed_mid_stream() {
    // 25k nmethods: the replay streams for a while, so the kills land mid-stream.
    let cp = format!(
        "{}:{}",
        bench_classes().display(),
        bench_classes().with_file_name("many-classes").display()
    );
    let jvm = Jvm::start_with_classpath(
        std::path::Path::new(&cp),
        &["-XX:TieredStopAtLevel=1", "-XX:-BackgroundCompilation"],
        "bench.ManyMethods",
        &[],
    );
    for delay_ms in [60u64, 150, 300] {
        let mut daemon = jvmperf()
            .args(["jitmap", "-p", &jvm.pid.to_string(), "-o", "/dev/null"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        daemon.kill().unwrap();
        daemon.wait().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(jvm.is_alive());
    }
    let map = jitmap(jvm.pid, &[]);
    assert!(
        map.contains("bench.gen.G0000"),
        "re-attach after killed daemons replays fully"
    );
    assert!(map.lines().filter(|l| l.starts_with("nmethod ")).count() > 20_000);
    assert!(jvm.is_alive());
}

/// An attach socket at the JVM's path owned by another user was left by an earlier process with
/// the same pid: the JVM cannot replace it, so jitmap names it and the fix, and record profiles
/// without the agent.
#[test]
fn a_socket_left_by_another_users_process_is_named_and_record_goes_on_without_the_agent() {
    let jvm = Jvm::start(&[], "bench.InlineHot", &[]);
    let pid = jvm.pid.to_string();
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let sock = Remove(format!("/tmp/.java_pid{pid}").into());
    let _listener = std::os::unix::net::UnixListener::bind(&sock.0).unwrap();
    let nobody = Some(nix::unistd::Uid::from_raw(65534));
    nix::unistd::chown(&sock.0, nobody, None).unwrap();

    let out = run_jvmperf(&["jitmap", "-p", &pid]);
    assert_one_line_error(&out, 5, "belongs to uid 65534");
    let profile = std::env::temp_dir().join(format!("jvmperf-foreign-socket-{pid}.collapsed"));
    let rec = run_jvmperf(&[
        "record",
        "-p",
        &pid,
        "-d",
        "2",
        "-o",
        profile.to_str().unwrap(),
    ]);
    let err = stderr_of(&rec);
    assert!(rec.status.success(), "{err}");
    assert!(
        err.contains("without the agent") && err.contains("belongs to uid 65534"),
        "{err}"
    );
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(text.contains("bench.InlineHot"), "{text}");
    let _ = std::fs::remove_file(&profile);
    assert!(jvm.is_alive());
}
