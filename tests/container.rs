//! A JVM in its own mount and pid namespace with a private /tmp, as in a container: jvmperf places
//! the shim and its socket inside, attaches through /proc/<pid>/root, and names frames correctly.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Contained {
    child: std::process::Child,
    jvm_pid: u32,
}

impl Drop for Contained {
    fn drop(&mut self) {
        if self.jvm_pid == 0 {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return;
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.jvm_pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_contained() -> Contained {
    let classes = bench_classes();
    let java = java_home().join("bin/java");
    // A new mount + pid namespace; /tmp replaced by a private tmpfs, so the JVM's attach socket, the
    // shim and jvmperf's socket live where only /proc/<pid>/root reaches them.
    // The classes may themselves live under /tmp (a CI checkout): bind them to /mnt first, and
    // jvmperf's directory to /srv (for jvmperf run inside the namespaces).
    let script = format!(
        "mount --bind {} /mnt && mount --bind {} /srv && mount -t tmpfs tmpfs /tmp && exec {} \
         -cp /mnt bench.InlineHot",
        classes.display(),
        jvmperf_dir().display(),
        java.display()
    );
    let mut child = Command::new("unshare")
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("unshare (needs root)");
    let parent = child.id();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if line.is_ok_and(|l| l.contains("READY")) {
                let _ = ready_tx.send(());
            }
        }
    });
    let mut contained = Contained { child, jvm_pid: 0 };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The JVM is the grandchild: unshare → (fork) sh → exec java.
        let found = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| {
                let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let ppid: u32 = stat
                    .rsplit_once(") ")?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
                (ppid == parent && cmd.contains("bench.InlineHot")).then_some(pid)
            })
            .next();
        if let Some(jvm_pid) = found {
            contained.jvm_pid = jvm_pid;
            // After its warm-up (~2 s; much longer on a loaded machine, where a fixed 3 s wait let
            // the attach begin in the JVM's start-up and time out).
            ready
                .recv_timeout(Duration::from_secs(60))
                .expect("the contained JVM printed READY");
            return contained;
        }
        assert!(Instant::now() < deadline, "contained JVM did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn jvmperf_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_BIN_EXE_jvmperf"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Samples of `bench.InlineHot.hotLoop` on its main thread in collapsed `text`.
fn hot_loop_samples(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.contains("bench.InlineHot.hotLoop_[j]") && l.starts_with("java;"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

/// jvmperf inside the JVM's pid and mount namespaces, as in its container (root there, which
/// includes CAP_PERFMON): per-CPU events report pids and tids as that namespace numbers them, and
/// jvmperf finds the JVM by the pid it has there.
#[test]
fn profiles_per_cpu_from_inside_the_jvms_namespaces() {
    let c = start_contained();
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.jvm_pid)).unwrap();
    let ns_pid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|ids| ids.split_whitespace().last())
        .unwrap()
        .to_string();
    let out = Command::new("nsenter")
        .args(["-t", &c.jvm_pid.to_string(), "-p", "-m", "--"])
        .args([
            "/srv/jvmperf",
            "record",
            "-p",
            &ns_pid,
            "-d",
            "3",
            "-F",
            "199",
        ])
        .args([
            "--sampling",
            "per-cpu",
            "--threads",
            "-o",
            "/tmp/in-ns.collapsed",
        ])
        .output()
        .expect("nsenter");
    let err = stderr_of(&out);
    assert!(out.status.success(), "record inside the namespaces: {err}");
    assert!(err.contains("sampling per CPU"), "{err}");
    let file = format!("/proc/{}/root/tmp/in-ns.collapsed", c.jvm_pid);
    let text = std::fs::read_to_string(file).unwrap();
    let hot = hot_loop_samples(&text);
    assert!(
        hot > 100,
        "hot loop samples on the main thread: {hot}\n{text}"
    );
}

#[test]
fn profiles_a_jvm_in_its_own_mount_and_pid_namespace() {
    let c = start_contained();
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.jvm_pid)).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(
        nspid.split_whitespace().count() == 3,
        "JVM is in a nested pid namespace: {nspid}"
    );
    assert!(
        !std::path::Path::new(&format!("/tmp/.java_pid{}", c.jvm_pid)).exists(),
        "the JVM's /tmp is private"
    );

    let out = run_jvmperf(&["jitmap", "-p", &c.jvm_pid.to_string()]);
    assert!(out.status.success(), "jitmap: {}", stderr_of(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bench.InlineHot.hotLoop"));

    let file = std::env::temp_dir().join(format!("jvmperf-ns-{}.collapsed", std::process::id()));
    let out = run_jvmperf(&[
        "record",
        "-p",
        &c.jvm_pid.to_string(),
        "-d",
        "3",
        "-F",
        "199",
        "--threads",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "record: {}", stderr_of(&out));
    let text = std::fs::read_to_string(&file).unwrap();
    let hot = hot_loop_samples(&text);
    assert!(
        hot > 100,
        "hot loop samples on the main thread: {hot}\n{text}"
    );
    let _ = std::fs::remove_file(&file);
}
