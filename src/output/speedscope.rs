//! speedscope's JSON file format (`src/lib/file-format-spec.ts` in jlfwong/speedscope, schema
//! `https://www.speedscope.app/file-format-schema.json`): one "sampled" profile per thread over
//! shared frames, so speedscope's thread selector, time-order and sandwich views all work.
//!
//! Sampled profiles keep no timestamps, only an ordered list of stacks with weights. With sample
//! times known, each sample weighs its period in nanoseconds and a gap in a thread's samples
//! longer than a period becomes an idle sample (an empty stack) as long as the gap, so the
//! time-order view shows each sample at its time, relative to the start of the recording. Back-to-
//! back samples of one stack are one entry, as long as both.

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
    // Bytes allocated are weights of their own, not time.
    let bytes = profile.clock == crate::profile::Clock::Alloc;
    let timed = !bytes && profile.period_ns > 0 && profile.samples.iter().any(|s| s.time != 0);
    let origin = match profile.start_ns {
        0 => profile.samples.iter().map(|s| s.time).min().unwrap_or(0),
        start => start,
    };
    let mut profiles = Vec::new();
    for (tid, mut samples) in by_thread {
        samples.sort_by_key(|s| s.time);
        let start_value = if timed {
            samples[0].time.saturating_sub(origin)
        } else {
            0
        };
        let mut out = SampledProfile {
            kind: "sampled",
            name: format!("{} (tid {tid})", profile.thread_name(tid)),
            unit: match (bytes, timed) {
                (true, _) => "bytes",
                (false, true) => "nanoseconds",
                (false, false) => "none",
            },
            start_value,
            end_value: start_value,
            samples: Vec::with_capacity(samples.len()),
            weights: Vec::with_capacity(samples.len()),
        };
        // The stack of the last entry, while the next sample may extend it.
        let mut extends: Option<u32> = None;
        for (i, s) in samples.iter().enumerate() {
            let weight = if timed {
                s.weight.saturating_mul(profile.period_ns)
            } else {
                s.weight
            };
            match (extends, out.weights.last_mut()) {
                // Back-to-back samples of one stack are one entry as long as both.
                (Some(last), Some(w)) if last == s.stack => *w += weight,
                _ => {
                    out.samples.push(stack(s.stack));
                    out.weights.push(weight);
                }
            }
            extends = Some(s.stack);
            out.end_value += weight;
            let next = samples.get(i + 1).map(|n| n.time.saturating_sub(origin));
            if let Some(next) = next.filter(|&n| timed && n > out.end_value + profile.period_ns) {
                out.samples.push(Vec::new());
                out.weights.push(next - out.end_value);
                out.end_value = next;
                extends = None;
            }
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
    fn one_sampled_profile_per_thread_in_time_order_with_idle_gaps() {
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
        assert_eq!(w["endValue"], 11_000_000);
        let samples: Vec<Vec<u64>> = serde_json::from_value(w["samples"].clone()).unwrap();
        // The samples at 0 and 1 ms (one stack) are one entry of 2 ms.
        assert_eq!(samples, [vec![0, 1], vec![0, 2], vec![], vec![0, 1]]);
        let weights: Vec<u64> = serde_json::from_value(w["weights"].clone()).unwrap();
        assert_eq!(weights, [2_000_000, 1_000_000, 7_000_000, 1_000_000]);
        let t = &profiles[1];
        assert_eq!(t["name"], "tid-8 (tid 8)");
        assert_eq!(
            (&t["startValue"], &t["endValue"]),
            (&3_000_000.into(), &5_000_000.into())
        );
        assert_eq!(json["activeProfileIndex"], 0);
    }

    #[test]
    fn without_times_weights_are_sample_counts() {
        let mut p = profile();
        for s in &mut p.samples {
            s.time = 0;
        }
        let json: Value = serde_json::from_slice(&render(&p).unwrap()).unwrap();
        let w = &json["profiles"][0];
        assert_eq!(w["unit"], "none");
        assert_eq!(w["endValue"], 4);
        assert_eq!(json["profiles"][1]["weights"][0], 2);
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
