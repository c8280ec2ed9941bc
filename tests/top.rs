//! `jvmperf top` in a real terminal: tmux (a private server) runs it against a real JVM; the hot
//! method must come on screen, and `q` and Ctrl-C must each end it with the terminal restored
//! (the shell's screen back, the line discipline out of raw mode).
//!
//! tmux's panes are sessions of their own, as a user's terminal is: where the kernel groups
//! processes by session (autogroups), top shares the CPUs with the JVM's session, not with its
//! threads.

mod common;

use common::*;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A tmux server of this test's own, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!("jvmperf-top-{name}-{}", std::process::id()),
        };
        let out = tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "150",
            "-y",
            "40",
            "sh",
        ]);
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux (installed by scripts/setup-debian.sh --tests)")
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.run(&args).status.success());
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// Waits until the screen satisfies `done`; returns it.
    fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {timeout:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Runs top (with `options`) in the pane until `method` shows, quits it with `quit_keys`, and
/// checks the terminal is the shell's again, in cooked mode.
fn top_then_quit(tmux: &Tmux, pid: u32, options: &str, method: &str, quit_keys: &[&str]) {
    let cmd = format!("{} top -p {pid} {options}", env!("CARGO_BIN_EXE_jvmperf"));
    tmux.keys(&[&cmd, "Enter"]);
    tmux.wait_for(method, Duration::from_secs(60), |s| {
        s.contains("SELF%") && s.contains(method)
    });
    tmux.keys(quit_keys);
    tmux.wait_for("the shell's screen", Duration::from_secs(10), |s| {
        !s.contains("SELF%")
    });
    let modes = std::env::temp_dir().join(format!("{}-stty-{pid}", tmux.socket));
    let _ = std::fs::remove_file(&modes);
    // Written whole, then renamed: the file exists only once stty has finished.
    let cmd = format!("stty -a > {0}.tmp && mv {0}.tmp {0}", modes.display());
    tmux.keys(&[&cmd, "Enter"]);
    tmux.wait_for("stty's output", Duration::from_secs(10), |_| modes.exists());
    let stty = std::fs::read_to_string(&modes).unwrap_or_default();
    let _ = std::fs::remove_file(&modes);
    let flags: Vec<&str> = stty.split_whitespace().collect();
    for mode in ["icanon", "echo", "isig"] {
        assert!(flags.contains(&mode), "{mode} is off after top: {stty}");
    }
}

#[test]
fn top_shows_the_hot_method_and_quits_cleanly_on_q_and_ctrl_c() {
    let _turn = one_at_a_time();
    let jvm = Jvm::start(
        &[
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=dontinline,bench.InlineHot::hotLoop",
        ],
        "bench.InlineHot",
        &[],
    );
    let hot = "bench.InlineHot.hotLoop";
    top_then_quit(&Tmux::start("q"), jvm.pid, "", hot, &["q"]);
    top_then_quit(&Tmux::start("ctrl-c"), jvm.pid, "", hot, &["C-c"]);
    assert!(jvm.is_alive());
}

/// With --wall, threads count while they sleep: the workers' sleeping method shows.
#[test]
fn top_wall_shows_where_threads_wait() {
    let _turn = one_at_a_time();
    let jvm = Jvm::start(&[], "bench.WallPhases", &["--threads", "1"]);
    let options = "--wall --sort total --thread wall-worker";
    top_then_quit(
        &Tmux::start("wall"),
        jvm.pid,
        options,
        "bench.WallPhases.sleepPhase",
        &["q"],
    );
    assert!(jvm.is_alive());
}

/// With -e alloc, the allocated classes lead the table, and the title counts bytes.
#[test]
fn top_alloc_shows_the_allocated_classes() {
    let _turn = one_at_a_time();
    let jvm = Jvm::start(&["-Xmx1g"], "bench.Allocs", &[]);
    let tmux = Tmux::start("alloc");
    let cmd = format!(
        "{} top -p {} -e alloc",
        env!("CARGO_BIN_EXE_jvmperf"),
        jvm.pid
    );
    tmux.keys(&[&cmd, "Enter"]);
    let screen = tmux.wait_for("bytes in the title", Duration::from_secs(60), |s| {
        s.contains("SELF%") && s.contains("long[]")
    });
    assert!(
        screen.contains("allocations") && screen.contains("MiB allocated"),
        "{screen}"
    );
    tmux.keys(&["q"]);
    assert!(jvm.is_alive());
}

/// A JVM of 3000 threads keeping both cores busy: top comes up, and Ctrl-C ends it. On Linux 6.18
/// with autogroups, a terminal's session at nice 0 got no CPU time beside this JVM's session until
/// the JVM exited: top drew nothing and Ctrl-C did nothing. top now raises its session's autogroup
/// along with its own nice value, and gives it back when it ends; the shell that starts it is
/// still at nice 0, so it may take seconds to start top (3–36 s measured).
#[test]
fn top_comes_up_beside_a_3000_thread_jvm() {
    let _turn = one_at_a_time();
    // The terminal exists before the JVM, as a user's does.
    let tmux = Tmux::start("many-threads");
    let jvm = Jvm::start(&[], "bench.ManyThreads", &["--pool", "3000", "--busy", "4"]);
    let cmd = format!("{} top -p {}", env!("CARGO_BIN_EXE_jvmperf"), jvm.pid);
    tmux.keys(&[&cmd, "Enter"]);
    tmux.wait_for("the busy threads' method", Duration::from_secs(150), |s| {
        s.contains("SELF%") && s.contains("bench.ManyThreads.busyWork")
    });
    tmux.keys(&["C-c"]);
    tmux.wait_for("top's end", Duration::from_secs(10), |s| {
        !s.contains("SELF%")
    });
    assert!(jvm.is_alive());
}
