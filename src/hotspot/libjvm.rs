//! Locating libjvm.so in the target and resolving its exported symbols.

use crate::error::{err, Error, ErrorKind, Result};
use crate::target::{Mapping, TargetProcess};
use object::{Object, ObjectSegment, ObjectSymbol};
use std::collections::HashMap;

/// The target's libjvm: where it is mapped and the run-time addresses of the symbols we asked for.
#[derive(Debug, Clone)]
pub struct LibJvm {
    /// Path as the target sees it.
    pub path: String,
    /// Load bias: run-time address minus ELF virtual address.
    pub bias: u64,
    pub symbols: HashMap<String, u64>,
}

/// Symbols jvmperf reads from libjvm's dynamic symbol table.
pub const VMSTRUCTS_SYMBOLS: &[&str] = &[
    "gHotSpotVMStructs",
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMTypes",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySuperclassNameOffset",
    "gHotSpotVMTypeEntryIsOopTypeOffset",
    "gHotSpotVMTypeEntryIsIntegerTypeOffset",
    "gHotSpotVMTypeEntryIsUnsignedOffset",
    "gHotSpotVMTypeEntrySizeOffset",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMIntConstants",
    "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
    "gHotSpotVMIntConstantEntryArrayStride",
    "gHotSpotVMLongConstants",
    "gHotSpotVMLongConstantEntryNameOffset",
    "gHotSpotVMLongConstantEntryValueOffset",
    "gHotSpotVMLongConstantEntryArrayStride",
];

pub fn find_libjvm_mappings(maps: &[Mapping]) -> Vec<&Mapping> {
    maps.iter()
        .filter(|m| m.path.ends_with("/libjvm.so"))
        .collect()
}

impl LibJvm {
    pub fn locate(process: &TargetProcess) -> Result<Self> {
        let maps = process.maps()?;
        let jvm_maps = find_libjvm_mappings(&maps);
        let Some(first) = jvm_maps.iter().min_by_key(|m| m.start) else {
            return err(
                ErrorKind::NotJvm,
                format!(
                    "process {} ({}) is not a HotSpot JVM: no libjvm.so is mapped",
                    process.pid, process.name
                ),
            );
        };
        // The mapping of file offset 0 tells us the bias; read the file through the target's root.
        let base = jvm_maps
            .iter()
            .filter(|m| m.offset == 0)
            .map(|m| m.start)
            .min()
            .unwrap_or(first.start);
        let file_path = process.path_in_root(std::path::Path::new(&first.path));
        let cannot = |e: std::io::Error| {
            Error::new(
                ErrorKind::Permission,
                format!(
                    "cannot read the target's libjvm.so at {}: {e}",
                    file_path.display()
                ),
            )
        };
        let file = std::fs::File::open(&file_path).map_err(cannot)?;
        // SAFETY: the mapping is read-only and private; a concurrent truncation of libjvm.so (which
        // would break the running JVM anyway) is the only way to invalidate it.
        let data = unsafe { memmap2::Mmap::map(&file) }.map_err(cannot)?;
        Self::from_elf(&first.path, &data, base)
    }

    /// Resolve the VMStructs symbols of an ELF image mapped with file offset 0 at `base`.
    pub fn from_elf(path: &str, data: &[u8], base: u64) -> Result<Self> {
        let bad = |e: object::Error| {
            Error::new(
                ErrorKind::NotJvm,
                format!("cannot parse {path} as ELF: {e}"),
            )
        };
        let file = object::File::parse(data).map_err(bad)?;
        let first_vaddr = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
        let bias = base.wrapping_sub(first_vaddr);
        let mut symbols = HashMap::new();
        for sym in file.dynamic_symbols() {
            if let Ok(name) = sym.name() {
                if VMSTRUCTS_SYMBOLS.contains(&name) {
                    symbols.insert(name.to_string(), sym.address().wrapping_add(bias));
                }
            }
        }
        if !symbols.contains_key("gHotSpotVMStructs") {
            return err(
                ErrorKind::NotJvm,
                format!(
                    "{path} does not export gHotSpotVMStructs; only HotSpot JVMs are supported"
                ),
            );
        }
        Ok(LibJvm {
            path: path.to_string(),
            bias,
            symbols,
        })
    }

    pub fn symbol(&self, name: &str) -> Option<u64> {
        self.symbols.get(name).copied()
    }
}
