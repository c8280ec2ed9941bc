use super::*;
use crate::profile::{FrameKind, Sample};

fn profile() -> Profile {
    let mut p = Profile::default();
    p.period_ns = 1_000_000;
    p.labels = vec![("main".into(), "bench.Phases".into())];
    let main = Frame {
        line: Some(210),
        signature: Some("([Ljava/lang/String;)V".into()),
        ..Frame::named("bench.Phases.main", FrameKind::Interpreted)
    };
    let main_211 = Frame {
        line: Some(211),
        ..main.clone()
    };
    let hot = Frame::named("bench.Phases.hotLoop</script>", FrameKind::Jit);
    let ids: Vec<_> = [main, main_211, hot]
        .into_iter()
        .map(|f| p.intern_frame(f))
        .collect();
    let a = p.intern_stack(vec![ids[0], ids[2]]);
    let b = p.intern_stack(vec![ids[1], ids[2]]);
    let c = p.intern_stack(vec![ids[0]]);
    p.thread_names.insert(7, "phases-worker".into());
    for (ms, tid, stack) in [(5, 7, a), (6, 7, b), (7, 8, b), (9, 7, c), (10, 7, b)] {
        p.samples.push(Sample {
            time: 1_000_000_000 + ms * 1_000_000,
            tid,
            stack,
            weight: 1,
        });
    }
    p
}

fn data(page: &str) -> Value {
    let start = page.find("id=\"profile-data\">").unwrap() + "id=\"profile-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

fn decode(column: &Value) -> Vec<u64> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(column.as_str().unwrap())
        .unwrap();
    let (mut out, mut v, mut shift) = (Vec::new(), 0u64, 0);
    for b in bytes {
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            out.push(v);
            (v, shift) = (0, 0);
        }
    }
    out
}

#[test]
fn one_self_contained_page_with_a_strict_policy() {
    let page = String::from_utf8(render(&profile()).unwrap()).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains(&format!("script-src '{}'", sha256(SCRIPT))));
    assert!(page.contains(&format!("style-src '{}'", sha256(STYLE))));
    assert!(page.contains("default-src 'none'"));
    assert!(
        page.contains(&format!("<script>{SCRIPT}</script>")),
        "script inline, unchanged"
    );
    assert!(page.contains(&format!("<style>{STYLE}</style>")));
    // Nothing is loaded from anywhere: no src/href attributes, no fetch or XHR in the script.
    for needle in [" src=", " href=", "fetch(", "XMLHttpRequest", "import("] {
        assert!(!page.contains(needle), "{needle}");
    }
    assert_eq!(
        page.matches("</script>").count(),
        2,
        "a frame name cannot end the data block"
    );
}

#[test]
fn frames_merge_lines_stacks_are_a_trie_and_samples_columns() {
    let page = String::from_utf8(render(&profile()).unwrap()).unwrap();
    let d = data(&page);
    let strings: Vec<String> = serde_json::from_value(d["strings"].clone()).unwrap();
    let s = |col: &Value| -> Vec<String> {
        decode(col)
            .into_iter()
            .map(|i| strings[i as usize].clone())
            .collect()
    };
    // main's two lines are one frame, its details listing both.
    assert_eq!(
        s(&d["frames"]["name"]),
        ["bench.Phases.main", "bench.Phases.hotLoop</script>"]
    );
    assert_eq!(
        s(&d["frames"]["detail"])[0],
        "([Ljava/lang/String;)V · lines 210, 211"
    );
    let kinds: Vec<String> = decode(&d["frames"]["kind"])
        .into_iter()
        .map(|k| d["kinds"][k as usize]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["interpreted", "C2"]);
    // Two nodes: main, and hotLoop under it.
    assert_eq!(decode(&d["nodes"]["up"]), [0, 1]);
    assert_eq!(decode(&d["nodes"]["frame"]), [0, 1]);
    // Stacks hottest first: main;hotLoop (4 samples), then main (1).
    assert_eq!(decode(&d["stacks"]["leaf"]), [2, 1]);
    let sm = &d["samples"];
    // A 1 ms period: times in ms from the first sample (5 ms).
    assert_eq!(sm["unit_ns"], 1_000_000);
    let (t7, t8) = (&sm["threads"][0], &sm["threads"][1]);
    assert_eq!(
        (&t7["name"], &t7["n"], &t7["samples"]),
        (&"phases-worker".into(), &4.into(), &4.into())
    );
    // stack × 4 + time delta: at 0, 1 and 4 (delta 3: escaped, the delta next) and 5 ms.
    assert_eq!(decode(&t7["rows"]), [0, 1, 4 + 3, 3, 1]);
    assert!(t7["weight"].is_null(), "all weights 1");
    assert_eq!(t8["name"], "tid-8");
    assert_eq!(decode(&t8["rows"]), [2], "at 2 ms");
    assert_eq!(d["clock"], "cpu");
    assert_eq!(d["title"], "bench.Phases");
}

