//! Mixed-mode stack walking: HotSpot frames (compiled, interpreted, stubs) by their frame layout read
//! through VMStructs, native frames by DWARF CFI (framehop), one frame at a time, so Java → native →
//! Java transitions work in both directions. x86_64 only. Frame layout facts are in
//! `crate::hotspot::frame` (HotSpot's `frame_x86.hpp`).

use crate::hotspot::codecache::{BlobInfo, BlobKind, CodeCache};
use crate::hotspot::frame::{self, INTERP_BCP, INTERP_METHOD, INTERP_SENDER_SP};
use crate::hotspot::method::{MethodLayout, MethodNames};
use crate::hotspot::HotSpot;
use crate::native::{Interrupted, NativeRegs, NativeUnwinder, StepOutcome};
use crate::process::{PageCachedMemory, ProcessMemory, TargetMemory};
use crate::sampler::Regs;
use foldhash::HashMap;
use std::sync::Arc;

const MAX_FRAMES: usize = 4096;

/// One frame as found on the stack, before names are attached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RawFrame {
    Native {
        pc: u64,
        return_address: bool,
    },
    /// Compiled Java code; `method` is the nmethod's `Method*` (a fallback when the shim has no record).
    Compiled {
        pc: u64,
        method: u64,
    },
    Interpreted {
        method: u64,
        bci: i32,
    },
    /// Compiled Java code named from its nmethod's own debug info when it was walked (a JVM
    /// profiled without the agent).
    Scoped {
        pc: u64,
        methods: ScopeChain,
    },
    Stub {
        pc: u64,
        blob: Arc<str>,
    },
    /// The class of the object a probe's sample is about, its leaf: allocated (see
    /// `engine::alloc`) or locked (`engine::lock`).
    Object {
        class: Arc<str>,
        kind: crate::profile::FrameKind,
    },
}

/// The Java methods at a pc of compiled code: (`Method*`, bci), innermost first, the nmethod's
/// own method last.
pub type ScopeChain = Arc<[(u64, i32)]>;

/// Why a walk stopped before reaching the thread's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Truncation {
    NoUserRegs,
    UnknownCode,
    BadStack,
    TooDeep,
    NativeFailed,
}

#[derive(Debug, Default)]
pub struct Walk {
    pub frames: Vec<RawFrame>,
    /// The walk reached the end of the thread's stack.
    pub rooted: bool,
    pub truncated: Option<Truncation>,
}

/// How a walk goes on from a frame.
enum Next {
    Caller(NativeRegs),
    /// Past a signal frame: the interrupted code, whose pc is not a return address.
    Interrupted(Interrupted),
}

/// `base + off` for a stack address computed from sampled registers or stack words, which are
/// untrusted: one past the top of the address space is a corrupt stack, not a panic.
fn above(base: u64, off: u64) -> Result<u64, Truncation> {
    base.checked_add(off).ok_or(Truncation::BadStack)
}

/// Bytes at the end of the kernel's stack copy compared with the live stack before anything past
/// the copy is read.
const OVERLAP: usize = 64;

/// The sampled stack: the kernel's copy from `sp`, and the live stack above it, read a page at a
/// time. Older frames are still there unless the thread has since returned through them and
/// called something else: then the end of the copy no longer matches the live stack, and nothing
/// past the copy is read (the walk stops there rather than follow another call's frames).
struct StackView<'a, M: TargetMemory> {
    sp: u64,
    bytes: &'a [u8],
    live: PageCachedMemory<M>,
    live_matches: std::cell::OnceCell<bool>,
}

impl<'a, M: TargetMemory> StackView<'a, M> {
    fn new(sp: u64, bytes: &'a [u8], mem: M) -> Self {
        StackView {
            sp,
            bytes,
            live: PageCachedMemory::new(mem),
            live_matches: std::cell::OnceCell::new(),
        }
    }

    fn read(&self, addr: u64) -> Result<u64, ()> {
        let off = addr.checked_sub(self.sp).ok_or(())?;
        if off
            .checked_add(8)
            .is_some_and(|end| end <= self.bytes.len() as u64)
        {
            let o = off as usize;
            return Ok(u64::from_le_bytes(self.bytes[o..o + 8].try_into().unwrap()));
        }
        if !self.live_matches_copy() {
            return Err(());
        }
        self.live.read_u64(addr).map_err(|_| ())
    }

