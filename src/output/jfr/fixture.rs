//! A recording in async-profiler's layout, written here (from the format, not from its code) to
//! test the reader on what async-profiler writes and jvmperf's own writer does not: its type set
//! (class loaders, `contextId`, log levels, CPU load with floats, active settings), 5-byte padded
//! event sizes, frame types `C++` and `Kernel` with libraries as classes, strings in a
//! `java.lang.String` pool and in Latin-1, a thread with only an OS name, two checkpoints chained
//! in one chunk, and two chunks. `tests/fixtures/async-profiler-layout.jfr` is this file
//! (`JVMPERF_WRITE_FIXTURES=1 cargo test --lib output::jfr` rewrites it).

use super::metadata::Element;
use super::*;

const T_BOOLEAN: u64 = 4;
const T_FLOAT: u64 = 6;
const T_INT: u64 = 10;
const T_LONG: u64 = 11;
const T_STRING: u64 = 20;
const T_CLASS: u64 = 21;
const T_THREAD: u64 = 22;
const T_CLASS_LOADER: u64 = 23;
const T_FRAME_TYPE: u64 = 24;
const T_THREAD_STATE: u64 = 25;
const T_STACK_TRACE: u64 = 26;
const T_STACK_FRAME: u64 = 27;
const T_METHOD: u64 = 28;
const T_PACKAGE: u64 = 29;
const T_SYMBOL: u64 = 30;
const T_LOG_LEVEL: u64 = 31;
const T_EXECUTION_SAMPLE: u64 = 110;
const T_WALL_CLOCK_SAMPLE: u64 = 118;
const T_ACTIVE_SETTING: u64 = 120;
const T_CPU_LOAD: u64 = 125;
const T_LOG: u64 = 130;

fn class(name: &str, id: u64) -> Element {
    Element::new("class").attr("name", name).attr("id", id)
}

fn field(name: &str, id: u64) -> Element {
    Element::new("field").attr("name", name).attr("class", id)
}

fn pooled(name: &str, id: u64) -> Element {
    field(name, id).attr("constantPool", true)
}

fn event(name: &str, id: u64) -> Element {
    class(name, id)
        .attr("superType", "jdk.jfr.Event")
        .child(field("startTime", T_LONG))
}

