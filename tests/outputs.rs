//! Output formats, `convert`, `report` and `diff` on real recordings of real JDK 17 JVMs:
//! iprof checked against GraalVM's JSON schema and `javap`'s bytecode, pprof read by Go's pprof,
//! time windows checked against the `System.nanoTime` stamps the bench app prints.

mod common;

use common::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The JVMs in this file share two cores: one recording at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jvmperf-outputs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Per-method (self, total) samples, as an independent reading of collapsed stacks.
#[derive(Default, Debug)]
struct Counts {
    samples: u64,
    methods: BTreeMap<String, (u64, u64)>,
}

const JAVA_SUFFIXES: [&str; 4] = ["_[j]", "_[1]", "_[i]", "_[0]"];

fn java_name(label: &str) -> Option<&str> {
    JAVA_SUFFIXES.iter().find_map(|s| label.strip_suffix(s))
}

/// From collapsed text: all frames (`java_only` = false, leaf = the last frame) or only Java
/// frames (`java_only` = true, leaf = the last Java frame, samples without Java frames skipped),
/// which is what an iprof of the same recording holds.
fn counts_from_collapsed(text: &str, java_only: bool) -> Counts {
    let mut c = Counts::default();
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        let names: Vec<String> = stack
            .split(';')
            .filter_map(|l| match java_name(l) {
                Some(name) => Some(name.to_string()),
                None if java_only => None,
                None => Some(match l.strip_suffix("_[k]") {
                    Some(k) => format!("{k} [kernel]"),
                    None => l.to_string(),
                }),
            })
            .collect();
        let Some(leaf) = names.last() else { continue };
        c.samples += n;
        c.methods.entry(leaf.clone()).or_default().0 += n;
        for name in names.iter().collect::<HashSet<_>>() {
            c.methods.entry(name.clone()).or_default().1 += n;
        }
    }
    c
}

/// `jvmperf report FILE --top 0`, parsed.
fn report(file: &Path) -> Counts {
    let out = ok(&["report", s(file), "--top", "0"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let mut c = Counts {
        samples: header
            .split(", ")
            .find_map(|p| p.strip_suffix(" samples"))
            .unwrap_or_else(|| panic!("no sample count in {header}"))
            .parse()
            .unwrap(),
        ..Default::default()
    };
    assert!(lines.next().unwrap().trim_start().starts_with("self"));
    for line in lines {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let mut method = line.trim_start();
        for _ in 0..4 {
            method = method.split_once(' ').unwrap().1.trim_start();
        }
        c.methods.insert(
            method.to_string(),
            (cols[0].parse().unwrap(), cols[2].parse().unwrap()),
        );
    }
    c
}

fn assert_same(what: &str, a: &Counts, b: &Counts) {
    assert_eq!(a.samples, b.samples, "{what}: sample totals");
    let keys: HashSet<&String> = a.methods.keys().chain(b.methods.keys()).collect();
    for k in keys {
        assert_eq!(
            a.methods.get(k),
            b.methods.get(k),
            "{what}: (self, total) of {k}"
        );
    }
}

/// `go tool pprof -top` of every function: (flat, cum) by name, and the total.
fn pprof_top(file: &Path) -> (u64, HashMap<String, (u64, u64)>) {
    let out = Command::new(go())
        .args([
            "tool",
            "pprof",
            "-top",
            "-sample_index=samples",
            "-nodecount=1000000",
            "-nodefraction=0",
            "-edgefraction=0",
            "-symbolize=none",
        ])
        .arg(file)
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "pprof failed: {}", stderr_of(&out));
    let total: u64 = text
        .lines()
        .find_map(|l| l.split_once("% of ").map(|(_, t)| t))
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_else(|| panic!("no total in pprof output:\n{text}"))
        .parse()
        .unwrap();
    let mut rows = HashMap::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.trim_start().starts_with("flat") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        // pprof marks functions it only ever saw inlined, and those it saw both inlined and not
        // (a method compiled on its own during warm-up and inlined into its caller later).
        let name = cols[5..].join(" ");
        let name = name
            .strip_suffix(" (inline)")
            .or_else(|| name.strip_suffix(" (partial-inline)"))
            .unwrap_or(&name)
            .to_string();
        rows.insert(name, (cols[0].parse().unwrap(), cols[3].parse().unwrap()));
    }
    (total, rows)
}