#[test]
fn samples_of_one_stack_in_one_unit_merge() {
    let rows: Vec<Row> = (0..1000u64)
        .map(|i| Row {
            time: i * 300_000,
            stack: (i % 2) as u32,
            weight: 1,
        })
        .collect();
    let merged = merge(&rows, 1_000_000);
    // Each 1 ms holds 3 or 4 samples of 2 stacks: two rows per ms.
    assert_eq!(merged.len(), 600);
    assert_eq!(merged.iter().map(|r| r.weight).sum::<u64>(), 1000);
    assert!(merged.windows(2).all(|w| w[0].time <= w[1].time));
}

#[test]
fn too_many_rows_get_coarser_units() {
    // Two threads, 1000 samples each at 1 kHz, of 50 stacks.
    let threads: BTreeMap<u32, Vec<Row>> = (1..=2)
        .map(|tid| {
            let rows = (0..1000u64)
                .map(|i| Row {
                    time: i * 1_000_000 + 1,
                    stack: (i % 50) as u32,
                    weight: 1,
                })
                .collect();
            (tid, rows)
        })
        .collect();
    let (rows, unit) = in_units(&threads, 1_000_000, 10_000);
    assert_eq!((unit, rows[&1].len()), (1_000_000, 1000), "fits in 1 ms");
    let (rows, unit) = in_units(&threads, 1_000_000, 1500);
    // 10 ms hold 10 stacks: no merging yet; 100 ms hold 100 samples of 50 stacks.
    assert_eq!((unit, rows[&1].len()), (100_000_000, 500));
    assert_eq!(rows[&2].iter().map(|r| r.weight).sum::<u64>(), 1000);
    let (_, unit) = in_units(&threads, 100_000, 10_000);
    assert_eq!(unit, FINEST_UNIT_NS, "0.1 ms under a 1 ms period");
}

#[test]
fn the_page_says_when_sample_times_were_coarsened() {
    // Above 1 kHz times start at 0.1 ms: rounding them to 1 ms is already a coarsening.
    let note = coarsening_note(3_000_000, 1_000_000, 500_000).expect("a note");
    assert!(note.contains("3000000 samples") && note.contains("rounded to 1 ms"));
    assert_eq!(coarsening_note(3_000_000, 1_000_000, 1_000_000), None);
    assert_eq!(coarsening_note(3_000_000, FINEST_UNIT_NS, 500_000), None);
    assert!(coarsening_note(3_000_000, 10_000_000, 1_000_000).is_some());
}

#[test]
fn diff_pages_carry_the_baseline() {
    let after = profile();
    let mut before = profile();
    before.samples.truncate(2);
    let page = String::from_utf8(render_diff(&before, &after, "a → b").unwrap()).unwrap();
    let d = data(&page);
    assert_eq!(d["samples"]["threads"][0]["samples"], 4);
    assert_eq!(d["baseline"]["threads"][0]["samples"], 2);
    assert_eq!(d["title"], "a → b");
}

#[test]
fn templates_fill_each_key_once() {
    assert_eq!(
        fill("a{{X}}b{{Y}}c{{Z}}", &[("X", "{{Y}}"), ("Y", "2")]),
        "a{{Y}}b2c{{Z}}"
    );
}
