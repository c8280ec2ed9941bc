//! pprof (`.pb.gz`): gzipped `profile.proto`, readable by `go tool pprof` and every pprof UI.
//!
//! - Sample types `samples/count` and `cpu/nanoseconds` (count × period); period type
//!   `cpu/nanoseconds`, period = 1e9 / sampling frequency. An allocation profile has one,
//!   `alloc_space/bytes`, and the allocated classes' frames a mapping `[allocated class]`.
//! - Functions: Java methods by `package.Class.method` with the source file and the first line of
//!   the line table (system name = name + JVM descriptor); native code by symbol.
//! - Locations: one per physical frame; a compiled Java frame carries its inlined methods as
//!   extra lines (innermost first), as pprof models inlining.
//! - Mappings tell the kind of code: `[jvm jit]`, `[jvm interpreter]`, `[jvm stubs]`,
//!   `[kernel.kallsyms]`, `[thread]`, or the native module's file name. Each version of compiled
//!   code whose tier is known has a `[jvm jit]` mapping of its own, its build id
//!   `level=4 compile_id=812 osr_bci=5 code_size=1024` (`osr_bci` only for OSR code).
//! - Labels: `thread` (name) and `tid` on every sample, and the profile's own labels (the daemon's
//!   host, pid, main class, JDK version, rate).
//! - A profile of one interval (the daemon's files) has `time_nanos`/`duration_nanos` set to it,
//!   and a comment `jvmperf interval_start_ns=N` with its CLOCK_MONOTONIC start, which reading
//!   back gives every sample as its time (a window selects whole intervals).

use crate::error::{Error, ErrorKind, Result};
use crate::profile::{
    Clock, CompiledCode, Frame, FrameId, FrameKind, Profile, WallInterval, MAX_WEIGHT,
};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::Arc;

#[rustfmt::skip]
#[allow(clippy::all, clippy::pedantic, rustdoc::all)]
#[path = "pprof_proto.rs"]
mod proto;

const JIT: &str = "[jvm jit]";
const INTERPRETER: &str = "[jvm interpreter]";
const STUBS: &str = "[jvm stubs]";
const KERNEL: &str = "[kernel.kallsyms]";
const THREAD: &str = "[thread]";
/// The mapping of allocation samples' leaves: the class allocated.
const ALLOCATED: &str = "[allocated class]";
const LOCK: &str = "[lock class]";
/// A lock profile's count of waits (Pyroscope's name).
const CONTENTIONS: &str = "contentions";
const THREAD_LABEL: &str = "thread";
const TID_LABEL: &str = "tid";
const INTERVAL_START: &str = "jvmperf interval_start_ns=";
/// The target's CPU time over the window, which predicts the samples taken on a CPU (coverage):
/// `jvmperf target_cpu_ns=N expected_samples=M`.
const TARGET_CPU: &str = "jvmperf target_cpu_ns=";
/// Decompressed pprof files larger than this are refused (a corrupt or hostile file).
const MAX_DECODED: u64 = 1 << 32;

#[derive(Default)]
struct Builder {
    out: proto::Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64, i64, i64), u64>,
    locations: HashMap<(u64, Vec<(u64, i64)>), u64>,
    mappings: HashMap<(String, String), u64>,
}

/// The build id of a compiled code version's mapping.
fn code_build_id(c: &CompiledCode) -> String {
    let osr = c
        .osr_bci
        .map(|b| format!(" osr_bci={b}"))
        .unwrap_or_default();
    format!(
        "level={} compile_id={}{osr} code_size={}",
        c.level, c.compile_id, c.code_size
    )
}

