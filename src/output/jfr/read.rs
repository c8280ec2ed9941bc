//! Reading JFR recordings into the profile model, one chunk at a time (a chunk's constant pools
//! are dropped when the next one starts, so memory follows the profile, not the file).
//!
//! Field layouts come from each chunk's metadata, by name, so recordings of any JDK (11–25) and of
//! async-profiler read alike; event types other than the samples are skipped by their size.
//! Sample times are the chunk's ticks in ns; the profile's span is the chunks' wall-clock span.

use super::metadata::{self, Element, Type};
use super::ChunkHeader;
use super::*;
use crate::profile::{
    Clock, CompiledCode, Frame, FrameId, FrameKind, Profile, Sample, StackId, WallInterval,
    MAX_WEIGHT,
};
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

/// The root frame of stacks the recording cut short.
const TRUNCATED: &str = "[truncated: JFR stackdepth]";
/// Values nested deeper than this are damage (a stack trace is 3 deep).
const MAX_DEPTH: usize = 16;
/// Arrays longer than this are damage (the JDK caps stacks at 2048 frames).
const MAX_ARRAY: usize = 1 << 20;

/// How a type's values are encoded.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    Byte,
    /// `short` and `int`: the JDK reads them as the low bits of a varint long, sign included.
    Short,
    Int,
    Varint,
    Float,
    Double,
    Text,
    Struct,
}

#[derive(Debug, Clone, PartialEq)]
enum Value<'a> {
    Int(i64),
    Float,
    Text(Str<'a>),
    /// A constant-pool key.
    Ref(u64),
    Struct(Vec<Value<'a>>),
    Array(Vec<Value<'a>>),
}

impl ChunkHeader {
    fn read(bytes: &[u8]) -> Result<ChunkHeader> {
        if bytes.len() < HEADER_LEN {
            return Err(corrupt(format!(
                "a chunk header needs {HEADER_LEN} bytes, {} are left",
                bytes.len()
            )));
        }
        let mut c = Cursor::new(bytes, 0);
        if c.take(4)? != MAGIC {
            return Err(corrupt("no `FLR` magic at a chunk's start"));
        }
        let (major, minor) = (c.raw_u16()?, c.raw_u16()?);
        if major != 2 {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("JFR version {major}.{minor} is not supported: jvmperf reads version 2 (JDK 11 and later, async-profiler)"),
            ));
        }
        let size = c.raw_u64()?;
        let checkpoint = c.raw_u64()?;
        let metadata = c.raw_u64()?;
        let h = ChunkHeader {
            size: size as usize,
            checkpoint: checkpoint as usize,
            metadata: metadata as usize,
            start_unix_ns: c.raw_u64()?,
            duration_ns: c.raw_u64()?,
            start_ticks: c.raw_u64()? as i64,
            ticks_per_second: c.raw_u64()?,
        };
        if size < HEADER_LEN as u64 || size > bytes.len() as u64 {
            return Err(corrupt(format!(
                "a chunk of {size} bytes where {} are left",
                bytes.len()
            )));
        }
        for (what, at) in [("constant pool", checkpoint), ("metadata", metadata)] {
            if at < HEADER_LEN as u64 || at >= size {
                return Err(corrupt(format!("{what} offset {at} outside its chunk")));
            }
        }
        if h.ticks_per_second == 0 {
            return Err(corrupt("0 ticks per second"));
        }
        Ok(h)
    }

    /// Ticks as ns on the recording's own clock.
    fn ns(&self, ticks: i64) -> u64 {
        (ticks.max(0) as u128 * 1_000_000_000 / self.ticks_per_second as u128) as u64
    }
}

/// One event's bytes: its type and a cursor over its fields.
fn event<'a>(chunk: &'a [u8], at: usize) -> Result<(u64, Cursor<'a>, usize)> {
    let mut c = Cursor::new(chunk, at);
    let size = c.varint()?;
    if size == 0 || size > (chunk.len() - at.min(chunk.len())) as u64 {
        return Err(corrupt(format!(
            "an event of {size} bytes at chunk offset {at}"
        )));
    }
    let end = at + size as usize;
    let mut c = Cursor::new(&chunk[..end], c.pos);
    let type_id = c.varint()?;
    Ok((type_id, c, end))
}

/// A chunk's types and constant pools.
struct Chunk<'a> {
    types: HashMap<u64, Type>,
    encodings: HashMap<u64, Encoding>,
    ids: HashMap<String, u64>,
    pools: HashMap<u64, HashMap<u64, Value<'a>>>,
    /// Values left to decode in this chunk: fields of types without fields take no bytes, so
    /// nested or repeated ones could otherwise stand for more values than memory holds.
    budget: std::cell::Cell<usize>,
}

