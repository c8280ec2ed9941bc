//! `jvmperf record -e alloc` against a real JDK 17 running the Allocs bench app, whose threads
//! allocate `long[4]` (inside TLABs), 16 KiB and 4 MiB arrays (outside TLABs) from a method each,
//! and print their bytes as the JVM counts them (`ThreadMXBean.getThreadAllocatedBytes`): each
//! method's share of the sampled bytes must match its share of the counted bytes over the sample
//! window, the total too, with the class allocated as each stack's leaf.
//!
//! Not run on JDK 11: there most 16 KiB arrays go outside TLABs, each a sample (~22k/s here), and
//! the rings overflow.

mod common;

use common::*;
use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

const KINDS: [&str; 3] = ["small", "medium", "large"];

/// Bytes per kind of the stacks under each kind's method, and the leaves of those stacks.
fn bytes_by_kind(collapsed: &str) -> ([u64; 3], [HashMap<String, u64>; 3]) {
    let mut bytes = [0u64; 3];
    let mut leaves: [HashMap<String, u64>; 3] = Default::default();
    for line in collapsed.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        let Some(k) = KINDS
            .iter()
            .position(|k| stack.contains(&format!("bench.Allocs.{k}Arrays_[")))
        else {
            continue;
        };
        bytes[k] += n;
        let leaf = stack.rsplit(';').next().unwrap().to_string();
        *leaves[k].entry(leaf).or_default() += n;
    }
    (bytes, leaves)
}

#[test]
fn sampled_bytes_match_what_the_jvm_counted_per_method() {
    let _one = one_at_a_time();
    let jvm = Jvm::start(&["-Xmx1g"], "bench.Allocs", &[]);
    let dir = Scratch::new("alloc", "shares");
    let rec = dir.path("alloc.jvmperf");
    let pid = jvm.pid.to_string();
    let res = ok(&[
        "record",
        "-p",
        &pid,
        "-e",
        "alloc",
        "-d",
        "10",
        "-o",
        s(&rec),
    ]);
    let err = stderr_of(&res);
    assert!(
        err.contains("jvmperf: alloc: uprobes on AllocTracer::send_allocation_in_new_tlab"),
        "{err}"
    );
    assert!(err.contains(" bytes in "), "{err}");
    assert!(err.contains(" MiB allocated in "), "{err}");
    let truth = truth_over(&jvm, KINDS, sample_window(&err));

    let collapsed = dir.path("alloc.collapsed");
    ok(&["convert", s(&rec), "-o", s(&collapsed)]);
    let text = std::fs::read_to_string(&collapsed).unwrap();
    let (bytes, leaves) = bytes_by_kind(&text);
    assert_shares(KINDS, bytes, truth, 0.8..=1.2, 3.0);
    // The class allocated is the leaf: small arrays in TLABs, 4 MiB ones outside.
    let top = |k: usize| {
        leaves[k]
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(leaf, n)| (leaf.clone(), *n as f64 / bytes[k] as f64))
            .unwrap()
    };
    let (small, small_share) = top(0);
    assert_eq!(small, "long[]_[a]");
    assert!(small_share > 0.99, "{:?}", leaves[0]);
    let (large, large_share) = top(2);
    assert_eq!(large, "long[] (outside TLAB)_[a]");
    assert!(large_share > 0.99, "{:?}", leaves[2]);
    // Mixed stacks: the Java method above the runtime's allocation path, down to the thread's
    // start.
    for k in 0..3 {
        let method = format!("bench.Allocs.{}Arrays_[", KINDS[k]);
        let mixed: u64 = text
            .lines()
            .filter(|l| {
                let java = l.find(&method);
                let native = l.rfind("MemAllocator::allocate");
                java.zip(native).is_some_and(|(j, n)| j < n) && l.contains("start_thread")
            })
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert!(
            mixed as f64 >= 0.95 * bytes[k] as f64,
            "{}: {mixed} of {} bytes in mixed stacks",
            KINDS[k],
            bytes[k]
        );
    }

    // `report` and the SVG count bytes.
    let total_all: u64 = text
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let report_of = |file: &std::path::Path| {
        let report = stderr_or_stdout(&ok(&["report", s(file), "--top", "5"]));
        let first = report.lines().next().unwrap();
        assert!(first.contains(&format!(", {total_all} bytes")), "{report}");
        report
    };
    let report = report_of(&rec);
    assert!(report.contains("long[]"), "{report}");
    let svg = dir.path("alloc.svg");
    ok(&["convert", s(&rec), "-o", s(&svg)]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("allocated bytes"), "no clock in the SVG");
    assert!(svg.contains(" bytes, "), "the SVG does not count bytes");
    assert!(!svg.contains(" samples, "), "the SVG counts samples");

    for (file, unit) in [
        ("alloc.speedscope.json", r#""unit":"bytes""#),
        ("alloc.html", r#""unit":"bytes""#),
    ] {
        let out = dir.path(file);
        ok(&["convert", s(&rec), "-o", s(&out)]);
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains(unit), "{file} does not count bytes");
    }

    // pprof: alloc_space in bytes, read back as such.
    let pb = dir.path("alloc.pb.gz");
    ok(&["convert", s(&rec), "-o", s(&pb)]);
    let back = dir.path("back.collapsed");
    ok(&["convert", s(&pb), "-o", s(&back)]);
    let (back_bytes, back_leaves) = bytes_by_kind(&std::fs::read_to_string(&back).unwrap());
    assert_eq!(back_bytes, bytes);
    assert_eq!(back_leaves, leaves);
    report_of(&pb);

    // JFR: jdk.ObjectAllocationSample events as the JDK's own parser reads them, the class as
    // objectClass and the bytes as weight.
    let jfr = dir.path("alloc.jfr");
    ok(&["convert", s(&rec), "-o", s(&jfr)]);
    let print = Command::new(java_home().join("bin/jfr"))
        .args(["print", "--json", "--events", "jdk.ObjectAllocationSample"])
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
    let weight: u64 = events
        .iter()
        .map(|e| e["values"]["weight"].as_u64().unwrap())
        .sum();
    assert_eq!(weight, total_all, "the JFR events' weights");
    let long_arrays = events
        .iter()
        .filter(|e| e["values"]["objectClass"]["name"] == "[J")
        .count();
    assert!(long_arrays * 2 > events.len(), "{} events", events.len());
    let stack = &events[0]["values"]["stackTrace"]["frames"];
    assert!(!stack.as_array().unwrap().is_empty(), "{stack}");
}