/// Instruction offsets of every method of `class` by (name, descriptor), from `javap -c`.
fn bytecode_offsets(class: &str) -> Option<HashMap<(String, String), Vec<u32>>> {
    let out = Command::new(java_home().join("bin/javap"))
        .args(["-c", "-p", "-s", "-cp"])
        .arg(bench_classes())
        .arg(class)
        .output()
        .expect("javap");
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let simple = class.rsplit('.').next().unwrap();
    let mut methods = HashMap::new();
    let mut name = String::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if line.starts_with("  ") && !line.starts_with("   ") {
            name = match line.split_once('(') {
                Some((head, _)) => match head.split_whitespace().last().unwrap_or("") {
                    n if n == class || n == simple => "<init>".to_string(),
                    n => n.to_string(),
                },
                None if line.trim() == "static {};" => "<clinit>".to_string(),
                None => String::new(),
            };
            current = None;
        } else if let Some(desc) = line.trim().strip_prefix("descriptor: ") {
            if !name.is_empty() {
                let key = (name.clone(), desc.to_string());
                methods.insert(key.clone(), Vec::new());
                current = Some(key);
            }
        } else if let Some(key) = &current {
            // Instructions are `%6d: op` at column 8; switch cases are indented further.
            if line.len() > 9 && line.as_bytes()[8] == b':' {
                if let Ok(off) = line[..8].trim().parse::<u32>() {
                    methods.get_mut(key).unwrap().push(off);
                }
            }
        }
    }
    Some(methods)
}

fn schema() -> jsonschema::Validator {
    let path = std::env::var_os("JVMPERF_IPROF_SCHEMA")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("tests/fixtures/iprof-v1.1.0.schema.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "GraalVM's iprof schema at {} ({e}); set JVMPERF_IPROF_SCHEMA",
            path.display()
        )
    });
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).expect("schema compiles")
}

/// Schema, id integrity and bytecode checks of one iprof; returns its contexts as
/// (frames leaf first as (qualified name, descriptor, bci), count).
#[allow(clippy::type_complexity)]
fn check_iprof(path: &Path) -> Vec<(Vec<(String, String, i64)>, u64)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let errors: Vec<String> = schema().iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{}: schema errors {errors:?}",
        path.display()
    );
    assert_eq!(v["version"], "1.0.0");

    let mut types = HashMap::new();
    for t in v["types"].as_array().unwrap() {
        let prev = types.insert(
            t["id"].as_i64().unwrap(),
            t["name"].as_str().unwrap().to_string(),
        );
        assert!(prev.is_none(), "duplicate type id {t}");
    }
    let descriptor = |t: &str| -> String {
        match t {
            "boolean" => "Z".into(),
            "byte" => "B".into(),
            "char" => "C".into(),
            "short" => "S".into(),
            "int" => "I".into(),
            "long" => "J".into(),
            "float" => "F".into(),
            "double" => "D".into(),
            "void" => "V".into(),
            t if t.starts_with('[') => t.replace('.', "/"),
            t => format!("L{};", t.replace('.', "/")),
        }
    };
    let mut methods: HashMap<i64, (String, String)> = HashMap::new();
    for m in v["methods"].as_array().unwrap() {
        let sig: Vec<&String> = m["signature"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| {
                types
                    .get(&id.as_i64().unwrap())
                    .unwrap_or_else(|| panic!("type {id} of method {m} is not in types"))
            })
            .collect();
        assert!(sig.len() >= 2, "declaring and return type in {m}");
        let params: String = sig[2..].iter().map(|t| descriptor(t)).collect();
        let prev = methods.insert(
            m["id"].as_i64().unwrap(),
            (
                format!("{}.{}", sig[0], m["name"].as_str().unwrap()),
                format!("({params}){}", descriptor(sig[1])),
            ),
        );
        assert!(prev.is_none(), "duplicate method id {m}");
    }

    let mut contexts = Vec::new();
    for p in v["samplingProfiles"].as_array().unwrap() {
        let frames: Vec<(String, String, i64)> = p["ctx"]
            .as_str()
            .unwrap()
            .split('<')
            .map(|part| {
                let (m, bci) = part.split_once(':').unwrap();
                let (name, desc) = methods
                    .get(&m.parse().unwrap())
                    .unwrap_or_else(|| panic!("method {m} of ctx {p} is not in methods"));
                (name.clone(), desc.clone(), bci.parse().unwrap())
            })
            .collect();
        contexts.push((frames, p["records"][0].as_u64().unwrap()));
    }

    // Every bci is an instruction of its method, for every class javap can read.
    let mut classes: HashMap<String, Option<HashMap<(String, String), Vec<u32>>>> = HashMap::new();
    let (mut checked, mut unknown, mut samples) = (0, 0, 0);
    for (frames, n) in &contexts {
        samples += n;
        if frames.iter().any(|f| f.2 == -1) {
            // The documented marker of a compiled frame the code map could not resolve.
            unknown += n;
        }
        for (name, desc, bci) in frames.iter().filter(|f| f.2 != -1) {
            let (class, method) = name.rsplit_once('.').unwrap();
            let offsets = classes
                .entry(class.to_string())
                .or_insert_with(|| bytecode_offsets(class));
            let Some(offsets) = offsets else {
                assert!(!class.starts_with("bench."), "javap cannot read {class}");
                continue;
            };
            let ops = offsets
                .get(&(method.to_string(), desc.clone()))
                .unwrap_or_else(|| panic!("{name}{desc} not found by javap"));
            // Native methods have no bytecode; HotSpot places their frames at bci 0.
            assert!(
                u32::try_from(*bci).is_ok_and(|b| ops.contains(&b) || (ops.is_empty() && b == 0)),
                "{name}{desc}: bci {bci} is not an instruction (code length {})",
                ops.last().map_or(0, |l| l + 1)
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "no frame checked against javap");
    assert!(
        100 * unknown <= samples,
        "{unknown} of {samples} samples have a frame of unknown bci"
    );
    contexts
}

fn inline_hot_flags() -> Vec<&'static str> {
    vec![
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=inline,bench.InlineHot::helper",
        "-XX:CompileCommand=dontinline,bench.InlineHot::hotLoop",
    ]
}

