//! The JIT code cache seen from outside: which CodeBlob contains a pc, and the blob's frame facts.
//! Layout from VMStructs (JDK `code/codeBlob.hpp`, `memory/heap.hpp`); the segment-map walk follows
//! `CodeHeap::find_blob` in HotSpot's `memory/heap.cpp` (as async-profiler's `findNMethod` and the
//! OTel profiler do).

use super::vmstructs::VmStructs;
use crate::process::TargetMemory;
use crate::profile::CompiledCode;

/// A corrupt segment map must not make us loop: HotSpot's hops are short.
const MAX_SEGMAP_HOPS: usize = 64;
/// Blobs larger than this are not plausible (the whole code cache is at most 2 GiB).
const MAX_BLOB_SIZE: u64 = 64 << 20;

/// Where a field lives: a pointer field (JDK ≤ 22) or an int offset from the blob start (JDK 23+).
#[derive(Debug, Clone, Copy)]
enum CodeBound {
    Pointer(u64),
    Offset { off: u64, width: u64 },
}

#[derive(Debug, Clone)]
struct Layout {
    heaps_var: u64,
    low_bound_var: u64,
    high_bound_var: u64,
    array_len: u64,
    array_data: u64,
    heap_memory: u64,
    heap_segmap: u64,
    heap_log2_segment: u64,
    vs_low: u64,
    vs_high: u64,
    heap_block_size: u64,
    block_used: u64,
    blob_name: u64,
    blob_size: u64,
    blob_frame_size: u64,
    blob_frame_complete: (u64, u64),
    code_begin: CodeBound,
    code_end: CodeBound,
    nm_method: Option<u64>,
    nm_deopt_handler: Option<CodeBound>,
    nm_orig_pc_offset: Option<u64>,
    nm_compile: Option<CompileFields>,
}

/// Where an nmethod keeps its compile facts (JDK `code/nmethod.hpp`: `_entry_bci`, `_compile_id`,
/// `_comp_level`; the level is an `int` up to JDK 20 and a one-byte `CompLevel` later: the low
/// byte is the level either way, on little-endian x86-64).
#[derive(Debug, Clone, Copy)]
struct CompileFields {
    entry_bci: u64,
    compile_id: u64,
    comp_level: u64,
}

fn width_of(type_string: &str) -> u64 {
    match type_string {
        "int16_t" | "short" | "u2" | "uint16_t" => 2,
        "u1" | "uint8_t" | "int8_t" => 1,
        _ => 4,
    }
}

