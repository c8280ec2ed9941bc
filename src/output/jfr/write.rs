//! Writing a profile as one JFR chunk: the samples as events in time order, then one checkpoint
//! with the constant pools, then the metadata describing the types used (the type set and field
//! order of the JDK's `jdk.ExecutionSample`, `jdk.ObjectAllocationSample`, `jdk.JavaMonitorEnter`
//! and `jdk.ThreadPark`, and async-profiler's `profiler.WallClockSample`). An allocation sample's
//! leaf frame, the allocated class, becomes the event's `objectClass`, and its bytes its `weight`;
//! a wait for a lock becomes a monitor enter or a park (by the runtime function it waited in, on
//! its stack) with the lock's class as `monitorClass` or `parkedClass` and the nanoseconds waited
//! as its `duration`.
//!
//! Ticks are CLOCK_MONOTONIC ns (1e9 ticks a second); the chunk starts at the first sample, its
//! wall-clock start taken from the profile's span when known. A CPU sample of weight n (a profile
//! read back from an aggregated format) becomes n events; a wall-clock sample carries its weight
//! as the event's `samples` count.

use super::metadata::Element;
use super::*;
use crate::engine::lock::PARK as PARK_FUNCTION;
use crate::profile::{Clock, Frame, FrameKind, Profile};
use std::collections::HashMap;

// Type ids: any numbers but 0 and 1 (the metadata and checkpoint events).
const T_BOOLEAN: u64 = 4;
const T_INT: u64 = 10;
const T_LONG: u64 = 11;
const T_STRING: u64 = 20;
const T_CLASS: u64 = 21;
const T_THREAD: u64 = 22;
const T_FRAME_TYPE: u64 = 24;
const T_THREAD_STATE: u64 = 25;
const T_STACK_TRACE: u64 = 26;
const T_STACK_FRAME: u64 = 27;
const T_METHOD: u64 = 28;
const T_PACKAGE: u64 = 29;
const T_SYMBOL: u64 = 30;
const T_EXECUTION_SAMPLE: u64 = 101;
const T_WALL_CLOCK_SAMPLE: u64 = 102;
const T_OBJECT_ALLOCATION_SAMPLE: u64 = 103;
const T_JAVA_MONITOR_ENTER: u64 = 104;
const T_THREAD_PARK: u64 = 105;
const T_LABEL: u64 = 200;
const T_CATEGORY: u64 = 201;
const T_TIMESTAMP: u64 = 202;
const T_DATA_AMOUNT: u64 = 203;
const T_TIMESPAN: u64 = 204;

/// Frame type keys, in async-profiler's numbering.
const FRAME_TYPES: [&str; 7] = [
    INTERPRETED,
    JIT_COMPILED,
    INLINED,
    NATIVE,
    CPP,
    KERNEL,
    C1_COMPILED,
];

/// More events than this are refused rather than written (weighted samples expanded).
const MAX_EVENTS: u64 = 50_000_000;

fn class(name: &str, id: u64) -> Element {
    Element::new("class").attr("name", name).attr("id", id)
}

fn field(name: &str, type_id: u64) -> Element {
    Element::new("field")
        .attr("name", name)
        .attr("class", type_id)
}

fn pooled(name: &str, type_id: u64) -> Element {
    field(name, type_id).attr("constantPool", true)
}

fn annotation(type_id: u64, value: &str) -> Element {
    Element::new("annotation")
        .attr("class", type_id)
        .attr("value", value)
}

/// An event type's name, label, category and start time.
fn event_type(name: &str, id: u64, label: &str, category: &[&str]) -> Element {
    let categories = category.iter().enumerate().fold(
        Element::new("annotation").attr("class", T_CATEGORY),
        |a, (i, c)| a.attr(&format!("value-{i}"), *c),
    );
    class(name, id)
        .attr("superType", "jdk.jfr.Event")
        .child(annotation(T_LABEL, label))
        .child(categories)
        .child(field("startTime", T_LONG).child(annotation(T_TIMESTAMP, "TICKS")))
}

