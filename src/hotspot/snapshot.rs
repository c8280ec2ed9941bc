//! One thread of a JVM captured for tests: its registers and stack, the address ranges of its
//! native modules, the VMStructs entries the stack walker and the Java symbolizer look up, and
//! exactly the memory they read to walk and name that stack (recorded through
//! [`RecordingMemory`]). Replaying the walk runs the walker and symbolizer of a live recording,
//! compiled for [`SnapshotMemory`] instead of [`ProcessMemory`]: real JVM memory, no JVM.
//! `tests/fixtures/jdk17-walk.*` and `jdk25-walk.*` are two, taken by [`capture`] (`cargo run
//! --example capture_walk`).
//!
//! The modules' files are not part of a snapshot, so native code has no unwind info: a walk
//! names the first native frame it reaches and stops there (`Truncation::NativeFailed`).
//!
//! Two files: `<name>.txt`, tab-separated lines (`#` comments; `regs`, `stack`, `module`,
//! `field`, `type`, `int`, `long`), and `<name>.mem`, the memory in [`SnapshotMemory`]'s format
//! with the stack copy as the region at `sp`.

use super::libjvm::LibJvm;
use super::scopes::ScopeLayout;
use super::vmstructs::{Field, TypeInfo, VmStructs};
use super::HotSpot;
use crate::cmd::dump::Naming;
use crate::jit::codemap::CodeMap;
use crate::native::{Modules, NativeSymbolizer, NativeUnwinder};
use crate::process::memory::RecordingMemory;
use crate::process::{MemError, ProcessMemory, SnapshotMemory, TargetMemory, TargetProcess};
use crate::profile::{Frame, Profile};
use crate::sampler::Regs;
use crate::symbolize::Symbolizer;
use crate::walker::{StackWalker, Walk};
use std::fmt::Write;
use std::ops::Range;

/// The VMStructs types the stack walker and the Java symbolizer look up (`codecache`, `frame`,
/// `method`, `scopes`): a snapshot keeps only their entries.
pub const WALKER_TYPES: &[&str] = &[
    "Abstract_VM_Version",
    "CodeBlob",
    "CodeCache",
    "CodeHeap",
    "CompiledMethod",
    "ConstMethod",
    "ConstantPool",
    "GenericGrowableArray",
    "GrowableArray<int>",
    "GrowableArrayBase",
    "HeapBlock",
    "HeapBlock::Header",
    "Klass",
    "Method",
    "PcDesc",
    "StubRoutines",
    "Symbol",
    "VirtualSpace",
    "nmethod",
];

/// Bytes of stack a capture reads while the thread is stopped: more than the Java frames of the
/// bench apps' threads take, so the walk never needs the live stack past the copy.
const CAPTURE_STACK: usize = 64 << 10;

#[derive(Debug, Clone)]
pub struct ThreadSnapshot {
    /// What was captured and how (the text file's comments).
    pub notes: Vec<String>,
    pub regs: Regs,
    /// The stack from `regs.sp` up, as far as the walk reads it.
    pub stack: Vec<u8>,
    /// The executable file mappings: name, address range, load bias.
    pub modules: Vec<(String, Range<u64>, u64)>,
    /// The entries of [`WALKER_TYPES`].
    pub vmstructs: VmStructs,
    /// What the walk and its naming read, the stack aside.
    pub mem: SnapshotMemory,
}

/// A stack walked and named as `jvmperf dump` names it.
#[derive(Debug)]
pub struct NamedWalk {
    pub walk: Walk,
    /// Leaf first: compiled frames with their inlined methods (from the nmethod's debug info),
    /// interpreted frames, stubs, native frames (`module+offset`).
    pub frames: Vec<Frame>,
}

impl NamedWalk {
    fn same_as(&self, other: &NamedWalk) -> bool {
        self.walk.frames == other.walk.frames
            && self.walk.rooted == other.walk.rooted
            && self.walk.truncated == other.walk.truncated
            && self.frames == other.frames
    }