impl Layout {
    fn discover(vs: &VmStructs) -> Option<Self> {
        let off = |t: &str, f: &str| vs.offset(t, f);
        let array_len =
            off("GrowableArrayBase", "_len").or_else(|| off("GenericGrowableArray", "_len"))?;
        let bound = |ptr: &str, offset: &str| -> Option<CodeBound> {
            if let Some(o) = off("CodeBlob", ptr) {
                return Some(CodeBound::Pointer(o));
            }
            let f = vs.field("CodeBlob", offset)?;
            Some(CodeBound::Offset {
                off: f.offset,
                width: width_of(&f.type_string),
            })
        };
        let frame_complete = vs.field("CodeBlob", "_frame_complete_offset")?;
        let nm_method = off("CompiledMethod", "_method").or_else(|| off("nmethod", "_method"));
        let nm_deopt_handler = off("CompiledMethod", "_deopt_handler_begin")
            .map(CodeBound::Pointer)
            .or_else(|| {
                let f = vs
                    .field("nmethod", "_deopt_handler_offset")
                    .or_else(|| vs.field("nmethod", "_deopt_handler_entry_offset"))?;
                Some(CodeBound::Offset {
                    off: f.offset,
                    width: width_of(&f.type_string),
                })
            });
        Some(Layout {
            heaps_var: vs.address("CodeCache", "_heaps")?,
            low_bound_var: vs.address("CodeCache", "_low_bound")?,
            high_bound_var: vs.address("CodeCache", "_high_bound")?,
            array_len,
            array_data: off("GrowableArray<int>", "_data")?,
            heap_memory: off("CodeHeap", "_memory")?,
            heap_segmap: off("CodeHeap", "_segmap")?,
            heap_log2_segment: off("CodeHeap", "_log2_segment_size")?,
            vs_low: off("VirtualSpace", "_low")?,
            vs_high: off("VirtualSpace", "_high")?,
            heap_block_size: vs.size("HeapBlock")?,
            block_used: off("HeapBlock", "_header")?
                .wrapping_add(off("HeapBlock::Header", "_used")?),
            blob_name: off("CodeBlob", "_name")?,
            blob_size: off("CodeBlob", "_size")?,
            blob_frame_size: off("CodeBlob", "_frame_size")?,
            blob_frame_complete: (frame_complete.offset, width_of(&frame_complete.type_string)),
            code_begin: bound("_code_begin", "_code_offset")?,
            code_end: bound("_code_end", "_data_offset")?,
            nm_method,
            nm_deopt_handler,
            nm_orig_pc_offset: off("nmethod", "_orig_pc_offset"),
            nm_compile: (|| {
                Some(CompileFields {
                    entry_bci: off("nmethod", "_entry_bci")?,
                    compile_id: off("nmethod", "_compile_id")?,
                    comp_level: off("nmethod", "_comp_level")?,
                })
            })(),
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Heap {
    low: u64,
    high: u64,
    segmap: u64,
    log2_segment: u32,
}

/// What a blob is, from its `_name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    Nmethod,
    NativeNmethod,
    Interpreter,
    /// `StubRoutines (n)` and similar: no frame of their own (frame_size 0), maybe rbp-framed.
    Stub,
    /// Adapters, runtime and safepoint stubs: a fixed frame once complete.
    FramedStub,
    VtableChunks,
}

/// The facts about one CodeBlob that unwinding needs.
#[derive(Debug, Clone)]
pub struct BlobInfo {
    pub start: u64,
    pub end: u64,
    pub code_begin: u64,
    pub code_end: u64,
    pub kind: BlobKind,
    pub name: String,
    /// Frame size in bytes, including the return address and saved rbp.
    pub frame_size: u64,
    /// First pc at which the frame is fully built (absolute), if known.
    pub frame_complete: Option<u64>,
    /// For nmethods: the `Method*` and deoptimization facts.
    pub method: u64,
    pub deopt_handler: u64,
    pub orig_pc_offset: i64,
}

fn classify(name: &str) -> BlobKind {
    match name {
        "nmethod" => BlobKind::Nmethod,
        "native nmethod" => BlobKind::NativeNmethod,
        "Interpreter" => BlobKind::Interpreter,
        "vtable chunks" => BlobKind::VtableChunks,
        n if n.starts_with("StubRoutines") || n.starts_with("Stub") => BlobKind::Stub,
        _ => BlobKind::FramedStub,
    }
}

/// The code cache of one JVM: heap bounds read once, blobs read on demand.
#[derive(Debug, Clone)]
pub struct CodeCache {
    layout: Layout,
    heaps: Vec<Heap>,
    pub low: u64,
    pub high: u64,
}

impl CodeCache {
    /// Read the heap list; `None` if the layout is not exported or the JVM has not set it up yet.
    pub fn discover(vs: &VmStructs, mem: &(impl TargetMemory + ?Sized)) -> Option<Self> {
        let layout = Layout::discover(vs)?;
        let array = mem.read_u64(layout.heaps_var).ok().filter(|&a| a != 0)?;
        let len = mem
            .read_u32(array.wrapping_add(layout.array_len))
            .ok()?
            .min(16);
        let data = mem.read_u64(array.wrapping_add(layout.array_data)).ok()?;
        let mut heaps = Vec::new();
        for i in 0..len as u64 {
            let heap = mem.read_u64(data.wrapping_add(8 * i)).ok()?;
            let memory = heap.wrapping_add(layout.heap_memory);
            heaps.push(Heap {
                low: mem.read_u64(memory.wrapping_add(layout.vs_low)).ok()?,
                high: mem.read_u64(memory.wrapping_add(layout.vs_high)).ok()?,
                segmap: mem
                    .read_u64(
                        heap.wrapping_add(layout.heap_segmap)
                            .wrapping_add(layout.vs_low),
                    )
                    .ok()?,
                log2_segment: mem
                    .read_u32(heap.wrapping_add(layout.heap_log2_segment))
                    .ok()?
                    .min(20),
            });
        }
        Some(CodeCache {
            low: mem.read_u64(layout.low_bound_var).ok()?,
            high: mem.read_u64(layout.high_bound_var).ok()?,
            layout,
            heaps,
        })
    }

    pub fn contains(&self, pc: u64) -> bool {
        self.low <= pc && pc < self.high
    }

    /// Committed heap bounds change as the code cache grows: re-read them.
    pub fn refresh(&mut self, vs: &VmStructs, mem: &(impl TargetMemory + ?Sized)) {
        if let Some(fresh) = CodeCache::discover(vs, mem) {
            *self = fresh;
        }
    }

    /// Address of the CodeBlob containing `pc`, by the heap's segment map.
    pub fn find_blob(&self, mem: &(impl TargetMemory + ?Sized), pc: u64) -> Option<u64> {
        let heap = self.heaps.iter().find(|h| h.low <= pc && pc < h.high)?;
        let mut idx = (pc - heap.low) >> heap.log2_segment;
        let mut hops = 0;
        // Read the map in chunks ending at `idx`: a walk back to the block start usually stays
        // within one read.
        let mut chunk = [0u8; 64];
        'read: loop {
            let base = idx.saturating_sub(chunk.len() as u64 - 1);
            let n = (idx - base + 1) as usize;
            mem.read(heap.segmap.wrapping_add(base), &mut chunk[..n])
                .ok()?;
            loop {
                let tag = chunk[(idx - base) as usize];
                if tag == 0xff {
                    return None;
                }
                if tag == 0 {
                    break 'read;
                }
                idx = idx.checked_sub(tag as u64)?;
                hops += 1;
                if hops > MAX_SEGMAP_HOPS {
                    return None;
                }
                if idx < base {
                    continue 'read;
                }
            }
        }
        let block = heap.low + (idx << heap.log2_segment);
        if mem
            .read_u8(block.wrapping_add(self.layout.block_used))
            .ok()?
            == 0
        {
            return None;
        }
        block.checked_add(self.layout.heap_block_size)
    }

    fn read_bound(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        blob: u64,
        b: CodeBound,
    ) -> Option<u64> {
        match b {
            CodeBound::Pointer(off) => mem.read_u64(blob.wrapping_add(off)).ok(),
            CodeBound::Offset { off, width } => {
                let v = match width {
                    2 => mem.read_u16(blob.wrapping_add(off)).ok()? as u64,
                    _ => mem.read_u32(blob.wrapping_add(off)).ok()? as u64,
                };
                blob.checked_add(v)
            }
        }
    }

    /// Read a blob's header; `None` when it is not plausible.
    pub fn read_blob(&self, mem: &(impl TargetMemory + ?Sized), blob: u64) -> Option<BlobInfo> {
        let l = &self.layout;
        let size = mem.read_u32(blob.wrapping_add(l.blob_size)).ok()? as u64;
        if size == 0 || size > MAX_BLOB_SIZE {
            return None;
        }
        let end = blob.checked_add(size)?;
        let name = mem
            .read_cstr(mem.read_u64(blob.wrapping_add(l.blob_name)).ok()?)
            .ok()?;
        let kind = classify(&name);
        let code_begin = self.read_bound(mem, blob, l.code_begin)?;
        let code_end = self.read_bound(mem, blob, l.code_end)?;
        let frame_words = mem.read_u32(blob.wrapping_add(l.blob_frame_size)).ok()? as i32;
        let (fc_off, fc_width) = l.blob_frame_complete;
        let frame_complete = match fc_width {
            2 => mem.read_u16(blob.wrapping_add(fc_off)).ok()? as i16 as i64,
            _ => mem.read_u32(blob.wrapping_add(fc_off)).ok()? as i32 as i64,
        };
        let is_nmethod = matches!(kind, BlobKind::Nmethod | BlobKind::NativeNmethod);
        let nm_read = |off: Option<u64>| {
            off.and_then(|o| mem.read_u64(blob.wrapping_add(o)).ok())
                .unwrap_or(0)
        };
        Some(BlobInfo {
            start: blob,
            end,
            code_begin,
            code_end,
            kind,
            name,
            frame_size: (frame_words.clamp(0, 1 << 16) as u64) * 8,
            frame_complete: u64::try_from(frame_complete)
                .ok()
                .and_then(|fc| code_begin.checked_add(fc)),
            method: if is_nmethod { nm_read(l.nm_method) } else { 0 },
            deopt_handler: match (is_nmethod, l.nm_deopt_handler) {
                (true, Some(b)) => self.read_bound(mem, blob, b).unwrap_or(0),
                _ => 0,
            },
            orig_pc_offset: match (is_nmethod, l.nm_orig_pc_offset) {
                (true, Some(o)) => mem
                    .read_u32(blob.wrapping_add(o))
                    .map(|v| v as i32 as i64)
                    .unwrap_or(0),
                _ => 0,
            },
        })
    }

    /// Tier, compile id and OSR entry of the nmethod whose code starts at `code_addr` (JVMTI's
    /// `CompiledMethodLoad` address, `nm->code_begin()`) and is `code_size` bytes long. `None`
    /// unless the blob there is an nmethod whose code starts there and holds that many bytes: the
    /// load record may arrive after its code was freed, and a different blob must not lend its
    /// facts.
    pub fn compiled_code(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        code_addr: u64,
        code_size: u32,
    ) -> Option<CompiledCode> {
        let fields = self.layout.nm_compile?;
        let blob = self.read_blob(mem, self.find_blob(mem, code_addr)?)?;
        // JDK 11 reports the instructions' size, later JDKs the whole code section's.
        let exact = blob.code_begin == code_addr
            && blob.code_end.checked_sub(code_addr) >= Some(code_size as u64);
        if blob.kind != BlobKind::Nmethod || !exact {
            return None;
        }
        let entry_bci = mem
            .read_u32(blob.start.wrapping_add(fields.entry_bci))
            .ok()? as i32;
        let compile_id = mem
            .read_u32(blob.start.wrapping_add(fields.compile_id))
            .ok()?;
        let level = mem
            .read_u8(blob.start.wrapping_add(fields.comp_level))
            .ok()?;
        // CompLevel_full_optimization is 4; anything else is not a compiled level.
        if !(1..=4).contains(&level) {
            return None;
        }
        Some(CompiledCode {
            level,
            compile_id,
            // InvocationEntryBci (-1) marks a normal compile.
            osr_bci: (entry_bci >= 0).then_some(entry_bci),
            code_size,
        })
    }
}