/// A wait for a lock: its duration, thread, stack and the lock's class as `class_field`.
fn wait_event(name: &str, id: u64, label: &str, class_field: &str) -> Element {
    event_type(name, id, label, &["Java Application"])
        .child(field("duration", T_LONG).child(annotation(T_TIMESPAN, "TICKS")))
        .child(pooled("eventThread", T_THREAD))
        .child(pooled("stackTrace", T_STACK_TRACE))
        .child(pooled(class_field, T_CLASS))
}

/// A stack sample event: thread, stack and state after the start time.
fn event(name: &str, id: u64, label: &str) -> Element {
    event_type(name, id, label, &["Java Virtual Machine", "Profiling"])
        .child(pooled("sampledThread", T_THREAD))
        .child(pooled("stackTrace", T_STACK_TRACE))
        .child(pooled("state", T_THREAD_STATE))
}

fn metadata() -> Element {
    let primitive = |name, id| class(name, id);
    let annotation_type = |name, id| {
        class(name, id)
            .attr("superType", "java.lang.annotation.Annotation")
            .child(field("value", T_STRING))
    };
    let types = Element::new("metadata")
        .child(primitive("boolean", T_BOOLEAN))
        .child(primitive("int", T_INT))
        .child(primitive("long", T_LONG))
        .child(primitive("java.lang.String", T_STRING))
        .child(
            class("java.lang.Class", T_CLASS)
                .child(pooled("name", T_SYMBOL))
                .child(pooled("package", T_PACKAGE))
                .child(field("modifiers", T_INT)),
        )
        .child(
            class("java.lang.Thread", T_THREAD)
                .child(field("osName", T_STRING))
                .child(field("osThreadId", T_LONG))
                .child(field("javaName", T_STRING))
                .child(field("javaThreadId", T_LONG)),
        )
        .child(
            class("jdk.types.FrameType", T_FRAME_TYPE)
                .attr("simpleType", true)
                .child(field("description", T_STRING)),
        )
        .child(
            class("jdk.types.ThreadState", T_THREAD_STATE)
                .attr("simpleType", true)
                .child(field("name", T_STRING)),
        )
        .child(
            class("jdk.types.StackTrace", T_STACK_TRACE)
                .child(field("truncated", T_BOOLEAN))
                .child(field("frames", T_STACK_FRAME).attr("dimension", 1)),
        )
        .child(
            class("jdk.types.StackFrame", T_STACK_FRAME)
                .child(pooled("method", T_METHOD))
                .child(field("lineNumber", T_INT))
                .child(field("bytecodeIndex", T_INT))
                .child(pooled("type", T_FRAME_TYPE)),
        )
        .child(
            class("jdk.types.Method", T_METHOD)
                .child(pooled("type", T_CLASS))
                .child(pooled("name", T_SYMBOL))
                .child(pooled("descriptor", T_SYMBOL))
                .child(field("modifiers", T_INT))
                .child(field("hidden", T_BOOLEAN)),
        )
        .child(class("jdk.types.Package", T_PACKAGE).child(pooled("name", T_SYMBOL)))
        .child(
            class("jdk.types.Symbol", T_SYMBOL)
                .attr("simpleType", true)
                .child(field("string", T_STRING)),
        )
        .child(event(
            EXECUTION_SAMPLE,
            T_EXECUTION_SAMPLE,
            "Method Profiling Sample",
        ))
        .child(
            event(WALL_CLOCK_SAMPLE, T_WALL_CLOCK_SAMPLE, "Wall Clock Sample")
                .child(field("samples", T_INT)),
        )
        .child(
            event_type(
                OBJECT_ALLOCATION_SAMPLE,
                T_OBJECT_ALLOCATION_SAMPLE,
                "Object Allocation Sample",
                &["Java Application", "Statistics"],
            )
            .child(pooled("eventThread", T_THREAD))
            .child(pooled("stackTrace", T_STACK_TRACE))
            .child(pooled("objectClass", T_CLASS))
            .child(field("weight", T_LONG).child(annotation(T_DATA_AMOUNT, "BYTES"))),
        )
        .child(wait_event(
            JAVA_MONITOR_ENTER,
            T_JAVA_MONITOR_ENTER,
            "Java Monitor Blocked",
            "monitorClass",
        ))
        .child(wait_event(
            THREAD_PARK,
            T_THREAD_PARK,
            "Java Thread Park",
            "parkedClass",
        ))
        .child(annotation_type("jdk.jfr.Label", T_LABEL))
        .child(annotation_type("jdk.jfr.DataAmount", T_DATA_AMOUNT))
        .child(
            class("jdk.jfr.Category", T_CATEGORY)
                .attr("superType", "java.lang.annotation.Annotation")
                .child(field("value", T_STRING).attr("dimension", 1)),
        )
        .child(annotation_type("jdk.jfr.Timestamp", T_TIMESTAMP))
        .child(annotation_type("jdk.jfr.Timespan", T_TIMESPAN));
    Element::new("root").child(types).child(
        Element::new("region")
            .attr("locale", "en_US")
            .attr("gmtOffset", 0),
    )
}

