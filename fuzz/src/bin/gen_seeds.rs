//! Writes the seed corpus (`fuzz/corpus/<target>/seed-*`): valid inputs of every kind each target
//! parses, so fuzzing starts from real structure rather than from nothing.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --bin gen_seeds` (run from the repository root). The
//! vmstructs seeds are the JDK 17 snapshot of `tests/fixtures/` and two synthetic JVMs (JDK 17 and
//! JDK 23+ layouts) small enough to fuzz fast, with a code cache, blobs, a method and a flag table;
//! each is checked to read back as intended before it is written.

use jvmperf::hotspot::codecache::{BlobKind, CodeCache};
use jvmperf::hotspot::flags::FlagTable;
use jvmperf::hotspot::method::MethodLayout;
use jvmperf::hotspot::vmstructs::{parse_symbol_lines, VmStructs};
use jvmperf::shim::protocol::{self as p, encode_frame};
use jvmperf::process::{SnapshotMemory, TargetMemory};
use jvmperf_fuzz::VmInput;
use std::collections::HashMap;
use std::path::Path;

fn main() {
    let out = Path::new("fuzz/corpus");
    assert!(
        Path::new("tests/fixtures/jdk17-vmstructs.mem").exists(),
        "run from the repository root"
    );
    let mut n = 0;
    for (target, seeds) in [
        ("shim_protocol", shim_seeds()),
        ("perf_record", perf_seeds()),
        ("vmstructs", vm_seeds()),
    ] {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds {
            std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
            n += 1;
        }
    }
    println!("wrote {n} seeds under {}", out.display());
}

// ---------------------------------------------------------------------------------------------
// shim_protocol

#[derive(Default)]
struct Payload(Vec<u8>);