fn stderr_or_stdout(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn alloc_on_a_jvm_without_libjvm_symbols_is_a_one_line_error_naming_the_package() {
    // A libjvm without .symtab or debug file: a stripped copy of the JDK's, without the
    // build-id that finds an installed debug file (openjdk-17-dbg) either.
    let dir = Scratch::new("alloc", "stripped");
    let jdk = dir.path("jdk");
    let status = Command::new("cp")
        .args(["-a"])
        .arg(java_home().canonicalize().unwrap())
        .arg(&jdk)
        .status()
        .unwrap();
    assert!(status.success());
    let libjvm = jdk.join("lib/server/libjvm.so");
    let status = Command::new("strip")
        .args([
            "--strip-all",
            "--remove-section=.gnu_debuglink",
            "--remove-section=.note.gnu.build-id",
        ])
        .arg(&libjvm)
        .status()
        .unwrap();
    assert!(status.success());
    let mut cmd = Command::new(jdk.join("bin/java"));
    cmd.args(["-cp", s(&bench_classes()), "bench.Allocs"]);
    let jvm = Jvm::spawn(cmd);
    let out = run_jvmperf(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-e",
        "alloc",
        "-d",
        "1",
        "-o",
        s(&dir.path("x.svg")),
    ]);
    assert_one_line_error(&out, 2, "AllocTracer::send_allocation_in_new_tlab");
    let err = stderr_of(&out);
    assert!(err.contains("debug-info package"), "{err}");
    assert!(err.contains("-dbg;"), "{err}");
}

/// The first byte of `AllocTracer::send_allocation_in_new_tlab` in JVM `pid`'s memory: `0xcc`
/// (int3) while a uprobe is on it. The address is its `.symtab` value plus where libjvm's first
/// segment, at file offset and address 0, is mapped.
fn probed_byte(pid: u32) -> u8 {
    use object::{Object, ObjectSymbol};
    use std::io::{Read, Seek};
    let libjvm = java_home().join("lib/server/libjvm.so");
    let data = std::fs::read(&libjvm).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let svma = elf
        .symbols()
        .find(|s| {
            s.name()
                .is_ok_and(|n| n.contains("send_allocation_in_new_tlab") && !n.contains('.'))
        })
        .unwrap()
        .address();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let base = maps
        .lines()
        .find(|l| l.ends_with("/libjvm.so") && l.split_whitespace().nth(2) == Some("00000000"))
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    mem.seek(std::io::SeekFrom::Start(base + svma)).unwrap();
    let mut byte = [0u8];
    mem.read_exact(&mut byte).unwrap();
    byte[0]
}

/// Waits up to `timeout` for `probed_byte(pid) == 0xcc` to be `probed`.
fn wait_for_probe(pid: u32, probed: bool, timeout: Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if (probed_byte(pid) == 0xcc) == probed {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn a_killed_recording_leaves_no_probe_behind_and_the_jvm_runs_on() {
    let _one = one_at_a_time();
    let jvm = Jvm::start(&["-Xmx1g"], "bench.Allocs", &[]);
    let dir = Scratch::new("alloc", "killed");
    assert_ne!(probed_byte(jvm.pid), 0xcc, "probed before jvmperf ran");
    let mut record = jvmperf()
        .args([
            "record",
            "-p",
            &jvm.pid.to_string(),
            "-e",
            "alloc",
            "-d",
            "60",
        ])
        .args(["-o", s(&dir.path("x.svg"))])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_probe(jvm.pid, true, Duration::from_secs(30)),
        "no uprobe while recording"
    );
    record.kill().unwrap();
    record.wait().unwrap();
    // The kernel removes a perf event's uprobe with its last descriptor, when the killed
    // process's files are closed.
    assert!(
        wait_for_probe(jvm.pid, false, Duration::from_secs(10)),
        "the uprobe outlived jvmperf"
    );
    let lines = jvm.stdout_lines().len();
    std::thread::sleep(Duration::from_millis(500));
    assert!(jvm.is_alive());
    assert!(
        jvm.stdout_lines().len() > lines,
        "the JVM stopped reporting"
    );
}
