//! speedscope's JSON file format (`src/lib/file-format-spec.ts` in jlfwong/speedscope, schema
//! `https://www.speedscope.app/file-format-schema.json`): one "sampled" profile per thread over
//! shared frames, so speedscope's thread selector, time-order and sandwich views all work.
//!
//! Sampled profiles keep no timestamps, only an ordered list of stacks with weights. Each sample
//! weighs what it stands for: its periods in nanoseconds (CPU or wall-clock time), or its bytes
//! (allocations), so that a thread's total and a method's share agree with the other outputs.
//! Gaps between a thread's samples are not filled: an idle entry would count as the thread's time.
//! Samples stay in time order; back-to-back samples of one stack are one entry, as long as both.
use crate::error::{Error, ErrorKind, Result};
use crate::profile::{Frame, Profile, Sample};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
struct File {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<SampledProfile>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Serialize)]
struct Shared {
    frames: Vec<SpeedscopeFrame>,
}

#[derive(Serialize, PartialEq, Eq, Hash, Clone)]
struct SpeedscopeFrame {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

#[derive(Serialize)]
struct SampledProfile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    /// Indices into the shared frames, root first.
    samples: Vec<Vec<u32>>,
    weights: Vec<u64>,
}

/// One speedscope frame per method (and source file): speedscope's sandwich view merges by frame,
/// so the lines and tiers of one method are one frame, named as `report` names methods.
fn speedscope_frame(frame: &Frame) -> Option<SpeedscopeFrame> {
    let name = frame.method_key()?;
    let file = frame
        .file
        .as_deref()
        .or(frame.module.as_deref())
        .map(str::to_string);
    Some(SpeedscopeFrame {
        name,
        file,
        line: frame.start_line,
    })
}