/// Interned constants: each value gets its key (index + 1) once.
struct Interner<K> {
    keys: HashMap<K, u64>,
    values: Vec<K>,
}

impl<K: std::hash::Hash + Eq + Clone> Interner<K> {
    fn new() -> Self {
        Interner {
            keys: HashMap::new(),
            values: Vec::new(),
        }
    }

    fn key(&mut self, v: &K) -> u64 {
        if let Some(&k) = self.keys.get(v) {
            return k;
        }
        self.values.push(v.clone());
        let k = self.values.len() as u64;
        self.keys.insert(v.clone(), k);
        k
    }

    fn entries(&self) -> impl Iterator<Item = (u64, &K)> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64 + 1, v))
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Method {
    class: u64,
    name: u64,
    descriptor: u64,
}

struct Constants {
    symbols: Interner<String>,
    packages: Interner<u64>,
    /// (name symbol, package)
    classes: Interner<(u64, u64)>,
    methods: Interner<Method>,
}

impl Constants {
    fn new() -> Self {
        Constants {
            symbols: Interner::new(),
            packages: Interner::new(),
            classes: Interner::new(),
            methods: Interner::new(),
        }
    }

    fn symbol(&mut self, s: &str) -> u64 {
        self.symbols.key(&s.to_string())
    }

    /// A class by its binary name (`java/lang/String`), in its package.
    fn class(&mut self, binary_name: &str) -> u64 {
        let package = match binary_name.rsplit_once('/') {
            Some((p, _)) if !binary_name.starts_with('[') => p,
            _ => "",
        };
        let package = self.symbol(package);
        let package = self.packages.key(&package);
        let name = self.symbol(binary_name);
        self.classes.key(&(name, package))
    }

    fn method(&mut self, class: &str, name: &str, descriptor: &str) -> u64 {
        let m = Method {
            class: self.class(class),
            name: self.symbol(name),
            descriptor: self.symbol(descriptor),
        };
        self.methods.key(&m)
    }
}

/// A Java class name as JFR stores it: `java/lang/String` (a hidden class's `/0x…` suffix kept).
fn binary_name(class: &str) -> String {
    let (name, hidden) = match class.find('/') {
        Some(i) => class.split_at(i),
        None => (class, ""),
    };
    format!("{}{hidden}", name.replace('.', "/"))
}

