//! One-frame-at-a-time native unwinding with framehop over the target's modules, so the HotSpot
//! walker can interleave its own JIT/interpreter frames with native ones.

use super::modules::{FileBytes, Module, ModuleChanges, ModuleRef, Modules};
use super::sigframe::{self, Interrupted};
use crate::error::Result;
use crate::process::TargetProcess;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Unwinder};
use object::{CompressionFormat, Object, ObjectSection};
use std::borrow::Cow;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// The registers framehop needs on x86_64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeRegs {
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// The caller's registers; its `pc` is a return address.
    Caller(NativeRegs),
    /// The stack ends here (`_start`, `clone`, thread start: the unwind info says so).
    Root,
    /// The pc is the signal trampoline: the caller is the code the signal interrupted, at the
    /// instruction it was about to run (not a return address).
    Interrupted(Interrupted),
    /// The pc is in no known module (JIT code, or a library loaded too recently to be seen).
    NoModule,
    Failed(String),
}

pub struct NativeUnwinder {
    modules: Modules,
    unwinder: UnwinderX86_64<SectionBytes>,
    /// framehop's rule cache: kept across samples, it makes repeated steps at the same pc cheap.
    cache: CacheX86_64,
    /// Where the signal trampolines of the loaded modules are.
    trampolines: Vec<u64>,
}

impl NativeUnwinder {
    pub fn new(process: &TargetProcess) -> Result<Self> {
        let modules = Modules::scan(process)?;
        let mut unwinder = UnwinderX86_64::new();
        for m in modules.all() {
            unwinder.add_module(framehop_module(m));
        }
        let trampolines = modules
            .all()
            .iter()
            .flat_map(|m| sigframe::trampolines(m))
            .collect();
        Ok(NativeUnwinder {
            modules,
            unwinder,
            cache: CacheX86_64::new(),
            trampolines,
        })
    }

    /// An unwinder over modules known only by their address ranges (a snapshot of a process,
    /// [`Modules::without_files`]): a step in one of them fails, as there is no unwind info.
    pub fn without_files(modules: Modules) -> Self {
        NativeUnwinder {
            modules,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            trampolines: Vec::new(),
        }
    }

    pub fn modules(&self) -> &Modules {
        &self.modules
    }

    /// The module containing `pc`, rescanning the target's mappings (rate-limited) if none does.
    pub fn module_for(&mut self, pc: u64) -> Option<ModuleRef> {
        if let Some(m) = self.modules.find(pc) {
            return Some(m.clone());
        }
        let changes = self.modules.refresh_for(pc)?;
        self.apply(changes);
        self.modules.find(pc).cloned()
    }

    /// Rescan the target's mappings now.
    pub fn rescan(&mut self) -> Result<()> {
        let changes = self.modules.rescan()?;
        self.apply(changes);
        Ok(())
    }

    /// Unwind one frame: from the registers of a frame, the caller's. `first_frame` means `pc` is
    /// the sampled instruction rather than a return address. `read_stack` reads a u64 of the
    /// sampled stack.
    pub fn step(
        &mut self,
        regs: NativeRegs,
        first_frame: bool,
        read_stack: &mut dyn FnMut(u64) -> std::result::Result<u64, ()>,
    ) -> StepOutcome {
        let address = if first_frame {
            FrameAddress::from_instruction_pointer(regs.pc)
        } else {
            match FrameAddress::from_return_address(regs.pc) {
                Some(a) => a,
                None => return StepOutcome::Failed("return address 0".into()),
            }
        };
        // Outside any module framehop would guess with frame pointers; JIT frames are not ours.
        // So would it in a module whose file is not at hand.
        let lookup = address.address_for_lookup();
        let has_file = match self.modules.find(lookup) {
            Some(m) => m.has_file_bytes(),
            None => match self.module_for(lookup) {
                Some(m) => m.has_file_bytes(),
                None => return StepOutcome::NoModule,
            },
        };
        if !has_file {
            return StepOutcome::Failed("no unwind info: the module's file is not at hand".into());
        }
        // A handler's return lands on the trampoline's first instruction; a sample may also
        // catch the trampoline at its `syscall` or, inside rt_sigreturn, just after it. sp is at
        // the ucontext all along.
        let offsets: &[u64] = if first_frame { &[0, 7, 9] } else { &[0] };
        if offsets
            .iter()
            .any(|&off| self.is_sigreturn(regs.pc.wrapping_sub(off)))
        {
            return self.signal_frame(regs, read_stack);
        }
        let mut fh_regs = UnwindRegsX86_64::new(regs.pc, regs.sp, regs.bp);
        match self.unwinder.unwind_frame(
            address,
            &mut fh_regs,
            &mut self.cache,
            &mut &mut *read_stack,
        ) {
            Ok(Some(pc)) => StepOutcome::Caller(NativeRegs {
                pc,
                sp: fh_regs.sp(),
                bp: fh_regs.bp(),
            }),
            Ok(None) => StepOutcome::Root,
            Err(e) => StepOutcome::Failed(e.to_string()),
        }
    }