    /// One line a frame: kind, name, bci and line.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for f in &self.frames {
            let bci = f.bci.map(|b| format!(" bci={b}")).unwrap_or_default();
            let line = f.line.map(|l| format!(" line={l}")).unwrap_or_default();
            let _ = writeln!(out, "{:?}\t{}{bci}{line}", f.kind, f.name);
        }
        let _ = match self.walk.truncated {
            Some(why) => writeln!(out, "(stops: {why:?})"),
            None => writeln!(out, "(rooted: {})", self.walk.rooted),
        };
        out
    }
}

/// Walk one stack and name its frames as `jvmperf dump` does (no code map: nothing attached).
fn walk_and_name<M: TargetMemory + Copy>(
    hotspot: &HotSpot<M>,
    native: NativeUnwinder,
    regs: &Regs,
    stack: &[u8],
) -> NamedWalk {
    let mut walker = StackWalker::new(hotspot, native);
    let walk = walker.walk(regs, stack);
    let mut symbolizer = Symbolizer::new(
        walker.method_layout().cloned(),
        hotspot.mem,
        NativeSymbolizer::with_cache(Err("not needed: modules without files".into())),
    );
    let scopes = ScopeLayout::discover(&hotspot.vmstructs, &hotspot.mem);
    let code = CodeMap::new();
    let mut profile = Profile::default();
    let naming = Naming {
        symbolizer: &mut symbolizer,
        scopes: scopes.as_ref(),
        code: &code,
        time_ns: 0,
    };
    let ids = naming.name(&walk, &mut walker, &mut profile);
    NamedWalk {
        walk,
        frames: ids
            .iter()
            .map(|&id| profile.frames[id as usize].clone())
            .collect(),
    }
}

fn hex(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("{s:?}: {e}"))
}