fn metadata() -> Element {
    let mut m = Element::new("metadata");
    for (name, id) in [
        ("boolean", T_BOOLEAN),
        ("float", T_FLOAT),
        ("int", T_INT),
        ("long", T_LONG),
        ("java.lang.String", T_STRING),
    ] {
        m = m.child(class(name, id));
    }
    let sample = |name, id| {
        event(name, id)
            .child(pooled("sampledThread", T_THREAD))
            .child(pooled("stackTrace", T_STACK_TRACE))
            .child(pooled("state", T_THREAD_STATE))
    };
    m.child(
        class("java.lang.Class", T_CLASS)
            .child(pooled("classLoader", T_CLASS_LOADER))
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
        class("jdk.types.ClassLoader", T_CLASS_LOADER)
            .child(pooled("type", T_CLASS))
            .child(pooled("name", T_SYMBOL)),
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
    .child(
        class("profiler.types.LogLevel", T_LOG_LEVEL)
            .attr("simpleType", true)
            .child(field("name", T_STRING)),
    )
    .child(sample(EXECUTION_SAMPLE, T_EXECUTION_SAMPLE).child(field("contextId", T_LONG)))
    .child(sample(WALL_CLOCK_SAMPLE, T_WALL_CLOCK_SAMPLE).child(field("samples", T_INT)))
    .child(
        event("jdk.ActiveSetting", T_ACTIVE_SETTING)
            .child(field("duration", T_LONG))
            .child(pooled("eventThread", T_THREAD))
            .child(pooled("stackTrace", T_STACK_TRACE))
            .child(field("id", T_LONG))
            .child(field("name", T_STRING))
            .child(field("value", T_STRING)),
    )
    .child(
        event("jdk.CPULoad", T_CPU_LOAD)
            .child(field("jvmUser", T_FLOAT))
            .child(field("jvmSystem", T_FLOAT))
            .child(field("machineTotal", T_FLOAT)),
    )
    .child(
        event("profiler.Log", T_LOG)
            .child(pooled("level", T_LOG_LEVEL))
            .child(field("message", T_STRING)),
    )
}

/// An event with its size as a 5-byte varint, as async-profiler reserves it before the body.
fn padded_event(out: &mut Vec<u8>, body: &[u8]) {
    let size = body.len() + 5;
    for i in 0..4 {
        out.push((size >> (7 * i)) as u8 & 0x7f | 0x80);
    }
    out.push((size >> 28) as u8 & 0x7f);
    out.extend_from_slice(body);
}

fn v(buf: &mut Vec<u8>, values: &[u64]) {
    for &x in values {
        put_varint(buf, x);
    }
}

fn latin1(buf: &mut Vec<u8>, s: &[u8]) {
    buf.push(STRING_LATIN1);
    put_varint(buf, s.len() as u64);
    buf.extend_from_slice(s);
}

/// A constant pool: type id, count, then key and value of each entry.
fn pool(out: &mut Vec<u8>, type_id: u64, entries: &[(u64, Vec<u8>)]) {
    v(out, &[type_id, entries.len() as u64]);
    for (key, value) in entries {
        put_varint(out, *key);
        out.extend_from_slice(value);
    }
}

fn symbols(strings: &[(u64, &str)]) -> Vec<(u64, Vec<u8>)> {
    strings
        .iter()
        .map(|&(k, s)| {
            let mut b = Vec::new();
            put_utf8(&mut b, s);
            (k, b)
        })
        .collect()
}

/// Frame types as async-profiler numbers them.
const FRAME_TYPES: [(u64, &str); 7] = [
    (0, INTERPRETED),
    (1, JIT_COMPILED),
    (2, INLINED),
    (3, NATIVE),
    (4, CPP),
    (5, KERNEL),
    (6, C1_COMPILED),
];

/// Method keys: (key, class key, name symbol, descriptor symbol).
const METHODS: [(u64, u64, u64, u64); 9] = [
    (1, 1, 10, 30), // bench/App.helper (J)J
    (2, 1, 11, 30), // bench/App.hot
    (3, 1, 12, 31), // bench/App.main ([Ljava/lang/String;)V
    (4, 2, 13, 32), // libjvm.so JavaCalls::call_helper
    (5, 3, 14, 32), // libc.so.6 start_thread
    (6, 4, 15, 32), // kernel do_syscall_64
    (7, 5, 16, 33), // java/util/zip/Deflater.deflateBytesBytes, a JNI method
    (8, 1, 17, 30), // bench/App.warm
    (9, 6, 18, 34), // the hidden lambda class's run
];

/// Stack traces, leaf first: (method key, line, bci, frame type key).
type Trace = &'static [(u64, i32, i32, u64)];
const BASE: [(u64, i32, i32, u64); 3] = [(3, 5, 0, 0), (4, -1, -1, 4), (5, -1, -1, 3)];
const TRACE_HOT: Trace = &[(1, 14, 3, 2), (2, 9, 7, 1), BASE[0], BASE[1], BASE[2]];
const TRACE_JNI: Trace = &[
    (6, -1, -1, 5),
    (7, -1, -1, 3),
    (8, 19, 2, 6),
    BASE[0],
    BASE[1],
];
const TRACE_LAMBDA: Trace = &[(9, 1, 0, 1), BASE[0]];

fn trace(frames: Trace) -> Vec<u8> {
    let mut b = vec![0u8];
    put_varint(&mut b, frames.len() as u64);
    for &(method, line, bci, ft) in frames {
        put_varint(&mut b, method);
        put_int(&mut b, line);
        put_int(&mut b, bci);
        put_varint(&mut b, ft);
    }
    b
}

/// The pools of classes, methods and symbols: the first checkpoint of each chunk.
fn static_pools() -> (u64, Vec<u8>) {
    let mut b = Vec::new();
    pool(
        &mut b,
        T_SYMBOL,
        &symbols(&[
            (1, "bench/App"),
            (2, "libjvm.so"),
            (3, "libc.so.6"),
            (4, ""),
            (5, "java/util/zip/Deflater"),
            (6, "bench/App$$Lambda/0x0000000800c03000"),
            (7, "bench"),
            (8, "java/util/zip"),
            (9, "app"),
            (10, "helper"),
            (11, "hot"),
            (12, "main"),
            (13, "JavaCalls::call_helper"),
            (14, "start_thread"),
            (15, "do_syscall_64"),
            (16, "deflateBytesBytes"),
            (17, "warm"),
            (18, "run"),
            (30, "(J)J"),
            (31, "([Ljava/lang/String;)V"),
            (32, NO_DESCRIPTOR),
            (33, "(J[BII[BIII)I"),
            (34, "()V"),
        ]),
    );
    let packages: Vec<(u64, Vec<u8>)> = [(1, 7), (2, 8), (3, 4)]
        .iter()
        .map(|&(k, name)| {
            let mut p = Vec::new();
            v(&mut p, &[name]);
            (k, p)
        })
        .collect();
    pool(&mut b, T_PACKAGE, &packages);
    // (key, loader, name, package)
    let classes: Vec<(u64, Vec<u8>)> = [
        (1, 1, 1, 1),
        (2, 0, 2, 3),
        (3, 0, 3, 3),
        (4, 0, 4, 3),
        (5, 0, 5, 2),
        (6, 1, 6, 1),
    ]
    .iter()
    .map(|&(k, loader, name, package)| {
        let mut c = Vec::new();
        v(&mut c, &[loader, name, package, 1]);
        (k, c)
    })
    .collect();
    pool(&mut b, T_CLASS, &classes);
    pool(&mut b, T_CLASS_LOADER, &[(1, vec![1, 9])]);
    let methods: Vec<(u64, Vec<u8>)> = METHODS
        .iter()
        .map(|&(k, class, name, desc)| {
            let mut m = Vec::new();
            v(&mut m, &[class, name, desc, 9]);
            m.push(0);
            (k, m)
        })
        .collect();
    pool(&mut b, T_METHOD, &methods);
    let frame_types: Vec<(u64, Vec<u8>)> = FRAME_TYPES
        .iter()
        .map(|&(k, name)| {
            let mut f = Vec::new();
            put_utf8(&mut f, name);
            (k, f)
        })
        .collect();
    pool(&mut b, T_FRAME_TYPE, &frame_types);
    (6, b)
}

/// Threads, stack traces and the rest: the last checkpoint of each chunk. Stack keys differ
/// between the chunks, as constant keys are the chunk's own.
fn dynamic_pools(stack_key_base: u64) -> (u64, Vec<u8>) {
    let mut b = Vec::new();
    let mut worker = Vec::new();
    latin1(&mut worker, b"worker");
    v(&mut worker, &[4242]);
    put_utf8(&mut worker, "worker");
    v(&mut worker, &[17]);
    let mut gc = Vec::new();
    put_utf8(&mut gc, "G1 Conc#0");
    v(&mut gc, &[4243]);
    gc.push(STRING_NULL);
    v(&mut gc, &[0]);
    pool(&mut b, T_THREAD, &[(1, worker), (2, gc)]);
    pool(
        &mut b,
        T_STACK_TRACE,
        &[
            (stack_key_base, trace(TRACE_HOT)),
            (stack_key_base + 1, trace(TRACE_JNI)),
            (stack_key_base + 2, trace(TRACE_LAMBDA)),
        ],
    );
    pool(&mut b, T_THREAD_STATE, &symbols(&[(0, "STATE_RUNNABLE")]));
    pool(&mut b, T_LOG_LEVEL, &symbols(&[(3, "INFO")]));
    pool(&mut b, T_STRING, &symbols(&[(7, "interval")]));
    (5, b)
}

fn checkpoint(out: &mut Vec<u8>, ticks: u64, delta: i64, (count, pools): (u64, Vec<u8>)) {
    let mut b = Vec::new();
    v(&mut b, &[CHECKPOINT_EVENT, ticks, 0, delta as u64]);
    b.push(0);
    put_varint(&mut b, count);
    b.extend_from_slice(&pools);
    padded_event(out, &b);
}

/// (ticks, thread key, stack offset from the chunk's first stack key)
type Samples<'a> = &'a [(u64, u64, u64)];

fn chunk(start_ticks: u64, stack_key_base: u64, cpu: Samples, wall: Samples) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    let mut e = Vec::new();
    v(&mut e, &[T_ACTIVE_SETTING, start_ticks, 0, 1, 0, 1]);
    e.push(STRING_POOL);
    put_varint(&mut e, 7);
    put_utf8(&mut e, "10ms");
    padded_event(&mut out, &e);
    // The JDK's form: the sampling period of an event type, by its id.
    let mut e = Vec::new();
    v(
        &mut e,
        &[T_ACTIVE_SETTING, start_ticks, 0, 1, 0, T_EXECUTION_SAMPLE],
    );
    put_utf8(&mut e, "period");
    put_utf8(&mut e, "10 ms");
    padded_event(&mut out, &e);
    for &(ticks, thread, stack) in cpu {
        let mut e = Vec::new();
        v(
            &mut e,
            &[
                T_EXECUTION_SAMPLE,
                ticks,
                thread,
                stack_key_base + stack,
                0,
                0,
            ],
        );
        padded_event(&mut out, &e);
    }
    let mut e = Vec::new();
    v(&mut e, &[T_CPU_LOAD, start_ticks]);
    for x in [0.5f32, 0.1, 0.75] {
        e.extend_from_slice(&x.to_be_bytes());
    }
    padded_event(&mut out, &e);
    for &(ticks, thread, stack) in wall {
        let mut e = Vec::new();
        v(
            &mut e,
            &[
                T_WALL_CLOCK_SAMPLE,
                ticks,
                thread,
                stack_key_base + stack,
                0,
                3,
            ],
        );
        padded_event(&mut out, &e);
    }
    let mut e = Vec::new();
    v(&mut e, &[T_LOG, start_ticks, 3]);
    put_utf8(&mut e, "Profiling started");
    padded_event(&mut out, &e);

    let first = out.len();
    checkpoint(&mut out, start_ticks, 0, static_pools());
    let last = out.len();
    checkpoint(
        &mut out,
        start_ticks,
        first as i64 - last as i64,
        dynamic_pools(stack_key_base),
    );
    let meta_at = out.len();
    let mut m = Vec::new();
    v(&mut m, &[METADATA_EVENT, start_ticks, 0, 1]);
    Element::new("root")
        .child(metadata())
        .child(
            Element::new("region")
                .attr("locale", "en_US")
                .attr("gmtOffset", 0),
        )
        .encode(&mut m);
    padded_event(&mut out, &m);
    // Ticks of a TSC at 2.5 GHz, as async-profiler uses where the TSC is stable.
    let header = ChunkHeader {
        size: out.len(),
        checkpoint: last,
        metadata: meta_at,
        start_unix_ns: 1_764_000_000_000_000_000 + start_ticks * 2 / 5,
        duration_ns: 1_000_000_000,
        start_ticks: start_ticks as i64,
        ticks_per_second: 2_500_000_000,
    };
    out[..HEADER_LEN].copy_from_slice(&header.encode());
    out
}