#[test]
fn iprof_pprof_and_report_agree_with_collapsed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("inline");
    let jvm = Jvm::start(&inline_hot_flags(), "bench.InlineHot", &[]);
    let pid = jvm.pid.to_string();
    let rec = dir.join("a.jvmperf");
    let record = |out: &Path, secs: &str| {
        ok(&[
            "record",
            "-p",
            &pid,
            "-d",
            secs,
            "-F",
            "499",
            "--precise-inlining",
            "-o",
            s(out),
        ])
    };
    record(&rec, "4");
    // `record` writes every format itself too.
    let (direct_iprof, direct_pprof) = (dir.join("direct.iprof"), dir.join("direct.pb.gz"));
    record(&direct_iprof, "2");
    let direct_log = stderr_of(&record(&direct_pprof, "2"));
    assert!(jvm.is_alive());
    drop(jvm);

    let out = |ext: &str| dir.join(format!("a.{ext}"));
    for ext in ["iprof", "collapsed", "pb.gz", "svg"] {
        ok(&["convert", s(&rec), "-o", s(&out(ext))]);
    }
    let svg = std::fs::read_to_string(out("svg")).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("bench.InlineHot.hotLoop"));
    // Converted from the .jvmperf recording: titled with what was profiled, when and how, the
    // frames coloured by kind, no kind suffix in any label.
    assert!(
        svg.contains(&format!("bench.InlineHot (pid {pid}) on ")),
        "{svg}"
    );
    assert!(
        svg.contains("CPU time · ") && svg.contains(" UTC · 499 Hz · "),
        "{svg}"
    );
    assert!(svg.contains(" samples · C2 green, C1 lime, "), "{svg}");
    assert!(
        !svg.contains("_[") && svg.contains("rgb(80,190,90)"),
        "{svg}"
    );

    // iprof: schema, ids, bytecode indices; the forced-inline helper is the leaf with its
    // caller at the call site.
    check_iprof(&direct_iprof);
    let contexts = check_iprof(&out("iprof"));
    let call_helper = call_site_bci("bench.InlineHot", "hotLoop", "helper") as i64;
    let call_hot = call_site_bci("bench.InlineHot", "drive", "hotLoop") as i64;
    let (mut all, mut helper_leaf) = (0, 0);
    for (frames, n) in &contexts {
        all += n;
        for pair in frames.windows(2) {
            let ((callee, _, _), (caller, _, bci)) = (&pair[0], &pair[1]);
            if callee == "bench.InlineHot.helper" && caller == "bench.InlineHot.hotLoop" {
                assert_eq!(*bci, call_helper, "hotLoop calls helper at its call site");
            }
            if callee == "bench.InlineHot.hotLoop" && caller == "bench.InlineHot.drive" {
                assert_eq!(*bci, call_hot, "drive calls hotLoop at its call site");
            }
        }
        if frames.len() >= 2
            && frames[0].0 == "bench.InlineHot.helper"
            && frames[1].0 == "bench.InlineHot.hotLoop"
        {
            helper_leaf += n;
        }
    }
    assert!(
        4 * helper_leaf >= all,
        "helper is the leaf under hotLoop in {helper_leaf} of {all} samples"
    );

    // Round trip: report of the iprof = the Java frames of the collapsed output.
    let collapsed = std::fs::read_to_string(out("collapsed")).unwrap();
    assert_same(
        "iprof report vs collapsed (Java frames)",
        &report(&out("iprof")),
        &counts_from_collapsed(&collapsed, true),
    );
    // Every other readable format reports the same as the collapsed text.
    let expected = counts_from_collapsed(&collapsed, false);
    for ext in ["collapsed", "pb.gz", "jvmperf"] {
        assert_same(&format!("report of .{ext}"), &report(&out(ext)), &expected);
    }

    // A real pprof reads both pprof files; its flat/cum agree with the collapsed totals.
    let (total, rows) = pprof_top(&out("pb.gz"));
    assert_eq!(total, expected.samples, "pprof total");
    let java_methods = counts_from_collapsed(&collapsed, true).methods;
    let mut java = 0;
    for (name, &(flat, cum)) in &expected.methods {
        if java_methods.contains_key(name) {
            java += 1;
            assert_eq!(
                rows.get(name),
                Some(&(flat, cum)),
                "pprof flat/cum of {name} in {rows:?}"
            );
        }
    }
    assert!(java >= 4, "Java methods compared: {java}");
    let (direct_total, direct_rows) = pprof_top(&direct_pprof);
    assert!(direct_total > 200, "direct pprof samples: {direct_total}");
    assert!(
        direct_rows.contains_key("bench.InlineHot.helper"),
        "no helper in the direct pprof: {direct_rows:?}\nrecord said: {direct_log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `System.nanoTime` stamps of the app's `GT` lines.
fn gt_times(jvm: &Jvm) -> Vec<(u64, u64)> {
    jvm.stdout_lines()
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("GT ")?.split_whitespace();
            let t = it.next()?.parse().ok()?;
            let cpu = it
                .filter_map(|kv| kv.split_once('=')?.1.parse::<u64>().ok())
                .sum();
            Some((t, cpu))
        })
        .collect()
}