impl<'a> Chunk<'a> {
    fn read(bytes: &'a [u8], h: &ChunkHeader) -> Result<Chunk<'a>> {
        let (type_id, mut c, _) = event(bytes, h.metadata)?;
        if type_id != METADATA_EVENT {
            return Err(corrupt(format!(
                "event type {type_id} where the metadata should be"
            )));
        }
        for _ in 0..3 {
            c.varint()?; // start, duration, metadata id
        }
        let root = Element::decode(&mut c)?;
        let types = metadata::types(&root)?;
        let encodings = types
            .iter()
            .map(|(&id, t)| {
                let e = match t.name.as_str() {
                    "boolean" | "byte" => Encoding::Byte,
                    "short" => Encoding::Short,
                    "int" => Encoding::Int,
                    "char" | "long" => Encoding::Varint,
                    "float" => Encoding::Float,
                    "double" => Encoding::Double,
                    "java.lang.String" => Encoding::Text,
                    _ => Encoding::Struct,
                };
                (id, e)
            })
            .collect();
        let ids = types.iter().map(|(&id, t)| (t.name.clone(), id)).collect();
        let mut chunk = Chunk {
            types,
            encodings,
            ids,
            pools: HashMap::new(),
            budget: std::cell::Cell::new(4 * bytes.len() + 4096),
        };
        chunk.read_pools(bytes, h.checkpoint)?;
        Ok(chunk)
    }

    /// The checkpoints, newest first, following each one's offset to the one before.
    fn read_pools(&mut self, bytes: &'a [u8], mut at: usize) -> Result<()> {
        let mut seen = HashSet::new();
        while seen.insert(at) {
            let (type_id, mut c, _) = event(bytes, at)?;
            if type_id != CHECKPOINT_EVENT {
                return Err(corrupt(format!(
                    "event type {type_id} where a constant pool should be"
                )));
            }
            c.varint()?; // start
            c.varint()?; // duration
            let delta = c.varint()? as i64;
            c.u8()?; // checkpoint type
            for _ in 0..c.count()? {
                let type_id = c.varint()?;
                let n = c.count()?;
                for _ in 0..n {
                    let key = c.varint()?;
                    let v = self.value(&mut c, type_id, 0)?;
                    // An older checkpoint never replaces a newer one's constant.
                    self.pools
                        .entry(type_id)
                        .or_default()
                        .entry(key)
                        .or_insert(v);
                }
            }
            if delta == 0 {
                return Ok(());
            }
            at = match at.checked_add_signed(delta as isize) {
                Some(next) if next >= HEADER_LEN && next < bytes.len() => next,
                _ => {
                    return Err(corrupt(format!(
                        "a constant pool offset {delta} out of the chunk"
                    )))
                }
            };
        }
        Err(corrupt("constant pools chained in a loop"))
    }

    fn value(&self, c: &mut Cursor<'a>, type_id: u64, depth: usize) -> Result<Value<'a>> {
        if depth > MAX_DEPTH {
            return Err(corrupt("values nested too deep"));
        }
        let budget = self.budget.get();
        if budget == 0 {
            return Err(corrupt("more values than its bytes can hold"));
        }
        self.budget.set(budget - 1);
        let encoding = self
            .encodings
            .get(&type_id)
            .ok_or_else(|| corrupt(format!("type {type_id} is not in the metadata")))?;
        Ok(match encoding {
            Encoding::Byte => Value::Int(c.u8()? as i64),
            Encoding::Short => Value::Int(c.varint()? as i16 as i64),
            Encoding::Int => Value::Int(c.varint()? as i32 as i64),
            Encoding::Varint => Value::Int(c.varint()? as i64),
            Encoding::Float => {
                c.take(4)?;
                Value::Float
            }
            Encoding::Double => {
                c.take(8)?;
                Value::Float
            }
            Encoding::Text => Value::Text(c.string()?),
            Encoding::Struct => {
                let t = &self.types[&type_id];
                let mut fields = Vec::with_capacity(t.fields.len());
                for f in &t.fields {
                    let one = |c: &mut Cursor<'a>| -> Result<Value<'a>> {
                        if f.constant_pool {
                            Ok(Value::Ref(c.varint()?))
                        } else {
                            self.value(c, f.type_id, depth + 1)
                        }
                    };
                    fields.push(if f.array {
                        let n = c.count()?;
                        if n > MAX_ARRAY {
                            return Err(corrupt(format!("an array of {n} values")));
                        }
                        let mut items = Vec::with_capacity(n);
                        for _ in 0..n {
                            items.push(one(c)?);
                        }
                        Value::Array(items)
                    } else {
                        one(c)?
                    });
                }
                Value::Struct(fields)
            }
        })
    }

    /// Field `name` of `v`, a value of type `type_id`, with the field's type; constant-pool
    /// references are followed.
    fn field<'v>(
        &'v self,
        type_id: u64,
        v: &'v Value<'a>,
        name: &str,
    ) -> Option<(u64, &'v Value<'a>)> {
        let t = self.types.get(&type_id)?;
        let i = t.field(name)?;
        let f = &t.fields[i];
        let Value::Struct(fields) = v else {
            return None;
        };
        match fields.get(i)? {
            Value::Ref(key) => Some((f.type_id, self.pools.get(&f.type_id)?.get(key)?)),
            other => Some((f.type_id, other)),
        }
    }

    fn int(&self, type_id: u64, v: &Value, name: &str) -> Option<i64> {
        match self.field(type_id, v, name)? {
            (_, Value::Int(i)) => Some(*i),
            _ => None,
        }
    }

    /// A string field, through a string constant or a one-field constant (a symbol, a frame
    /// type's description).
    fn text(&self, type_id: u64, v: &Value, name: &str) -> Option<String> {
        let (t, v) = self.field(type_id, v, name)?;
        self.as_text(t, v, 0)
    }

    fn as_text(&self, type_id: u64, v: &Value, depth: usize) -> Option<String> {
        match v {
            Value::Text(Str::Text(s)) => Some(s.to_string()),
            Value::Text(Str::Pool(key)) => match self.pools.get(&type_id)?.get(key)? {
                Value::Text(Str::Text(s)) => Some(s.to_string()),
                _ => None,
            },
            Value::Struct(fields) if fields.len() == 1 && depth < 2 => {
                let t = self.types.get(&type_id)?;
                let (_, inner) = self.field(type_id, v, &t.fields[0].name)?;
                self.as_text(t.fields[0].type_id, inner, depth + 1)
            }
            _ => None,
        }
    }
}

/// A JFR setting's duration (`20 ms`, `1 s`, `999 us`) in ns; `None` for other values
/// (`beginChunk`, `everyChunk`).
fn duration_ns(value: &str) -> Option<u64> {
    let (n, unit) = value.trim().split_once(' ')?;
    let n: f64 = n.parse().ok()?;
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        "d" => 86400e9,
        _ => return None,
    };
    let ns = n * scale;
    (1.0..1e18).contains(&ns).then_some(ns as u64)
}

