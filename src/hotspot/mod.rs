//! Everything that knows HotSpot's internal layout. Offsets and sizes come from the target's own
//! VMStructs tables at run time; nothing here is hard-coded per JDK build.
//!
//! All of it is untrusted: a corrupt or hostile target can put anything in its tables and heaps.
//! Loops and allocations are bounded, and an address computed from target values wraps
//! (`wrapping_add`) as the hardware's would: it is then just another bad pointer, whose read fails
//! or yields garbage that the next plausibility check rejects. Values that are results rather than
//! places to read (a blob's end, a code start) are checked instead, and `None` when they overflow.

pub mod codecache;
pub mod flags;
pub mod frame;
pub mod libjvm;
pub mod locks;
pub mod method;
pub mod oops;
pub mod scopes;
pub mod snapshot;
pub mod threads;
pub mod unsigned5;
pub mod vmstructs;

use crate::error::{Error, ErrorKind, Result};
use crate::process::{
    MemError, MemFault, PageCachedMemory, ProcessMemory, TargetMemory, TargetProcess,
};
use flags::FlagTable;
use libjvm::LibJvm;
use std::time::Duration;
use vmstructs::{VmStructs, VmStructsError};

/// A HotSpot JVM as seen from outside: its libjvm, its VMStructs, and its memory: the live
/// process's ([`ProcessMemory`], from [`HotSpot::open`]), or a snapshot of what was read of it
/// ([`snapshot::ThreadSnapshot::hotspot`]), so the walker and symbolizer are tested on captures.
pub struct HotSpot<M = ProcessMemory> {
    pub libjvm: LibJvm,
    pub vmstructs: VmStructs,
    pub mem: M,
}

/// Attempts at reading VMStructs before giving up, and the pause before the first retry (doubled
/// each time). A failed read is retried from the maps up: while another tool attaches, the target's
/// mappings change under us.
const OPEN_ATTEMPTS: u32 = 5;
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(50);

impl HotSpot {
    pub fn open(process: &TargetProcess) -> Result<Self> {
        let mut pause = OPEN_RETRY_PAUSE;
        for _ in 1..OPEN_ATTEMPTS {
            match Self::try_open(process) {
                Err(OpenError::Transient(_)) => std::thread::sleep(pause),
                other => return other.map_err(|e| e.into_error(process)),
            }
            pause *= 2;
        }
        Self::try_open(process).map_err(|e| e.into_error(process))
    }