    /// Whether the live stack still ends the copy with the same bytes (never for no copy: the
    /// thread has moved on since, and nothing tells whether its stack did).
    fn live_matches_copy(&self) -> bool {
        *self.live_matches.get_or_init(|| {
            if self.bytes.is_empty() {
                return false;
            }
            let n = OVERLAP.min(self.bytes.len());
            let tail = &self.bytes[self.bytes.len() - n..];
            let mut live = [0u8; OVERLAP];
            let Some(at) = self.sp.checked_add((self.bytes.len() - n) as u64) else {
                return false;
            };
            self.live.read(at, &mut live[..n]).is_ok() && live[..n] == *tail
        })
    }
}

/// Walks samples of one JVM whose memory it reads through `M`: the live process
/// ([`ProcessMemory`]), or a captured snapshot in tests. `M` is a small copyable handle (the
/// process id, or a reference to the snapshot), and each walker is compiled for its own memory.
pub struct StackWalker<M = ProcessMemory> {
    pub native: NativeUnwinder,
    code_cache: Option<CodeCache>,
    methods: Option<MethodLayout>,
    mem: M,
    blobs: HashMap<u64, Option<Arc<BlobInfo>>>,
    /// pc → start of its blob: the segment-map walk costs several target reads, and the same
    /// return addresses recur in almost every sample.
    pc_blobs: HashMap<u64, Option<u64>>,
    call_stub_return: u64,
    /// Interpreted methods, named while alive.
    pub method_names: MethodNames,
    /// The first bytes of compiled code at a top frame's pc (is it returning?), per pc: code
    /// bytes only change when the code cache does.
    code_bytes: HashMap<u64, Option<[u8; frame::EPILOGUE_BYTES]>>,
    /// `Method*` → its bytecodes (start, size) as last read. A frame whose bcp lies inside them
    /// needs no read: a `Method*` reused for another method has other bytecodes, which its frames'
    /// bcps point into, and is read again.
    bytecodes: HashMap<u64, (u64, u32)>,
}

/// Entries kept in the walker's per-address caches before they are cleared (bounded memory for
/// JVMs that keep loading classes).
const MAX_CACHED: usize = 1 << 16;

impl<M: TargetMemory + Copy> StackWalker<M> {
    pub fn new(hotspot: &HotSpot<M>, native: NativeUnwinder) -> Self {
        let vs = &hotspot.vmstructs;
        let call_stub_return = frame::call_stub_return_address(vs, &hotspot.mem).unwrap_or(0);
        StackWalker {
            native,
            code_cache: CodeCache::discover(vs, &hotspot.mem),
            methods: MethodLayout::discover(vs),
            mem: hotspot.mem,
            blobs: HashMap::default(),
            pc_blobs: HashMap::default(),
            call_stub_return,
            method_names: MethodNames::default(),
            code_bytes: HashMap::default(),
            bytecodes: HashMap::default(),
        }
    }

    /// The memory the walker reads.
    pub fn memory(&self) -> M {
        self.mem
    }

    pub fn method_layout(&self) -> Option<&MethodLayout> {
        self.methods.as_ref()
    }

    /// Forget cached blob headers: call when the code cache changed (the shim reported loads or
    /// unloads), since freed blobs' addresses are reused.
    pub fn code_changed(&mut self, hotspot: &HotSpot<M>) {
        self.blobs.clear();
        self.pc_blobs.clear();
        self.code_bytes.clear();
        if let Some(cc) = self.code_cache.as_mut() {
            cc.refresh(&hotspot.vmstructs, &hotspot.mem);
        }
    }

    fn in_code_cache(&self, pc: u64) -> bool {
        self.code_cache.as_ref().is_some_and(|cc| cc.contains(pc))
    }

    /// The code blob containing `pc`, if it is in the code cache.
    pub fn blob_for(&mut self, pc: u64) -> Option<Arc<BlobInfo>> {
        let cc = self.code_cache.as_ref()?;
        let mem = self.mem;
        let start = *self
            .pc_blobs
            .entry(pc)
            .or_insert_with(|| cc.find_blob(&mem, pc));
        let start = start?;
        self.blobs
            .entry(start)
            .or_insert_with(|| cc.read_blob(&mem, start).map(Arc::new))
            .clone()
            .filter(|b| b.start <= pc && pc < b.end)
    }

    fn plausible_return(&mut self, pc: u64) -> bool {
        pc > 0x1000 && (self.in_code_cache(pc) || self.native.module_for(pc).is_some())
    }