fn regs_fields(r: &mut Regs) -> [(&'static str, &mut u64); 18] {
    [
        ("abi", &mut r.abi),
        ("ax", &mut r.ax),
        ("bx", &mut r.bx),
        ("cx", &mut r.cx),
        ("dx", &mut r.dx),
        ("si", &mut r.si),
        ("di", &mut r.di),
        ("bp", &mut r.bp),
        ("sp", &mut r.sp),
        ("ip", &mut r.ip),
        ("r8", &mut r.r8),
        ("r9", &mut r.r9),
        ("r10", &mut r.r10),
        ("r11", &mut r.r11),
        ("r12", &mut r.r12),
        ("r13", &mut r.r13),
        ("r14", &mut r.r14),
        ("r15", &mut r.r15),
    ]
}

impl ThreadSnapshot {
    /// The JVM as the snapshot saw it.
    pub fn hotspot(&self) -> HotSpot<&SnapshotMemory> {
        let libjvm = self.modules.iter().find(|(name, ..)| name == "libjvm.so");
        HotSpot {
            libjvm: LibJvm {
                path: "libjvm.so".into(),
                bias: libjvm.map_or(0, |(_, _, bias)| *bias),
                symbols: Default::default(),
            },
            vmstructs: self.vmstructs.clone(),
            mem: &self.mem,
        }
    }

    /// Its native modules, without their files.
    pub fn native_unwinder(&self) -> NativeUnwinder {
        NativeUnwinder::without_files(Modules::without_files(self.modules.iter().cloned()))
    }

    /// Walk the captured stack again, on the snapshot.
    pub fn replay(&self) -> NamedWalk {
        walk_and_name(
            &self.hotspot(),
            self.native_unwinder(),
            &self.regs,
            &self.stack,
        )
    }

    /// The text file.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for note in &self.notes {
            let _ = writeln!(out, "# {note}");
        }
        let mut regs = self.regs;
        let regs: Vec<String> = regs_fields(&mut regs)
            .iter()
            .map(|(name, v)| format!("{name}={:#x}", **v))
            .collect();
        let _ = writeln!(out, "regs\t{}", regs.join(" "));
        let _ = writeln!(out, "stack\t{:#x}\t{:#x}", self.regs.sp, self.stack.len());
        for (name, range, bias) in &self.modules {
            let _ = writeln!(
                out,
                "module\t{name}\t{:#x}\t{:#x}\t{bias:#x}",
                range.start, range.end
            );
        }
        let vs = &self.vmstructs;
        let mut fields: Vec<_> = vs.fields.iter().collect();
        fields.sort_by(|a, b| a.0.cmp(b.0));
        for ((t, name), f) in fields {
            let _ = writeln!(
                out,
                "field\t{t}\t{name}\t{}\t{:#x}\t{:#x}\t{}",
                u8::from(f.is_static),
                f.offset,
                f.address,
                f.type_string
            );
        }
        let mut types: Vec<_> = vs.types.iter().collect();
        types.sort_by(|a, b| a.0.cmp(b.0));
        for (t, info) in types {
            let sup = info.superclass.as_deref().unwrap_or("");
            let _ = writeln!(out, "type\t{t}\t{:#x}\t{sup}", info.size);
        }
        let mut ints: Vec<_> = vs.int_constants.iter().collect();
        ints.sort();
        for (name, v) in ints {
            let _ = writeln!(out, "int\t{name}\t{v}");
        }
        let mut longs: Vec<_> = vs.long_constants.iter().collect();
        longs.sort();
        for (name, v) in longs {
            let _ = writeln!(out, "long\t{name}\t{v:#x}");
        }
        out
    }

    /// The memory file: the memory, and the stack copy as the region at `sp`.
    pub fn mem_bytes(&self) -> Vec<u8> {
        let mut mem = self.mem.clone();
        mem.add(self.regs.sp, self.stack.clone());
        mem.to_bytes()
    }

    pub fn parse(text: &str, mem_bytes: &[u8]) -> Result<ThreadSnapshot, String> {
        let mut mem = SnapshotMemory::from_bytes(mem_bytes).ok_or("memory file is corrupt")?;
        let mut snap = ThreadSnapshot {
            notes: Vec::new(),
            regs: Regs::default(),
            stack: Vec::new(),
            modules: Vec::new(),
            vmstructs: VmStructs::default(),
            mem: SnapshotMemory::new(),
        };
        let mut stack = None;
        for (n, line) in text.lines().enumerate() {
            let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
            if let Some(note) = line.strip_prefix('#') {
                snap.notes.push(note.trim_start().to_string());
                continue;
            }
            let cols: Vec<&str> = line.split('\t').collect();
            let col = |i: usize| cols.get(i).copied().ok_or_else(|| bad("too few columns"));
            match cols[0] {
                "regs" => {
                    for pair in col(1)?.split(' ') {
                        let (name, value) = pair.split_once('=').ok_or_else(|| bad(pair))?;
                        let slot = regs_fields(&mut snap.regs)
                            .into_iter()
                            .find(|(n, _)| *n == name)
                            .ok_or_else(|| bad(name))?
                            .1;
                        *slot = hex(value)?;
                    }
                }
                "stack" => stack = Some((hex(col(1)?)?, hex(col(2)?)?)),
                "module" => snap.modules.push((
                    col(1)?.to_string(),
                    hex(col(2)?)?..hex(col(3)?)?,
                    hex(col(4)?)?,
                )),
                "field" => {
                    let field = Field {
                        is_static: col(3)? == "1",
                        offset: hex(col(4)?)?,
                        address: hex(col(5)?)?,
                        type_string: col(6)?.to_string(),
                    };
                    let key = (col(1)?.to_string(), col(2)?.to_string());
                    snap.vmstructs.fields.insert(key, field);
                }
                "type" => {
                    let info = TypeInfo {
                        size: hex(col(2)?)?,
                        superclass: Some(col(3)?).filter(|s| !s.is_empty()).map(String::from),
                    };
                    snap.vmstructs.types.insert(col(1)?.to_string(), info);
                }
                "int" => {
                    let v = col(2)?.parse().map_err(|_| bad("not a number"))?;
                    snap.vmstructs.int_constants.insert(col(1)?.to_string(), v);
                }
                "long" => {
                    let v = hex(col(2)?)?;
                    snap.vmstructs.long_constants.insert(col(1)?.to_string(), v);
                }
                "" => {}
                _ => return Err(bad("unknown line")),
            }
        }
        let (sp, len) = stack.ok_or("no stack line")?;
        if sp != snap.regs.sp {
            return Err(format!("the stack starts at {sp:#x}, not at sp"));
        }
        snap.stack = mem.remove(sp).ok_or("no stack in the memory file")?;
        if snap.stack.len() as u64 != len {
            return Err("the stack in the memory file has another size".into());
        }
        snap.mem = mem;
        Ok(snap)
    }
}