    fn try_open(process: &TargetProcess) -> std::result::Result<Self, OpenError> {
        let libjvm = LibJvm::locate(process).map_err(OpenError::Final)?;
        let mem = ProcessMemory { pid: process.pid };
        match VmStructs::read(&PageCachedMemory::new(mem), &libjvm.symbols) {
            Ok(vmstructs) => Ok(HotSpot {
                libjvm,
                vmstructs,
                mem,
            }),
            Err(VmStructsError::Memory(e)) if e.cause != MemFault::Unmapped => {
                Err(OpenError::Memory(e))
            }
            Err(VmStructsError::MissingSymbol(s)) => Err(OpenError::Final(Error::new(
                ErrorKind::NotJvm,
                format!("{} does not export {s}", libjvm.path),
            ))),
            Err(e) => Err(OpenError::Transient(e)),
        }
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

impl<M: TargetMemory> HotSpot<M> {
    pub fn flags(&self) -> Option<FlagTable> {
        FlagTable::locate(&self.vmstructs, &self.mem)?.ok()
    }

    /// The VM's release string (e.g. `17.0.12+7-Debian-1deb12u1`), `Abstract_VM_Version::_s_vm_release`.
    pub fn vm_release(&self) -> Option<String> {
        let a = self
            .vmstructs
            .address("Abstract_VM_Version", "_s_vm_release")?;
        let p = self.mem.read_u64(a).ok()?;
        self.mem.read_cstr(p).ok()
    }

    pub fn read_bool_flag(&self, name: &str) -> Option<bool> {
        self.flags()?.read_bool(&self.mem, name).ok().flatten()
    }
}

/// Why VMStructs could not be read, before it becomes a user-facing error.
enum OpenError {
    /// Not worth retrying: no libjvm, no rights to its file, a table it does not export.
    Final(Error),
    /// The target's memory is not ours to read, or the process is gone.
    Memory(MemError),
    /// Unreadable or inconsistent tables in a readable process: retried.
    Transient(VmStructsError),
}

impl OpenError {
    fn into_error(self, process: &TargetProcess) -> Error {
        let pid = process.pid;
        match self {
            OpenError::Final(e) => e,
            OpenError::Memory(e) if e.cause == MemFault::NoProcess => Error::new(
                ErrorKind::NoProcess,
                format!("process {pid} exited while jvmperf was reading its VMStructs"),
            ),
            OpenError::Memory(e) => Error::new(
                ErrorKind::Permission,
                format!(
                    "cannot read the memory of JVM {pid}: {e} (jvmperf needs ptrace rights: run as the JVM's user or root, and check kernel.yama.ptrace_scope)"
                ),
            ),
            OpenError::Transient(e) => Error::new(
                ErrorKind::NotJvm,
                format!(
                    "cannot read the VMStructs of JVM {pid} ({OPEN_ATTEMPTS} tries): {e} (its libjvm.so is not laid out as the loaded file says: a JVM still starting or exiting, or a libjvm.so without HotSpot's tables)"
                ),
            ),
        }
    }
}

#[cfg(test)]
pub(crate) mod fixture_tests {
    //! VMStructs, the flag table and the code cache layout read from memory captured from a real
    //! JDK 17 (`cargo run --example capture_vmstructs`).
    use super::codecache::CodeCache;
    use super::flags::FlagTable;
    use super::method::MethodLayout;
    use super::vmstructs::VmStructs;
    use crate::process::{SnapshotMemory, TargetMemory};
    use std::collections::HashMap;

    pub(crate) fn fixture() -> (SnapshotMemory, HashMap<String, u64>) {
        let mem =
            SnapshotMemory::from_bytes(include_bytes!("../../tests/fixtures/jdk17-vmstructs.mem"))
                .expect("snapshot");
        let symbols = super::vmstructs::parse_symbol_lines(include_str!(
            "../../tests/fixtures/jdk17-vmstructs.symbols"
        ));
        (mem, symbols)
    }

    #[test]
    fn jdk17_tables_flags_and_code_cache() {
        let (mem, symbols) = fixture();
        let vs = VmStructs::read(&mem, &symbols).expect("VMStructs");
        assert!(vs.fields.len() > 500 && vs.types.len() > 500);
        assert_eq!(vs.offset("CodeBlob", "_frame_size"), Some(28));
        assert_eq!(vs.size("nmethod"), Some(352));
        assert!(vs
            .address("StubRoutines", "_call_stub_return_address")
            .is_some());
        let flags = FlagTable::locate(&vs, &mem).unwrap().unwrap();
        assert_eq!(
            flags.read_bool(&mem, "DisableAttachMechanism").unwrap(),
            Some(false)
        );
        assert_eq!(
            flags.read_bool(&mem, "EnableDynamicAgentLoading").unwrap(),
            Some(true)
        );
        assert!(flags
            .read_bool(&mem, "DebugNonSafepoints")
            .unwrap()
            .is_some());
        let cc = CodeCache::discover(&vs, &mem).expect("code cache");
        assert!(cc.low < cc.high);
        assert!(MethodLayout::discover(&vs).is_some());
    }

    /// Corrupt memory: every failure is an error, never a panic or an endless loop.
    #[test]
    fn corrupt_snapshots_fail_cleanly() {
        let (mem, symbols) = fixture();
        let stride_var = symbols["gHotSpotVMStructEntryArrayStride"];
        for stride in [0u64, 7, 1 << 40] {
            let mut bad = mem.clone();
            bad.add(stride_var, stride.to_le_bytes().to_vec());
            let r = VmStructs::read(&bad, &symbols);
            assert!(stride == 7 && r.is_ok() || r.is_err(), "stride {stride}");
        }
        let mut bytes = mem.to_bytes();
        // Flip bytes inside every captured region (not its header): reads may fail or give
        // nonsense, but never panic.
        let mut at = 0;
        while at + 16 <= bytes.len() {
            let len = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()) as usize;
            for i in (at + 16..at + 16 + len).step_by(97) {
                bytes[i] ^= 0x5a;
            }
            at += 16 + len;
        }
        let bad = SnapshotMemory::from_bytes(&bytes).unwrap();
        if let Ok(vs) = VmStructs::read(&bad, &symbols) {
            let _ = CodeCache::discover(&vs, &bad);
            if let Some(Ok(flags)) = FlagTable::locate(&vs, &bad) {
                let _ = flags.read_bool(&bad, "DebugNonSafepoints");
            }
        }
        assert!(VmStructs::read(&SnapshotMemory::new(), &symbols).is_err());
        let _ = mem.read_u8(0);
    }

    /// `mem` with the u64 at `addr` replaced, inside its captured page.
    fn patch(mem: &SnapshotMemory, addr: u64, value: u64) -> SnapshotMemory {
        let page = addr & !0xfff;
        let mut bytes = vec![0u8; 4096];
        mem.read(page, &mut bytes).expect("a captured page");
        let at = (addr - page) as usize;
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        let mut out = mem.clone();
        out.add(page, bytes);
        out
    }

    /// Pointers and tables at the top of the address space (found by `fuzz/`, target vmstructs):
    /// reads there fail; nothing overflows.
    #[test]
    fn pointers_near_the_end_of_the_address_space() {
        let (mem, symbols) = fixture();
        let vs = VmStructs::read(&mem, &symbols).unwrap();
        let top = u64::MAX - 4;
        let layout = MethodLayout::discover(&vs).unwrap();
        assert!(layout.read(&mem, top).is_none());
        assert!(layout.code_start(&mem, top).is_none());
        let cc = CodeCache::discover(&vs, &mem).unwrap();
        assert!(cc.read_blob(&mem, top).is_none());
        assert!(cc.find_blob(&mem, top).is_none());
        assert!(cc.compiled_code(&mem, top, 16).is_none());
        assert!(
            cc.compiled_code(&mem, cc.low, 16).is_none(),
            "no nmethod captured"
        );
        // The flag array, and VMStructs' own table, moved to the top.
        let flags_var = vs.address("JVMFlag", "flags").unwrap();
        let bad = patch(&mem, flags_var, top);
        let flags = FlagTable::locate(&vs, &bad).unwrap().unwrap();
        assert!(flags.read_bool(&bad, "DebugNonSafepoints").is_err());
        let bad = patch(&mem, symbols["gHotSpotVMStructs"], top);
        assert!(VmStructs::read(&bad, &symbols).is_err());
        // A string running into the end of the address space.
        let mut edge = SnapshotMemory::new();
        edge.add(u64::MAX - 255, vec![b'x'; 256]);
        assert!(edge.read_cstr(u64::MAX - 255).is_err());
    }

    /// Thousands of entries each naming a distinct 4 KiB string would take gigabytes: the names
    /// have a budget.
    #[test]
    fn huge_names_exhaust_the_budget() {
        let (mem, symbols) = fixture();
        let global = |name: &str| mem.read_u64(symbols[name]).unwrap();
        let (stride, type_off, field_off) = (
            global("gHotSpotVMStructEntryArrayStride"),
            global("gHotSpotVMStructEntryTypeNameOffset"),
            global("gHotSpotVMStructEntryFieldNameOffset"),
        );
        let (strings, table, entries) = (0x10_0000u64, 0x20_0000u64, 2048u64);
        let mut bad = patch(&mem, symbols["gHotSpotVMStructs"], table);
        // 8 KiB of 'n': entry i names the string starting 4097 + i bytes in (distinct, 2-4 KiB).
        let mut text = vec![b'n'; 8192];
        text.push(0);
        bad.add(strings, text);
        let mut rows = vec![0u8; ((entries + 1) * stride) as usize];
        for i in 0..entries {
            let name = (strings + 4097 + i).to_le_bytes();
            for off in [type_off, field_off] {
                let at = (i * stride + off) as usize;
                rows[at..at + 8].copy_from_slice(&name);
            }
        }
        bad.add(table, rows);
        let err = VmStructs::read(&bad, &symbols).unwrap_err().to_string();
        assert!(err.contains("names take more than"), "{err}");
    }
}