    /// Walk one sample's user stack.
    pub fn walk(&mut self, regs: &Regs, stack: &[u8]) -> Walk {
        let mut walk = Walk::default();
        if regs.abi == 0 || regs.sp == 0 {
            walk.truncated = Some(Truncation::NoUserRegs);
            return walk;
        }
        let view = StackView::new(regs.sp, stack, self.mem);
        let mut r = NativeRegs {
            pc: regs.ip,
            sp: regs.sp,
            bp: regs.bp,
        };
        let mut first = true;
        // The registers of the innermost frame: the sampled ones, or those a signal interrupted.
        let mut top = *regs;
        while walk.frames.len() < MAX_FRAMES {
            let next = if self.in_code_cache(r.pc) {
                match self.blob_for(r.pc) {
                    Some(blob) => self
                        .java_step(&blob, r, first, &top, &view, &mut walk.frames)
                        .map(|c| c.map(Next::Caller)),
                    None => Err(Truncation::UnknownCode),
                }
            } else {
                walk.frames.push(RawFrame::Native {
                    pc: r.pc,
                    return_address: !first,
                });
                let mut read = |a: u64| view.read(a);
                match self.native.step(r, first, &mut read) {
                    StepOutcome::Caller(c) => Ok(Some(Next::Caller(c))),
                    StepOutcome::Interrupted(i) => Ok(Some(Next::Interrupted(i))),
                    StepOutcome::Root => Ok(None),
                    StepOutcome::NoModule => Err(Truncation::UnknownCode),
                    StepOutcome::Failed(_) => Err(Truncation::NativeFailed),
                }
            };
            match next {
                Ok(Some(Next::Caller(caller))) => {
                    // Callers live at higher addresses; anything else is a corrupt or misread frame.
                    if caller.sp <= r.sp || caller.pc == 0 {
                        walk.truncated = Some(Truncation::BadStack);
                        return walk;
                    }
                    r = caller;
                    first = false;
                }
                Ok(Some(Next::Interrupted(i))) => {
                    // The interrupted code is below the signal frame on its stack, or anywhere
                    // when the handler ran on an alternate signal stack.
                    if i.sp == r.sp || i.pc == 0 {
                        walk.truncated = Some(Truncation::BadStack);
                        return walk;
                    }
                    r = NativeRegs {
                        pc: i.pc,
                        sp: i.sp,
                        bp: i.bp,
                    };
                    top.bx = i.bx;
                    top.r13 = i.r13;
                    first = true;
                    // The trampoline was entered by a return, not a call: its own pc names it.
                    if let Some(RawFrame::Native { return_address, .. }) = walk.frames.last_mut() {
                        *return_address = false;
                    }
                }
                Ok(None) => {
                    walk.rooted = true;
                    return walk;
                }
                Err(t) => {
                    walk.truncated = Some(t);
                    return walk;
                }
            }
        }
        walk.truncated = Some(Truncation::TooDeep);
        walk
    }

    /// One HotSpot frame: record it and compute its caller's registers.
    fn java_step(
        &mut self,
        blob: &BlobInfo,
        r: NativeRegs,
        first: bool,
        regs: &Regs,
        view: &StackView<'_, M>,
        out: &mut Vec<RawFrame>,
    ) -> Result<Option<NativeRegs>, Truncation> {
        let rd = |a: u64| view.read(a).map_err(|_| Truncation::BadStack);
        match blob.kind {
            BlobKind::Nmethod | BlobKind::NativeNmethod => {
                // A frame being deoptimized returns into the deopt handler; its real pc is saved in
                // the frame.
                let pc = if !first && blob.deopt_handler != 0 && r.pc == blob.deopt_handler {
                    rd(r.sp.wrapping_add(blob.orig_pc_offset as u64))?
                } else {
                    r.pc
                };
                out.push(RawFrame::Compiled {
                    pc,
                    method: blob.method,
                });
                self.framed_caller(blob, r, first, view).map(Some)
            }
            BlobKind::Interpreter => self.interpreted_step(r, first, regs, view, out).map(Some),
            BlobKind::Stub | BlobKind::FramedStub | BlobKind::VtableChunks => {
                out.push(RawFrame::Stub {
                    pc: r.pc,
                    blob: Arc::from(blob.name.as_str()),
                });
                if r.pc == self.call_stub_return || blob.frame_size == 0 {
                    return self.rbp_framed_caller(r, first, view).map(Some);
                }
                self.framed_caller(blob, r, first, view).map(Some)
            }
        }
    }

