//! `jvmperf daemon` against real JVMs: one running before it starts, one started after, one that
//! exits while profiled, one with attach disabled; files rotate per interval, are read back by
//! `jvmperf report`/`convert` and Go's pprof, and SIGTERM writes every JVM's last interval.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Daemon {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    fn start(args: &[&str]) -> Daemon {
        let mut child = jvmperf()
            .arg("daemon")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start jvmperf daemon");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Daemon { child, log }
    }

    fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until `ok` holds, checking every 100 ms; panic with `what` and the daemon's log after
/// `cap` (a cap for a loaded machine, not a timing assertion).
fn wait_for(daemon: &Daemon, what: &str, cap: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < cap,
            "{what} did not happen within {cap:?}; daemon log:\n{}",
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The interval files of the JVM with `pid`, oldest first.
fn files_of(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let suffix = format!("-{pid}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().unwrap().to_string_lossy().ends_with(&suffix))
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten())
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .collect();
    files.sort();
    files
}

/// `go tool pprof -raw` of `file`: its header, samples with labels, locations.
fn pprof_raw(file: &Path) -> String {
    text(
        &Command::new(go())
            .args(["tool", "pprof", "-raw", "-symbolize=none"])
            .arg(file)
            .output()
            .expect("run go tool pprof"),
    )
}

fn text(out: &std::process::Output) -> String {
    assert!(out.status.success(), "failed: {}", stderr_of(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn daemon_profiles_every_matching_jvm_per_interval_and_flushes_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("jvmperf-daemon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Only JVMs of this test match: other JVMs on the host are never touched.
    let marker = format!("-Djvmperf.daemon.test={}", std::process::id());
    let hot_flags = [
        marker.as_str(),
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=inline,bench.InlineHot::helper",
        "-XX:CompileCommand=dontinline,bench.InlineHot::hotLoop",
    ];
    let before = Jvm::start(&hot_flags, "bench.InlineHot", &[]);
    let refusing = Jvm::start(
        &[marker.as_str(), "-XX:+DisableAttachMechanism"],
        "bench.InlineHot",
        &[],
    );
    // Runs 10 s after READY, then exits while the daemon profiles it.
    let exiting = Jvm::start(
        &[marker.as_str()],
        "bench.Throughput",
        &["--threads", "1", "10"],
    );
    let daemon = Daemon::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--interval",
        "3",
        &format!("--match={marker}"),
        // The CPU budget is tested on its own below: a loaded machine must not change the rate.
        "--max-cpu",
        "100",
    ]);
    let after = Jvm::start(&[marker.as_str()], "bench.Phases", &[]);
    // Generous: a first run builds the symbol cache of a new JDK's libjvm (CPU-seconds on a busy host).
    let cap = Duration::from_secs(120);
    wait_for(&daemon, "two intervals of the first JVM", cap, || {
        files_of(&dir, before.pid).len() >= 2
    });
    wait_for(&daemon, "an interval of the JVM started later", cap, || {
        !files_of(&dir, after.pid).is_empty()
    });
    // A JVM that refuses attach is profiled without the agent, saying why once.
    let refused = format!("profiling JVM {} (bench.InlineHot", refusing.pid);
    wait_for(
        &daemon,
        "an interval of the JVM refusing attach",
        cap,
        || !files_of(&dir, refusing.pid).is_empty(),
    );
    let log = daemon.log_text();
    // As root: one set of per-CPU events for every JVM.
    assert!(
        log.contains("sampling per CPU: one event per CPU for every JVM"),
        "{log}"
    );
    let line = log.lines().find(|l| l.contains(&refused)).unwrap();
    assert!(
        line.contains("without the agent") && line.contains("DisableAttachMechanism"),
        "{line}"
    );
    assert_eq!(log.matches(&refused).count(), 1, "logged once: {log}");
    let exited = format!("stopped profiling JVM {} (bench.Throughput)", exiting.pid);
    wait_for(&daemon, "the exiting JVM's last interval", cap, || {
        daemon.log_text().contains(&exited)
    });
    assert!(!files_of(&dir, exiting.pid).is_empty());

    daemon.signal(nix::sys::signal::Signal::SIGUSR1);
    let status = format!("status pid={} name=bench.InlineHot samples=", before.pid);
    wait_for(&daemon, "a status line per JVM", cap, || {
        daemon.log_text().contains(&status)
    });
    let log = daemon.log_text();
    let line = log.lines().find(|l| l.contains(&status)).unwrap();
    for key in ["lost=", "rate_hz=19", "shim_kib="] {
        assert!(line.contains(key), "{key} not in {line}");
    }
    assert!(log.contains("rss_kib="), "{log}");
    // Per CPU, the rings' losses are the host's, said apart from each JVM's own.
    let head = log.lines().rfind(|l| l.contains("status jvms=")).unwrap();
    assert!(head.contains(" host_lost="), "{head}");

    let files_before_stop = files_of(&dir, before.pid).len();
    let mut daemon = daemon;
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "daemon did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", daemon.log_text());
    assert!(
        daemon
            .log_text()
            .contains("every JVM's last interval was written"),
        "{}",
        daemon.log_text()
    );
    assert!(before.is_alive() && after.is_alive(), "the JVMs run on");
    let hot_files = files_of(&dir, before.pid);
    assert!(
        hot_files.len() > files_before_stop,
        "SIGTERM wrote the current interval"
    );

    // Every file reads back; merged, the first JVM's files show its hot method.
    for file in hot_files.iter().chain(&files_of(&dir, after.pid)) {
        let report = text(&run_jvmperf(&["report", file.to_str().unwrap()]));
        assert!(report.contains("samples"), "{report}");
    }
    let mut args = vec!["report", "--top", "0"];
    args.extend(hot_files.iter().map(|f| f.to_str().unwrap()));
    let report = text(&run_jvmperf(&args));
    assert!(report.contains("bench.InlineHot.hotLoop"), "{report}");
    assert!(
        report.contains(&format!("and {} more files", hot_files.len() - 1)),
        "{report}"
    );
    let merged = dir.join("merged.collapsed");
    let mut args = vec!["convert", "-o", merged.to_str().unwrap()];
    let phases = files_of(&dir, after.pid);
    args.extend(phases.iter().map(|f| f.to_str().unwrap()));
    text(&run_jvmperf(&args));
    let folded = std::fs::read_to_string(&merged).unwrap();
    assert!(folded.contains("bench.Phases"), "{folded}");

    // Go's pprof reads each file: labels, interval start and duration, the rate in effect.
    for file in &hot_files {
        let raw = pprof_raw(file);
        for needle in [
            format!("pid:[{}]", before.pid),
            "main:[bench.InlineHot]".to_string(),
            "jdk:[".to_string(),
            "host:[".to_string(),
            "rate_hz=19".to_string(),
            // Per CPU, the rings' losses, of every process on the host.
            " host_lost=".to_string(),
            "Duration: ".to_string(),
            "Time: ".to_string(),
            "bench.InlineHot.hotLoop".to_string(),
        ] {
            assert!(
                raw.contains(&needle),
                "{needle} not in {}:\n{raw}",
                file.display()
            );
        }
    }

    // Over its CPU budget the daemon lowers the rate, says so, and the files carry the new rate.
    let tight = Daemon::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--interval",
        "2",
        "--pid",
        &before.pid.to_string(),
        "--max-cpu",
        "0.001",
    ]);
    wait_for(&tight, "the rate lowered", cap, || {
        tight
            .log_text()
            .contains("sampling rate lowered from 19 to")
    });
    let known = files_of(&dir, before.pid).len();
    wait_for(&tight, "an interval at the lower rate", cap, || {
        files_of(&dir, before.pid).len() > known
    });
    let mut tight = tight;
    tight.signal(nix::sys::signal::Signal::SIGTERM);
    // Its last interval is written on the way out: the directory is read and removed after.
    tight.child.wait().unwrap();
    let newest = files_of(&dir, before.pid).pop().unwrap();
    let raw = pprof_raw(&newest);
    let rate: u64 = raw
        .split("rate_hz=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no rate in {}:\n{raw}", newest.display()));
    assert!(rate < 19, "rate {rate} in {}", newest.display());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// In a pid namespace of its own (the test forces pid reuse there with `ns_last_pid`, as a
