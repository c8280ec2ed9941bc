//! Shared test support: bench apps compiled by `cargo xtask bench-apps`, real JVMs started from them,
//! and the jvmperf binary.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub mod tomcat;

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn java_home() -> PathBuf {
    std::env::var_os("JVMPERF_TEST_JAVA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/jvm/java-17-openjdk-amd64"))
}

/// Compile the bench apps once per test binary (xtask skips work that is up to date).
pub fn bench_classes() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = option_env!("CARGO").unwrap_or("cargo");
            let lock = std::fs::File::create(workspace().join("target/.bench-apps.lock"))
                .expect("lock file");
            nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
                .map(|guard| {
                    let status = Command::new(cargo)
                        .args(["run", "--quiet", "--package", "xtask", "--", "bench-apps"])
                        .current_dir(workspace())
                        .status()
                        .expect("run cargo xtask bench-apps");
                    assert!(status.success(), "cargo xtask bench-apps failed");
                    drop(guard);
                })
                .expect("flock");
            workspace().join("target/bench-apps/classes")
        })
        .clone()
}

/// A JVM running a bench app; killed when dropped.
pub struct Jvm {
    pub child: Child,
    pub pid: u32,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Jvm {
    /// Start `class` with extra JVM flags and program args, wait for its `READY` line.
    pub fn start(jvm_flags: &[&str], class: &str, args: &[&str]) -> Jvm {
        Self::start_with_classpath(&bench_classes(), jvm_flags, class, args)
    }

    pub fn start_with_classpath(cp: &Path, jvm_flags: &[&str], class: &str, args: &[&str]) -> Jvm {
        Self::spawn(java_command(cp, jvm_flags, class, args))
    }

    /// Start `class` as user `uid` (and group `gid`, no supplementary groups); `cp` must be
    /// readable by that user.
    pub fn start_as(
        uid: u32,
        gid: u32,
        cp: &Path,
        jvm_flags: &[&str],
        class: &str,
        args: &[&str],
    ) -> Jvm {
        use std::os::unix::process::CommandExt;
        let mut cmd = java_command(cp, jvm_flags, class, args);
        cmd.uid(uid).gid(gid).current_dir("/");
        Self::spawn(cmd)
    }

    /// Spawn a prepared `java` command with piped output and wait for its `READY` line.
    pub fn spawn(mut cmd: Command) -> Jvm {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start java");
        let pid = child.id();
        let stdout = collect_lines(child.stdout.take().unwrap());
        let stderr = collect_lines(child.stderr.take().unwrap());
        let jvm = Jvm {
            child,
            pid,
            stdout,
            stderr,
        };
        jvm.wait_for_line("READY", Duration::from_secs(60));
        jvm
    }

    pub fn wait_for_line(&self, needle: &str, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self
                .stdout
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(needle))
            {
                return;
            }
            assert!(
                self.is_alive(),
                "JVM exited early; stderr: {:?}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("JVM did not print {needle} within {timeout:?}");
    }

    pub fn is_alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
            })
            .unwrap_or(false)
    }

    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// The `bench.Throughput` app's rate of work (units per second): the median over the 100 ms
    /// intervals between the `WORK <nanoTime> <units>` lines it prints during the next `window`.
    pub fn work_rate(&self, window: Duration) -> f64 {
        let seen = self.stdout.lock().unwrap().len();
        std::thread::sleep(window);
        let points: Vec<(f64, f64)> = self.stdout.lock().unwrap()[seen..]
            .iter()
            .filter_map(|l| {
                let mut it = l.strip_prefix("WORK ")?.split_whitespace();
                Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
            })
            .collect();
        let mut rates: Vec<f64> = points
            .windows(2)
            .filter(|w| w[1].0 > w[0].0)
            .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0) * 1e9)
            .collect();
        assert!(
            rates.len() >= 3,
            "too few WORK lines in {window:?}: is this bench.Throughput? {points:?}"
        );
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    }

    /// HotSpot printed a thread dump: it got a SIGQUIT it did not take as an attach request.
    pub fn printed_thread_dump(&self) -> bool {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("Full thread dump"))
    }
}

/// `java` from the test JDK running `class` from `cp`.
/// One test of the binary at a time, for tests whose JVM keeps both cores busy (a guard per test;
/// a test that panicked does not poison it for the rest).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn java_command(cp: &Path, jvm_flags: &[&str], class: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(java_home().join("bin/java"));
    cmd.args(jvm_flags).arg("-cp").arg(cp).arg(class).args(args);
    cmd
}

/// Assert that jvmperf failed with exit `code` and exactly one line on stderr containing `needle`.
pub fn assert_one_line_error(out: &Output, code: i32, needle: &str) {
    let err = stderr_of(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected: {err}"
    );
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
}

impl Drop for Jvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Killed, the JVM cannot remove its attach socket; a later process given the same pid
        // (pid_max is 32768 here) would find it in its way.
        let _ = std::fs::remove_file(format!("/tmp/.java_pid{}", self.pid));
    }
}

fn collect_lines(r: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

pub fn jvmperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_jvmperf"))
}

/// Run jvmperf with `args`, returning its output.
pub fn run_jvmperf(args: &[&str]) -> Output {
    jvmperf().args(args).output().expect("run jvmperf")
}

pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JDK that compiled the bench apps (its `javap` reads them; test JDKs may be runtimes only).
pub fn build_java_home() -> PathBuf {
    PathBuf::from("/usr/lib/jvm/java-17-openjdk-amd64")
}

/// The bytecode index of the first `invoke*` of `callee` inside `method` of `class`, from `javap -c`.
pub fn call_site_bci(class: &str, method: &str, callee: &str) -> i32 {
    let out = Command::new(build_java_home().join("bin/javap"))
        .args(["-c", "-p", "-cp"])
        .arg(bench_classes())
        .arg(class)
        .output()
        .expect("javap");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut in_method = false;
    for line in text.lines() {
        if line.starts_with("  ") && !line.starts_with("   ") {
            in_method = line.contains(&format!(" {method}("));
        } else if in_method
            && line.contains("invoke")
            && (line.contains(&format!("Method {callee}:"))
                || line.contains(&format!(".{callee}:")))
        {
            let bci = line.trim().split(':').next().unwrap();
            return bci.trim().parse().unwrap();
        }
    }
    panic!("no call to {callee} in {class}.{method}:\n{text}");
}

/// Go's pprof (`go tool pprof`), from PATH or Debian's golang-go.
pub fn go() -> PathBuf {
    let candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("go")).collect())
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain([PathBuf::from("/usr/lib/go/bin/go")])
        .find(|p| p.is_file())
        .expect("Go's pprof is needed: install golang-go (scripts/setup-debian.sh --tests)")
}

/// Each key's increase over `window` by the app's ground truth, read once a `GT` line past the
/// window's end is out.
pub fn truth_over<const N: usize>(jvm: &Jvm, keys: [&str; N], window: [u64; 2]) -> [f64; N] {
    std::thread::sleep(std::time::Duration::from_millis(300));
    let lines = jvm.stdout_lines();
    let (a, b) = (
        ground_truth_at(&lines, keys, window[0]),
        ground_truth_at(&lines, keys, window[1]),
    );
    std::array::from_fn(|i| b[i] - a[i])
}

/// Asserts that the sampled total is within `total` (a ratio range) of the truth's, and each
/// key's share of the sampled within `points` percentage points of its share of the truth.
pub fn assert_shares<const N: usize>(
    keys: [&str; N],
    sampled: [u64; N],
    truth: [f64; N],
    total: std::ops::RangeInclusive<f64>,
    points: f64,
) {
    let (sum, truth_sum) = (
        sampled.iter().sum::<u64>() as f64,
        truth.iter().sum::<f64>(),
    );
    let ratio = sum / truth_sum;
    eprintln!("sampled {sum:.0}, the app counted {truth_sum:.0}: {ratio:.3}");
    assert!(
        total.contains(&ratio),
        "sampled {sum:.0}, the app counted {truth_sum:.0}"
    );
    for (k, key) in keys.iter().enumerate() {
        let share = 100.0 * sampled[k] as f64 / sum;
        let true_share = 100.0 * truth[k] / truth_sum;
        eprintln!("{key}: {share:.2}% sampled, {true_share:.2}% counted");
        assert!(
            (share - true_share).abs() <= points,
            "{key}: {share:.2}% sampled, {true_share:.2}% counted"
        );
    }
}

/// Cumulative per-key values at `t`, interpolated between the app's `GT <nanoTime> key=value …`
/// lines (the bench apps' ground truth), in the order of `keys`.
pub fn ground_truth_at<const N: usize>(lines: &[String], keys: [&str; N], t: u64) -> [f64; N] {
    let points: Vec<(u64, [f64; N])> = lines
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("GT ")?.split_whitespace();
            let time: u64 = it.next()?.parse().ok()?;
            let mut v = [0.0; N];
            for kv in it {
                let (k, n) = kv.split_once('=')?;
                v[keys.iter().position(|g| *g == k)?] = n.parse().ok()?;
            }
            Some((time, v))
        })
        .collect();
    let after = points
        .iter()
        .position(|p| p.0 >= t)
        .expect("GT line after the window");
    assert!(after > 0, "GT line before the window");
    let ((t0, a), (t1, b)) = (points[after - 1], points[after]);
    let f = (t - t0) as f64 / (t1 - t0).max(1) as f64;
    std::array::from_fn(|i| a[i] + f * (b[i] - a[i]))
}

/// The sample window `record` prints (CLOCK_MONOTONIC ns, first and last).
pub fn sample_window(record_stderr: &str) -> [u64; 2] {
    let window: Vec<u64> = record_stderr
        .lines()
        .find_map(|l| l.split_once("as System.nanoTime): ").map(|(_, w)| w))
        .expect("sample window")
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    window.try_into().expect("two times in the sample window")
}

/// A scratch directory `jvmperf-<file>-<name>-<pid>` in the temporary directory, removed when
/// dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(file: &str, name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("jvmperf-{file}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs jvmperf with `args` and fails the test unless it succeeds.
pub fn ok(args: &[&str]) -> Output {
    let res = run_jvmperf(args);
    assert!(
        res.status.success(),
        "jvmperf {args:?} failed: {}",
        stderr_of(&res)
    );
    res
}

/// A path as the `&str` an argument list takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
