//! Everything that knows HotSpot's internal layout. Offsets and sizes come from the target's own
//! VMStructs tables at run time; nothing here is hard-coded per JDK build.

pub mod codecache;
pub mod flags;
pub mod libjvm;
pub mod method;
pub mod vmstructs;

use crate::error::{Error, ErrorKind, Result};
use crate::target::{PageCachedMemory, ProcessMemory, TargetMemory, TargetProcess};
use flags::FlagTable;
use libjvm::LibJvm;
use vmstructs::VmStructs;

/// A live HotSpot JVM as seen from outside: its libjvm, its VMStructs, and its memory.
pub struct HotSpot {
    pub libjvm: LibJvm,
    pub vmstructs: VmStructs,
    pub mem: ProcessMemory,
}

impl HotSpot {
    pub fn open(process: &TargetProcess) -> Result<Self> {
        let libjvm = LibJvm::locate(process)?;
        let mem = ProcessMemory { pid: process.pid };
        let vmstructs = VmStructs::read(&PageCachedMemory::new(mem), &libjvm.symbols).map_err(|e| {
            Error::new(
                ErrorKind::Permission,
                format!(
                    "cannot read the VMStructs of JVM {}: {e} (jvmperf needs ptrace rights: run as the JVM's user or root, and check kernel.yama.ptrace_scope)",
                    process.pid
                ),
            )
        })?;
        Ok(HotSpot {
            libjvm,
            vmstructs,
            mem,
        })
    }

    pub fn flags(&self) -> Option<FlagTable> {
        FlagTable::locate(&self.vmstructs, &self.mem)?.ok()
    }

    pub fn read_bool_flag(&self, name: &str) -> Option<bool> {
        self.flags()?.read_bool(&self.mem, name).ok().flatten()
    }

    /// Make C2 record debug info at every instruction boundary (not only at safepoints) for code it
    /// compiles from now on, even after jvmperf detaches. The shim's CompiledMethodLoad subscription
    /// has the same effect only while it is enabled (JDK `debugInfoRec.cpp
    /// compute_recording_non_safepoints`). Returns whether the flag is now on.
    pub fn enable_debug_non_safepoints(&self) -> bool {
        let Some(table) = self.flags() else {
            return false;
        };
        match table.find(&self.mem, "DebugNonSafepoints") {
            Ok(Some(loc)) => {
                self.mem.read_u8(loc.value_addr) == Ok(1)
                    || (self.mem.write(loc.value_addr, &[1]).is_ok()
                        && self.mem.read_u8(loc.value_addr) == Ok(1))
            }
            _ => false,
        }
    }
}
