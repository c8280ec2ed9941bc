//! The agent inside the JVM (`java-agent-shim/`): a reader that stops reading, the capability it
//! gives back, thread churn under `-Xcheck:jni`, and a JVM started with `-agentpath` and no
//! jvmperf. Real JVMs, real attach.

mod common;

use common::*;
use jvmperf::shim::protocol::{self, Record};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

fn has_shim_thread(pid: u32) -> bool {
    shim_thread(pid).is_some()
}

/// A `jvmperf record` running in the background, its stderr lines collected as they come; killed
/// when dropped.
struct Recorder {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    fn spawn(pid: u32, args: &[&str], out: &Path, env: &[(&str, &str)]) -> Recorder {
        let mut child = jvmperf()
            .args(["record", "-p", &pid.to_string(), "-o", s(out)])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Recorder {
            child,
            stderr,
            reader: Some(reader),
        }
    }

    /// Its exit status and all it said, once it exits (within `timeout`).
    fn finish(&mut self, timeout: Duration) -> (std::process::ExitStatus, String) {
        wait_until("the recording's end", timeout, || !self.is_running());
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status, self.stderr.lock().unwrap().join("\n"))
    }

    fn said(&self, needle: &str) -> bool {
        self.lines_with(needle) > 0
    }

    fn lines_with(&self, needle: &str) -> usize {
        let lines = self.stderr.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bench.ManyMethods` with its recommended flags and `flag`, and how many nmethods it has.
fn many_methods(flag: &str, args: &[&str]) -> (Jvm, u64) {
    let cp = format!(
        "{}:{}",
        bench_classes().display(),
        bench_classes().with_file_name("many-classes").display()
    );
    let jvm = Jvm::start_with_classpath(
        Path::new(&cp),
        &[
            "-XX:TieredStopAtLevel=1",
            "-XX:-BackgroundCompilation",
            flag,
        ],
        "bench.ManyMethods",
        args,
    );
    let nmethods = jvm
        .stdout_lines()
        .iter()
        .find_map(|l| {
            l.strip_prefix("NMETHODS total=")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .expect("NMETHODS line");
    (jvm, nmethods)
}

/// A JVM with tens of thousands of nmethods to replay whose classes unload and whose code is freed
/// all along (`bench.ManyMethods --churn`).
fn many_methods_churning() -> Jvm {
    let (jvm, nmethods) = many_methods("-XX:+UseSerialGC", &["--churn"]);
    assert!(nmethods >= 20_000, "{nmethods} nmethods");
    jvm
}

/// The agent's thread in `pid`, if it runs.
fn shim_thread(pid: u32) -> Option<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end() == "jvmperf-shim")
        })?
        .file_name()
        .to_str()?
        .parse()
        .ok()
}

/// Time thread `tid` of `pid` has run on a CPU (`schedstat`), in ns.
fn cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The JVM's count of unloaded classes (`jcmd PerfCounter.print`) and the code cache's use in KiB
/// (`jcmd Compiler.codecache`, all its heaps).
fn unloaded_and_code_kib(pid: u32) -> (u64, u64) {
    let jcmd = |what: &str| {
        let out = Command::new(java_home().join("bin/jcmd"))
            .args([&pid.to_string(), what])
            .output()
            .expect("jcmd");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let counters = jcmd("PerfCounter.print");
    let unloaded = counters
        .lines()
        .find_map(|l| l.strip_prefix("java.cls.unloadedClasses="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no unloaded-class counter: {counters}"));
    let code: u64 = jcmd("Compiler.codecache")
        .split_whitespace()
        .filter_map(|w| {
            w.strip_prefix("used=")?
                .strip_suffix("Kb")?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(code > 0, "no code cache use from jcmd");
    (unloaded, code)
}

/// A `jvmperf record` stopped (SIGSTOP) in the middle of the agent's replay of ~25,000 nmethods
/// loses its session within the agent's write deadline: GenerateEvents, which keeps every nmethod
/// not yet posted, returns; classes go on unloading and code being freed; and the next recording is
/// served while the stopped one still exists. Resumed, the stopped one reads what the socket held
/// and the end of the stream, without the end of the replay: the agent's writes stalled inside it.
#[test]
fn a_reader_stopped_mid_replay_loses_its_session_and_the_next_one_is_served() {
    let scratch = Scratch::new("shim", "stalled");
    let jvm = many_methods_churning();
    let pid = jvm.pid;
    let mut stuck = Recorder::spawn(pid, &["-d", "120"], &scratch.path("stuck.collapsed"), &[]);
    // The agent's thread runs ~50 ms for the whole replay here, paced by the reader, ~10 ms of it
    // before the reader has to read anything (~470 KiB of socket and write buffers): stopped at
    // 20 ms, the reader has read part of the replay, and more than the buffers hold is left.
    let mut tid = None;
    wait_until("the agent's thread", Duration::from_secs(60), || {
        tid = shim_thread(pid);
        tid.is_some()
    });
    let tid = tid.unwrap();
    wait_until(
        "the agent's thread running 20 ms",
        Duration::from_secs(30),
        || cpu_ns(pid, tid).is_none_or(|ns| ns >= 20_000_000),
    );
    stuck.signal(Signal::SIGSTOP);
    let stopped = Instant::now();
    let at_stop = unloaded_and_code_kib(pid);
    let stop_cpu = cpu_ns(pid, tid);

    // The agent's thread ends with its session: 5 s without room in the socket, plus a margin.
    wait_until(
        "the agent ending the stalled session",
        Duration::from_secs(20),
        || !has_shim_thread(pid),
    );
    let ended_after = stopped.elapsed();
    let mut after_end = vec![unloaded_and_code_kib(pid)];
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1500));
        after_end.push(unloaded_and_code_kib(pid));
    }
    eprintln!(
        "stopped with the agent's thread at {:?} ms of CPU; session ended {ended_after:?} after the stop; (unloaded classes, code cache KiB): {at_stop:?} at the stop, {after_end:?} at the end and every 1.5 s after",
        stop_cpu.map(|ns| ns / 1_000_000)
    );
    assert!(
        after_end[2].0 > after_end[0].0,
        "class unloading stalled: {after_end:?}"
    );

    let out = scratch.path("next.collapsed");
    let res = run_jvmperf(&["record", "-p", &pid.to_string(), "-d", "2", "-o", s(&out)]);
    let err = stderr_of(&res);
    assert!(res.status.success(), "{err}");
    assert!(!err.contains("without the agent"), "{err}");
    let collapsed = std::fs::read_to_string(&out).unwrap();
    assert!(collapsed.contains("bench.CodeChurn"), "{collapsed}");
    assert!(stuck.is_running(), "the stopped reader went away");

    stuck.signal(Signal::SIGCONT);
    let (status, said) = stuck.finish(Duration::from_secs(30));
    assert_eq!(status.code(), Some(7), "{said}");
    assert!(
        said.contains("closed its connection while the JVM is still running"),
        "{said}"
    );
    assert!(jvm.is_alive());
}

/// A `record` that stops reading after the replay, on a quiet JVM, loses its session to the next
/// `record` within seconds. Its socket fills with a STATS record a second, so the agent's writes
/// would wait only ~25 minutes later: the agent sees instead that the bytes it sent are not read.
/// While it still read, the next `record` was told "busy".
#[test]
fn a_reader_stopped_after_the_replay_on_a_quiet_jvm_is_taken_over() {
    let scratch = Scratch::new("shim", "stopped-quiet");
    let jvm = Jvm::start(&[], "bench.Throughput", &[]);
    let pid = jvm.pid.to_string();
    let next_out = scratch.path("next.collapsed");
    let next = || run_jvmperf(&["record", "-p", &pid, "-d", "1", "-o", s(&next_out)]);
    let mut stuck = Recorder::spawn(
        jvm.pid,
        &["-d", "120", "--status-every", "1"],
        &scratch.path("stuck.collapsed"),
        &[],
    );
    // Status lines come once sampling runs, after the replay.
    wait_until("the first status line", Duration::from_secs(60), || {
        stuck.said("jvmperf: status")
    });
    for _ in 0..4 {
        let res = next();
        assert_eq!(res.status.code(), Some(5), "{}", stderr_of(&res));
        std::thread::sleep(Duration::from_millis(500));
    }

    stuck.signal(Signal::SIGSTOP);
    let stopped = Instant::now();
    let mut busy = 0;
    let (res, served_after) = loop {
        let tried = stopped.elapsed();
        let res = next();
        if res.status.code() != Some(5) || tried > Duration::from_secs(10) {
            break (res, tried);
        }
        busy += 1;
        std::thread::sleep(Duration::from_millis(200));
    };
    let err = stderr_of(&res);
    eprintln!("served by an attach {served_after:?} after the stop, {busy} told busy before");
    assert!(res.status.success(), "{err}");
    assert!(!err.contains("without the agent"), "{err}");
    let collapsed = std::fs::read_to_string(&next_out).unwrap();
    assert!(
        collapsed.contains("bench.Throughput.recurse"),
        "{collapsed}"
    );
    assert!(stuck.is_running(), "the stopped reader went away");
}

/// The last value of `key=` in the status lines `said`.
fn last_status(said: &str, key: &str) -> Option<u64> {
    said.lines()
        .rev()
        .filter(|l| l.starts_with("jvmperf: status"))
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.parse().ok())
        })
}

/// A reader that falls behind while code is compiled: the agent (built with a 16 KiB queue) drops
/// the records that do not fit, counts them in its STATS, and `record` says how many were dropped.
/// The recording goes on: a stop of 3 s is within the agent's write deadline.
#[test]
fn records_that_do_not_fit_the_agents_queue_are_dropped_and_counted() {
    let scratch = Scratch::new("shim", "drops");
    let jvm = Jvm::start(
        &["-XX:ReservedCodeCacheSize=16m", "-XX:+UseSerialGC"],
        "bench.CodeChurn",
        &[],
    );
    let out = scratch.path("drops.collapsed");
    let mut record = Recorder::spawn(
        jvm.pid,
        &["-d", "10", "--status-every", "1"],
        &out,
        &[("JVMPERF_SHIM_LIBRARY", env!("JVMPERF_SHIM_SMALL_QUEUE"))],
    );
    wait_until("the first status line", Duration::from_secs(60), || {
        record.said("jvmperf: status")
    });
    record.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(3));
    let before = record.lines_with("jvmperf: status");
    record.signal(Signal::SIGCONT);
    let (status, said) = record.finish(Duration::from_secs(60));
    assert!(status.success(), "{said}");
    assert!(
        record.lines_with("jvmperf: status") > before,
        "no status line after the stop: {said}"
    );
    let counted = last_status(&said, "shim_dropped=").unwrap_or_else(|| panic!("{said}"));
    let reported: u64 = said
        .lines()
        .find_map(|l| {
            l.strip_prefix("jvmperf: the agent dropped ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no dropped records reported: {said}"));
    eprintln!("the agent's STATS counted {counted} records dropped, record reported {reported}");
    assert!(counted > 0 && reported >= counted, "{said}");
    assert!(!said.contains("ended early"), "{said}");
    let collapsed = std::fs::read_to_string(&out).unwrap();
    assert!(collapsed.contains("bench.CodeChurn"), "{collapsed}");
}

/// The agent, copied to `lib_name` in `scratch`, loaded into `pid` by `jcmd` with a socket of
/// the test's own: its connection, as a daemon would accept it.
fn load_agent(pid: u32, scratch: &Scratch, lib_name: &str) -> UnixStream {
    let lib = scratch.path(lib_name);
    std::fs::write(&lib, jvmperf::shim_lib::SHIM_SO).unwrap();
    let sock = scratch.path(&format!("{lib_name}.sock"));
    let listener = UnixListener::bind(&sock).unwrap();
    let load = Command::new(java_home().join("bin/jcmd"))
        .args([&pid.to_string(), "JVMTI.agent_load", s(&lib), s(&sock)])
        .output()
        .unwrap();
    assert!(load.status.success(), "{load:?}");
    listener.set_nonblocking(true).unwrap();
    let mut conn = None;
    wait_until("the agent connecting", Duration::from_secs(10), || {
        conn = listener.accept().ok().map(|(c, _)| c);
        conn.is_some()
    });
    let conn = conn.unwrap();
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

/// The records the agent sends on `conn`, read as a daemon does.
struct Records {
    conn: UnixStream,
    buf: Vec<u8>,
}

impl Records {
    fn next(&mut self) -> Record {
        use std::io::Read;
        loop {
            if let Some(body) = protocol::first_frame(&self.buf).unwrap() {
                let n = 4 + body.len();
                let record = protocol::decode_frame(body).unwrap().record;
                self.buf.drain(..n);
                return record;
            }
            let mut chunk = [0u8; 1 << 16];
            let n = self.conn.read(&mut chunk).expect("a record within 10 s");
            assert!(n > 0, "the agent closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A retransform that fails after the agent took `can_retransform_classes` (the JVM allows a JNI
/// local frame of 1024 references, the agent asks for one per class: PushLocalFrame fails) still
/// gives the capability back, as the agent's next STATS shows.
#[test]
fn a_failed_retransform_gives_the_capability_back() {
    let scratch = Scratch::new("shim", "retransform-fails");
    let (jvm, _) = many_methods("-XX:MaxJNILocalCapacity=1024", &["--target", "3000"]);
    let mut records = Records {
        conn: load_agent(jvm.pid, &scratch, "libjvmperf-shim-retransform.so"),
        buf: Vec::new(),
    };
    let mut methods = Vec::new();
    loop {
        match records.next() {
            Record::Method(m) => methods.push(m.id),
            Record::ReplayDone { .. } => break,
            _ => {}
        }
    }
    assert!(methods.len() >= 2000, "{} methods replayed", methods.len());
    let conn = &mut records.conn;
    conn.write_all(&protocol::encode_retransform(0, &methods[..2000]))
        .unwrap();
    let (retransformed, error) = loop {
        if let Record::RetransformDone {
            retransformed,
            jvmti_error,
            ..
        } = records.next()
        {
            break (retransformed, jvmti_error);
        }
    };
    // JVMTI_ERROR_OUT_OF_MEMORY: PushLocalFrame failed.
    assert_eq!((retransformed, error), (0, 110));
    let held = loop {
        if let Record::Stats(stats) = records.next() {
            break stats.extra.expect("STATS version 2").holds_retransform;
        }
    };
    assert!(!held, "the agent still holds can_retransform_classes");
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

/// Thread names of 15,016 bytes reach `record` cut by the agent to at most 4032 bytes, on a
/// character boundary: its records stay small enough to be copied under the queue's lock.
#[test]
fn the_agent_cuts_long_thread_names_on_a_character_boundary() {
    let scratch = Scratch::new("shim", "long-names");
    let jvm = Jvm::start(&[], "bench.Throughput", &["--spawn", "--long-names"]);
    let out = scratch.path("names.collapsed");
    let res = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "3",
        "--threads",
        "-o",
        s(&out),
    ]);
    assert!(res.status.success(), "{}", stderr_of(&res));
    let full = format!("throughput-unit-{}", "\u{20ac}".repeat(5000));
    let collapsed = std::fs::read_to_string(&out).unwrap();
    let names: Vec<&str> = collapsed
        .lines()
        .filter_map(|l| l.split(';').next())
        .filter(|root| root.starts_with("throughput-unit-"))
        .collect();
    assert!(
        !names.is_empty(),
        "no unit thread named by the agent: {collapsed}"
    );
    for name in names {
        assert!(
            full.starts_with(name) && name.len() <= 4032 && name.len() > 4032 - 3,
            "{} bytes: {name:?}",
            name.len()
        );
    }
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

    let mut conn = load_agent(pid, &scratch, "libjvmperf-shim-another-version.so");
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