/// A leaf class's name (an allocated class or a lock's) as the JVM spells it:
/// `java/lang/String`, `[J` for `long[]`, `[Ljava/lang/String;` for `java.lang.String[]`
/// (` (outside TLAB)` dropped).
fn class_name(name: &str) -> String {
    let name = name.strip_suffix(" (outside TLAB)").unwrap_or(name);
    let element = name.trim_end_matches("[]");
    let dimensions = (name.len() - element.len()) / 2;
    if dimensions == 0 {
        return binary_name(element);
    }
    let code = match element {
        "boolean" => "Z".to_string(),
        "byte" => "B".to_string(),
        "char" => "C".to_string(),
        "short" => "S".to_string(),
        "int" => "I".to_string(),
        "long" => "J".to_string(),
        "float" => "F".to_string(),
        "double" => "D".to_string(),
        class => format!("L{};", binary_name(class)),
    };
    format!("{}{code}", "[".repeat(dimensions))
}

/// A frame as a JFR stack frame: (method key, line, bci, frame type key).
fn stack_frame(c: &mut Constants, f: &Frame) -> (u64, i32, i32, u64) {
    let frame_type = |name: &str| FRAME_TYPES.iter().position(|t| *t == name).unwrap_or(3) as u64;
    let line = f.line.map_or(-1, |l| l.min(i32::MAX as u32) as i32);
    let bci = f.bci.unwrap_or(-1);
    let java = |c: &mut Constants| {
        let (class, method) = f.class_and_method();
        c.method(
            &binary_name(class),
            method,
            f.signature.as_deref().unwrap_or(NO_DESCRIPTOR),
        )
    };
    match f.kind {
        FrameKind::Jit => {
            let t = match f.code {
                Some(code) if code.is_c1() => C1_COMPILED,
                _ => JIT_COMPILED,
            };
            (java(c), line, bci, frame_type(t))
        }
        FrameKind::Inlined => (java(c), line, bci, frame_type(INLINED)),
        FrameKind::Interpreted => (java(c), line, bci, frame_type(INTERPRETED)),
        // A Java native method (JNI) keeps its class.
        FrameKind::Native if f.signature.is_some() => (java(c), -1, -1, frame_type(NATIVE)),
        FrameKind::Native
        | FrameKind::Stub
        | FrameKind::Kernel
        | FrameKind::Thread
        | FrameKind::Allocated
        | FrameKind::Lock => {
            let (class, t) = match f.kind {
                FrameKind::Kernel => (KERNEL_CLASS, KERNEL),
                FrameKind::Stub => (STUBS_CLASS, NATIVE),
                _ => (f.module.as_deref().unwrap_or(""), NATIVE),
            };
            (
                c.method(class, &f.name, NO_DESCRIPTOR),
                -1,
                -1,
                frame_type(t),
            )
        }
    }
}

/// The event `body` with its size in front (the size counts itself).
fn put_event(out: &mut Vec<u8>, body: &[u8]) {
    let mut n = 1;
    while super::varint_len((body.len() + n) as u64) != n {
        n += 1;
    }
    put_varint(out, (body.len() + n) as u64);
    out.extend_from_slice(body);
}

