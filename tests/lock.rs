//! `jvmperf record -e lock` against a real JVM (JDK from `JVMPERF_TEST_JAVA_HOME`) running the
//! Contention bench app, whose threads contend on a `synchronized` monitor (`onMonitor`, an
//! `Account`) and on a fair `ReentrantLock` (`onLock`) and time their own waits with
//! `System.nanoTime`: each site's share of the nanoseconds sampled must match its share of the
//! nanoseconds the threads timed over the sample window, the total too, with the lock's class as
//! each stack's leaf under the runtime's contended path.

mod common;

use common::*;
use std::collections::HashMap;

const SITES: [&str; 2] = ["monitor", "lock"];
/// Each site's method, and the lock's class at its stacks' leaves.
const METHODS: [&str; 2] = ["bench.Contention.onMonitor_[", "bench.Contention.onLock_["];
const LEAVES: [&str; 2] = [
    "bench.Contention$Account_[l]",
    "java.util.concurrent.locks.ReentrantLock$FairSync_[l]",
];
/// The runtime's contended path below each site's Java frames: `ObjectMonitor::EnterI` (JDK
/// 11–23) or `ObjectMonitor::enter_with_contention_mark` (JDK 24+), and `Unsafe_Park`.
const RUNTIME: [&str; 2] = ["ObjectMonitor::", "Unsafe_Park"];

/// Nanoseconds per site of the stacks under each site's method, and the leaves of those stacks.
fn waited_by_site(collapsed: &str) -> ([u64; 2], [HashMap<String, u64>; 2]) {
    let mut waited = [0u64; 2];
    let mut leaves: [HashMap<String, u64>; 2] = Default::default();
    for line in collapsed.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        let Some(k) = METHODS.iter().position(|m| stack.contains(m)) else {
            continue;
        };
        waited[k] += n;
        let leaf = stack.rsplit(';').next().unwrap().to_string();
        *leaves[k].entry(leaf).or_default() += n;
    }
    (waited, leaves)
}

fn weight(line: &str) -> u64 {
    line.rsplit_once(' ').unwrap().1.parse().unwrap()
}