/// A Java class name from JFR's binary name (`java/lang/String`), a hidden class's `/0x…`
/// suffix kept as the JVM prints it.
fn java_class_name(binary: &str) -> String {
    match binary.rsplit_once('/') {
        Some((head, hidden)) if hidden.starts_with("0x") && head.contains('/') => {
            format!("{}/{hidden}", head.replace('/', "."))
        }
        Some((_, hidden)) if hidden.starts_with("0x") => binary.to_string(),
        _ => binary.replace('/', "."),
    }
}

/// A JFR stack frame as a profile frame.
fn frame(chunk: &Chunk, frame_type: u64, v: &Value) -> Frame {
    let kind_name = chunk.text(frame_type, v, "type").unwrap_or_default();
    let line = chunk
        .int(frame_type, v, "lineNumber")
        .filter(|&l| l > 0 && l <= u32::MAX as i64)
        .map(|l| l as u32);
    let bci = chunk
        .int(frame_type, v, "bytecodeIndex")
        .filter(|&b| b >= 0 && b <= i32::MAX as i64)
        .map(|b| b as i32);
    let Some((method_type, method)) = chunk.field(frame_type, v, "method") else {
        return Frame::named("[unknown]", FrameKind::Native);
    };
    let name = chunk.text(method_type, method, "name").unwrap_or_default();
    let descriptor = chunk
        .text(method_type, method, "descriptor")
        .filter(|d| !d.is_empty() && d != NO_DESCRIPTOR);
    let class = chunk
        .field(method_type, method, "type")
        .and_then(|(t, class)| chunk.text(t, class, "name"))
        .unwrap_or_default();
    let qualified = match class.as_str() {
        "" => name.clone(),
        class => format!("{}.{name}", java_class_name(class)),
    };
    let java = |kind: FrameKind| Frame {
        line,
        bci,
        signature: descriptor.clone(),
        ..Frame::named(qualified.clone(), kind)
    };
    match kind_name.as_str() {
        INTERPRETED => java(FrameKind::Interpreted),
        INLINED => java(FrameKind::Inlined),
        C1_COMPILED => Frame {
            code: Some(CompiledCode {
                level: 1,
                compile_id: 0,
                osr_bci: None,
                code_size: 0,
            }),
            ..java(FrameKind::Jit)
        },
        NATIVE | CPP | KERNEL if descriptor.is_some() && !class.is_empty() => {
            // A Java method declared native (JNI).
            Frame {
                line: None,
                bci: None,
                ..java(FrameKind::Native)
            }
        }
        NATIVE | CPP | KERNEL => match class.as_str() {
            _ if kind_name == KERNEL => Frame::named(name, FrameKind::Kernel),
            KERNEL_CLASS => Frame::named(name, FrameKind::Kernel),
            STUBS_CLASS => Frame::named(name, FrameKind::Stub),
            "" => Frame::named(name, FrameKind::Native),
            module => Frame {
                module: Some(module.into()),
                ..Frame::named(name, FrameKind::Native)
            },
        },
        // "JIT compiled", and types of later JDKs: Java code of unknown tier.
        _ => java(FrameKind::Jit),
    }
}