/// A code version from its mapping's build id; `None` for other build ids.
fn parse_code_build_id(id: &str) -> Option<CompiledCode> {
    let mut c = CompiledCode {
        level: 0,
        compile_id: 0,
        osr_bci: None,
        code_size: 0,
    };
    let mut level = None;
    for field in id.split(' ') {
        let (key, value) = field.split_once('=')?;
        match key {
            "level" => level = Some(value.parse().ok()?),
            "compile_id" => c.compile_id = value.parse().ok()?,
            "osr_bci" => c.osr_bci = Some(value.parse().ok()?),
            "code_size" => c.code_size = value.parse().ok()?,
            _ => {}
        }
    }
    c.level = level?;
    Some(c)
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.out.string_table.len() as i64;
        self.out.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), id);
        id
    }

    fn mapping(&mut self, frame: &Frame) -> u64 {
        let name = match frame.kind {
            FrameKind::Jit | FrameKind::Inlined => JIT,
            FrameKind::Interpreted => INTERPRETER,
            FrameKind::Stub => STUBS,
            FrameKind::Kernel => KERNEL,
            FrameKind::Thread => THREAD,
            FrameKind::Allocated => ALLOCATED,
            FrameKind::Lock => LOCK,
            FrameKind::Native => match &frame.module {
                Some(m) => m,
                None => return 0,
            },
        };
        let build = match (frame.kind, &frame.code) {
            (FrameKind::Jit, Some(code)) => code_build_id(code),
            _ => String::new(),
        };
        let key = (name.to_string(), build);
        if let Some(&id) = self.mappings.get(&key) {
            return id;
        }
        let id = self.out.mapping.len() as u64 + 1;
        let filename = self.string(name);
        let build_id = self.string(&key.1);
        self.out.mapping.push(proto::Mapping {
            id,
            filename,
            build_id,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
            ..Default::default()
        });
        self.mappings.insert(key, id);
        id
    }

    fn function(&mut self, frame: &Frame) -> u64 {
        let name = self.string(&frame.name);
        let system_name = match &frame.signature {
            Some(sig) if frame.kind.is_java() => self.string(&format!("{}{sig}", frame.name)),
            _ => name,
        };
        let filename = self.string(frame.file.as_deref().unwrap_or(""));
        let start_line = frame.start_line.unwrap_or(0) as i64;
        // A Java method is one function however its frames were named: an interpreted frame
        // named through `Method*` has no source file, a compiled one of the same method has.
        let key = match frame.kind.is_java() {
            true => (name, system_name, 0, 0),
            false => (name, system_name, filename, start_line),
        };
        if let Some(&id) = self.functions.get(&key) {
            let known = &mut self.out.function[id as usize - 1];
            if known.filename == 0 {
                known.filename = filename;
            }
            if known.start_line == 0 {
                known.start_line = start_line;
            }
            return id;
        }
        let id = self.out.function.len() as u64 + 1;
        self.out.function.push(proto::Function {
            id,
            name,
            system_name,
            filename,
            start_line,
        });
        self.functions.insert(key, id);
        id
    }

    /// The location of one physical frame: `frames` innermost first, the last one the frame that
    /// owns the code.
    fn location(&mut self, profile: &Profile, frames: &[FrameId]) -> u64 {
        let owner = &profile.frames[*frames.last().unwrap_or(&0) as usize];
        let mapping = self.mapping(owner);
        let lines: Vec<(u64, i64)> = frames
            .iter()
            .map(|&f| {
                let frame = &profile.frames[f as usize];
                (self.function(frame), frame.line.unwrap_or(0) as i64)
            })
            .collect();
        let key = (mapping, lines);
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let id = self.out.location.len() as u64 + 1;
        self.out.location.push(proto::Location {
            id,
            mapping_id: mapping,
            address: 0,
            line: key
                .1
                .iter()
                .map(|&(function_id, line)| proto::Line { function_id, line })
                .collect(),
            is_folded: false,
        });
        self.locations.insert(key, id);
        id
    }

    /// Location ids of a stack, leaf first: inlined frames join the compiled frame below them.
    fn stack(&mut self, profile: &Profile, root_to_leaf: &[FrameId]) -> Vec<u64> {
        let mut out = Vec::new();
        let mut pending: Vec<FrameId> = Vec::new();
        for &f in root_to_leaf.iter().rev() {
            pending.push(f);
            if profile.frames[f as usize].kind != FrameKind::Inlined {
                out.push(self.location(profile, &pending));
                pending.clear();
            }
        }
        if !pending.is_empty() {
            out.push(self.location(profile, &pending));
        }
        out
    }
}