    /// The caller of a frame with a fixed size (nmethods, adapters, runtime stubs), including a top
    /// frame caught in its prologue or epilogue.
    fn framed_caller(
        &mut self,
        blob: &BlobInfo,
        r: NativeRegs,
        first: bool,
        view: &StackView<'_, M>,
    ) -> Result<NativeRegs, Truncation> {
        let rd = |a: u64| view.read(a).map_err(|_| Truncation::BadStack);
        let ret_at_sp = |this: &mut Self| -> Result<Option<NativeRegs>, Truncation> {
            let pc = rd(r.sp)?;
            let sp = above(r.sp, 8)?;
            Ok(this
                .plausible_return(pc)
                .then_some(NativeRegs { pc, sp, bp: r.bp }))
        };
        let after_push = || -> Result<NativeRegs, Truncation> {
            Ok(NativeRegs {
                pc: rd(above(r.sp, 8)?)?,
                sp: above(r.sp, 16)?,
                bp: rd(r.sp)?,
            })
        };
        if first {
            let in_prologue = blob.frame_complete.is_some_and(|fc| r.pc < fc);
            if in_prologue {
                return match ret_at_sp(self)? {
                    Some(c) => Ok(c),
                    None => after_push(),
                };
            }
            match self.code_at(r.pc).map(frame::epilogue_at) {
                Some(frame::Epilogue::FramePopped) => {
                    if let Some(c) = ret_at_sp(self)? {
                        return Ok(c);
                    }
                }
                Some(frame::Epilogue::PopRbp) => return after_push(),
                _ => {}
            }
        }
        if blob.frame_size >= 16 {
            let sender_sp = above(r.sp, blob.frame_size)?;
            let pc = rd(sender_sp - 8)?;
            if !first || self.plausible_return(pc) {
                return Ok(NativeRegs {
                    pc,
                    sp: sender_sp,
                    bp: rd(sender_sp - 16)?,
                });
            }
        } else if !first {
            return Err(Truncation::UnknownCode);
        }
        // A top frame where its frame size does not hold: a stub whose frame is never marked
        // complete (C1's Runtime1 stubs build an rbp frame with `enter`, `c1_Runtime1_x86.cpp`),
        // or code that moved sp for a call (native wrappers realign it around runtime calls and
        // keep rbp framed, `sharedRuntime_x86_64.cpp`).
        self.rbp_framed_caller(r, first, view)
    }

    /// The first code bytes at a top frame's pc, cached per pc.
    fn code_at(&mut self, pc: u64) -> Option<[u8; frame::EPILOGUE_BYTES]> {
        if self.code_bytes.len() > MAX_CACHED {
            self.code_bytes.clear();
        }
        let mem = self.mem;
        *self.code_bytes.entry(pc).or_insert_with(|| {
            let mut code = [0u8; frame::EPILOGUE_BYTES];
            mem.read(pc, &mut code).ok().map(|()| code)
        })
    }

    /// The caller of a stub without a fixed frame size (StubRoutines, the call stub): it builds an
    /// rbp frame, if any, with `MacroAssembler::enter()` (`push rbp; mov rbp,rsp`) and ends it
    /// with `leave` or `pop rbp` before `ret` (`macroAssembler_x86.cpp`). A top frame may be
    /// caught before its frame exists or after it is gone; its code bytes tell.
    fn rbp_framed_caller(
        &mut self,
        r: NativeRegs,
        first: bool,
        view: &StackView<'_, M>,
    ) -> Result<NativeRegs, Truncation> {
        let rd = |a: u64| view.read(a).map_err(|_| Truncation::BadStack);
        let ret_at_sp = || -> Result<NativeRegs, Truncation> {
            Ok(NativeRegs {
                pc: rd(r.sp)?,
                sp: above(r.sp, 8)?,
                bp: r.bp,
            })
        };
        if first {
            match self.code_at(r.pc).map(frame::stub_frame_at) {
                Some(frame::StubFrame::None) => return ret_at_sp(),
                Some(frame::StubFrame::RbpPushed) => {
                    return Ok(NativeRegs {
                        pc: rd(above(r.sp, 8)?)?,
                        sp: above(r.sp, 16)?,
                        bp: rd(r.sp)?,
                    })
                }
                _ => {}
            }
        }
        // Right after `enter` rbp equals sp.
        if r.bp >= r.sp && r.bp - r.sp < 1 << 16 {
            let pc = rd(above(r.bp, 8)?)?;
            if self.plausible_return(pc) {
                return Ok(NativeRegs {
                    pc,
                    sp: above(r.bp, 16)?,
                    bp: rd(r.bp)?,
                });
            }
        }
        // A leaf stub that builds no frame.
        ret_at_sp()
    }