/// Per-chunk caches from constant keys to the profile's ids.
#[derive(Default)]
struct Resolved {
    threads: HashMap<u64, u32>,
    stacks: HashMap<u64, Option<StackId>>,
    /// By method key, line, bci and frame type key.
    frames: HashMap<[i64; 4], FrameId>,
}

/// Where a sample event type's fields are, and the types of its fields.
struct Layout {
    /// Its index in [`SAMPLE_EVENTS`].
    event: u8,
    kind: SampleKind,
    name: String,
    types: Vec<u64>,
    time: Option<usize>,
    thread: Option<usize>,
    stack: Option<usize>,
    /// async-profiler's wall-clock sample count.
    samples: Option<usize>,
    /// A CPU-time sample without a stack, and the CPU time a sample stands for.
    failed: Option<usize>,
    period: Option<usize>,
}

impl Layout {
    fn of(event: u8, kind: SampleKind, t: &Type) -> Layout {
        Layout {
            event,
            kind,
            name: t.name.clone(),
            types: t.fields.iter().map(|f| f.type_id).collect(),
            time: t.field("startTime"),
            thread: t.field("sampledThread").or_else(|| t.field("eventThread")),
            stack: t.field("stackTrace"),
            samples: t.field("samples"),
            failed: t.field("failed"),
            period: t.field("samplingPeriod"),
        }
    }
}

/// The kinds of sample events, in the order a recording's samples are taken from: the JDK 25
/// CPU-time sampler's, else the execution (and native-method) samples, else wall-clock ones.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SampleKind {
    CpuTime,
    Execution,
    Wall,
}

const SAMPLE_EVENTS: [(&str, SampleKind); 4] = [
    (CPU_TIME_SAMPLE, SampleKind::CpuTime),
    (EXECUTION_SAMPLE, SampleKind::Execution),
    (NATIVE_METHOD_SAMPLE, SampleKind::Execution),
    (WALL_CLOCK_SAMPLE, SampleKind::Wall),
];

#[derive(Default)]
struct Reader {
    profile: Profile,
    /// Samples by [`SampleKind`].
    samples: [Vec<Sample>; 3],
    /// The time each sample stands for, in ns (0 = unknown), by [`SampleKind`]: a CPU-time
    /// sample's `samplingPeriod`, an execution sample's event type's `period` setting.
    periods: [Vec<u64>; 3],
    /// The index in [`SAMPLE_EVENTS`] of each execution-kind sample's event type.
    events: Vec<u8>,
    /// The `period` setting of each sample event type, by name (`jdk.ActiveSetting` events).
    settings: HashMap<String, u64>,
    /// CPU-time samples without a stack (`failed`).
    failed: u64,
    start_ns: Option<u64>,
    span: Option<(u64, u64)>,
}