    fn signal_frame(
        &self,
        regs: NativeRegs,
        read_stack: &mut dyn FnMut(u64) -> std::result::Result<u64, ()>,
    ) -> StepOutcome {
        match sigframe::interrupted(regs.sp, read_stack) {
            Some(regs) => StepOutcome::Interrupted(regs),
            None => StepOutcome::Failed("signal frame unreadable".into()),
        }
    }

    /// Whether `pc` is the first instruction of a signal trampoline.
    fn is_sigreturn(&self, pc: u64) -> bool {
        self.trampolines.contains(&pc)
    }

    fn apply(&mut self, changes: ModuleChanges) {
        for m in changes.removed {
            self.unwinder.remove_module(m.start);
        }
        for m in &changes.added {
            self.unwinder.add_module(framehop_module(m));
        }
        self.trampolines = self
            .modules
            .all()
            .iter()
            .flat_map(|m| sigframe::trampolines(m))
            .collect();
    }
}

/// A byte range of shared file bytes, given to framehop without copying.
#[derive(Clone)]
struct SectionBytes {
    bytes: Arc<FileBytes>,
    range: Range<usize>,
}

impl SectionBytes {
    fn new(bytes: Arc<FileBytes>, range: Range<usize>) -> Option<Self> {
        bytes.get(range.clone())?;
        Some(SectionBytes { bytes, range })
    }

    fn owned(data: Vec<u8>) -> Self {
        let range = 0..data.len();
        SectionBytes {
            bytes: Arc::new(FileBytes::Copied(data)),
            range,
        }
    }
}

// framehop's section-info struct derives `Default`, which needs it of the section type.
impl Default for SectionBytes {
    fn default() -> Self {
        SectionBytes::owned(Vec::new())
    }
}

impl Deref for SectionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.range.clone()]
    }
}

/// framehop's view of a module: section addresses and bytes, borrowed from the mapped file.
fn framehop_module(m: &Module) -> framehop::Module<SectionBytes> {
    let info = object::File::parse(m.data())
        .map(|elf| section_info(m, &elf))
        .unwrap_or_default();
    framehop::Module::new(m.path.clone(), m.start..m.end, m.bias, info)
}

fn section_info(m: &Module, elf: &object::File) -> ExplicitModuleSectionInfo<SectionBytes> {
    let range = |name: &str| -> Option<Range<u64>> {
        let s = elf.section_by_name(name)?;
        Some(s.address()..s.address() + s.size())
    };
    let data =
        |name: &str| -> Option<SectionBytes> { section_bytes(m, &elf.section_by_name(name)?) };
    // framehop reads `.text` only for instruction analysis where unwind tables may be imprecise
    // (Mach-O); handing it over costs nothing, the bytes are mapped.
    ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        text: data(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame: data(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        eh_frame_hdr: data(".eh_frame_hdr"),
        debug_frame: data(".debug_frame"),
        ..Default::default()
    }
}

/// A section's bytes: a window on the file when stored plainly, a decompressed copy otherwise.
fn section_bytes(m: &Module, section: &object::Section) -> Option<SectionBytes> {
    let stored = section.compressed_file_range().ok()?;
    if stored.format == CompressionFormat::None {
        let start = usize::try_from(stored.offset).ok()?;
        let end = start.checked_add(usize::try_from(stored.uncompressed_size).ok()?)?;
        return SectionBytes::new(m.bytes.clone(), start..end);
    }
    match section.uncompressed_data().ok()? {
        Cow::Owned(data) => Some(SectionBytes::owned(data)),
        Cow::Borrowed(data) => Some(SectionBytes::owned(data.to_vec())),
    }
}

#[cfg(test)]
mod tests;
