//! Locating libjvm.so in the target and resolving its exported symbols.

use crate::error::{err, Error, ErrorKind, Result};
use crate::process::mapped::{load_bias, open_mapped_file, target_path};
use crate::process::{Mapping, TargetProcess};
use object::{Object, ObjectSymbol};
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

fn find_libjvm_mappings(maps: &[Mapping]) -> Vec<&Mapping> {
    maps.iter()
        .filter(|m| target_path(m).ends_with("/libjvm.so"))
        .collect()
}

impl LibJvm {
    /// Find the loaded libjvm by its executable mapping (see `load_bias`: other mappings of the
    /// file may be another tool's) and resolve the VMStructs symbols.
    pub fn locate(process: &TargetProcess) -> Result<Self> {
        let maps = process.maps()?;
        let Some(text) = find_libjvm_mappings(&maps)
            .into_iter()
            .find(|m| m.perms.contains('x'))
        else {
            // An exiting process has released its memory: no mapping is left to read.
            if maps.is_empty() || !process.is_alive() {
                return err(
                    ErrorKind::NoProcess,
                    format!("process {} ({}) has exited", process.pid, process.name),
                );
            }
            return err(
                ErrorKind::NotJvm,
                format!(
                    "process {} ({}) is not a HotSpot JVM: no libjvm.so is mapped",
                    process.pid, process.name
                ),
            );
        };
        let Some((_, data, _)) = open_mapped_file(process, text) else {
            return err(
                ErrorKind::Permission,
                format!(
                    "cannot open the target's libjvm.so ({} in its root, or /proc/{}/map_files): run as the JVM's user or root",
                    target_path(text),
                    process.pid
                ),
            );
        };
        Self::from_elf(target_path(text), &data, text.start, text.offset)
    }

    /// Resolve the VMStructs symbols of an ELF image whose executable segment's file offset
    /// `offset` is mapped at `start`.
    pub fn from_elf(path: &str, data: &[u8], start: u64, offset: u64) -> Result<Self> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::NotJvm,
                format!("cannot parse {path} as ELF: {why}"),
            )
        };
        let file = object::File::parse(data).map_err(|e| bad(e.to_string()))?;
        let bias = load_bias(&file, start, offset).ok_or_else(|| {
            bad(format!(
                "no executable segment holds file offset {offset:#x}"
            ))
        })?;
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