#[test]
fn waited_time_matches_what_the_threads_timed_per_site() {
    let _one = one_at_a_time();
    let jvm = Jvm::start(&[], "bench.Contention", &[]);
    let dir = Scratch::new("lock", "shares");
    let rec = dir.path("lock.jvmperf");
    let pid = jvm.pid.to_string();
    let res = ok(&["record", "-p", &pid, "-e", "lock", "-d", "8", "-o", s(&rec)]);
    let err = stderr_of(&res);
    assert!(
        err.contains("jvmperf: lock: uprobes on entry to and return from "),
        "{err}"
    );
    assert!(err.contains(" waits on monitors ("), "{err}");
    assert!(err.contains(" on java.util.concurrent locks ("), "{err}");
    let truth = truth_over(&jvm, SITES, sample_window(&err));

    let collapsed = dir.path("lock.collapsed");
    ok(&["convert", s(&rec), "-o", s(&collapsed)]);
    let text = std::fs::read_to_string(&collapsed).unwrap();
    let (waited, leaves) = waited_by_site(&text);
    assert_shares(SITES, waited, truth, 0.75..=1.25, 5.0);
    for (k, site) in SITES.iter().enumerate() {
        // The lock's class is the leaf.
        let leaf = leaves[k].get(LEAVES[k]).copied().unwrap_or(0);
        assert!(
            leaf as f64 >= 0.99 * waited[k] as f64,
            "{site}: {:?}",
            leaves[k]
        );
        // Mixed stacks: the Java method above the runtime's contended path, down to the
        // thread's start.
        let mixed: u64 = text
            .lines()
            .filter(|l| {
                let java = l.find(METHODS[k]);
                let native = l.rfind(RUNTIME[k]);
                java.zip(native).is_some_and(|(j, n)| j < n) && l.contains("start_thread")
            })
            .map(weight)
            .sum();
        assert!(
            mixed as f64 >= 0.95 * waited[k] as f64,
            "{site}: {mixed} of {} ns in mixed stacks",
            waited[k]
        );
    }

    // `report` leads with the lock classes, and the SVG and the HTML page count nanoseconds.
    let total_all: u64 = text.lines().map(weight).sum();
    let report_of = |file: &std::path::Path| {
        let out = ok(&["report", s(file), "--top", "2"]);
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            report
                .lines()
                .next()
                .unwrap()
                .contains(&format!(", {total_all} nanoseconds")),
            "{report}"
        );
        for leaf in LEAVES {
            let class = leaf.trim_end_matches("_[l]");
            assert!(report.contains(class), "{class} not in {report}");
        }
    };
    report_of(&rec);
    let svg = dir.path("lock.svg");
    ok(&["convert", s(&rec), "-o", s(&svg)]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("time waited for locks"), "no clock in the SVG");
    assert!(
        svg.contains(" s waited"),
        "the SVG does not count time waited"
    );
    let html = dir.path("lock.html");
    ok(&["convert", s(&rec), "-o", s(&html)]);
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.contains(r#""unit":"nanoseconds""#), "the HTML page");

    // pprof: contentions and delay, read back as a lock profile with the same stacks.
    let pb = dir.path("lock.pb.gz");
    ok(&["convert", s(&rec), "-o", s(&pb)]);
    let back = dir.path("back.collapsed");
    ok(&["convert", s(&pb), "-o", s(&back)]);
    let (back_waited, back_leaves) = waited_by_site(&std::fs::read_to_string(&back).unwrap());
    assert_eq!(back_waited, waited);
    assert_eq!(back_leaves, leaves);
    report_of(&pb);
    // Go's pprof reads both sample types: contentions count the waits, delay their nanoseconds,
    // the lock classes leading.
    for index in ["delay", "contentions"] {
        let out = std::process::Command::new(go())
            .args([
                "tool",
                "pprof",
                "-top",
                "-unit=ns",
                "-nodecount=2",
                "-symbolize=none",
            ])
            .arg(format!("-sample_index={index}"))
            .arg(&pb)
            .output()
            .unwrap();
        let top = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "pprof: {}", stderr_of(&out));
        assert!(top.contains(&format!("Type: {index}")), "{top}");
        if index == "delay" {
            assert!(top.contains(&format!("of {total_all}ns total")), "{top}");
        }
        for leaf in LEAVES {
            assert!(top.contains(leaf.trim_end_matches("_[l]")), "{top}");
        }
    }

    // JFR: a jdk.JavaMonitorEnter per monitor wait and a jdk.ThreadPark per park, as the JDK's own
    // parser reads them, each with the lock's class and the time waited as its duration.
    let jfr = dir.path("lock.jfr");
    ok(&["convert", s(&rec), "-o", s(&jfr)]);
    let counted = |what: &str| -> u64 {
        err.split_once(what)
            .and_then(|(head, _)| {
                head.rsplit([' ', ','])
                    .find(|w| !w.is_empty())?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no count before {what:?}: {err}"))
    };
    for (k, (event, class_field, class)) in [
        (
            "jdk.JavaMonitorEnter",
            "monitorClass",
            "bench/Contention$Account",
        ),
        (
            "jdk.ThreadPark",
            "parkedClass",
            "java/util/concurrent/locks/ReentrantLock$FairSync",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let print = std::process::Command::new(java_home().join("bin/jfr"))
            .args(["print", "--json", "--events", event])
            .arg(&jfr)
            .output()
            .unwrap();
        assert!(
            print.status.success(),
            "{}",
            String::from_utf8_lossy(&print.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&print.stdout).unwrap();
        let events = json["recording"]["events"].as_array().unwrap();
        let what = [" waits on monitors (", " on java.util.concurrent locks ("][k];
        // Once on JDK 11 (in some 10 runs) one type's count differed from the summary's by an
        // unknown few: within 0.5% until that is understood.
        let (n, summary) = (events.len() as f64, counted(what) as f64);
        assert!(
            (n - summary).abs() <= 0.005 * summary,
            "{n} {event}s, {summary} counted: {err}"
        );
        let mut of_class = 0.0;
        for e in events {
            let v = &e["values"];
            // ISO 8601, as "PT0.00222901S" (waits under a minute here).
            let duration = v["duration"].as_str().unwrap();
            let seconds: f64 = duration
                .strip_prefix("PT")
                .and_then(|d| d.strip_suffix('S')?.parse().ok())
                .unwrap_or_else(|| panic!("{event} duration {duration}"));
            if v[class_field]["name"] == class {
                of_class += seconds * 1e9;
            }
        }
        assert!(
            (of_class - waited[k] as f64).abs() <= 1e-3 * waited[k] as f64,
            "{event}: {of_class:.0} ns of {class}, {} ns sampled at {}",
            waited[k],
            SITES[k]
        );
    }
}

#[test]
fn a_threshold_above_every_wait_leaves_them_all_out() {
    let _one = one_at_a_time();
    let jvm = Jvm::start(&[], "bench.Contention", &[]);
    let dir = Scratch::new("lock", "threshold");
    let out = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-e",
        "lock",
        "--lock-threshold",
        "10s",
        "-d",
        "3",
        "-o",
        s(&dir.path("x.collapsed")),
    ]);
    // Nothing sampled: the error says how many waits the threshold left out.
    assert_one_line_error(&out, 8, " waits were shorter than --lock-threshold");
    let err = stderr_of(&out);
    let left_out: u64 = err
        .split_once(" waits were shorter")
        .and_then(|(head, _)| head.rsplit([' ', '(']).next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count of shorter waits: {err}"));
    assert!(left_out > 100, "{err}");
}