/// busy host does by itself): a JVM is killed while profiled and another program's JVM is
/// started at once on its pid, while the first one's last interval still waits for native
/// symbols. The first one's engine ends, the new one gets its intervals, and neither JVM's
/// files hold the other's frames.
const PID_REUSE: &str = r#"
set -u
dir=$1 jvmperf=$2 java=$3 cp=$4 marker=$5
# A symbol cache of its own, cold: the killed JVM's last interval waits for it while the new
# JVM is found.
export JVMPERF_CACHE_DIR=$dir/cache
now() { date +%s.%N; }
"$jvmperf" daemon --dir "$dir" --interval 2 --format collapsed --match="$marker" \
    --max-cpu 100 2>"$dir.log" &
daemon=$!
"$java" "$marker" -cp "$cp" bench.InlineHot >/dev/null 2>&1 &
old=$!
for _ in $(seq 600); do
    kill -0 $daemon || break
    grep -q "profiling JVM $old (bench.InlineHot" "$dir.log" && break
    sleep 0.1
done
sleep 1
kill -9 $old
wait $old 2>/dev/null
# Killed, it left its attach socket, in the way of the next JVM of its pid.
rm -f /tmp/.java_pid$old
# The JVM's own threads take pids too: try again until the new JVM got the old pid.
for _ in $(seq 20); do
    echo $((old - 1)) >/proc/sys/kernel/ns_last_pid
    "$java" "$marker" -cp "$cp" bench.Phases >/dev/null 2>&1 &
    new=$!
    [ $new = $old ] && break
    kill -9 $new
    wait $new 2>/dev/null