pub fn render(profile: &Profile) -> Result<Vec<u8>> {
    let mut frames: Vec<SpeedscopeFrame> = Vec::new();
    let mut index: HashMap<SpeedscopeFrame, u32> = HashMap::new();
    let frame_ids: Vec<Option<u32>> = profile
        .frames
        .iter()
        .map(|f| {
            let sf = speedscope_frame(f)?;
            Some(*index.entry(sf.clone()).or_insert_with(|| {
                frames.push(sf);
                frames.len() as u32 - 1
            }))
        })
        .collect();
    let mut stacks: Vec<Option<Vec<u32>>> = vec![None; profile.stacks.len()];
    let mut stack = |id: u32| -> Vec<u32> {
        stacks[id as usize]
            .get_or_insert_with(|| {
                profile
                    .stacks
                    .frames(id)
                    .into_iter()
                    .filter_map(|f| frame_ids[f as usize])
                    .collect()
            })
            .clone()
    };
    let mut by_thread: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
    for s in &profile.samples {
        by_thread.entry(s.tid).or_default().push(s);
    }
    let timed = profile.clock.is_time() && profile.period_ns > 0;
    let mut profiles = Vec::new();
    for (tid, mut samples) in by_thread {
        samples.sort_by_key(|s| s.time);
        let mut out = SampledProfile {
            kind: "sampled",
            name: format!("{} (tid {tid})", profile.thread_name(tid)),
            unit: match (profile.clock.is_time(), timed) {
                (false, _) => "bytes",
                (true, true) => "nanoseconds",
                (true, false) => "none",
            },
            start_value: 0,
            end_value: 0,
            samples: Vec::with_capacity(samples.len()),
            weights: Vec::with_capacity(samples.len()),
        };
        let mut last = None;
        for s in samples {
            let weight = if timed {
                s.weight.saturating_mul(profile.period_ns)
            } else {
                s.weight
            };
            match out.weights.last_mut() {
                Some(w) if last == Some(s.stack) => *w += weight,
                _ => {
                    out.samples.push(stack(s.stack));
                    out.weights.push(weight);
                }
            }
            last = Some(s.stack);
            out.end_value += weight;
        }
        profiles.push(out);
    }
    // The busiest thread opens first.
    let active_profile_index = profiles
        .iter()
        .enumerate()
        .max_by_key(|(i, p)| {
            (
                p.samples.iter().filter(|s| !s.is_empty()).count(),
                usize::MAX - i,
            )
        })
        .map_or(0, |(i, _)| i);
    let file = File {
        schema: SCHEMA,
        shared: Shared { frames },
        profiles,
        name: super::flamegraph::title(profile),
        active_profile_index,
        exporter: format!("jvmperf {}", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_vec(&file).map_err(|e| {
        Error::new(
            ErrorKind::Output,
            format!("cannot write the speedscope profile: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::FrameKind;
    use serde_json::Value;

    fn profile() -> Profile {
        let mut p = Profile::default();
        p.period_ns = 1_000_000;
        p.start_ns = 5_000_000_000;
        p.labels = vec![("main".into(), "bench.Phases".into())];
        let mut main = Frame::named("bench.Phases.main", FrameKind::Interpreted);
        main.file = Some("Phases.java".into());
        main.start_line = Some(200);
        main.line = Some(210);
        let main_other_line = Frame {
            line: Some(211),
            kind: FrameKind::Jit,
            ..main.clone()
        };
        let hot = Frame::named("bench.Phases.hotLoop", FrameKind::Jit);
        let sys = Frame::named("do_syscall_64", FrameKind::Kernel);
        let ids: Vec<_> = [main, main_other_line, hot, sys]
            .into_iter()
            .map(|f| p.intern_frame(f))
            .collect();
        let a = p.intern_stack(vec![ids[0], ids[2]]);
        let b = p.intern_stack(vec![ids[1], ids[3]]);
        p.thread_names.insert(7, "phases-worker".into());
        // tid 7: samples at 0, 1 and 2 ms, then one at 10 ms after a gap; tid 8: one of weight 2.
        for (ms, tid, stack, weight) in [
            (1, 7, a, 1),
            (0, 7, a, 1),
            (2, 7, b, 1),
            (10, 7, a, 1),
            (3, 8, b, 2),
        ] {
            p.samples.push(Sample {
                time: 5_000_000_000 + ms * 1_000_000,
                tid,
                stack,
                weight,
            });
        }
        p
    }

    #[test]
    fn one_sampled_profile_per_thread_in_time_order_weighed_by_period() {
        let json: Value = serde_json::from_slice(&render(&profile()).unwrap()).unwrap();
        assert_eq!(json["$schema"], SCHEMA);
        assert_eq!(json["name"], "bench.Phases");
        let frames = json["shared"]["frames"].as_array().unwrap();
        let names: Vec<&str> = frames.iter().map(|f| f["name"].as_str().unwrap()).collect();
        // The two lines and tiers of main are one frame, named with its first line.
        assert_eq!(
            names,
            [
                "bench.Phases.main",
                "bench.Phases.hotLoop",
                "do_syscall_64 [kernel]"
            ]
        );
        assert_eq!(frames[0]["file"], "Phases.java");
        assert_eq!(frames[0]["line"], 200);
        let profiles = json["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 2);
        let w = &profiles[0];
        assert_eq!(w["type"], "sampled");
        assert_eq!(w["name"], "phases-worker (tid 7)");
        assert_eq!(w["unit"], "nanoseconds");
        assert_eq!(w["startValue"], 0);
        // Four samples of 1 ms, the gap before the one at 10 ms not counted.
        assert_eq!(w["endValue"], 4_000_000);
        let samples: Vec<Vec<u64>> = serde_json::from_value(w["samples"].clone()).unwrap();
        // The samples at 0 and 1 ms (one stack) are one entry of 2 ms.
        assert_eq!(samples, [vec![0, 1], vec![0, 2], vec![0, 1]]);
        let weights: Vec<u64> = serde_json::from_value(w["weights"].clone()).unwrap();
        assert_eq!(weights, [2_000_000, 1_000_000, 1_000_000]);
        let t = &profiles[1];
        assert_eq!(t["name"], "tid-8 (tid 8)");
        assert_eq!(
            (&t["startValue"], &t["endValue"]),
            (&0.into(), &2_000_000.into())
        );
        assert_eq!(json["activeProfileIndex"], 0);
    }

    #[test]
    fn without_a_period_weights_are_sample_counts() {
        let mut p = profile();
        p.period_ns = 0;
        let json: Value = serde_json::from_slice(&render(&p).unwrap()).unwrap();
        let w = &json["profiles"][0];
        assert_eq!(w["unit"], "none");
        assert_eq!(w["endValue"], 4);
        assert_eq!(json["profiles"][1]["weights"][0], 2);
    }

    #[test]
    fn a_rarely_sampled_thread_weighs_its_samples_times_the_period() {
        let mut p = profile();
        let stack = p.samples[0].stack;
        // Two samples 6 s apart (and one without a time): 3 periods, not 6 s.
        for time in [5_000_000_000, 11_000_000_000, 0] {
            p.samples.push(Sample {
                time,
                tid: 9,
                stack,
                weight: 1,
            });
        }
        let json: Value = serde_json::from_slice(&render(&p).unwrap()).unwrap();
        let rare = &json["profiles"][2];
        assert_eq!(rare["name"], "tid-9 (tid 9)");
        assert_eq!(rare["endValue"], 3_000_000);
        assert_eq!(rare["weights"], serde_json::json!([3_000_000]));
    }

    /// Each leaf's share of all weight.
    fn self_shares(weights: impl IntoIterator<Item = (String, u64)>) -> BTreeMap<String, f64> {
        let mut by_leaf = BTreeMap::new();
        let mut total = 0;
        for (leaf, w) in weights {
            *by_leaf.entry(leaf).or_insert(0) += w;
            total += w;
        }
        by_leaf
            .into_iter()
            .map(|(k, w): (String, u64)| (k, w as f64 / total as f64))
            .collect()
    }

    #[test]
    fn method_shares_equal_the_collapsed_outputs() {
        let mut p = profile();
        let (a, b) = (p.samples[0].stack, p.samples[2].stack);
        // A rare thread with a long gap, and a weight of 3 on one sample.
        for (time, stack, weight) in [(5_000_000_000, a, 1), (9_000_000_000, b, 3)] {
            p.samples.push(Sample {
                time,
                tid: 9,
                stack,
                weight,
            });
        }
        let json: Value = serde_json::from_slice(&render(&p).unwrap()).unwrap();
        let names: Vec<String> = json["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                f["name"]
                    .as_str()
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let mut speedscope = Vec::new();
        for prof in json["profiles"].as_array().unwrap() {
            let samples: Vec<Vec<usize>> = serde_json::from_value(prof["samples"].clone()).unwrap();
            let weights: Vec<u64> = serde_json::from_value(prof["weights"].clone()).unwrap();
            for (s, w) in samples.iter().zip(weights) {
                let leaf = s.last().map_or("(idle)".to_string(), |&f| names[f].clone());
                speedscope.push((leaf, w));
            }
        }
        let folded =
            crate::output::collapsed::folded(&p, &crate::output::OutputOptions { threads: false });
        let collapsed = folded.into_iter().map(|(line, w)| {
            let leaf = line.rsplit(';').next().unwrap();
            let name = names.iter().find(|n| leaf.starts_with(n.as_str())).unwrap();
            (name.clone(), w)
        });
        let (speedscope, collapsed) = (self_shares(speedscope), self_shares(collapsed));
        assert_eq!(
            speedscope.len(),
            collapsed.len(),
            "{speedscope:?} {collapsed:?}"
        );
        for (leaf, share) in &collapsed {
            assert!(
                (speedscope[leaf] - share).abs() < 1e-9,
                "{speedscope:?} {collapsed:?}"
            );
        }
    }

    #[test]
    fn valid_by_speedscope_schema() {
        // The schema speedscope 1.25.0 publishes (dist/release/file-format-schema.json in its
        // npm package).
        let schema: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/speedscope-1.25.0.schema.json"
        ))
        .unwrap();
        let json: Value = serde_json::from_slice(&render(&profile()).unwrap()).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&json)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}