/// Total samples of the collapsed lines of `path` that start with `prefix`.
fn collapsed_total_of(path: &Path, prefix: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

fn collapsed_total(path: &Path) -> u64 {
    collapsed_total_of(path, "")
}

fn one_line_error(args: &[&str], needle: &str) {
    let res = run_jvmperf(args);
    let err = stderr_of(&res);
    assert_eq!(res.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn convert_windows_threads_and_diff() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("window");
    let jvm = Jvm::start(
        &[
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=inline,bench.Phases::inlinedHelper",
            "-XX:CompileCommand=exclude,bench.Phases::interpretedPhase",
        ],
        "bench.Phases",
        &["--threads", "2"],
    );
    let rec = dir.join("p.jvmperf");
    ok(&[
        "record",
        "-p",
        &jvm.pid.to_string(),
        "-d",
        "4",
        "-F",
        "499",
        "-o",
        s(&rec),
    ]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let gt = gt_times(&jvm);
    drop(jvm);

    let p = jvmperf::input::read(&rec).unwrap().profile;
    let (first, last) = (
        p.samples.iter().map(|s| s.time).min().unwrap(),
        p.samples.iter().map(|s| s.time).max().unwrap(),
    );
    // The app's own stamps inside the recording, a quarter and three quarters in.
    let inside: Vec<(u64, u64)> = gt
        .iter()
        .copied()
        .filter(|&(t, _)| t > first && t < last)
        .collect();
    assert!(
        inside.len() >= 20,
        "GT lines inside the recording: {}",
        inside.len()
    );
    let (a, b) = (inside[inside.len() / 4], inside[3 * inside.len() / 4]);
    let in_window = |s: &jvmperf::profile::Sample| s.time >= a.0 && s.time < b.0;
    let expected: u64 = p
        .samples
        .iter()
        .filter(|s| in_window(s))
        .map(|s| s.weight)
        .sum();

    let (ta, tb) = (a.0.to_string(), b.0.to_string());
    let window = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "convert",
            s(&rec),
            "--since",
            &ta,
            "--until",
            &tb,
            "-o",
            s(out),
        ];
        args.extend_from_slice(extra);
        ok(&args);
    };
    let w = dir.join("w.collapsed");
    window(&w, &["--threads"]);
    assert_eq!(collapsed_total(&w), expected, "samples in the window");
    // The app's CPU between its two stamps matches the workers' samples in the window.
    let workers = collapsed_total_of(&w, "phases-worker");
    let cpu_samples = (b.1 - a.1) as f64 / p.period_ns as f64;
    assert!(
        (workers as f64 - cpu_samples).abs() <= 0.1 * cpu_samples,
        "{workers} worker samples in the window vs {cpu_samples:.0} from the app's CPU time"
    );

    // The window written as a recording keeps exactly those samples, times included.
    let wr = dir.join("w.jvmperf");
    window(&wr, &[]);
    let back = jvmperf::input::read(&wr).unwrap().profile;
    let mut got: Vec<u64> = back.samples.iter().map(|s| s.time).collect();
    let mut want: Vec<u64> = p
        .samples
        .iter()
        .filter(|s| in_window(s))
        .map(|s| s.time)
        .collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);

    // Seconds from the start of the recording.
    let rel = dir.join("rel.collapsed");
    ok(&[
        "convert",
        s(&rec),
        "--since",
        "1",
        "--until",
        "2.5",
        "-o",
        s(&rel),
    ]);
    let (ra, rb) = (p.start_ns + 1_000_000_000, p.start_ns + 2_500_000_000);
    let want_rel: u64 = p
        .samples
        .iter()
        .filter(|s| s.time >= ra && s.time < rb)
        .map(|s| s.weight)
        .sum();
    assert!(want_rel > 0);
    assert_eq!(collapsed_total(&rel), want_rel);

    // One thread by name.
    let t1 = dir.join("t1.collapsed");
    ok(&[
        "convert",
        s(&rec),
        "--thread",
        "phases-worker-1",
        "--threads",
        "-o",
        s(&t1),
    ]);
    let tids: Vec<u32> = p
        .thread_names
        .iter()
        .filter(|(_, n)| *n == "phases-worker-1")
        .map(|(t, _)| *t)
        .collect();
    let want_t1: u64 = p
        .samples
        .iter()
        .filter(|s| tids.contains(&s.tid))
        .map(|s| s.weight)
        .sum();
    assert!(want_t1 > 500, "phases-worker-1 samples: {want_t1}");
    assert_eq!(collapsed_total(&t1), want_t1);
    let text = std::fs::read_to_string(&t1).unwrap();
    assert!(text.lines().all(|l| l.starts_with("phases-worker-1;")));

    // Per-thread report.
    let res = ok(&["report", s(&rec), "--threads", "--top", "3"]);
    let text = String::from_utf8(res.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "thread phases-worker-1 (tid {}): {want_t1} samples",
            tids[0]
        )),
        "{text}"
    );

    // Diff of the first and second half: the before and after columns are the halves.
    let mid = ((first + last) / 2).to_string();
    let (h1, h2) = (dir.join("h1.jvmperf"), dir.join("h2.jvmperf"));
    ok(&["convert", s(&rec), "--until", &mid, "-o", s(&h1)]);
    ok(&["convert", s(&rec), "--since", &mid, "-o", s(&h2)]);
    let d = dir.join("d.collapsed");
    ok(&["diff", s(&h1), s(&h2), "-o", s(&d)]);
    let (mut before, mut after) = (0u64, 0u64);
    for line in std::fs::read_to_string(&d).unwrap().lines() {
        let mut it = line.rsplitn(3, ' ');
        after += it.next().unwrap().parse::<u64>().unwrap();
        before += it.next().unwrap().parse::<u64>().unwrap();
    }
    let mid: u64 = mid.parse().unwrap();
    let n1 = p.samples.iter().filter(|s| s.time < mid).count() as u64;
    assert_eq!((before, after), (n1, p.samples.len() as u64 - n1));
    let dsvg = dir.join("d.svg");
    ok(&["diff", s(&h1), s(&h2), "-o", s(&dsvg)]);
    assert!(std::fs::read_to_string(&dsvg)
        .unwrap()
        .contains("bench.Phases.hotLoop"));

    // Bad input: one line, exit code 2, naming the fix.
    one_line_error(
        &[
            "convert",
            s(&w),
            "--since",
            "1",
            "-o",
            s(&dir.join("x.svg")),
        ],
        ".jvmperf or .jfr recording",
    );
    one_line_error(
        &["convert", s(&rec), "-o", s(&dir.join("x.png"))],
        "cannot tell the format",
    );
    let bytes = std::fs::read(&rec).unwrap();
    let cut = dir.join("cut.jvmperf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    one_line_error(&["report", s(&cut)], "corrupt .jvmperf file");
    one_line_error(
        &[
            "convert",
            s(&rec),
            "--thread",
            "nope",
            "-o",
            s(&dir.join("x.svg")),
        ],
        "phases-worker-1",
    );
    one_line_error(
        &["diff", s(&h1), s(&h2), "-o", s(&dir.join("x.iprof"))],
        "-o diff.svg",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