pub fn async_profiler_layout() -> Vec<u8> {
    let mut file = chunk(
        10_000_000_000,
        100,
        &[
            (10_000_000_100, 1, 0),
            (10_000_000_200, 1, 1),
            (10_000_000_300, 2, 1),
        ],
        &[],
    );
    file.extend(chunk(
        12_500_000_000,
        7,
        &[(12_500_000_100, 1, 2), (12_500_000_200, 1, 0)],
        &[(12_500_000_300, 1, 0)],
    ));
    file
}

mod tests {
    use super::*;
    use crate::output::{collapsed, OutputOptions};

    #[test]
    fn an_async_profiler_layout_reads_back() {
        let bytes = async_profiler_layout();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/async-profiler-layout.jfr");
        if std::env::var_os("JVMPERF_WRITE_FIXTURES").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{}", path.display());

        let p = parse(&bytes).unwrap();
        let text = collapsed::render(&p, &OutputOptions { threads: true });
        assert_eq!(
            text,
            "G1 Conc#0;JavaCalls::call_helper;bench.App.main_[0];\
             bench.App.warm_[1];java.util.zip.Deflater.deflateBytesBytes;do_syscall_64_[k] 1\n\
             worker;JavaCalls::call_helper;bench.App.main_[0];bench.App.warm_[1];\
             java.util.zip.Deflater.deflateBytesBytes;do_syscall_64_[k] 1\n\
             worker;bench.App.main_[0];bench.App$$Lambda/0x0000000800c03000.run_[j] 1\n\
             worker;start_thread;JavaCalls::call_helper;bench.App.main_[0];bench.App.hot_[j];\
             bench.App.helper_[i] 2\n"
        );
        assert_eq!(p.thread_name(4242), "worker");
        assert_eq!(p.thread_name(4243), "G1 Conc#0");
        let times: Vec<u64> = p.samples.iter().map(|s| s.time).collect();
        // 2.5 ticks a ns.
        assert_eq!(
            times,
            [
                4_000_000_040,
                4_000_000_080,
                4_000_000_120,
                5_000_000_040,
                5_000_000_080
            ]
        );
        assert_eq!(p.start_ns, 4_000_000_000);
        assert_eq!(p.period_ns, 10_000_000);
        let span = p.interval.unwrap();
        assert_eq!(span.start_unix_ns, 1_764_000_004_000_000_000);
        assert_eq!(span.duration_ns, 2_000_000_000);
        assert!(p.comments[0].contains("1 profiler.WallClockSample events skipped"));
        let jni = p
            .frames
            .iter()
            .find(|f| f.name.ends_with("deflateBytesBytes"))
            .unwrap();
        assert_eq!(jni.signature.as_deref(), Some("(J[BII[BIII)I"));
        let vm = p
            .frames
            .iter()
            .find(|f| f.name == "JavaCalls::call_helper")
            .unwrap();
        assert_eq!(vm.module.as_deref(), Some("libjvm.so"));
    }
}
