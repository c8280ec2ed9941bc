//! The JVM's `-XX` flag table (`JVMFlag::flags`, `Flag::flags` before JDK 11), found through VMStructs.

use super::vmstructs::VmStructs;
use crate::process::{MemError, TargetMemory};

/// A bounded guard against a corrupt `numFlags`.
const MAX_FLAGS: u64 = 10_000;

/// One `-XX` flag: where its value lives in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagLocation {
    pub name: String,
    pub value_addr: u64,
}

/// Layout of the flag table, discovered from VMStructs.
#[derive(Debug, Clone)]
pub struct FlagTable {
    array: u64,
    count: u64,
    entry_size: u64,
    name_off: u64,
    addr_off: u64,
}

impl FlagTable {
    pub fn locate(vs: &VmStructs, mem: &dyn TargetMemory) -> Option<Result<Self, MemError>> {
        let ty = ["JVMFlag", "Flag"]
            .into_iter()
            .find(|t| vs.address(t, "flags").is_some())?;
        let entry_size = vs.size(ty)?;
        let name_off = vs.offset(ty, "_name")?;
        let addr_off = vs.offset(ty, "_addr")?;
        let flags_var = vs.address(ty, "flags")?;
        let num_var = vs.address(ty, "numFlags")?;
        Some((|| {
            Ok(FlagTable {
                array: mem.read_u64(flags_var)?,
                count: mem.read_u64(num_var)?.min(MAX_FLAGS),
                entry_size,
                name_off,
                addr_off,
            })
        })())
    }

    pub fn find(
        &self,
        mem: &dyn TargetMemory,
        name: &str,
    ) -> Result<Option<FlagLocation>, MemError> {
        for i in 0..self.count {
            let entry = self.array.wrapping_add(i.wrapping_mul(self.entry_size));
            let name_ptr = mem.read_u64(entry.wrapping_add(self.name_off))?;
            if name_ptr == 0 {
                continue;
            }
            if mem.read_cstr(name_ptr)? == name {
                return Ok(Some(FlagLocation {
                    name: name.to_string(),
                    value_addr: mem.read_u64(entry.wrapping_add(self.addr_off))?,
                }));
            }
        }
        Ok(None)
    }

    /// A boolean flag's current value, `None` if this JVM has no such flag.
    pub fn read_bool(&self, mem: &dyn TargetMemory, name: &str) -> Result<Option<bool>, MemError> {
        match self.find(mem, name)? {
            Some(loc) => Ok(Some(mem.read_u8(loc.value_addr)? != 0)),
            None => Ok(None),
        }
    }
}
