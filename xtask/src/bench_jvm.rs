//! Running bench-app JVMs and the release jvmperf binary for benchmarks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{jdk, paths};

/// A bench-app JVM, killed on drop.
pub struct BenchJvm {
    child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl BenchJvm {
    /// Start `class` with `flags` on `classpath` and wait for its `READY` line.
    pub fn start(flags: &[&str], classpath: &str, class: &str, args: &[&str]) -> Result<Self> {
        let mut child = Command::new(jdk::tool("java")?)
            .args(flags)
            .args(["-cp", classpath, class])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting java")?;
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().context("java stdout")?;
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let jvm = BenchJvm { child, lines: rx };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match jvm.lines.recv_timeout(left) {
                Ok(line) if line.trim() == "READY" => return Ok(jvm),
                Ok(_) => {}
                Err(_) => bail!("{class} did not print READY within 120 s"),
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for BenchJvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Build the bench apps and the release jvmperf; return the jvmperf binary.
pub fn prepare() -> Result<PathBuf> {
    crate::bench_apps::main(&[])?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--package", "jvmperf"])
        .current_dir(paths::workspace_root())
        .status()
        .context("cargo build --release")?;
    if !status.success() {
        bail!("cargo build --release failed");
    }
    Ok(paths::target_dir().join("release/jvmperf"))
}

pub fn classes() -> String {
    paths::bench_apps_out()
        .join("classes")
        .to_string_lossy()
        .into_owned()
}

pub fn many_classpath() -> String {
    let out = paths::bench_apps_out();
    format!(
        "{}:{}",
        out.join("classes").display(),
        out.join("many-classes").display()
    )
}

/// utime + stime of a whole process (its exited threads included), from `/proc/<pid>/stat`
/// (USER_HZ = 100 on Linux).
pub fn proc_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Starts `jvmperf record -p PID -d SECS -F HZ [extra…] -o OUT` with its stderr piped.
pub fn spawn_record(
    jvmperf: &Path,
    pid: u32,
    (secs, hz): (u64, u64),
    extra: &[&str],
    out: &Path,
) -> Result<Child> {
    Command::new(jvmperf)
        .args(["record", "-p", &pid.to_string()])
        .args(["-d", &secs.to_string(), "-F", &hz.to_string()])
        .args(extra)
        .arg("-o")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting jvmperf record")
}