impl Reader {
    fn chunk(&mut self, bytes: &[u8], h: &ChunkHeader) -> Result<()> {
        let chunk = Chunk::read(bytes, h)?;
        let layouts: HashMap<u64, Layout> = SAMPLE_EVENTS
            .iter()
            .enumerate()
            .filter_map(|(event, &(name, kind))| {
                let id = *chunk.ids.get(name)?;
                Some((id, Layout::of(event as u8, kind, chunk.types.get(&id)?)))
            })
            .collect();
        self.read_settings(&chunk, bytes)?;
        let mut resolved = Resolved::default();
        let mut at = HEADER_LEN;
        while at < bytes.len() {
            let (type_id, mut c, end) = event(bytes, at)?;
            at = end;
            let Some(layout) = layouts.get(&type_id) else {
                continue;
            };
            let v = chunk.value(&mut c, type_id, 0)?;
            let Value::Struct(fields) = &v else {
                continue;
            };
            let int = |i: Option<usize>| match fields.get(i?) {
                Some(Value::Int(n)) => Some(*n),
                _ => None,
            };
            let key = |i: Option<usize>| match fields.get(i?) {
                Some(Value::Ref(k)) => Some(*k),
                _ => None,
            };
            if layout.kind == SampleKind::CpuTime && int(layout.failed) == Some(1) {
                self.failed += 1;
                continue;
            }
            let weight = match int(layout.samples) {
                Some(n) if layout.kind == SampleKind::Wall => n.clamp(0, MAX_WEIGHT as i64) as u64,
                _ => 1,
            };
            let Some(stack) = key(layout.stack).and_then(|k| self.stack(&chunk, &mut resolved, k))
            else {
                continue;
            };
            if weight == 0 {
                continue;
            }
            let tid = match (layout.thread, key(layout.thread)) {
                (Some(i), Some(k)) => self.thread(&chunk, &mut resolved, layout.types[i], k),
                _ => 0,
            };
            let period = match layout.kind {
                SampleKind::CpuTime => h.ns(int(layout.period).unwrap_or(0)),
                _ => self.settings.get(&layout.name).copied().unwrap_or(0),
            };
            if layout.kind == SampleKind::Execution {
                self.events.push(layout.event);
            }
            self.periods[layout.kind as usize].push(period);
            self.samples[layout.kind as usize].push(Sample {
                time: h.ns(int(layout.time).unwrap_or(h.start_ticks)),
                tid,
                stack,
                weight,
            });
        }
        let start = h.ns(h.start_ticks);
        self.start_ns = Some(self.start_ns.map_or(start, |s| s.min(start)));
        let end_unix = h.start_unix_ns.saturating_add(h.duration_ns);
        self.span = Some(match self.span {
            Some((s, e)) => (s.min(h.start_unix_ns), e.max(end_unix)),
            None => (h.start_unix_ns, end_unix),
        });
        Ok(())
    }

    /// The `period` of sample event types, from the chunk's `jdk.ActiveSetting` events (the JDK
    /// samples threads in Java and in native code at periods of their own: 10 and 20 ms in its
    /// `profile` settings).
    fn read_settings(&mut self, chunk: &Chunk, bytes: &[u8]) -> Result<()> {
        let Some(&setting) = chunk.ids.get(ACTIVE_SETTING) else {
            return Ok(());
        };
        let names: HashMap<u64, &str> = SAMPLE_EVENTS
            .iter()
            .filter_map(|&(name, _)| Some((*chunk.ids.get(name)?, name)))
            .collect();
        let mut at = HEADER_LEN;
        while at < bytes.len() {
            let (type_id, mut c, end) = event(bytes, at)?;
            at = end;
            if type_id != setting {
                continue;
            }
            let v = chunk.value(&mut c, type_id, 0)?;
            let event = chunk
                .int(setting, &v, "id")
                .and_then(|id| names.get(&(id as u64)));
            let period = chunk
                .text(setting, &v, "value")
                .and_then(|value| duration_ns(&value));
            if let (Some(event), Some("period"), Some(ns)) =
                (event, chunk.text(setting, &v, "name").as_deref(), period)
            {
                self.settings.insert(event.to_string(), ns);
            }
        }
        Ok(())
    }

    /// The thread of constant `key` (of type `thread_type`): its id, its name noted.
    fn thread(&mut self, chunk: &Chunk, r: &mut Resolved, thread_type: u64, key: u64) -> u32 {
        if let Some(&tid) = r.threads.get(&key) {
            return tid;
        }
        let tid = match chunk.pools.get(&thread_type).and_then(|p| p.get(&key)) {
            Some(thread) => {
                let id = ["osThreadId", "javaThreadId"]
                    .into_iter()
                    .filter_map(|f| chunk.int(thread_type, thread, f))
                    .find(|&id| id > 0 && id <= u32::MAX as i64)
                    .map_or(key as u32, |id| id as u32);
                let name = ["javaName", "osName"]
                    .into_iter()
                    .filter_map(|f| chunk.text(thread_type, thread, f))
                    .find(|n| !n.is_empty());
                if let Some(name) = name {
                    self.profile.thread_names.entry(id).or_insert(name);
                }
                id
            }
            None => key as u32,
        };
        r.threads.insert(key, tid);
        tid
    }

    /// The stack trace of constant `key`, interned; `None` when the chunk has no such trace.
    fn stack(&mut self, chunk: &Chunk, r: &mut Resolved, key: u64) -> Option<StackId> {
        if let Some(&s) = r.stacks.get(&key) {
            return s;
        }
        let stack = self.resolve_stack(chunk, r, key);
        r.stacks.insert(key, stack);
        stack
    }