pub fn render(profile: &Profile) -> Result<Vec<u8>> {
    let mut b = Builder::default();
    b.string("");
    let value_type = |b: &mut Builder, t: &str, u: &str| proto::ValueType {
        r#type: b.string(t),
        unit: b.string(u),
    };
    let clock = profile.clock.name();
    if profile.clock == Clock::Alloc {
        // Weights are bytes: Pyroscope's name for bytes allocated, and no count of objects
        // (a sample stands for a TLAB's worth of allocations, or one object outside TLABs).
        b.out.sample_type = vec![value_type(&mut b, clock, "bytes")];
        b.out.period_type = Some(value_type(&mut b, clock, "bytes"));
    } else if profile.clock == Clock::Lock {
        // Pyroscope's names: the waits (one sample each) and the time they took.
        b.out.sample_type = vec![
            value_type(&mut b, CONTENTIONS, "count"),
            value_type(&mut b, clock, "nanoseconds"),
        ];
        b.out.period_type = Some(value_type(&mut b, CONTENTIONS, "count"));
    } else {
        b.out.sample_type = vec![
            value_type(&mut b, "samples", "count"),
            value_type(&mut b, clock, "nanoseconds"),
        ];
        b.out.period_type = Some(value_type(&mut b, clock, "nanoseconds"));
    }
    b.out.period = profile.period_ns as i64;
    b.out.default_sample_type = b.string(clock);
    for comment in std::iter::once("jvmperf").chain(profile.comments.iter().map(String::as_str)) {
        let id = b.string(comment);
        b.out.comment.push(id);
    }
    // Samples a CPU time predicts: not those of allocations or waits.
    if let (Some(cpu), Clock::Cpu | Clock::Wall) = (profile.cpu_time_ns, profile.clock) {
        let expected = cpu / profile.period_ns.max(1);
        let line = b.string(&format!("{TARGET_CPU}{cpu} expected_samples={expected}"));
        b.out.comment.push(line);
    }
    let times = profile.samples.iter().map(|s| s.time).filter(|&t| t != 0);
    if let Some(interval) = profile.interval {
        b.out.time_nanos = interval.start_unix_ns as i64;
        b.out.duration_nanos = interval.duration_ns as i64;
        let start = b.string(&format!("{INTERVAL_START}{}", profile.start_ns));
        b.out.comment.push(start);
    } else if let (Some(first), Some(last)) = (times.clone().min(), times.max()) {
        b.out.duration_nanos = (last - first) as i64;
    }
    let profile_labels: Vec<proto::Label> = profile
        .labels
        .iter()
        .map(|(k, v)| proto::Label {
            key: b.string(k),
            str: b.string(v),
            ..Default::default()
        })
        .collect();

    let mut stack_locations: Vec<Option<Vec<u64>>> = vec![None; profile.stacks.len()];
    let (thread_key, tid_key) = (b.string(THREAD_LABEL), b.string(TID_LABEL));
    for ((stack, tid), tally) in profile.weights_by_stack_and_thread() {
        let weight = tally.weight;
        let location_id = match &stack_locations[stack as usize] {
            Some(ids) => ids.clone(),
            None => {
                let ids = b.stack(profile, &profile.stacks.frames(stack));
                stack_locations[stack as usize] = Some(ids.clone());
                ids
            }
        };
        let thread = b.string(&profile.thread_name(tid));
        b.out.sample.push(proto::Sample {
            location_id,
            value: match profile.clock {
                Clock::Alloc => vec![weight as i64],
                Clock::Lock => vec![tally.samples as i64, weight as i64],
                Clock::Cpu | Clock::Wall => vec![
                    weight as i64,
                    weight.saturating_mul(profile.period_ns) as i64,
                ],
            },
            label: vec![
                proto::Label {
                    key: thread_key,
                    str: thread,
                    ..Default::default()
                },
                proto::Label {
                    key: tid_key,
                    num: tid as i64,
                    ..Default::default()
                },
            ]
            .into_iter()
            .chain(profile_labels.iter().cloned())
            .collect(),
        });
    }
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&b.out.encode_to_vec())
        .and_then(|_| gz.finish())
        .map_err(|e| Error::new(ErrorKind::Output, format!("cannot compress: {e}")))
}

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Usage,
        format!("not a valid pprof file: {what} (pass a gzipped profile.proto, as jvmperf or pprof writes it)"),
    )
}