impl Payload {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(self, v: i32) -> Self {
        self.u32(v as u32)
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(self, s: &str) -> Self {
        let mut me = self.u32(s.len() as u32);
        me.0.extend_from_slice(s.as_bytes());
        me
    }
    fn pad3(self) -> Self {
        self.u8(0).u8(0).u8(0)
    }
    fn frame(self, kind: u16, time: u64) -> Vec<u8> {
        encode_frame(kind, time, &self.0)
    }
}

fn hello(time: u64) -> Vec<u8> {
    Payload::default()
        .u32(p::PROTOCOL_VERSION)
        .u32(4242)
        .u32(1)
        .str("0.1.0-abc")
        .str("17.0.9+9")
        .str("17.0.9")
        .str("OpenJDK 64-Bit Server VM")
        .frame(p::KIND_HELLO, time)
}

fn method(time: u64, id: u64, class: &str, name: &str, sig: &str, lines: &[(u32, u32)]) -> Vec<u8> {
    let mut m = Payload::default()
        .u64(id)
        .str(class)
        .str(name)
        .str(sig)
        .str("Phases.java")
        .u32(1)
        .i32(40)
        .u32(lines.len() as u32);
    for &(bci, line) in lines {
        m = m.u32(bci).u32(line);
    }
    m.frame(p::KIND_METHOD, time)
}

/// `pcs`: (pc, [(method, bci)] innermost first).
fn nmethod(
    time: u64,
    method: u64,
    addr: u64,
    size: u32,
    replayed: bool,
    pcs: &[(u64, &[(u64, i32)])],
) -> Vec<u8> {
    let mut m = Payload::default()
        .u64(method)
        .u64(addr)
        .u32(size)
        .u8(replayed as u8)
        .pad3()
        .u32(pcs.len() as u32);
    for (pc, frames) in pcs {
        m = m.u64(*pc).u32(frames.len() as u32);
        for &(id, bci) in *frames {
            m = m.u64(id).i32(bci);
        }
    }
    m.frame(p::KIND_NMETHOD_LOAD, time)
}

fn unload(time: u64, method: u64, addr: u64) -> Vec<u8> {
    Payload::default()
        .u64(method)
        .u64(addr)
        .frame(p::KIND_NMETHOD_UNLOAD, time)
}

fn blob(time: u64, addr: u64, size: u32, name: &str) -> Vec<u8> {
    Payload::default()
        .u64(addr)
        .u32(size)
        .u8(1)
        .pad3()
        .str(name)
        .frame(p::KIND_CODE_BLOB, time)
}

fn shim_seeds() -> Vec<(String, Vec<u8>)> {
    const CODE: u64 = 0x7f3c_0800_0000;
    let misc = [
        Payload::default()
            .u32(77)
            .str("main")
            .frame(p::KIND_THREAD_START, 10),
        Payload::default().u32(77).frame(p::KIND_THREAD_END, 11),
        Payload::default()
            .u64(3)
            .u64(4096)
            .frame(p::KIND_DROPPED, 12),
        Payload::default()
            .u32(120)
            .u32(300)
            .frame(p::KIND_REPLAY_DONE, 13),
        Payload::default()
            .u32(2)
            .u32(2)
            .i32(0)
            .frame(p::KIND_RETRANSFORM_DONE, 14),
        Payload::default().u64(1).frame(999, 15),
    ]
    .concat();
    let session = [
        hello(1),
        method(
            2,
            1,
            "Lbench/Phases;",
            "run",
            "(I[Ljava/lang/String;)V",
            &[(0, 10), (8, 11), (20, 13)],
        ),
        method(3, 2, "Lbench/Phases;", "inner", "()J", &[(0, 30)]),
        blob(4, CODE, 0x4000, "Interpreter"),
        blob(5, CODE + 0x4000, 0x80, "StubRoutines (1)"),
        nmethod(
            6,
            1,
            CODE + 0x1_0000,
            0x300,
            false,
            &[
                (CODE + 0x1_0040, &[(2, 4), (1, 10)]),
                (CODE + 0x1_0080, &[(1, 12)]),
            ],
        ),
        unload(7, 1, CODE + 0x1_0000),
        // The same address reused by a newer nmethod, and a late duplicate of a replayed one.
        nmethod(
            8,
            2,
            CODE + 0x1_0000,
            0x200,
            false,
            &[(CODE + 0x1_0010, &[(2, 0)])],
        ),
        nmethod(
            9,
            2,
            CODE + 0x1_0000,
            0x200,
            true,
            &[(CODE + 0x1_0010, &[(2, 0)])],
        ),
        misc.clone(),
    ]
    .concat();
    let overlapping = [
        nmethod(300, 5, CODE, 0x1000, false, &[]),
        nmethod(
            100,
            6,
            CODE + 0x800,
            0x1000,
            false,
            &[(CODE + 0x900, &[(6, -1)])],
        ),
        blob(200, CODE + 0x400, 0x100, "vtable chunks"),
        unload(250, 7, CODE + 0x800),
        unload(50, 6, CODE + 0x800),
    ]
    .concat();
    vec![
        ("hello".into(), hello(1)),
        ("session".into(), session),
        ("misc".into(), misc),
        ("overlapping".into(), overlapping),
        (
            "method".into(),
            method(1, 9, "[[Ljava/lang/Object;", "<init>", "(JZ)V", &[(0, 1)]),
        ),
        (
            "nmethod".into(),
            nmethod(1, 9, CODE, 64, true, &[(CODE + 8, &[(9, 1)])]),
        ),
        ("blob".into(), blob(1, CODE, 0x100, "Interpreter")),
    ]
}

// ---------------------------------------------------------------------------------------------
// perf_record

const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_THROTTLE: u32 = 5;
const PERF_RECORD_UNTHROTTLE: u32 = 6;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_MMAP: u32 = 1;
const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
const PERF_CONTEXT_USER: u64 = -512i64 as u64;

fn perf_record(kind: u32, body: &[u8]) -> Vec<u8> {
    let mut out = kind.to_ne_bytes().to_vec();
    out.extend_from_slice(&0u16.to_ne_bytes());
    out.extend_from_slice(&((body.len() + 8) as u16).to_ne_bytes());
    out.extend_from_slice(body);
    out
}

fn sample(callchain: Option<&[u64]>, abi: u64, stack: &[u8], dyn_size: u64) -> Vec<u8> {
    let mut b = Vec::new();
    let u64s =
        |b: &mut Vec<u8>, v: &[u64]| v.iter().for_each(|x| b.extend_from_slice(&x.to_ne_bytes()));
    b.extend_from_slice(&1234u32.to_ne_bytes());
    b.extend_from_slice(&1235u32.to_ne_bytes());
    u64s(&mut b, &[5_000_000_000]);
    if let Some(chain) = callchain {
        u64s(&mut b, &[chain.len() as u64]);
        u64s(&mut b, chain);
    }
    u64s(&mut b, &[abi]);
    if abi != 0 {
        let regs: Vec<u64> = (0..17).map(|i| 0x7ffd_0000_0000 + i * 8).collect();
        u64s(&mut b, &regs);
    }
    u64s(&mut b, &[stack.len() as u64]);
    b.extend_from_slice(stack);
    if !stack.is_empty() {
        u64s(&mut b, &[dyn_size]);
    }
    perf_record(PERF_RECORD_SAMPLE, &b)
}

fn perf_seeds() -> Vec<(String, Vec<u8>)> {
    let stack: Vec<u8> = (0..256u32).map(|i| (i * 7) as u8).collect();
    let chain = [
        PERF_CONTEXT_KERNEL,
        0xffff_ffff_8100_1234,
        0xffff_ffff_8100_5678,
        PERF_CONTEXT_USER,
        0x7f00_0000_1000,
    ];
    let lost = perf_record(
        PERF_RECORD_LOST,
        &[1u64.to_ne_bytes(), 17u64.to_ne_bytes()].concat(),
    );
    let throttle = perf_record(PERF_RECORD_THROTTLE, &[0u8; 24]);
    let unthrottle = perf_record(PERF_RECORD_UNTHROTTLE, &[0u8; 24]);
    let mmap = perf_record(
        PERF_RECORD_MMAP,
        b"\x01\0\0\0\x01\0\0\0/lib/x86_64-linux-gnu/libc.so.6\0",
    );
    let stream = [
        sample(None, 2, &stack[..64], 48),
        lost.clone(),
        sample(Some(&chain), 2, &stack[..32], 32),
        throttle.clone(),
        sample(None, 0, &[], 0),
        unthrottle.clone(),
    ]
    .concat();
    vec![
        ("sample".into(), sample(None, 2, &stack, 200)),
        (
            "sample-callchain".into(),
            sample(Some(&chain), 2, &stack[..128], 128),
        ),
        ("sample-noregs".into(), sample(None, 0, &[], 0)),
        ("sample-abi32".into(), sample(None, 1, &stack[..16], 8)),
        ("lost".into(), lost),
        ("throttle".into(), throttle),
        ("unthrottle".into(), unthrottle),
        ("mmap".into(), mmap),
        ("stream".into(), stream),
    ]
}

// ---------------------------------------------------------------------------------------------
// vmstructs

/// A bump allocator over one contiguous region of fake target memory.
struct Arena {
    base: u64,
    bytes: Vec<u8>,
    strings: HashMap<String, u64>,
}

impl Arena {
    fn new(base: u64) -> Self {
        Arena {
            base,
            bytes: Vec::new(),
            strings: HashMap::new(),
        }
    }
    fn alloc(&mut self, size: usize) -> u64 {
        while !self.bytes.len().is_multiple_of(8) {
            self.bytes.push(0);
        }
        let at = self.base + self.bytes.len() as u64;
        self.bytes.resize(self.bytes.len() + size, 0);
        at
    }
    fn put(&mut self, addr: u64, v: &[u8]) {
        let off = (addr - self.base) as usize;
        self.bytes[off..off + v.len()].copy_from_slice(v);
    }
    fn u8(&mut self, addr: u64, v: u8) {
        self.put(addr, &[v]);
    }
    fn u16(&mut self, addr: u64, v: u16) {
        self.put(addr, &v.to_le_bytes());
    }
    fn u32(&mut self, addr: u64, v: u32) {
        self.put(addr, &v.to_le_bytes());
    }
    fn u64(&mut self, addr: u64, v: u64) {
        self.put(addr, &v.to_le_bytes());
    }
    fn cstr(&mut self, s: &str) -> u64 {
        if let Some(&a) = self.strings.get(s) {
            return a;
        }
        let a = self.alloc(s.len() + 1);
        self.put(a, s.as_bytes());
        self.strings.insert(s.to_string(), a);
        a
    }
    /// A HotSpot `Symbol`: u32 hash/refcount, u16 length at 4, body at 6.
    fn symbol(&mut self, s: &str) -> u64 {
        let a = self.alloc(6 + s.len());
        self.u16(a + 4, s.len() as u16);
        self.put(a + 6, s.as_bytes());
        a
    }
}

/// One VMStructs field: (type, field, type string, static address or None, offset).
type FieldSpec = (&'static str, &'static str, &'static str, Option<u64>, u64);

struct Tables {
    fields: Vec<FieldSpec>,
    types: Vec<(&'static str, Option<&'static str>, u64)>,
    ints: Vec<(&'static str, i32)>,
    longs: Vec<(&'static str, u64)>,
}

/// Writes the four tables and the exported globals describing them; returns the symbol map.
fn write_tables(a: &mut Arena, t: &Tables) -> HashMap<String, u64> {
    let mut syms = HashMap::new();
    let mut global = |a: &mut Arena, name: &str, v: u64| {
        let at = a.alloc(8);
        a.u64(at, v);
        syms.insert(name.to_string(), at);
    };
    // gHotSpotVMStructs: typeName 0, fieldName 8, typeString 16, isStatic 24 (i32), offset 32,
    // address 40, stride 48; a NULL type name ends it.
    let table = a.alloc(48 * (t.fields.len() + 1));
    for (i, &(ty, field, ts, addr, off)) in t.fields.iter().enumerate() {
        let e = table + 48 * i as u64;
        let (tn, fnm, tsp) = (a.cstr(ty), a.cstr(field), a.cstr(ts));
        a.u64(e, tn);
        a.u64(e + 8, fnm);
        a.u64(e + 16, tsp);
        a.u32(e + 24, addr.is_some() as u32);
        a.u64(e + 32, off);
        a.u64(e + 40, addr.unwrap_or(0));
    }
    for (name, v) in [
        ("gHotSpotVMStructs", table),
        ("gHotSpotVMStructEntryTypeNameOffset", 0),
        ("gHotSpotVMStructEntryFieldNameOffset", 8),
        ("gHotSpotVMStructEntryTypeStringOffset", 16),
        ("gHotSpotVMStructEntryIsStaticOffset", 24),
        ("gHotSpotVMStructEntryOffsetOffset", 32),
        ("gHotSpotVMStructEntryAddressOffset", 40),
        ("gHotSpotVMStructEntryArrayStride", 48),
    ] {
        global(a, name, v);
    }
    // gHotSpotVMTypes: typeName 0, superclassName 8, isOop 16, isInteger 20, isUnsigned 24, size 32.
    let table = a.alloc(40 * (t.types.len() + 1));
    for (i, &(ty, sup, size)) in t.types.iter().enumerate() {
        let e = table + 40 * i as u64;
        let tn = a.cstr(ty);
        let sp = sup.map_or(0, |s| a.cstr(s));
        a.u64(e, tn);
        a.u64(e + 8, sp);
        a.u64(e + 32, size);
    }
    for (name, v) in [
        ("gHotSpotVMTypes", table),
        ("gHotSpotVMTypeEntryTypeNameOffset", 0),
        ("gHotSpotVMTypeEntrySuperclassNameOffset", 8),
        ("gHotSpotVMTypeEntryIsOopTypeOffset", 16),
        ("gHotSpotVMTypeEntryIsIntegerTypeOffset", 20),
        ("gHotSpotVMTypeEntryIsUnsignedOffset", 24),
        ("gHotSpotVMTypeEntrySizeOffset", 32),
        ("gHotSpotVMTypeEntryArrayStride", 40),
    ] {
        global(a, name, v);
    }
    // Int and long constants: name 0, value 8, stride 16.
    let ints = a.alloc(16 * (t.ints.len() + 1));
    for (i, &(name, v)) in t.ints.iter().enumerate() {
        let e = ints + 16 * i as u64;
        let np = a.cstr(name);
        a.u64(e, np);
        a.u32(e + 8, v as u32);
    }
    let longs = a.alloc(16 * (t.longs.len() + 1));
    for (i, &(name, v)) in t.longs.iter().enumerate() {
        let e = longs + 16 * i as u64;
        let np = a.cstr(name);
        a.u64(e, np);
        a.u64(e + 8, v);
    }
    for (name, v) in [
        ("gHotSpotVMIntConstants", ints),
        ("gHotSpotVMIntConstantEntryNameOffset", 0),
        ("gHotSpotVMIntConstantEntryValueOffset", 8),
        ("gHotSpotVMIntConstantEntryArrayStride", 16),
        ("gHotSpotVMLongConstants", longs),
        ("gHotSpotVMLongConstantEntryNameOffset", 0),
        ("gHotSpotVMLongConstantEntryValueOffset", 8),
        ("gHotSpotVMLongConstantEntryArrayStride", 16),
    ] {
        global(a, name, v);
    }
    syms
}

/// Encodes a line table as HotSpot's CompressedLineNumberWriteStream does (`bias` 1 from JDK 20).
fn line_table(lines: &[(u32, u32)], bias: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut bci, mut line) = (0i64, 0i64);
    for &(b, l) in lines {
        let (db, dl) = (b as i64 - bci, l as i64 - line);
        if (0..31).contains(&db) && (0..8).contains(&dl) && (db, dl) != (0, 0) {
            out.push(((db as u8) << 3) | dl as u8);
        } else {
            out.push(0xff);
            for d in [db, dl] {
                let zz = ((d << 1) ^ (d >> 63)) as u32;
                assert!(zz < 191, "single-byte UNSIGNED5 only");
                out.push(zz as u8 + bias);
            }
        }
        (bci, line) = (b as i64, l as i64);
    }
    out.push(0);
    out
}

/// A small synthetic JVM. `jdk23`: offset-based code bounds, no CompiledMethod, `Flag` (pre-11
/// name), u4 method flags, line tables with the JDK 20+ bias; otherwise a JDK 17 layout.
fn synthetic_jvm(jdk23: bool) -> (Vec<u8>, SnapshotMemory, HashMap<String, u64>, Vec<u64>) {
    let mut a = Arena::new(if jdk23 {
        0x7fa0_1000_0000
    } else {
        0x7f66_9900_0000
    });
    const LOG2_SEG: u64 = 6;
    const SEGS: u64 = 16;

    // Static variables.
    let heaps_var = a.alloc(8);
    let low_var = a.alloc(8);
    let high_var = a.alloc(8);
    let flags_var = a.alloc(8);
    let num_flags_var = a.alloc(8);
    let call_stub_var = a.alloc(8);

    // CodeHeap: _memory (VirtualSpace) at 16, _segmap (VirtualSpace) at 64, _log2_segment_size at 120;
    // VirtualSpace: _low 16, _high 24.
    let heap = a.alloc(128);
    let code = a.alloc((SEGS << LOG2_SEG) as usize);
    let segmap = a.alloc(SEGS as usize);
    a.u64(heap + 16 + 16, code);
    a.u64(heap + 16 + 24, code + (SEGS << LOG2_SEG));
    a.u64(heap + 64 + 16, segmap);
    a.u32(heap + 120, LOG2_SEG as u32);
    let array_data = a.alloc(8);
    a.u64(array_data, heap);
    let array = a.alloc(16); // GrowableArray: _len 0 (int), _data 8
    a.u32(array, 1);
    a.u64(array + 8, array_data);
    a.u64(heaps_var, array);
    a.u64(low_var, code);
    a.u64(high_var, code + (SEGS << LOG2_SEG));

    // The method all nmethods belong to: Method (_constMethod 8) → ConstMethod (56 bytes, then
    // bytecodes, then the line table) → ConstantPool (80 bytes, then slots) → Klass (_name 16).
    let lines = [(0, 10), (8, 11), (12, 14), (19, 9)];
    let table = line_table(&lines, jdk23 as u8);
    let code_size = 20u16;
    let method = a.alloc(16);
    let cm = a.alloc(56 + code_size as usize + table.len());
    let cp = a.alloc(80 + 8 * 3);
    let klass = a.alloc(24);
    let (class_sym, name_sym, sig_sym) = (
        a.symbol("bench/Phases"),
        a.symbol("run"),
        a.symbol("(I[Ljava/lang/String;)V"),
    );
    a.u64(method + 8, cm);
    a.u64(cm + 8, cp);
    a.u16(cm + 40, code_size);
    a.u16(cm + 42, 1);
    a.u16(cm + 44, 2);
    a.u16(cm + 46, 1); // has a line number table
    a.put(cm + 56 + code_size as u64, &table);
    a.u64(cp + 24, klass);
    a.u64(cp + 80 + 8, name_sym);
    a.u64(cp + 80 + 16, sig_sym | 1); // a tagged slot
    a.u64(klass + 16, class_sym);

    // Blocks in the heap: (first segment, segments, used, blob name, frame words).
    // CodeBlob: _size 12, _frame_complete_offset 20, _data_offset 24 (JDK 23: code end),
    // _frame_size 28, _code_begin 32 / _code_offset 32 (JDK 23), _code_end 40, _name 48,
    // CompiledMethod/nmethod: _method 64, _deopt_handler 72, _orig_pc_offset 80.
    let blocks = [
        (0u64, 6u64, true, "nmethod", 6u32),
        (6, 4, true, "Interpreter", 0),
        (10, 3, true, "StubRoutines (1)", 0),
        (13, 2, false, "", 0),
    ];
    let mut probes = Vec::new();
    let mut nmethod_blob = 0;
    for &(first, segs, used, name, frame_words) in &blocks {
        for s in 0..segs {
            a.u8(segmap + first + s, s as u8);
        }
        let block = code + (first << LOG2_SEG);
        a.u64(block, segs);
        a.u8(block + 8, used as u8);
        let blob = block + 16;
        let size = (segs << LOG2_SEG) - 16;
        probes.push(blob + 100);
        if !used {
            continue;
        }
        let name_ptr = a.cstr(name);
        a.u32(blob + 12, size as u32);
        a.u32(blob + 20, if frame_words > 0 { 12 } else { u32::MAX });
        a.u32(blob + 28, frame_words);
        a.u64(blob + 48, name_ptr);
        let (begin, end) = (blob + 96, blob + size - 8);
        if jdk23 {
            a.u32(blob + 32, 96);
            a.u32(blob + 24, (size - 8) as u32);
        } else {
            a.u64(blob + 32, begin);
            a.u64(blob + 40, end);
        }
        if name == "nmethod" {
            a.u64(blob + 64, method);
            if jdk23 {
                a.u32(blob + 72, 96 + 180);
            } else {
                a.u64(blob + 72, begin + 180);
            }
            a.u32(blob + 80, 24);
            nmethod_blob = blob;
        }
    }
    a.u8(segmap + 15, 0xff);
    a.u64(call_stub_var, code + (10 << LOG2_SEG) + 16 + 40);
    probes.extend([nmethod_blob, method, code + (SEGS << LOG2_SEG) - 1, 0]);
    probes.truncate(jvmperf_fuzz::MAX_PROBES);

    // The flag table: JVMFlag { _addr 0, _name 8, _flags 16 }, 24 bytes.
    let names = [
        Some(("UseCompiler", 1u8)),
        Some(("DebugNonSafepoints", 0)),
        Some(("DisableAttachMechanism", 0)),
        None,
        Some(("EnableDynamicAgentLoading", 1)),
    ];
    let flags = a.alloc(24 * names.len());
    for (i, f) in names.iter().enumerate() {
        if let Some((name, value)) = f {
            let e = flags + 24 * i as u64;
            let v = a.alloc(1);
            a.u8(v, *value);
            let np = a.cstr(name);
            a.u64(e, v);
            a.u64(e + 8, np);
        }
    }
    a.u64(flags_var, flags);
    a.u64(num_flags_var, names.len() as u64);

    let flag_ty = if jdk23 { "Flag" } else { "JVMFlag" };
    let mut fields: Vec<FieldSpec> = vec![
        (
            "CodeCache",
            "_heaps",
            "GrowableArray<CodeHeap*>*",
            Some(heaps_var),
            0,
        ),
        ("CodeCache", "_low_bound", "address", Some(low_var), 0),
        ("CodeCache", "_high_bound", "address", Some(high_var), 0),
        ("GrowableArrayBase", "_len", "int", None, 0),
        ("GrowableArray<int>", "_data", "int*", None, 8),
        ("CodeHeap", "_memory", "VirtualSpace", None, 16),
        ("CodeHeap", "_segmap", "VirtualSpace", None, 64),
        ("CodeHeap", "_log2_segment_size", "int", None, 120),
        ("VirtualSpace", "_low", "char*", None, 16),
        ("VirtualSpace", "_high", "char*", None, 24),
        ("HeapBlock", "_header", "HeapBlock::Header", None, 0),
        ("HeapBlock::Header", "_used", "bool", None, 8),
        ("CodeBlob", "_name", "const char*", None, 48),
        ("CodeBlob", "_size", "int", None, 12),
        ("CodeBlob", "_frame_size", "int", None, 28),
        ("nmethod", "_orig_pc_offset", "int", None, 80),
        (flag_ty, "flags", "JVMFlag*", Some(flags_var), 0),
        (flag_ty, "numFlags", "size_t", Some(num_flags_var), 0),
        (flag_ty, "_name", "const char*", None, 8),
        (flag_ty, "_addr", "void*", None, 0),
        ("Method", "_constMethod", "ConstMethod*", None, 8),
        ("ConstMethod", "_constants", "ConstantPool*", None, 8),
        ("ConstMethod", "_code_size", "u2", None, 40),
        ("ConstMethod", "_name_index", "u2", None, 42),
        ("ConstMethod", "_signature_index", "u2", None, 44),
        ("ConstantPool", "_pool_holder", "InstanceKlass*", None, 24),
        ("Klass", "_name", "Symbol*", None, 16),
        ("Symbol", "_length", "u2", None, 4),
        (
            "StubRoutines",
            "_call_stub_return_address",
            "address",
            Some(call_stub_var),
            0,
        ),
    ];
    if jdk23 {
        fields.extend([
            ("CodeBlob", "_frame_complete_offset", "int16_t", None, 20),
            ("CodeBlob", "_code_offset", "int", None, 32),
            ("CodeBlob", "_data_offset", "int", None, 24),
            ("nmethod", "_method", "Method*", None, 64),
            ("nmethod", "_deopt_handler_offset", "int", None, 72),
            ("ConstMethod", "_flags._flags", "u4", None, 46),
            ("Symbol", "_body", "u1", None, 6),
        ]);
        // u4 flags: the upper half must be zero.
        a.u16(cm + 48, 0);
    } else {
        fields.extend([
            ("CodeBlob", "_frame_complete_offset", "int", None, 20),
            ("CodeBlob", "_code_begin", "address", None, 32),
            ("CodeBlob", "_code_end", "address", None, 40),
            ("CompiledMethod", "_method", "Method*", None, 64),
            (
                "CompiledMethod",
                "_deopt_handler_begin",
                "address",
                None,
                72,
            ),
            ("ConstMethod", "_flags", "u2", None, 46),
            ("Symbol", "_body[0]", "u1", None, 6),
        ]);
    }
    let tables = Tables {
        fields,
        types: vec![
            ("CodeBlob", None, 96),
            ("CompiledMethod", Some("CodeBlob"), 96),
            ("nmethod", Some("CompiledMethod"), 352),
            ("HeapBlock", None, 16),
            (flag_ty, None, 24),
            ("ConstMethod", None, 56),
            ("ConstantPool", None, 80),
            ("Method", None, 88),
            ("int", None, 4),
        ],
        ints: vec![
            ("ConstMethod::_has_linenumber_table", 1),
            ("frame::interpreter_frame_method_offset", -3),
        ],
        longs: vec![("markWord::age_shift", 3)],
    };
    let syms = write_tables(&mut a, &tables);
    let mut mem = SnapshotMemory::new();
    mem.add(a.base, a.bytes.clone());
    let input = VmInput::encode(&syms, &probes, &[(a.base, &a.bytes)]);
    (input, mem, syms, probes)
}

fn check_synthetic(mem: &SnapshotMemory, syms: &HashMap<String, u64>, probes: &[u64]) {
    let vs = VmStructs::read(mem, syms).expect("synthetic VMStructs");
    let flags = FlagTable::locate(&vs, mem)
        .expect("flag table")
        .expect("flag memory");
    assert_eq!(
        flags.read_bool(mem, "EnableDynamicAgentLoading").unwrap(),
        Some(true)
    );
    assert_eq!(
        flags.read_bool(mem, "DebugNonSafepoints").unwrap(),
        Some(false)
    );
    let cc = CodeCache::discover(&vs, mem).expect("code cache");
    let kinds: Vec<Option<BlobKind>> = probes
        .iter()
        .map(|&pc| {
            cc.find_blob(mem, pc)
                .and_then(|b| cc.read_blob(mem, b))
                .map(|b| b.kind)
        })
        .collect();
    assert_eq!(
        kinds[..4],
        [
            Some(BlobKind::Nmethod),
            Some(BlobKind::Interpreter),
            Some(BlobKind::Stub),
            None
        ]
    );
    let nm = cc.read_blob(mem, probes[4]).expect("nmethod blob");
    assert!(nm.method != 0 && nm.deopt_handler == nm.code_begin + 180 && nm.frame_size == 48);
    let layout = MethodLayout::discover(&vs).expect("method layout");
    let m = layout.read(mem, nm.method).expect("method");
    assert_eq!((m.class.as_str(), m.name.as_str()), ("bench/Phases", "run"));
    assert_eq!(m.lines, [(0, 10), (8, 11), (12, 14), (19, 9)]);
}

fn vm_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for jdk23 in [false, true] {
        let (input, mem, syms, probes) = synthetic_jvm(jdk23);
        check_synthetic(&mem, &syms, &probes);
        let decoded = VmInput::decode(&input);
        assert_eq!(decoded.symbols, syms);
        check_synthetic(&decoded.mem, &decoded.symbols, &decoded.probes);
        seeds.push((
            format!("synthetic-jdk{}", if jdk23 { 23 } else { 17 }),
            input,
        ));
    }

    // The real JDK 17 capture: its pages as regions, its symbols, and probes at the code heaps.
    let mem =
        SnapshotMemory::from_bytes(&std::fs::read("tests/fixtures/jdk17-vmstructs.mem").unwrap())
            .expect("fixture snapshot");
    let syms = parse_symbol_lines(
        &std::fs::read_to_string("tests/fixtures/jdk17-vmstructs.symbols").unwrap(),
    );
    let vs = VmStructs::read(&mem, &syms).expect("fixture VMStructs");
    let cc = CodeCache::discover(&vs, &mem).expect("fixture code cache");
    let probes = [cc.low, cc.low + 0x1000, cc.high - 1];
    let raw = mem.to_bytes();
    let mut regions = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        let addr = u64::from_le_bytes(raw[at..at + 8].try_into().unwrap());
        let len = u64::from_le_bytes(raw[at + 8..at + 16].try_into().unwrap()) as usize;
        regions.push((addr, &raw[at + 16..at + 16 + len]));
        at += 16 + len;
    }
    let input = VmInput::encode(&syms, &probes, &regions);
    let decoded = VmInput::decode(&input);
    assert!(VmStructs::read(&decoded.mem, &decoded.symbols).is_ok());
    assert_eq!(decoded.mem.read_u64(cc.low).ok(), mem.read_u64(cc.low).ok());
    seeds.push(("jdk17-fixture".into(), input));
    seeds
}