    fn resolve_stack(&mut self, chunk: &Chunk, r: &mut Resolved, key: u64) -> Option<StackId> {
        let st = *chunk.ids.get("jdk.types.StackTrace")?;
        let trace = chunk.pools.get(&st)?.get(&key)?;
        let (ft, frames) = chunk.field(st, trace, "frames")?;
        let Value::Array(frames) = frames else {
            return None;
        };
        // A frame is its method, line, bci and type: the same four are the same frame.
        let frame_type = chunk.types.get(&ft)?;
        let at = ["method", "lineNumber", "bytecodeIndex", "type"].map(|n| frame_type.field(n));
        let mut ids: Vec<FrameId> = Vec::with_capacity(frames.len() + 1);
        for f in frames.iter().rev() {
            // JFR lists the leaf first.
            let Value::Struct(fields) = f else {
                continue;
            };
            let raw = at.map(|i| match i.and_then(|i| fields.get(i)) {
                Some(Value::Ref(k)) => *k as i64,
                Some(Value::Int(n)) => *n,
                _ => i64::MIN,
            });
            let id = match r.frames.get(&raw) {
                Some(&id) => id,
                None => {
                    let id = self.profile.intern_frame(frame(chunk, ft, f));
                    r.frames.insert(raw, id);
                    id
                }
            };
            ids.push(id);
        }
        if chunk.int(st, trace, "truncated") == Some(1) {
            // The JVM's stack depth cut the root off (`-XX:FlightRecorderOptions:stackdepth`).
            let marker = Frame::named(TRUNCATED, FrameKind::Stub);
            ids.insert(0, self.profile.intern_frame(marker));
        }
        Some(self.profile.intern_stack(ids))
    }

    /// Execution and native-method samples whose event type had no `period` setting (a `.jfc`
    /// without `jdk.ActiveSetting`), when both are there: each type's period from its samples'
    /// times, rather than both weighing 1.
    fn infer_unset_periods(&mut self) {
        let k = SampleKind::Execution as usize;
        let mut present = self.events.clone();
        present.sort_unstable();
        present.dedup();
        if present.len() < 2 {
            return;
        }
        for event in present {
            let unset: Vec<usize> = (0..self.events.len())
                .filter(|&i| self.events[i] == event && self.periods[k][i] == 0)
                .collect();
            if unset.is_empty() {
                continue;
            }
            let name = SAMPLE_EVENTS[event as usize].0;
            let samples = &self.samples[k];
            let comment = match sampling_period(unset.iter().map(|&i| &samples[i])) {
                Some(period) => {
                    for &i in &unset {
                        self.periods[k][i] = period;
                    }
                    format!(
                        "{name}: no period setting; {} ms inferred from its samples' times",
                        period / NS_PER_MS
                    )
                }
                None => format!(
                    "{name}: no period setting and too few samples to infer one: weighed 1 each"
                ),
            };
            self.profile.comments.push(comment);
        }
    }

    fn finish(mut self) -> Profile {
        let kind = [SampleKind::CpuTime, SampleKind::Execution, SampleKind::Wall]
            .into_iter()
            .find(|&k| !self.samples[k as usize].is_empty())
            .unwrap_or(SampleKind::Execution);
        for (name, k) in SAMPLE_EVENTS {
            let n = self.samples[k as usize].len();
            if k != kind && n > 0 && name != NATIVE_METHOD_SAMPLE {
                self.profile.comments.push(format!(
                    "{n} {name} events skipped: the recording's samples are {:?} ones",
                    kind
                ));
                self.samples[k as usize].clear();
            }
        }
        if self.failed > 0 {
            self.profile.comments.push(format!(
                "{} {CPU_TIME_SAMPLE} events without a stack (failed) skipped",
                self.failed
            ));
        }
        if kind == SampleKind::Execution {
            self.infer_unset_periods();
        }
        let mut samples = std::mem::take(&mut self.samples[kind as usize]);
        // Each sample stands for its period: weigh them in the shortest one.
        let periods = &self.periods[kind as usize];
        if let Some(base) = periods.iter().copied().filter(|&p| p > 0).min() {
            for (s, &period) in samples.iter_mut().zip(periods) {
                if period > 0 {
                    s.weight = (period.saturating_add(base / 2) / base).clamp(1, MAX_WEIGHT);
                }
            }
            self.profile.period_ns = base;
        }
        let clock = match kind {
            SampleKind::Wall => Clock::Wall,
            _ => Clock::Cpu,
        };
        let mut p = self.profile;
        p.samples = samples;
        p.clock = clock;
        p.start_ns = self.start_ns.unwrap_or(0);
        p.interval = self.span.map(|(s, e)| WallInterval {
            start_unix_ns: s,
            duration_ns: e - s,
        });
        p
    }
}

const NS_PER_MS: u64 = 1_000_000;
/// Gaps between samples of one thread needed to infer a sampler's period.
const MIN_GAPS: usize = 10;