pub fn parse(bytes: &[u8]) -> Result<Profile> {
    let decoded;
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        GzDecoder::new(bytes)
            .take(MAX_DECODED + 1)
            .read_to_end(&mut out)
            .map_err(|e| corrupt(format!("gzip: {e}")))?;
        if out.len() as u64 > MAX_DECODED {
            return Err(corrupt("more than 4 GiB decompressed"));
        }
        decoded = out;
        &decoded[..]
    } else {
        bytes
    };
    let pb = proto::Profile::decode(raw).map_err(|e| corrupt(format!("protobuf: {e}")))?;
    let string = |i: i64| -> Result<&str> {
        usize::try_from(i)
            .ok()
            .and_then(|i| pb.string_table.get(i))
            .map(String::as_str)
            .ok_or_else(|| corrupt(format!("string index {i} out of range")))
    };
    let types = pb
        .sample_type
        .iter()
        .map(|t| Ok((string(t.r#type)?, string(t.unit)?)))
        .collect::<Result<Vec<_>>>()?;
    let counted = types
        .iter()
        .position(|&(t, u)| t == "samples" && u == "count");
    let alloc_space = types
        .iter()
        .position(|&(t, u)| t == Clock::Alloc.name() && u == "bytes");
    let delay = types
        .iter()
        .position(|&(t, u)| t == Clock::Lock.name() && u == "nanoseconds");
    let count_index = delay.or(counted).or(alloc_space).ok_or_else(|| {
        corrupt("no samples/count (or alloc_space/bytes, delay/nanoseconds) sample type")
    })?;
    let mut mappings: HashMap<u64, &str> = HashMap::new();
    let mut code_versions: HashMap<u64, CompiledCode> = HashMap::new();
    for m in &pb.mapping {
        mappings.insert(m.id, string(m.filename)?);
        if let Some(code) = parse_code_build_id(string(m.build_id)?) {
            code_versions.insert(m.id, code);
        }
    }
    let functions: HashMap<u64, &proto::Function> = pb.function.iter().map(|f| (f.id, f)).collect();

    let mut profile = Profile::default();
    if delay.is_some() {
        profile.clock = Clock::Lock;
    } else if counted.is_none() {
        profile.clock = Clock::Alloc;
    }
    for &c in &pb.comment {
        if let Some(cpu) = string(c)?.strip_prefix(TARGET_CPU) {
            let ns = cpu.split(' ').next().unwrap_or_default();
            profile.cpu_time_ns = Some(ns.parse().map_err(|_| corrupt("bad target CPU time"))?);
        }
        if let Some(start) = string(c)?.strip_prefix(INTERVAL_START) {
            profile.start_ns = start.parse().map_err(|_| corrupt("bad interval start"))?;
            profile.interval = Some(WallInterval {
                start_unix_ns: pb.time_nanos.max(0) as u64,
                duration_ns: pb.duration_nanos.max(0) as u64,
            });
        }
    }
    if let Some(pt) = &pb.period_type {
        if string(pt.unit)? == "nanoseconds" {
            profile.period_ns = pb.period.max(0) as u64;
        }
    }
    // Frames of each location, outermost first (root-to-leaf order).
    let mut location_frames: HashMap<u64, Vec<FrameId>> = HashMap::new();
    for l in &pb.location {
        let mapping = match l.mapping_id {
            0 => None,
            id => Some(
                *mappings
                    .get(&id)
                    .ok_or_else(|| corrupt(format!("location {} names mapping {id}", l.id)))?,
            ),
        };
        let mut ids = Vec::with_capacity(l.line.len());
        for (depth, line) in l.line.iter().rev().enumerate() {
            let f = functions.get(&line.function_id).ok_or_else(|| {
                corrupt(format!(
                    "location {} names function {}",
                    l.id, line.function_id
                ))
            })?;
            let name = string(f.name)?;
            let system_name = string(f.system_name)?;
            let kind = match mapping {
                Some(JIT) if depth == 0 => FrameKind::Jit,
                Some(JIT) => FrameKind::Inlined,
                Some(INTERPRETER) => FrameKind::Interpreted,
                Some(STUBS) => FrameKind::Stub,
                Some(KERNEL) => FrameKind::Kernel,
                Some(THREAD) => FrameKind::Thread,
                Some(ALLOCATED) => FrameKind::Allocated,
                Some(LOCK) => FrameKind::Lock,
                _ => FrameKind::Native,
            };
            let positive = |v: i64| u32::try_from(v).ok().filter(|&v| v > 0);
            let file = string(f.filename)?;
            let frame = Frame {
                file: (!file.is_empty()).then(|| file.into()),
                line: positive(line.line),
                start_line: positive(f.start_line),
                signature: system_name
                    .strip_prefix(name)
                    .filter(|s| kind.is_java() && s.starts_with('('))
                    .map(str::to_string),
                module: mapping.filter(|_| kind == FrameKind::Native).map(Arc::from),
                code: code_versions
                    .get(&l.mapping_id)
                    .copied()
                    .filter(|_| kind == FrameKind::Jit),
                ..Frame::named(name, kind)
            };
            ids.push(profile.intern_frame(frame));
        }
        location_frames.insert(l.id, ids);
    }
    let mut synthetic_tids: HashMap<String, u32> = HashMap::new();
    for s in &pb.sample {
        let weight = *s
            .value
            .get(count_index)
            .ok_or_else(|| corrupt("a sample lacks its count value"))?;
        let weight = u64::try_from(weight)
            .ok()
            .filter(|&w| w <= MAX_WEIGHT)
            .ok_or_else(|| corrupt(format!("sample count {weight}")))?;
        let mut stack = Vec::new();
        for id in s.location_id.iter().rev() {
            let frames = location_frames
                .get(id)
                .ok_or_else(|| corrupt(format!("a sample names location {id}")))?;
            stack.extend_from_slice(frames);
        }
        let mut thread = None;
        let mut tid = None;
        for label in &s.label {
            match string(label.key)? {
                THREAD_LABEL => thread = Some(string(label.str)?),
                TID_LABEL => tid = u32::try_from(label.num).ok(),
                _ => {}
            }
        }
        let tid = match (tid, thread) {
            (Some(tid), _) => tid,
            (None, Some(name)) => {
                let next = u32::MAX - synthetic_tids.len() as u32;
                *synthetic_tids.entry(name.to_string()).or_insert(next)
            }
            (None, None) => 0,
        };
        if let Some(name) = thread {
            profile.thread_names.insert(tid, name.to_string());
        }
        profile.add_counted(stack, tid, weight);
    }
    for s in &mut profile.samples {
        s.time = profile.start_ns;
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Sample;

    #[test]
    fn an_allocation_profile_is_alloc_space_in_bytes_with_its_classes_and_reads_back_so() {
        let mut p = fixture();
        p.clock = Clock::Alloc;
        p.period_ns = 0;
        let class = p.intern_frame(Frame::named("long[]", FrameKind::Allocated));
        let stack = p.intern_stack(vec![0, 1, class]);
        p.samples.push(Sample {
            time: 0,
            tid: 10,
            stack,
            weight: 4 << 20,
        });
        let bytes = render(&p).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&bytes[..]).read_to_end(&mut raw).unwrap();
        let pb = proto::Profile::decode(&raw[..]).unwrap();
        let name = |i: i64| pb.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = pb
            .sample_type
            .iter()
            .map(|t| (name(t.r#type), name(t.unit)))
            .collect();
        assert_eq!(types, [("alloc_space", "bytes")]);
        assert_eq!(name(pb.default_sample_type), "alloc_space");
        assert!(pb.mapping.iter().any(|m| name(m.filename) == ALLOCATED));
        let q = parse(&bytes).unwrap();
        assert_eq!(q.clock, Clock::Alloc);
        assert_eq!(q.total_weight(), p.total_weight());
        let leaf = q
            .stacks
            .iter()
            .filter_map(|s| s.last().copied())
            .find(|&f| q.frames[f as usize].kind == FrameKind::Allocated)
            .unwrap();
        assert_eq!(q.frames[leaf as usize].name, "long[]");
    }

    fn fixture() -> Profile {
        let mut p = Profile::default();
        p.period_ns = 1_000_000;
        let java = |name: &str, kind, line| Frame {
            file: Some("App.java".into()),
            line: Some(line),
            bci: Some(1),
            signature: Some("(J)J".into()),
            start_line: Some(3),
            ..Frame::named(name, kind)
        };
        let libc = p.intern_frame(Frame {
            module: Some("libc.so.6".into()),
            ..Frame::named("start_thread", FrameKind::Native)
        });
        let main = p.intern_frame(java("bench.App.main", FrameKind::Interpreted, 5));
        let hot = p.intern_frame(Frame {
            code: Some(CompiledCode::TEST_VERSIONS[0]),
            ..java("bench.App.hot", FrameKind::Jit, 9)
        });
        let hot_c1 = p.intern_frame(Frame {
            code: Some(CompiledCode::TEST_VERSIONS[1]),
            ..java("bench.App.hot", FrameKind::Jit, 9)
        });
        let helper = p.intern_frame(java("bench.App.helper", FrameKind::Inlined, 14));
        let kernel = p.intern_frame(Frame::named("do_syscall_64", FrameKind::Kernel));
        let s1 = p.intern_stack(vec![libc, main, hot, helper]);
        let s2 = p.intern_stack(vec![libc, main, hot, kernel]);
        let s3 = p.intern_stack(vec![libc, main, hot_c1, helper]);
        p.thread_names.insert(10, "worker".into());
        for (tid, stack, weight) in [(10, s1, 2), (11, s2, 1), (10, s1, 1), (10, s3, 4)] {
            p.samples.push(Sample {
                time: 0,
                tid,
                stack,
                weight,
            });
        }
        p
    }

    #[test]
    fn a_java_method_is_one_function_with_its_file_however_its_frames_were_named() {
        let mut p = Profile::default();
        let frame = |file: Option<&str>, kind| Frame {
            file: file.map(Into::into),
            signature: Some("()V".into()),
            start_line: Some(3),
            ..Frame::named("bench.App.run", kind)
        };
        let interpreted = p.intern_frame(frame(None, FrameKind::Interpreted));
        let compiled = p.intern_frame(frame(Some("App.java"), FrameKind::Jit));
        for root_to_leaf in [vec![interpreted], vec![compiled]] {
            p.add_counted(root_to_leaf, 1, 1);
        }
        let mut raw = Vec::new();
        GzDecoder::new(&render(&p).unwrap()[..])
            .read_to_end(&mut raw)
            .unwrap();
        let pb = proto::Profile::decode(&raw[..]).unwrap();
        assert_eq!(pb.function.len(), 1);
        assert_eq!(
            pb.string_table[pb.function[0].filename as usize],
            "App.java"
        );
    }

    #[test]
    fn inlined_frames_share_a_location_and_everything_reads_back() {
        let p = fixture();
        let bytes = render(&p).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&bytes[..]).read_to_end(&mut raw).unwrap();
        let pb = proto::Profile::decode(&raw[..]).unwrap();
        assert_eq!(pb.period, 1_000_000);
        assert_eq!(pb.sample.len(), 3, "same stack and thread aggregated");
        assert_eq!(pb.sample[0].value, vec![3, 3_000_000]);
        let leaf = pb
            .location
            .iter()
            .find(|l| l.id == pb.sample[0].location_id[0])
            .unwrap();
        let fname = |id: u64| {
            let f = pb.function.iter().find(|f| f.id == id).unwrap();
            pb.string_table[f.name as usize].as_str()
        };
        let names: Vec<&str> = leaf.line.iter().map(|l| fname(l.function_id)).collect();
        assert_eq!(names, ["bench.App.helper", "bench.App.hot"]);
        assert_eq!(pb.sample[0].location_id.len(), 3);

        let q = parse(&bytes).unwrap();
        assert_eq!(q.total_weight(), 8);
        assert_eq!(q.period_ns, 1_000_000);
        assert_eq!(q.thread_name(10), "worker");
        assert_eq!(q.thread_name(11), "tid-11");
        let s = q.stacks.frames(q.samples[0].stack);
        let got: Vec<Frame> = s.iter().map(|&f| q.frames[f as usize].clone()).collect();
        let want: Vec<Frame> = p
            .stacks
            .frames(0)
            .into_iter()
            .map(|f| Frame {
                bci: None,
                ..p.frames[f as usize].clone()
            })
            .collect();
        assert_eq!(got, want);
        let kinds: Vec<FrameKind> = q
            .stacks
            .frames(q.samples[1].stack)
            .into_iter()
            .map(|f| q.frames[f as usize].kind)
            .collect();
        assert_eq!(
            kinds,
            [
                FrameKind::Native,
                FrameKind::Interpreted,
                FrameKind::Jit,
                FrameKind::Kernel
            ]
        );
        // Both code versions of bench.App.hot keep their tier and compile id.
        let s3: Vec<Frame> = q
            .stacks
            .frames(q.samples[2].stack)
            .into_iter()
            .map(|f| q.frames[f as usize].clone())
            .collect();
        assert_eq!(s3[2].code, p.frames[3].code);
        assert_eq!(s3[2].code.unwrap().compile_id, 700);
        assert_eq!(got[2].code.unwrap().osr_bci, Some(5));
        assert_eq!(
            parse_code_build_id("a0b1c2"),
            None,
            "another tool's build id"
        );
    }

    #[test]
    fn an_interval_keeps_its_window_labels_and_comments() {
        let mut p = fixture();
        p.start_ns = 77_000_000_000;
        p.interval = Some(WallInterval {
            start_unix_ns: 1_795_000_000_000_000_000,
            duration_ns: 60_000_000_000,
        });
        p.labels = vec![("pid".into(), "42".into()), ("host".into(), "h".into())];
        p.comments = vec!["rate_hz=19".into()];
        p.cpu_time_ns = Some(7_000_000_000);
        let bytes = render(&p).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(&bytes[..]).read_to_end(&mut raw).unwrap();
        let pb = proto::Profile::decode(&raw[..]).unwrap();
        assert_eq!(pb.time_nanos, 1_795_000_000_000_000_000);
        assert_eq!(pb.duration_nanos, 60_000_000_000);
        let s = |i: i64| pb.string_table[i as usize].as_str();
        let comments: Vec<&str> = pb.comment.iter().map(|&c| s(c)).collect();
        assert!(comments.contains(&"rate_hz=19"), "{comments:?}");
        for sample in &pb.sample {
            let labels: Vec<(&str, &str)> = sample
                .label
                .iter()
                .filter(|l| l.str != 0)
                .map(|l| (s(l.key), s(l.str)))
                .collect();
            assert!(labels.contains(&("pid", "42")) && labels.contains(&("host", "h")));
        }
        let period = p.period_ns;
        let coverage = format!(
            "jvmperf target_cpu_ns=7000000000 expected_samples={}",
            7_000_000_000 / period
        );
        assert!(comments.contains(&coverage.as_str()), "{comments:?}");
        let back = parse(&bytes).unwrap();
        assert_eq!(back.cpu_time_ns, Some(7_000_000_000));
        assert_eq!(back.interval, p.interval);
        assert_eq!(back.start_ns, 77_000_000_000);
        assert!(back.samples.iter().all(|s| s.time == 77_000_000_000));
        assert_eq!(back.total_weight(), p.total_weight());
    }

    #[test]
    fn bad_files_are_errors() {
        let good = render(&fixture()).unwrap();
        for cut in [1, 10, good.len() / 2, good.len() - 1] {
            let e = parse(&good[..cut]).unwrap_err();
            assert!(e.message.contains("not a valid pprof"), "{}", e.message);
        }
        let e = parse(b"\x0a\x05garbage").unwrap_err();
        assert!(e.message.contains("protobuf"), "{}", e.message);
        let no_count = proto::Profile {
            string_table: vec!["".into()],
            ..Default::default()
        };
        let e = parse(&no_count.encode_to_vec()).unwrap_err();
        assert!(e.message.contains("samples/count"), "{}", e.message);
        let dangling = proto::Profile {
            string_table: vec!["".into(), "samples".into(), "count".into()],
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            sample: vec![proto::Sample {
                location_id: vec![7],
                value: vec![1],
                label: vec![],
            }],
            ..Default::default()
        };
        let e = parse(&dangling.encode_to_vec()).unwrap_err();
        assert!(e.message.contains("location 7"), "{}", e.message);
    }
}
