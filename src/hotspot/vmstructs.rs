//! HotSpot's self-description tables (`gHotSpotVMStructs`, `gHotSpotVMTypes`, int and long constants),
//! read from the target's memory. See JDK `runtime/vmStructs.cpp` (end of file) for the exported layout.

use crate::process::{MemError, TargetMemory};
use std::collections::HashMap;

/// Upper bounds that keep a corrupt or hostile table from making us loop or allocate without end.
/// JDK 17 has 801 fields, 769 types, 398 int and 86 long constants, all their names together
/// under 64 KiB.
const MAX_STRIDE: u64 = 256;
const MAX_ENTRIES: usize = 1 << 14;
/// Bytes of names (all tables together) read before the tables are declared corrupt: every entry
/// could otherwise name a distinct 4 KiB string, gigabytes over the four tables.
const MAX_NAME_BYTES: usize = 4 << 20;

/// A field of a HotSpot type: an offset for instance fields, an absolute address for static ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub type_string: String,
    pub is_static: bool,
    pub offset: u64,
    pub address: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    pub superclass: Option<String>,
    pub size: u64,
}

#[derive(Debug, Default, Clone)]
pub struct VmStructs {
    pub fields: HashMap<(String, String), Field>,
    pub types: HashMap<String, TypeInfo>,
    pub int_constants: HashMap<String, i64>,
    pub long_constants: HashMap<String, u64>,
}

#[derive(Debug)]
pub enum VmStructsError {
    MissingSymbol(&'static str),
    Memory(MemError),
    Corrupt(String),
}

impl std::fmt::Display for VmStructsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmStructsError::MissingSymbol(s) => write!(f, "libjvm does not export {s}"),
            VmStructsError::Memory(e) => write!(f, "reading VMStructs: {e}"),
            VmStructsError::Corrupt(s) => write!(f, "VMStructs table looks corrupt: {s}"),
        }
    }
}

impl From<MemError> for VmStructsError {
    fn from(e: MemError) -> Self {
        VmStructsError::Memory(e)
    }
}

type R<T> = Result<T, VmStructsError>;

/// Symbols saved as `name 0xaddress` lines (how `examples/capture_vmstructs.rs` stores a
/// snapshot's libjvm symbols); malformed lines are skipped.
pub fn parse_symbol_lines(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (name, addr) = l.split_once(' ')?;
            let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok()?;
            Some((name.to_string(), addr))
        })
        .collect()
}

/// The symbol addresses a table read needs; `libjvm::LibJvm::symbols` provides them for live targets.
pub trait SymbolLookup {
    fn symbol(&self, name: &str) -> Option<u64>;
}

impl SymbolLookup for HashMap<String, u64> {
    fn symbol(&self, name: &str) -> Option<u64> {
        self.get(name).copied()
    }
}

struct Reader<'a> {
    mem: &'a dyn TargetMemory,
    syms: &'a dyn SymbolLookup,
    /// Name bytes still allowed, of `MAX_NAME_BYTES`.
    name_budget: std::cell::Cell<usize>,
}

impl Reader<'_> {
    fn sym(&self, name: &'static str) -> R<u64> {
        self.syms
            .symbol(name)
            .ok_or(VmStructsError::MissingSymbol(name))
    }

    /// The value of an exported `uint64_t` global.
    fn global(&self, name: &'static str) -> R<u64> {
        Ok(self.mem.read_u64(self.sym(name)?)?)
    }

    fn stride(&self, name: &'static str) -> R<u64> {
        let s = self.global(name)?;
        if s == 0 || s > MAX_STRIDE {
            return Err(VmStructsError::Corrupt(format!("{name} = {s}")));
        }
        Ok(s)
    }

    fn opt_cstr(&self, ptr: u64) -> R<Option<String>> {
        if ptr == 0 {
            return Ok(None);
        }
        let s = self.mem.read_cstr(ptr)?;
        let left = self.name_budget.get().checked_sub(s.len()).ok_or_else(|| {
            VmStructsError::Corrupt(format!("names take more than {MAX_NAME_BYTES} bytes"))
        })?;
        self.name_budget.set(left);
        Ok(Some(s))
    }

    /// Read a table (pointer held in `table_sym`) entry by entry until the first entry whose name
    /// pointer (at `name_off`) is NULL.
    fn entries(
        &self,
        table_sym: &'static str,
        stride_sym: &'static str,
        name_off: u64,
    ) -> R<Vec<(u64, String)>> {
        let stride = self.stride(stride_sym)?;
        let base = self.global(table_sym)?;
        if base == 0 {
            return Err(VmStructsError::Corrupt(format!("{table_sym} is NULL")));
        }
        let mut out = Vec::new();
        for i in 0..MAX_ENTRIES as u64 {
            let entry = base.wrapping_add(i * stride);
            let name_ptr = self.mem.read_u64(entry.wrapping_add(name_off))?;
            match self.opt_cstr(name_ptr)? {
                Some(name) => out.push((entry, name)),
                None => return Ok(out),
            }
        }
        Err(VmStructsError::Corrupt(format!("{table_sym} has no end")))
    }
}