/// The period of the JDK's execution or native-method sampler from its samples. Each period it
/// samples a thread at most once, so the gaps between one thread's samples are the period or
/// multiples of it (where the thread was in another state or the sample failed), a little less
/// where its millisecond clock ticked during a round (`get_monotonic_ms` in
/// `hotspot/share/jfr/periodic/sampling/jfrThreadSampler.cpp`, JDK 17). Periods are whole ms
/// (jdk.jfr's `internal/settings/PeriodSetting.java` hands the JVM milliseconds): the median of
/// the shortest gaps, rounded.
fn sampling_period<'a>(samples: impl Iterator<Item = &'a Sample>) -> Option<u64> {
    let mut times: HashMap<u32, Vec<u64>> = HashMap::new();
    for s in samples {
        times.entry(s.tid).or_default().push(s.time);
    }
    let mut gaps: Vec<u64> = Vec::new();
    for t in times.values_mut() {
        t.sort_unstable();
        gaps.extend(t.windows(2).map(|w| w[1] - w[0]));
    }
    if gaps.len() < MIN_GAPS {
        return None;
    }
    gaps.sort_unstable();
    // The 2nd percentile is the period or one of the few gaps short of it; the gaps up to half
    // as long again are the period's.
    let low = gaps[gaps.len() / 50];
    let shortest: Vec<u64> = gaps
        .into_iter()
        .take_while(|&g| g <= low + low / 2 + NS_PER_MS)
        .collect();
    let median = shortest[shortest.len() / 2];
    Some(((median + NS_PER_MS / 2) / NS_PER_MS).max(1) * NS_PER_MS)
}

/// Read a JFR recording: its samples, with their threads, times and stacks. A damaged chunk
/// after good ones ends the reading with what those held (noted in the profile's comments).
pub fn parse(bytes: &[u8]) -> Result<Profile> {
    let mut reader = Reader::default();
    let mut at = 0;
    while at < bytes.len() {
        let kept: [usize; 3] = std::array::from_fn(|i| reader.samples[i].len());
        let periods: [usize; 3] = std::array::from_fn(|i| reader.periods[i].len());
        let events = reader.events.len();
        let failed = reader.failed;
        let read = ChunkHeader::read(&bytes[at..])
            .and_then(|h| reader.chunk(&bytes[at..at + h.size], &h).map(|()| h.size));
        match read {
            Ok(size) => at += size,
            Err(e) if at == 0 => return Err(e),
            Err(e) => {
                // Its frames and stacks may stay, unused; its samples go.
                for (samples, n) in reader.samples.iter_mut().zip(kept) {
                    samples.truncate(n);
                }
                for (p, n) in reader.periods.iter_mut().zip(periods) {
                    p.truncate(n);
                }
                reader.events.truncate(events);
                reader.failed = failed;
                reader
                    .profile
                    .comments
                    .push(format!("JFR chunk at byte {at} skipped: {}", e.message));
                break;
            }
        }
    }
    Ok(reader.finish())
}

#[cfg(test)]
mod tests {
    use super::metadata::Field;
    use super::*;

    #[test]
    fn types_of_types_without_bytes_are_refused_not_expanded() {
        // Ten types of 64 fields of the next, the last empty: 64^10 values in no bytes at all.
        let mut types = HashMap::new();
        for id in 50..60u64 {
            let fields = (0..64)
                .map(|i| Field {
                    name: format!("f{i}"),
                    type_id: id + 1,
                    constant_pool: false,
                    array: false,
                })
                .collect();
            types.insert(
                id,
                Type {
                    name: format!("T{id}"),
                    fields,
                },
            );
        }
        types.insert(
            60,
            Type {
                name: "Empty".into(),
                fields: Vec::new(),
            },
        );
        let chunk = Chunk {
            encodings: types.keys().map(|&id| (id, Encoding::Struct)).collect(),
            types,
            ids: HashMap::new(),
            pools: HashMap::new(),
            budget: std::cell::Cell::new(4096),
        };
        let e = chunk.value(&mut Cursor::new(&[], 0), 50, 0).unwrap_err();
        assert!(e.message.contains("more values than"), "{}", e.message);
    }

    /// Samples of thread `tid` at `ms` (fractional ms from 0).
    fn at(tid: u32, ms: &[f64]) -> Vec<Sample> {
        ms.iter()
            .map(|&t| Sample {
                time: (t * 1e6) as u64,
                tid,
                stack: 0,
                weight: 1,
            })
            .collect()
    }

