//! Capture one thread of a live JVM as a walk snapshot for unit tests (`hotspot::snapshot`): its
//! registers, the part of its stack the walk reads, and what the stack walker and the Java
//! symbolizer read of the JVM to walk and name it. Writes `<out-prefix>.txt` and
//! `<out-prefix>.mem`, then prints the frames the snapshot replays.
//!
//! `cargo run --example capture_walk -- <out-prefix>` starts bench.Phases on the JDK in
//! `$JAVA_HOME` (default `/usr/lib/jvm/java-17-openjdk-amd64`; classes from `cargo xtask
//! bench-apps`), waits for its READY, and captures its worker while it runs the compiled
//! `hotLoop` (with `inlinedHelper` inlined) called by the interpreted `Worker.run`: so were
//! `tests/fixtures/jdk17-walk.*` made, and `jdk25-walk.*` with
//! `JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64`.
//!
//! `cargo run --example capture_walk -- <out-prefix> <pid> <thread-name> <Java frame>...`
//! captures a thread of a running JVM once its Java frames, from the leaf, begin with the ones
//! given (named as `jvmperf dump` names them, e.g. `bench.Phases.hotLoop`).

use jvmperf::hotspot::snapshot;
use jvmperf::process::TargetProcess;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Tries before giving up: a few ms apart, the worker is in `hotLoop`'s inlined helper in most.
const ATTEMPTS: u32 = 2000;

const PHASES_FLAGS: &[&str] = &[
    "-XX:+UnlockDiagnosticVMOptions",
    "-XX:+DebugNonSafepoints",
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=inline,bench.Phases::inlinedHelper",
    "-XX:CompileCommand=exclude,bench.Phases::interpretedPhase",
];

/// The leaf's Java frames; the JDK's own frames of the thread's start follow.
const PHASES_FRAMES: &[&str] = &[
    "bench.Phases.inlinedHelper",
    "bench.Phases.hotLoop",
    "bench.Phases$Worker.run",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: capture_walk <out-prefix> [<pid> <thread-name> <Java frame>...]");
        std::process::exit(2);
    };
    let mut notes = vec![format!(
        "captured by `cargo run --example capture_walk -- {}`",
        args.join(" ")
    )];
    let (mut snap, named) = match args.get(1) {
        None => capture_phases(&mut notes),
        Some(pid) => {
            let pid: u32 = pid.parse().expect("pid");
            let thread = args.get(2).expect("thread name");
            let frames: Vec<&str> = args[3..].iter().map(String::as_str).collect();
            snapshot::capture(pid, tid_named(pid, thread), &frames, ATTEMPTS)
        }
    }
    .unwrap_or_else(|e| panic!("{e}"));
    notes.append(&mut snap.notes);
    snap.notes = notes;
    std::fs::write(format!("{out}.txt"), snap.to_text()).unwrap();
    std::fs::write(format!("{out}.mem"), snap.mem_bytes()).unwrap();

    let text = std::fs::read_to_string(format!("{out}.txt")).unwrap();
    let mem = std::fs::read(format!("{out}.mem")).unwrap();
    let again = snapshot::ThreadSnapshot::parse(&text, &mem).expect("the files parse");
    let replayed = again.replay();
    assert_eq!(
        replayed.describe(),
        named.describe(),
        "the files replay the capture"
    );
    for note in &again.notes {
        println!("# {note}");
    }
    println!(
        "{} bytes of text, {} bytes of memory ({} of them stack)",
        text.len(),
        mem.len(),
        again.stack.len()
    );
    print!("{}", replayed.describe());
    for f in &replayed.walk.frames {
        println!("{f:?}");
    }
}

fn tid_named(pid: u32, name: &str) -> u32 {
    let process = TargetProcess::open(pid).unwrap_or_else(|e| panic!("{e}"));
    process
        .threads()
        .into_iter()
        .find(|&tid| process.thread_comm(tid).as_deref() == Some(name))
        .unwrap_or_else(|| panic!("JVM {pid} has no thread named {name}"))
}

fn capture_phases(
    notes: &mut Vec<String>,
) -> Result<(snapshot::ThreadSnapshot, snapshot::NamedWalk), String> {
    let java_home = std::env::var_os("JAVA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/jvm/java-17-openjdk-amd64"));
    let classes = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-apps/classes");
    assert!(
        classes.join("bench/Phases.class").exists(),
        "run `cargo xtask bench-apps` first"
    );
    let java = java_home.join("bin/java");
    notes.push(format!(
        "from `{} {} -cp target/bench-apps/classes bench.Phases`",
        java.display(),
        PHASES_FLAGS.join(" ")
    ));
    let mut child = Command::new(&java)
        .args(PHASES_FLAGS)
        .arg("-cp")
        .arg(&classes)
        .arg("bench.Phases")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start java");
    // Drained all along: a full pipe would block the worker in its report.
    let stdout = child.stdout.take().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "READY" {
                let _ = ready_tx.send(());
            }
        }
    });
    let result = if ready.recv_timeout(Duration::from_secs(60)).is_ok() {
        let pid = child.id();
        snapshot::capture(
            pid,
            tid_named(pid, "phases-worker"),
            PHASES_FRAMES,
            ATTEMPTS,
        )
    } else {
        Err("bench.Phases ended before READY".into())
    };
    let _ = child.kill();
    let _ = child.wait();
    result
}