/// The target's memory except for the stack mapping of the captured thread: reads there fail, so
/// the walk reads the stack only from the captured copy (as a replay does) and the recording
/// holds no stack.
struct OutsideStack {
    inner: ProcessMemory,
    stack: Range<u64>,
}

impl TargetMemory for OutsideStack {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let end = addr.saturating_add(buf.len() as u64);
        if addr < self.stack.end && self.stack.start < end {
            return Err(MemError::unmapped(addr, buf.len()));
        }
        self.inner.read(addr, buf)
    }
}

/// Capture thread `tid` of JVM `pid` when the Java frames of its stack, from the leaf, begin with
/// `leaf_frames` (named as `jvmperf dump` names them), trying up to `attempts` times, a few
/// milliseconds apart.
/// The stack is stopped for its registers and a copy of it; the walk and naming then read the
/// JVM's memory through a recording, and the snapshot keeps what they read and the part of the
/// stack copy they need. Checked before it is returned: the walk replayed on the snapshot, and the
/// same stack walked on the live JVM with its native modules, give the same frames.
pub fn capture(
    pid: u32,
    tid: u32,
    leaf_frames: &[&str],
    attempts: u32,
) -> Result<(ThreadSnapshot, NamedWalk), String> {
    let process = TargetProcess::open(pid).map_err(|e| e.to_string())?;
    let live = HotSpot::open(&process).map_err(|e| e.to_string())?;
    let live_native = || NativeUnwinder::new(&process).map_err(|e| e.to_string());
    let modules: Vec<(String, Range<u64>, u64)> = live_native()?
        .modules()
        .all()
        .iter()
        .map(|m| (m.name.clone(), m.start..m.end, m.bias))
        .collect();
    let mut last = String::from("no attempt");
    for attempt in 0..attempts {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(3 + u64::from(attempt % 7)));
        }
        let snap = crate::process::freeze::capture(pid, tid, CAPTURE_STACK, &mut || {})?;
        let maps = process.maps().map_err(|e| e.to_string())?;
        let Some(stack_map) = maps
            .iter()
            .find(|m| m.start <= snap.regs.sp && snap.regs.sp < m.end)
        else {
            last = "sp is in no mapping".into();
            continue;
        };
        let recording = RecordingMemory::new(OutsideStack {
            inner: ProcessMemory { pid },
            stack: stack_map.start..stack_map.end,
        });
        let hotspot = HotSpot {
            libjvm: live.libjvm.clone(),
            vmstructs: live.vmstructs.subset(WALKER_TYPES),
            mem: &recording,
        };
        let native = NativeUnwinder::without_files(Modules::without_files(modules.clone()));
        let named = walk_and_name(&hotspot, native, &snap.regs, &snap.stack);
        let java: Vec<&str> = named
            .frames
            .iter()
            .filter(|f| f.kind.is_java())
            .map(|f| f.name.as_str())
            .collect();
        if !java.starts_with(leaf_frames) {
            last = format!("Java frames {java:?}");
            continue;
        }
        let mut snapshot = ThreadSnapshot {
            notes: Vec::new(),
            regs: snap.regs,
            stack: snap.stack.clone(),
            modules: modules.clone(),
            vmstructs: hotspot.vmstructs.clone(),
            mem: recording.snapshot(),
        };
        if !snapshot.replay().same_as(&named) {
            last = "the replay differs from the capture".into();
            continue;
        }
        // The shortest stack copy the walk needs (reads past it would fail: the snapshot holds
        // no stack, as the capture read none).
        snapshot.stack = (0..=snap.stack.len().div_ceil(64))
            .map(|n| snap.stack[..(n * 64).min(snap.stack.len())].to_vec())
            .find(|stack| {
                let trial = ThreadSnapshot {
                    stack: stack.clone(),
                    ..snapshot.clone()
                };
                trial.replay().same_as(&named)
            })
            .expect("the whole copy replays the capture");
        // The walk on the live JVM, with unwind info for its native code, agrees up to the first
        // native frame the snapshot has none for.
        let mut full = StackWalker::new(&live, live_native()?);
        let full = full.walk(&snap.regs, &snap.stack);
        let n = named.walk.frames.len();
        if full.frames.get(..n) != Some(&named.walk.frames[..]) {
            last = format!(
                "the live walk differs: {:?} vs {:?}",
                full.frames, named.walk.frames
            );
            continue;
        }
        snapshot.notes = vec![
            format!(
                "thread {:?} of JVM {} ({}), attempt {}",
                process.thread_comm(tid).unwrap_or_default(),
                process.name,
                live.vm_release().unwrap_or_default(),
                attempt + 1
            ),
            format!(
                "the live walk goes on for {} more frames (rooted: {})",
                full.frames.len() - n,
                full.rooted
            ),
        ];
        return Ok((snapshot, named));
    }
    Err(format!(
        "no capture matched in {attempts} attempts; last: {last}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotspot::codecache::CodeCache;
    use crate::hotspot::fixture_tests::fixture;
    use crate::hotspot::frame::call_stub_return_address;
    use crate::hotspot::method::MethodLayout;

    /// The readers the walker and symbolizer use find everything they look up among the entries
    /// of [`WALKER_TYPES`] (on the JDK 17 VMStructs fixture).
    #[test]
    fn the_walker_types_hold_every_entry_the_readers_look_up() {
        let (mem, symbols) = fixture();
        let full = VmStructs::read(&mem, &symbols).unwrap();
        let subset = full.subset(WALKER_TYPES);
        assert!(subset.fields.len() < full.fields.len() / 3);
        assert!(subset
            .int_constants
            .contains_key("ConstMethod::_has_linenumber_table"));
        let same = |f: &dyn Fn(&VmStructs) -> String| assert_eq!(f(&full), f(&subset));
        same(&|vs| format!("{:?}", CodeCache::discover(vs, &mem).expect("code cache")));
        same(&|vs| format!("{:?}", MethodLayout::discover(vs).expect("methods")));
        same(&|vs| format!("{:?}", ScopeLayout::discover(vs, &mem).expect("scopes")));
        same(&|vs| format!("{:?}", call_stub_return_address(vs, &mem)));
        assert!(subset
            .address("StubRoutines", "_call_stub_return_address")
            .is_some());
    }

    #[test]
    fn the_files_round_trip() {
        let fixtures: [(&str, &[u8]); 2] = [
            (
                include_str!("../../tests/fixtures/jdk17-walk.txt"),
                include_bytes!("../../tests/fixtures/jdk17-walk.mem"),
            ),
            (
                include_str!("../../tests/fixtures/jdk25-walk.txt"),
                include_bytes!("../../tests/fixtures/jdk25-walk.mem"),
            ),
        ];
        for (text, mem) in fixtures {
            let snap = ThreadSnapshot::parse(text, mem).unwrap();
            assert_eq!(snap.to_text(), text);
            assert_eq!(snap.mem_bytes(), mem);
            assert!(!snap.stack.is_empty() && snap.stack.len() <= 1024);
            assert!(snap.vmstructs.size("nmethod").is_some());
            assert!(snap.modules.iter().any(|(name, ..)| name == "libjvm.so"));
            assert!(snap.mem.regions().all(|(addr, _)| addr != snap.regs.sp));
        }

        let (text, mem) = fixtures[0];
        let without = |what: &str| -> String {
            let kept: String = text
                .lines()
                .filter(|l| !l.starts_with(what))
                .map(|l| format!("{l}\n"))
                .collect();
            ThreadSnapshot::parse(&kept, mem).unwrap_err()
        };
        assert!(without("stack").contains("no stack line"));
        let unknown = format!("{text}bogus\t1\n");
        assert!(ThreadSnapshot::parse(&unknown, mem)
            .unwrap_err()
            .contains("unknown line"));
        assert!(ThreadSnapshot::parse(text, &mem[..mem.len() - 1]).is_err());
    }
}