    #[test]
    fn a_samplers_period_is_its_threads_shortest_usual_gap() {
        // Every 10 ms and a little more, one gap short where the ms clock ticked, and skipped
        // periods; a second thread interleaved.
        let mut times: Vec<f64> = (0..60).map(|i| i as f64 * 10.13).collect();
        times[30] -= 0.9;
        times.retain(|t| (*t as u64 / 10) % 7 != 3);
        let mut samples = at(1, &times);
        samples.extend(at(2, &[3.0, 23.3, 43.6, 103.9]));
        assert_eq!(sampling_period(samples.iter()), Some(10 * NS_PER_MS));
        // A thread in native code 25 ms of every 100, sampled every 20 ms.
        let bursts: Vec<f64> = (0..20)
            .flat_map(|i| [i as f64 * 100.0 + 2.0, i as f64 * 100.0 + 22.2])
            .collect();
        assert_eq!(sampling_period(at(7, &bursts).iter()), Some(20 * NS_PER_MS));
        // At 1 ms, now and then a round right after the last (0.05 ms).
        let mut fast: Vec<f64> = (0..200).map(|i| i as f64 * 1.09).collect();
        fast.insert(100, fast[99] + 0.05);
        assert_eq!(sampling_period(at(1, &fast).iter()), Some(NS_PER_MS));
        // One sample each of many threads: no gap at all.
        let one_each: Vec<Sample> = (0..50).flat_map(|t| at(t, &[t as f64])).collect();
        assert_eq!(sampling_period(one_each.iter()), None);
    }

    #[test]
    fn native_samples_without_a_period_setting_weigh_by_their_inferred_period() {
        let java: Vec<f64> = (0..100).map(|i| i as f64 * 10.1).collect();
        let native: Vec<f64> = (0..50).map(|i| 5.0 + i as f64 * 20.1).collect();
        let mut r = Reader::default();
        let k = SampleKind::Execution as usize;
        let event = |name| SAMPLE_EVENTS.iter().position(|e| e.0 == name).unwrap() as u8;
        for (times, name) in [(java, EXECUTION_SAMPLE), (native, NATIVE_METHOD_SAMPLE)] {
            for s in at(1, &times) {
                r.samples[k].push(s);
                r.periods[k].push(0);
                r.events.push(event(name));
            }
        }
        let p = r.finish();
        let weights: Vec<u64> = p.samples.iter().map(|s| s.weight).collect();
        assert_eq!(weights[..100], [1; 100]);
        assert_eq!(weights[100..], [2; 50]);
        assert_eq!(p.period_ns, 10 * NS_PER_MS);
        assert!(
            p.comments.iter().any(|c| c
                == "jdk.NativeMethodSample: no period setting; 20 ms inferred from its samples' times"),
            "{:?}",
            p.comments
        );
    }

    #[test]
    fn a_period_setting_is_kept_and_only_the_unset_type_is_inferred() {
        let mut r = Reader::default();
        let k = SampleKind::Execution as usize;
        let event = |name| SAMPLE_EVENTS.iter().position(|e| e.0 == name).unwrap() as u8;
        // Java samples every 1 ms by their setting; native ones every 20 ms, no setting.
        for s in at(1, &(0..400).map(|i| i as f64 * 1.1).collect::<Vec<_>>()) {
            r.samples[k].push(s);
            r.periods[k].push(NS_PER_MS);
            r.events.push(event(EXECUTION_SAMPLE));
        }
        for s in at(2, &(0..20).map(|i| i as f64 * 20.2).collect::<Vec<_>>()) {
            r.samples[k].push(s);
            r.periods[k].push(0);
            r.events.push(event(NATIVE_METHOD_SAMPLE));
        }
        let p = r.finish();
        assert_eq!(p.total_weight(), 400 + 20 * 20);
        assert_eq!(p.comments.len(), 1, "{:?}", p.comments);
    }

    #[test]
    fn setting_durations() {
        assert_eq!(duration_ns("20 ms"), Some(20_000_000));
        assert_eq!(duration_ns("1 s"), Some(1_000_000_000));
        assert_eq!(duration_ns("999 us"), Some(999_000));
        assert_eq!(duration_ns("beginChunk"), None);
        assert_eq!(duration_ns("0 ms"), None);
        assert_eq!(duration_ns("-5 ms"), None);
        assert_eq!(duration_ns("1e30 d"), None);
    }

    #[test]
    fn hidden_class_names_keep_their_suffix() {
        assert_eq!(java_class_name("java/lang/String"), "java.lang.String");
        assert_eq!(
            java_class_name("bench/App$$Lambda/0x0000000800c03000"),
            "bench.App$$Lambda/0x0000000800c03000"
        );
        assert_eq!(java_class_name("Top/0x1"), "Top/0x1");
        assert_eq!(java_class_name("libjvm.so"), "libjvm.so");
    }
}