done
echo "old=$old new=$new"
for _ in $(seq 240); do
    kill -0 $daemon || break
    grep -q "profiling JVM $new (bench.Phases" "$dir.log" && break
    sleep 0.1
done
echo "profiled=$(now)"
sleep 20
echo "stopped=$(now)"
kill -TERM $daemon
wait $daemon
kill -9 $new
"#;

#[test]
fn a_jvm_given_the_pid_of_one_that_exited_gets_its_intervals() {
    let dir = workspace()
        .join("target/tmp")
        .join(format!("jvmperf-pid-reuse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let marker = format!("-Djvmperf.pid.reuse.test={}", std::process::id());
    let out = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "bash",
            "-c",
            PID_REUSE,
            "bash",
        ])
        .arg(&dir)
        .arg(env!("CARGO_BIN_EXE_jvmperf"))
        .arg(java_home().join("bin/java"))
        .arg(bench_classes())
        .arg(&marker)
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default();
    let value = |key: &str| -> f64 {
        let found = stdout
            .lines()
            .flat_map(|l| l.split(' '))
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok());
        found.unwrap_or_else(|| panic!("no {key} in {stdout}\n{}\n{log}", stderr_of(&out)))
    };
    let (old, new) = (value("old") as u32, value("new") as u32);
    assert_eq!(old, new, "the new JVM did not get the old pid: {stdout}");
    let files = |name: &str| -> Vec<String> {
        let jvm_dir = dir.join(format!("{name}-{old}"));
        let mut files: Vec<_> = std::fs::read_dir(&jvm_dir)
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    };
    let old_files = files("bench.InlineHot");
    let new_files = files("bench.Phases");
    assert!(
        log.contains(&format!("stopped profiling JVM {old} (bench.InlineHot)")),
        "{log}"
    );
    // Every interval of the new JVM from its first: 20 s of 2 s intervals and the last one.
    let due = ((value("stopped") - value("profiled")) / 2.0).floor();
    eprintln!("{} intervals of the new JVM, {due} due", new_files.len());
    assert!(
        new_files.len() as f64 >= 0.9 * due,
        "{} intervals of the new JVM where {due} were due; log:\n{log}",
        new_files.len()
    );
    for (files, own, other) in [
        (&old_files, "bench.InlineHot", "bench.Phases"),
        (&new_files, "bench.Phases", "bench.InlineHot"),
    ] {
        assert!(!files.is_empty(), "no files of {own}: {log}");
        for text in files {
            assert!(!text.contains(other), "{other} in a file of {own}:\n{text}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(dir.with_extension("log"));
}

/// One HTTP request as the receiver got it.
struct Request {
    path: String,
    query: Vec<(String, String)>,
    body: Vec<u8>,
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// A minimal HTTP/1.1 receiver on 127.0.0.1:`port` that keeps every request and answers 200.
fn receive(listener: std::net::TcpListener, requests: Arc<Mutex<Vec<Request>>>) {
    use std::io::{BufRead, Read, Write};
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut length = 0;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = header.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let query = query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (percent_decode(k), percent_decode(v)))
                .collect();
            requests.lock().unwrap().push(Request {
                path: path.to_string(),
                query,
                body,
            });
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
}

#[test]
fn push_queues_while_the_server_is_down_then_delivers_every_interval() {
    let dir = std::env::temp_dir().join(format!("jvmperf-daemon-push-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let jvm = Jvm::start(&[], "bench.InlineHot", &[]);
    // A port nobody listens on yet: the server is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let daemon = Daemon::start(&[
        "--dir",
        dir.to_str().unwrap(),
        "--interval",
        "2",
        "--pid",
        &jvm.pid.to_string(),
        "--max-cpu",
        "100",
        "--push",
        &url,
    ]);
    let queue = dir.join(".push-queue");
    let queued = || {
        std::fs::read_dir(&queue)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "push")
                })
                .count()
            })
            .unwrap_or(0)
    };
    // Generous: a first run builds the symbol cache of a new JDK's libjvm (CPU-seconds on a busy host).
    let cap = Duration::from_secs(120);
    wait_for(
        &daemon,
        "two profiles queued while the server is down",
        cap,
        || queued() >= 2,
    );
    // The failure is logged once; the log is read from the daemon's stderr as it comes.
    wait_for(
        &daemon,
        "the push failure logged",
        Duration::from_secs(10),
        || daemon.log_text().contains("fails"),
    );
    let requests = Arc::new(Mutex::new(Vec::new()));
    receive(
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap(),
        requests.clone(),
    );
    wait_for(&daemon, "the queue delivered", cap, || {
        requests.lock().unwrap().len() >= 3 && queued() == 0
    });
    assert!(
        daemon.log_text().contains("works again"),
        "{}",
        daemon.log_text()
    );
    let mut daemon = daemon;
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(daemon.child.wait().unwrap().code(), Some(0));
    let requests = requests.lock().unwrap();
    let files = files_of(&dir, jvm.pid);
    assert!(requests.len() <= files.len(), "one push per file at most");
    let mut spans = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(r.path, "/ingest");
        let get = |k: &str| {
            r.query
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {k} in {:?}", r.query))
        };
        let name = get("name");
        assert!(name.starts_with("bench.InlineHot{"), "{name}");
        for label in [
            format!("pid={}", jvm.pid),
            "main=bench.InlineHot".into(),
            "jdk=".into(),
            "host=".into(),
        ] {
            assert!(name.contains(&label), "{label} not in {name}");
        }
        assert_eq!(get("format"), "pprof");
        assert_eq!(get("sampleRate"), "19");
        let (from, until): (u64, u64) =
            (get("from").parse().unwrap(), get("until").parse().unwrap());
        assert!(from < until, "{from} {until}");
        spans.push(from);
        let body = dir.join(format!("body-{i}.pb.gz"));
        std::fs::write(&body, &r.body).unwrap();
        let raw = pprof_raw(&body);
        assert!(raw.contains("bench.InlineHot.hotLoop"), "{raw}");
        assert!(raw.contains(&format!("pid:[{}]", jvm.pid)), "{raw}");
    }
    let mut sorted = spans.clone();
    sorted.sort();
    assert_eq!(spans, sorted, "oldest first");
    std::fs::remove_dir_all(&dir).unwrap();
}