    fn note_method(&mut self, method: u64, code_start: u64) {
        if let Some(layout) = &self.methods {
            self.method_names
                .note(layout, &self.mem, method, code_start);
        }
    }

    fn interpreted_step(
        &mut self,
        r: NativeRegs,
        first: bool,
        regs: &Regs,
        view: &StackView<'_, M>,
        out: &mut Vec<RawFrame>,
    ) -> Result<NativeRegs, Truncation> {
        let rd = |a: u64| view.read(a).map_err(|_| Truncation::BadStack);
        let slot = |i: i64| r.bp.wrapping_add((i * 8) as u64);
        let frame_ok = r.bp > r.sp && r.bp - r.sp < 1 << 20;
        let method = if frame_ok {
            rd(slot(INTERP_METHOD)).ok()
        } else {
            None
        };
        let bci_in = |code: Option<(u64, u32)>, bcp: u64| -> Option<i32> {
            let (start, size) = code?;
            let bci = bcp.checked_sub(start)?;
            (bci < u64::from(size)).then_some(bci as i32)
        };
        // The top frame's live bcp is in r13; callers saved theirs in the frame.
        let live_bcp = first.then_some(regs.r13);
        let saved_bcp = if frame_ok {
            rd(slot(INTERP_BCP)).ok()
        } else {
            None
        };
        let cached = method.and_then(|m| self.bytecodes.get(&m).copied());
        let cached_bci = bci_in(cached, live_bcp.unwrap_or(0))
            .or_else(|| bci_in(cached, saved_bcp.unwrap_or(0)));
        let code = match cached_bci {
            Some(_) => cached,
            None => method.and_then(|m| self.methods.as_ref()?.code_start(&self.mem, m)),
        };
        match (method, code) {
            (Some(method), Some((start, size))) => {
                if cached_bci.is_none() {
                    self.note_method(method, start);
                    if self.bytecodes.len() > MAX_CACHED {
                        self.bytecodes.clear();
                    }
                    self.bytecodes.insert(method, (start, size));
                }
                let bci = live_bcp
                    .and_then(|bcp| bci_in(code, bcp))
                    .or_else(|| saved_bcp.and_then(|bcp| bci_in(code, bcp)))
                    .unwrap_or(-1);
                out.push(RawFrame::Interpreted { method, bci });
                Ok(NativeRegs {
                    pc: rd(above(r.bp, 8)?)?,
                    sp: rd(slot(INTERP_SENDER_SP))?,
                    bp: rd(r.bp)?,
                })
            }
            _ if first => {
                // Method entry, frame not built yet: rbx holds the Method*, the return pc is at sp.
                let entry = self
                    .methods
                    .as_ref()
                    .and_then(|l| l.code_start(&self.mem, regs.bx));
                if let Some((start, _)) = entry {
                    self.note_method(regs.bx, start);
                }
                out.push(if entry.is_some() {
                    RawFrame::Interpreted {
                        method: regs.bx,
                        bci: 0,
                    }
                } else {
                    RawFrame::Stub {
                        pc: r.pc,
                        blob: Arc::from("Interpreter"),
                    }
                });
                Ok(NativeRegs {
                    pc: rd(r.sp)?,
                    sp: above(r.sp, 8)?,
                    bp: r.bp,
                })
            }
            _ => Err(Truncation::BadStack),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sampled registers and stack words are untrusted: addresses at the top of the address space
    /// fail to read instead of overflowing.
    #[test]
    fn stack_reads_near_the_end_of_the_address_space() {
        let mem = ProcessMemory {
            pid: std::process::id(),
        };
        let bytes = [7u8; 16];
        let view = StackView::new(1, &bytes, mem);
        assert_eq!(view.read(9), Ok(u64::from_le_bytes([7; 8])));
        assert!(view.read(u64::MAX - 3).is_err());
        assert!(view.read(0).is_err());
        assert_eq!(above(u64::MAX - 7, 8), Err(Truncation::BadStack));
        assert_eq!(above(0x1000, 8), Ok(0x1008));
    }

    /// Past the kernel's copy the live stack is read only while it still ends the copy with the
    /// same bytes: a thread that returned through those frames and called something else has
    /// other frames there.
    #[test]
    fn the_live_stack_is_read_past_the_copy_only_while_it_matches_the_copy() {
        use crate::process::SnapshotMemory;
        let sp = 0x10_000u64;
        let stack: Vec<u8> = (0..512u32)
            .flat_map(|w| u64::from(w).to_le_bytes())
            .collect();
        let copy = stack[..1024].to_vec();
        let copy = &copy[..];
        let live = |stack: Vec<u8>| {
            let mut mem = SnapshotMemory::new();
            mem.add(sp, stack);
            mem
        };
        let beyond = sp + 2048;
        let same = StackView::new(sp, copy, live(stack.clone()));
        assert_eq!(same.read(sp + 8), Ok(1));
        assert_eq!(same.read(beyond), Ok(256));

        let mut returned = stack.clone();
        returned[1000] ^= 0xff;
        let changed = StackView::new(sp, copy, live(returned));
        assert_eq!(changed.read(sp + 8), Ok(1), "the copy is read as it is");
        assert_eq!(changed.read(beyond), Err(()));

        let mut deeper_only = stack;
        deeper_only[8] ^= 0xff;
        let still = StackView::new(sp, copy, live(deeper_only));
        assert_eq!(still.read(beyond), Ok(256), "the leaf's frames may change");
    }
}

/// The walker, and the naming of what it walked, on real JVM threads captured with the memory
/// they read (`hotspot::snapshot`): the same code as a live recording, compiled for a snapshot.
#[cfg(test)]
mod snapshot_tests {
    use super::*;
    use crate::hotspot::snapshot::ThreadSnapshot;
    use crate::jit::codemap::CodeMap;
    use crate::native::NativeSymbolizer;
    use crate::process::{MemError, SnapshotMemory};
    use crate::profile::{FrameKind, Profile};
    use crate::symbolize::Symbolizer;
    use std::cell::Cell;

    /// bench.Phases' worker on JDK 17.0.21 (Debian), captured (`cargo run --example
    /// capture_walk`) while it ran the C2-compiled `hotLoop`, `inlinedHelper` inlined into it,
    /// called by the interpreted `Worker.run` and `Thread.run` through the call stub from
    /// `JavaCalls::call_helper` in libjvm.
    fn jdk17() -> ThreadSnapshot {
        ThreadSnapshot::parse(
            include_str!("../tests/fixtures/jdk17-walk.txt"),
            include_bytes!("../tests/fixtures/jdk17-walk.mem"),
        )
        .expect("the JDK 17 fixture parses")
    }

    /// The same on JDK 25.0.3 (Temurin): code blob bounds as offsets, debug info outside the
    /// nmethod, UNSIGNED5 with a bias of 1, `Thread.run` through `runWith`, JDK methods in the
    /// CDS archive.
    fn jdk25() -> ThreadSnapshot {
        ThreadSnapshot::parse(
            include_str!("../tests/fixtures/jdk25-walk.txt"),
            include_bytes!("../tests/fixtures/jdk25-walk.mem"),
        )
        .expect("the JDK 25 fixture parses")
    }

    /// Counts the reads that reach the memory.
    struct Counting<'a> {
        inner: &'a SnapshotMemory,
        reads: Cell<usize>,
    }

    impl TargetMemory for Counting<'_> {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
            self.reads.set(self.reads.get() + 1);
            self.inner.read(addr, buf)
        }
    }

    /// (kind, name, signature, bci, line) of a frame.
    type Named<'a> = (
        FrameKind,
        &'a str,
        Option<&'a str>,
        Option<i32>,
        Option<u32>,
    );

    /// Whether `snap` replays to `want`, named as `jvmperf dump` names frames, and stops where
    /// the snapshot has no unwind info.
    fn assert_dump_frames(snap: &ThreadSnapshot, want: &[Named<'_>]) {
        let named = snap.replay();
        let frames: Vec<Named<'_>> = named
            .frames
            .iter()
            .map(|f| {
                let java = f.kind.is_java();
                (
                    f.kind,
                    f.name.as_str(),
                    f.signature.as_deref().filter(|_| java),
                    f.bci.filter(|_| java),
                    f.line,
                )
            })
            .collect();
        assert_eq!(frames, want);
        assert_eq!(named.walk.truncated, Some(Truncation::NativeFailed));
        assert!(!named.walk.rooted);
    }

    /// The Phases frames of both fixtures: Phases.java:135 `long x = acc * 6364136223846793005L
    /// + salt;` in the inlined helper, :128 `acc = inlinedHelper(acc, i);` in hotLoop, :86
    /// `seed += hotLoop(seed, deadline);` in Worker.run.
    const PHASES: [Named<'static>; 3] = [
        (
            FrameKind::Inlined,
            "bench.Phases.inlinedHelper",
            Some("(JI)J"),
            Some(9),
            Some(135),
        ),
        (
            FrameKind::Jit,
            "bench.Phases.hotLoop",
            Some("(JJ)J"),
            Some(18),
            Some(128),
        ),
        (
            FrameKind::Interpreted,
            "bench.Phases$Worker.run",
            Some("()V"),
            Some(72),
            Some(86),
        ),
    ];

    /// Names as `jvmperf dump` gives them: compiled frames and their inlined methods decoded from
    /// the nmethod's debug info, interpreted frames from their `Method*` and bcp, the call stub
    /// by its blob; native code has no unwind info in a snapshot, so the walk stops at
    /// `JavaCalls::call_helper` (its return address, as `addr2line` on each JDK's libjvm.so
    /// names it), named by module and offset.
    #[test]
    fn captured_stacks_are_walked_and_named_frame_by_frame() {
        let mut want = PHASES.to_vec();
        want.extend([
            (
                FrameKind::Interpreted,
                "java.lang.Thread.run",
                Some("()V"),
                Some(11),
                Some(840),
            ),
            (FrameKind::Stub, "StubRoutines (1)", None, None, None),
            (FrameKind::Native, "libjvm.so+0x82aef2", None, None, None),
        ]);
        assert_dump_frames(&jdk17(), &want);

        let mut want = PHASES.to_vec();
        want.extend([
            (
                FrameKind::Interpreted,
                "java.lang.Thread.runWith",
                Some("(Ljava/lang/Object;Ljava/lang/Runnable;)V"),
                Some(5),
                Some(1487),
            ),
            (
                FrameKind::Interpreted,
                "java.lang.Thread.run",
                Some("()V"),
                Some(19),
                Some(1474),
            ),
            (
                FrameKind::Stub,
                "StubRoutines (initialstubs)",
                None,
                None,
                None,
            ),
            (FrameKind::Native, "libjvm.so+0xa23840", None, None, None),
        ]);
        assert_dump_frames(&jdk25(), &want);
    }

    /// The raw frames, and what the walker keeps for naming them later as a recording does:
    /// interpreted methods named while they were live, compiled ones through the nmethod's
    /// `Method*` (the fallback of a recording whose code map lacks the code).
    fn check_raw_frames(snap: &ThreadSnapshot, interpreted: &[(&str, &str, i32)], stub: &str) {
        let hotspot = snap.hotspot();
        let mut walker = StackWalker::new(&hotspot, snap.native_unwinder());
        let walk = walker.walk(&snap.regs, &snap.stack);
        assert_eq!(walk.truncated, Some(Truncation::NativeFailed));
        let n = walk.frames.len();
        assert_eq!(n, interpreted.len() + 3, "{:#?}", walk.frames);

        let RawFrame::Compiled {
            pc,
            method: hot_loop,
        } = walk.frames[0]
        else {
            panic!("not compiled: {:?}", walk.frames[0]);
        };
        assert_eq!(pc, snap.regs.ip, "the top frame is at the sampled pc");
        let nmethod = walker.blob_for(pc).expect("the top pc is in a blob");
        assert_eq!(nmethod.kind, BlobKind::Nmethod);
        assert_eq!(nmethod.method, hot_loop);
        assert!(nmethod.code_begin <= pc && pc < nmethod.code_end);
        assert!(
            walker.method_names.get(hot_loop).is_none(),
            "compiled frames are not named while walked"
        );

        for (raw, &(class, name, bci)) in walk.frames[1..].iter().zip(interpreted) {
            let &RawFrame::Interpreted { method, bci: b } = raw else {
                panic!("not interpreted: {raw:?}");
            };
            assert_eq!(b, bci, "{class}.{name}");
            let (read, version) = walker.method_names.get(method).expect("named when walked");
            let read = read.expect("readable");
            assert_eq!((read.class.as_str(), read.name.as_str()), (class, name));
            assert_eq!(version, 0);
            assert!(bci < read.code_size as i32);
        }

        let RawFrame::Stub { pc: stub_pc, blob } = &walk.frames[n - 2] else {
            panic!("not a stub: {:?}", walk.frames[n - 2]);
        };
        assert_eq!(&**blob, stub);
        assert_eq!(
            *stub_pc, walker.call_stub_return,
            "Java called from native code"
        );
        let RawFrame::Native {
            pc: caller,
            return_address: true,
        } = walk.frames[n - 1]
        else {
            panic!("not a caller in native code: {:?}", walk.frames[n - 1]);
        };
        let libjvm = walker.native.module_for(caller).expect("a native module");
        assert_eq!(libjvm.name, "libjvm.so");

        // Named as a recording names them when the code map has no record of the code.
        let mut symbolizer = Symbolizer::new(
            walker.method_layout().cloned(),
            hotspot.mem,
            NativeSymbolizer::with_cache(Err("unused".into())),
        );
        let mut profile = Profile::default();
        let mut ids = Vec::new();
        for raw in &walk.frames[..n - 2] {
            symbolizer.frames(
                &mut profile,
                &CodeMap::new(),
                &mut walker,
                (raw, 0),
                &mut (0..u64::MAX),
                &mut ids,
            );
        }
        let names: Vec<_> = ids
            .iter()
            .map(|&id| {
                let f = &profile.frames[id as usize];
                (f.kind, f.name.clone())
            })
            .collect();
        let mut want = vec![(FrameKind::Jit, "bench.Phases.hotLoop".to_string())];
        want.extend(interpreted.iter().map(|(class, name, _)| {
            let class = class.replace('/', ".");
            (FrameKind::Interpreted, format!("{class}.{name}"))
        }));
        assert_eq!(names, want);
        assert_eq!(symbolizer.unresolved_compiled, 1);
    }

    #[test]
    fn the_walker_finds_each_frame_of_captured_stacks() {
        check_raw_frames(
            &jdk17(),
            &[
                ("bench/Phases$Worker", "run", 72),
                ("java/lang/Thread", "run", 11),
            ],
            "StubRoutines (1)",
        );
        check_raw_frames(
            &jdk25(),
            &[
                ("bench/Phases$Worker", "run", 72),
                ("java/lang/Thread", "runWith", 5),
                ("java/lang/Thread", "run", 19),
            ],
            "StubRoutines (initialstubs)",
        );
    }

    /// The per-sample path: a stack seen before is walked from the walker's caches (blobs, code
    /// bytes, bytecode bounds, names) without reading the target.
    #[test]
    fn a_stack_walked_again_reads_no_target_memory() {
        for snap in [jdk17(), jdk25()] {
            let counting = Counting {
                inner: &snap.mem,
                reads: Cell::new(0),
            };
            let hotspot = HotSpot {
                libjvm: snap.hotspot().libjvm,
                vmstructs: snap.vmstructs.clone(),
                mem: &counting,
            };
            let mut walker = StackWalker::new(&hotspot, snap.native_unwinder());
            let setup = counting.reads.get();
            let first = walker.walk(&snap.regs, &snap.stack);
            assert!(first.frames.len() >= 5);
            assert!(counting.reads.get() > setup);
            let after_first = counting.reads.get();
            let again = walker.walk(&snap.regs, &snap.stack);
            assert_eq!(again.frames, first.frames);
            assert_eq!(
                counting.reads.get(),
                after_first,
                "no reads on the second walk"
            );
        }
    }

    /// Damaged memory, stack or registers: walks and names end (truncated, or with unknown
    /// names), and never panic or loop.
    #[test]
    fn damaged_snapshots_are_walked_without_panicking() {
        for snap in [jdk17(), jdk25()] {
            let regions: Vec<(u64, Vec<u8>)> =
                snap.mem.regions().map(|(a, b)| (a, b.to_vec())).collect();
            for (i, (addr, bytes)) in regions.iter().enumerate() {
                for damage in [0x00u8, 0xff, 0x5a] {
                    let mut bad = snap.clone();
                    let damaged = bytes
                        .iter()
                        .map(|b| if damage == 0x5a { b ^ damage } else { damage })
                        .collect();
                    bad.mem.add(*addr, damaged);
                    let named = bad.replay();
                    assert!(named.walk.frames.len() <= MAX_FRAMES, "region {i}");
                }
                let mut gone = snap.clone();
                gone.mem.remove(*addr);
                gone.replay();
            }
            for word in (0..snap.stack.len()).step_by(8) {
                for value in [0u64, u64::MAX, snap.regs.sp, snap.regs.sp + 8] {
                    let mut bad = snap.clone();
                    bad.stack[word..word + 8].copy_from_slice(&value.to_le_bytes());
                    bad.replay();
                }
            }
            let mut bad = snap.clone();
            bad.regs.ip = u64::MAX;
            assert_eq!(bad.replay().walk.truncated, Some(Truncation::UnknownCode));
            bad.regs.abi = 0;
            assert_eq!(bad.replay().walk.truncated, Some(Truncation::NoUserRegs));
        }
    }
}