pub fn render(profile: &Profile) -> Result<Vec<u8>> {
    let events: u64 = match profile.clock {
        Clock::Cpu => profile.total_weight(),
        Clock::Wall | Clock::Alloc | Clock::Lock => profile.samples.len() as u64,
    };
    if events > MAX_EVENTS {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{events} samples are too many for a JFR file, which holds one event per sample \
                 (at most {MAX_EVENTS}): write pprof (.pb.gz) instead, or convert a shorter window"
            ),
        ));
    }
    let mut order: Vec<usize> = (0..profile.samples.len()).collect();
    order.sort_by_key(|&i| profile.samples[i].time);
    let first_time = order
        .first()
        .map_or(profile.start_ns, |&i| profile.samples[i].time);
    let last_time = order
        .last()
        .map_or(first_time, |&i| profile.samples[i].time);
    let start_ticks = if first_time == 0 {
        profile.start_ns
    } else {
        first_time
    };
    let start_unix_ns = match profile.interval {
        Some(span) => span.start_unix_ns,
        None if start_ticks > 0 && start_ticks <= crate::profile::monotonic_now_ns() => {
            crate::profile::unix_ns_of_monotonic(start_ticks)
        }
        None => crate::profile::unix_ns_of_monotonic(crate::profile::monotonic_now_ns()),
    };

    let mut c = Constants::new();
    let mut threads: Interner<u32> = Interner::new();
    // Per stack: its key, its event type, and its leaf class's key (0: none).
    let mut stack_keys: HashMap<u32, (u64, u64, u64)> = HashMap::new();
    let mut stacks: Vec<Vec<(u64, i32, i32, u64)>> = Vec::new();
    let mut frames: HashMap<u32, (u64, i32, i32, u64)> = HashMap::new();

    let mut out = vec![0u8; HEADER_LEN];
    let mut body = Vec::with_capacity(32);
    for &i in &order {
        let s = &profile.samples[i];
        let thread = threads.key(&s.tid);
        let (stack, type_id, class) = *stack_keys.entry(s.stack).or_insert_with(|| {
            let ids = profile.stacks.frames(s.stack);
            let frames_of = || ids.iter().map(|&f| &profile.frames[f as usize]);
            let class = frames_of()
                .find(|f| matches!(f.kind, FrameKind::Allocated | FrameKind::Lock))
                .map_or(0, |f| c.class(&class_name(&f.name)));
            let type_id = match profile.clock {
                Clock::Cpu => T_EXECUTION_SAMPLE,
                Clock::Wall => T_WALL_CLOCK_SAMPLE,
                Clock::Alloc => T_OBJECT_ALLOCATION_SAMPLE,
                Clock::Lock if frames_of().any(|f| f.name == PARK_FUNCTION) => T_THREAD_PARK,
                Clock::Lock => T_JAVA_MONITOR_ENTER,
            };
            let jfr_frames = ids
                .into_iter()
                .rev()
                .filter(|&f| {
                    !matches!(
                        profile.frames[f as usize].kind,
                        FrameKind::Thread | FrameKind::Allocated | FrameKind::Lock
                    )
                })
                .map(|f| {
                    *frames
                        .entry(f)
                        .or_insert_with(|| stack_frame(&mut c, &profile.frames[f as usize]))
                })
                .collect();
            stacks.push(jfr_frames);
            (stacks.len() as u64, type_id, class)
        });
        let time = if s.time == 0 { start_ticks } else { s.time };
        body.clear();
        let copies = match profile.clock {
            Clock::Cpu => s.weight,
            Clock::Wall | Clock::Alloc | Clock::Lock => 1,
        };
        put_varint(&mut body, type_id);
        put_varint(&mut body, time);
        if profile.clock == Clock::Lock {
            put_varint(&mut body, s.weight);
        }
        put_varint(&mut body, thread);
        put_varint(&mut body, stack);
        match profile.clock {
            Clock::Lock => put_varint(&mut body, class),
            Clock::Alloc => {
                put_varint(&mut body, class);
                put_varint(&mut body, s.weight);
            }
            Clock::Wall => {
                put_varint(&mut body, 1);
                put_int(&mut body, s.weight.min(i32::MAX as u64) as i32);
            }
            Clock::Cpu => put_varint(&mut body, 1),
        }
        for _ in 0..copies {
            put_event(&mut out, &body);
        }
    }

    let checkpoint_at = out.len();
    let mut cp = Vec::new();
    put_varint(&mut cp, CHECKPOINT_EVENT);
    put_varint(&mut cp, start_ticks);
    put_varint(&mut cp, 0); // duration
    put_varint(&mut cp, 0); // delta to the previous checkpoint: none
    cp.push(0); // checkpoint type: an ordinary one
    let mut pools: Vec<(u64, usize, Vec<u8>)> = Vec::new();
    let mut pool = |type_id: u64, entries: &mut dyn Iterator<Item = (u64, Vec<u8>)>| {
        let mut buf = Vec::new();
        let mut n = 0;
        for (key, value) in entries {
            put_varint(&mut buf, key);
            buf.extend_from_slice(&value);
            n += 1;
        }
        // The JDK's parser refuses empty pools.
        if n > 0 {
            pools.push((type_id, n, buf));
        }
    };
    pool(
        T_THREAD,
        &mut threads.entries().map(|(k, &tid)| {
            let name = profile.thread_name(tid);
            let mut v = Vec::new();
            put_utf8(&mut v, &name);
            put_varint(&mut v, tid as u64);
            put_utf8(&mut v, &name);
            put_varint(&mut v, tid as u64);
            (k, v)
        }),
    );
    pool(
        T_STACK_TRACE,
        &mut stacks.iter().enumerate().map(|(i, frames)| {
            let mut v = vec![0u8]; // not truncated
            put_varint(&mut v, frames.len() as u64);
            for &(method, line, bci, frame_type) in frames {
                put_varint(&mut v, method);
                put_int(&mut v, line);
                put_int(&mut v, bci);
                put_varint(&mut v, frame_type);
            }
            (i as u64 + 1, v)
        }),
    );
    pool(
        T_METHOD,
        &mut c.methods.entries().map(|(k, m)| {
            let mut v = Vec::new();
            put_varint(&mut v, m.class);
            put_varint(&mut v, m.name);
            put_varint(&mut v, m.descriptor);
            put_int(&mut v, 0); // modifiers
            v.push(0); // not hidden
            (k, v)
        }),
    );
    pool(
        T_CLASS,
        &mut c.classes.entries().map(|(k, &(name, package))| {
            let mut v = Vec::new();
            put_varint(&mut v, name);
            put_varint(&mut v, package);
            put_int(&mut v, 0); // modifiers
            (k, v)
        }),
    );
    pool(
        T_PACKAGE,
        &mut c.packages.entries().map(|(k, &name)| {
            let mut v = Vec::new();
            put_varint(&mut v, name);
            (k, v)
        }),
    );
    pool(
        T_SYMBOL,
        &mut c.symbols.entries().map(|(k, s)| {
            let mut v = Vec::new();
            put_utf8(&mut v, s);
            (k, v)
        }),
    );
    pool(
        T_FRAME_TYPE,
        &mut FRAME_TYPES.iter().enumerate().map(|(k, name)| {
            let mut v = Vec::new();
            put_utf8(&mut v, name);
            (k as u64, v)
        }),
    );
    let state = match profile.clock {
        Clock::Cpu => "STATE_RUNNABLE",
        Clock::Wall | Clock::Alloc | Clock::Lock => "STATE_UNKNOWN",
    };
    pool(
        T_THREAD_STATE,
        &mut std::iter::once((1, {
            let mut v = Vec::new();
            put_utf8(&mut v, state);
            v
        })),
    );
    put_varint(&mut cp, pools.len() as u64);
    for (type_id, n, entries) in &pools {
        put_varint(&mut cp, *type_id);
        put_varint(&mut cp, *n as u64);
        cp.extend_from_slice(entries);
    }
    put_event(&mut out, &cp);

    let metadata_at = out.len();
    let mut meta = Vec::new();
    put_varint(&mut meta, METADATA_EVENT);
    put_varint(&mut meta, start_ticks);
    put_varint(&mut meta, 0); // duration
    put_varint(&mut meta, 1); // metadata id
    metadata().encode(&mut meta);
    put_event(&mut out, &meta);

    let header = ChunkHeader {
        size: out.len(),
        checkpoint: checkpoint_at,
        metadata: metadata_at,
        start_unix_ns,
        duration_ns: last_time.saturating_sub(start_ticks),
        start_ticks: start_ticks as i64,
        ticks_per_second: 1_000_000_000,
    };
    out[..HEADER_LEN].copy_from_slice(&header.encode());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_classes_are_named_as_the_jvm_spells_them() {
        for (name, jvm) in [
            ("java.lang.String", "java/lang/String"),
            ("long[]", "[J"),
            ("long[] (outside TLAB)", "[J"),
            ("byte[][]", "[[B"),
            ("java.lang.Object[]", "[Ljava/lang/Object;"),
        ] {
            assert_eq!(class_name(name), jvm, "{name}");
        }
    }
}
