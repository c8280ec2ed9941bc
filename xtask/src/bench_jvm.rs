//! Running bench-app JVMs and the release jvmperf binary for benchmarks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

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

/// Where the benchmarks that pin (`bench switch`, `bench alloc`) run the JVM…
pub const JVM_CPU: &str = "0";
/// …and the profilers to: what a profiler costs inside the JVM's threads is then apart from the
/// share of a core it takes.
pub const PROFILER_CPU: &str = "1";

/// `program` run pinned to [`PROFILER_CPU`], its output piped.
pub fn pinned(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", PROFILER_CPU]).arg(program);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Every thread of `pid` on `cpu`, and so the threads they start later. `taskset -a -p` gives up
/// when a thread ends while it goes through them (`--spawn` ends thousands a second).
pub fn pin_threads(pid: u32, cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    let mut pinned = 0;
    // Twice: threads started during the first pass by threads not yet pinned.
    for _ in 0..2 {
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))?.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<i32>().ok())
            else {
                continue;
            };
            // SAFETY: set is a valid cpu_set_t of the size given; a vanished tid fails with ESRCH.
            if unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) } == 0 {
                pinned += 1;
            }
        }
    }
    ensure!(pinned > 0, "could not pin the JVM's threads to CPU {cpu}");
    Ok(())
}

/// Runs a pinned benchmark `name`: checks for 2 CPUs, raises this process's priority, builds
/// jvmperf, and calls `measure` with it and a scratch directory, removed afterwards.
pub fn run_pinned(name: &str, measure: impl FnOnce(&Path, &Path) -> Result<()>) -> Result<()> {
    ensure!(
        std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2,
        "{name}: needs 2 CPUs (the JVM on one, the profilers on the other)"
    );
    crate::bench_record::raise_priority();
    let jvmperf = prepare()?;
    let dir = std::env::temp_dir().join(format!("jvmperf-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure(&jvmperf, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}