impl VmStructs {
    pub fn read(mem: &dyn TargetMemory, syms: &dyn SymbolLookup) -> R<Self> {
        let r = Reader {
            mem,
            syms,
            name_budget: std::cell::Cell::new(MAX_NAME_BYTES),
        };
        let mut vs = VmStructs::default();

        let field_name_off = r.global("gHotSpotVMStructEntryFieldNameOffset")?;
        let type_string_off = r.global("gHotSpotVMStructEntryTypeStringOffset")?;
        let is_static_off = r.global("gHotSpotVMStructEntryIsStaticOffset")?;
        let offset_off = r.global("gHotSpotVMStructEntryOffsetOffset")?;
        let address_off = r.global("gHotSpotVMStructEntryAddressOffset")?;
        for (entry, type_name) in r.entries(
            "gHotSpotVMStructs",
            "gHotSpotVMStructEntryArrayStride",
            r.global("gHotSpotVMStructEntryTypeNameOffset")?,
        )? {
            let Some(field_name) = r.opt_cstr(mem.read_u64(entry.wrapping_add(field_name_off))?)?
            else {
                continue;
            };
            let type_string = r
                .opt_cstr(mem.read_u64(entry.wrapping_add(type_string_off))?)?
                .unwrap_or_default();
            let field = Field {
                type_string,
                is_static: mem.read_u32(entry.wrapping_add(is_static_off))? != 0,
                offset: mem.read_u64(entry.wrapping_add(offset_off))?,
                address: mem.read_u64(entry.wrapping_add(address_off))?,
            };
            vs.fields.insert((type_name, field_name), field);
        }

        let super_off = r.global("gHotSpotVMTypeEntrySuperclassNameOffset")?;
        let size_off = r.global("gHotSpotVMTypeEntrySizeOffset")?;
        for (entry, type_name) in r.entries(
            "gHotSpotVMTypes",
            "gHotSpotVMTypeEntryArrayStride",
            r.global("gHotSpotVMTypeEntryTypeNameOffset")?,
        )? {
            let superclass = r.opt_cstr(mem.read_u64(entry.wrapping_add(super_off))?)?;
            let size = mem.read_u64(entry.wrapping_add(size_off))?;
            vs.types.insert(type_name, TypeInfo { superclass, size });
        }

        let value_off = r.global("gHotSpotVMIntConstantEntryValueOffset")?;
        for (entry, name) in r.entries(
            "gHotSpotVMIntConstants",
            "gHotSpotVMIntConstantEntryArrayStride",
            r.global("gHotSpotVMIntConstantEntryNameOffset")?,
        )? {
            let v = mem.read_u32(entry.wrapping_add(value_off))? as i32;
            vs.int_constants.insert(name, v as i64);
        }
        let value_off = r.global("gHotSpotVMLongConstantEntryValueOffset")?;
        for (entry, name) in r.entries(
            "gHotSpotVMLongConstants",
            "gHotSpotVMLongConstantEntryArrayStride",
            r.global("gHotSpotVMLongConstantEntryNameOffset")?,
        )? {
            vs.long_constants
                .insert(name, mem.read_u64(entry.wrapping_add(value_off))?);
        }
        Ok(vs)
    }

    /// The entries of `types` only: their fields and sizes, and the constants named after them
    /// (`Type::name`). A snapshot keeps those its readers look up.
    pub fn subset(&self, types: &[&str]) -> VmStructs {
        let kept = |name: &str| types.contains(&name);
        let named_after = |constant: &str| {
            constant
                .rsplit_once("::")
                .is_some_and(|(owner, _)| kept(owner))
        };
        VmStructs {
            fields: self
                .fields
                .iter()
                .filter(|((t, _), _)| kept(t))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            types: self
                .types
                .iter()
                .filter(|(t, _)| kept(t))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            int_constants: self
                .int_constants
                .iter()
                .filter(|(n, _)| named_after(n))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            long_constants: self
                .long_constants
                .iter()
                .filter(|(n, _)| named_after(n))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        }
    }

    pub fn field(&self, type_name: &str, field: &str) -> Option<&Field> {
        self.fields.get(&(type_name.to_string(), field.to_string()))
    }

    /// Offset of an instance field.
    pub fn offset(&self, type_name: &str, field: &str) -> Option<u64> {
        self.field(type_name, field)
            .filter(|f| !f.is_static)
            .map(|f| f.offset)
    }

    /// Address of a static field.
    pub fn address(&self, type_name: &str, field: &str) -> Option<u64> {
        self.field(type_name, field)
            .filter(|f| f.is_static)
            .map(|f| f.address)
    }

    pub fn size(&self, type_name: &str) -> Option<u64> {
        self.types.get(type_name).map(|t| t.size)
    }
}
