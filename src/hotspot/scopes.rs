//! Which Java methods a pc of compiled code is in — the nmethod's own method and those inlined
//! into it, with their bcis — decoded from outside from the nmethod's own debug info, so compiled
//! frames get their inlined frames without the shim (a JVM that cannot be attached).
//!
//! An nmethod keeps a sorted array of `PcDesc {pc_offset, scope_decode_offset, …}` (JDK
//! `code/pcDesc.hpp`; `pc_offset` from the code begin) and a scopes stream; the scope at a
//! PcDesc's decode offset is `sender_decode_offset, metadata index, bci + 1, …`
//! (`code/scopeDesc.cpp` `decode_body`, `code/debugInfo.hpp` `read_method`/`read_bci`), its method
//! `metadata[index - 1]`; a sender offset of 0 ends the chain at the nmethod's own method. The
//! numbers are UNSIGNED5 (`utilities/unsigned5.hpp`), whose byte bias became 1 in JDK 20
//! (JDK-8292758). Where the arrays live changed: JDK ≤ 22 keep them in the nmethod
//! (`_metadata_offset`, `CompiledMethod::_scopes_data_begin`, `_scopes_pcs_offset`,
//! `_dependencies_offset`); JDK 23+ in its immutable data (`_immutable_data`,
//! `_scopes_pcs_offset`, `_scopes_data_offset`, `_immutable_data_size`) with the metadata in
//! the mutable data after the relocations (`CodeBlob::_mutable_data`, `_relocation_size`,
//! `_mutable_data_size`).

use super::unsigned5;
use super::vmstructs::VmStructs;
use crate::process::TargetMemory;

/// Debug info of one nmethod larger than this is a misread.
const MAX_TABLE_BYTES: u64 = 4 << 20;
/// Deeper inlining than this is a misread (HotSpot's MaxInlineLevel is 15; method handles add
/// a few levels each).
const MAX_DEPTH: usize = 128;
/// One scope is at most this many bytes of the stream (three UNSIGNED5 numbers, 5 bytes each).
const MAX_SCOPE_BYTES: usize = 15;

#[derive(Debug, Clone, Copy)]
enum Where {
    /// JDK ≤ 22: offsets from the nmethod, and a pointer field to the scopes.
    InNmethod {
        metadata: u64,
        scopes_begin: u64,
        pcs: u64,
        dependencies: u64,
    },
    /// JDK 23+: the immutable and mutable data blocks.
    Outside {
        immutable: u64,
        immutable_size: u64,
        pcs: u64,
        scopes: u64,
        mutable: u64,
        mutable_size: u64,
        relocation_size: u64,
    },
}

#[derive(Debug, Clone)]
pub struct ScopeLayout {
    place: Where,
    pc_desc_size: u64,
    pc_offset: u64,
    scope_offset: u64,
    bias: u8,
}

/// Where an nmethod's debug info is: (metadata begin, metadata end, scopes begin, scopes end,
/// pcs begin, pcs end).
type Ranges = (u64, u64, u64, u64, u64, u64);

impl ScopeLayout {
    pub fn discover(vs: &VmStructs, mem: &(impl TargetMemory + ?Sized)) -> Option<ScopeLayout> {
        let off = |t: &str, f: &str| vs.offset(t, f);
        let place = match off("CompiledMethod", "_scopes_data_begin") {
            Some(scopes_begin) => Where::InNmethod {
                metadata: off("nmethod", "_metadata_offset")?,
                scopes_begin,
                pcs: off("nmethod", "_scopes_pcs_offset")?,
                dependencies: off("nmethod", "_dependencies_offset")?,
            },
            None => Where::Outside {
                immutable: off("nmethod", "_immutable_data")?,
                immutable_size: off("nmethod", "_immutable_data_size")?,
                pcs: off("nmethod", "_scopes_pcs_offset")?,
                scopes: off("nmethod", "_scopes_data_offset")?,
                mutable: off("CodeBlob", "_mutable_data")?,
                mutable_size: off("CodeBlob", "_mutable_data_size")?,
                relocation_size: off("CodeBlob", "_relocation_size")?,
            },
        };
        let major = vs
            .address("Abstract_VM_Version", "_vm_major_version")
            .and_then(|a| mem.read_u32(a).ok())
            .unwrap_or(0);
        Some(ScopeLayout {
            place,
            pc_desc_size: vs.size("PcDesc")?,
            pc_offset: off("PcDesc", "_pc_offset")?,
            scope_offset: off("PcDesc", "_scope_decode_offset")?,
            bias: u8::from(major >= 20),
        })
    }

    fn ranges(&self, mem: &(impl TargetMemory + ?Sized), nm: u64) -> Option<Ranges> {
        let int = |off: u64| -> Option<u64> {
            let v = mem.read_u32(nm.wrapping_add(off)).ok()? as i32;
            u64::try_from(v).ok()
        };
        let ptr = |off: u64| mem.read_u64(nm.wrapping_add(off)).ok();
        match self.place {
            Where::InNmethod {
                metadata,
                scopes_begin,
                pcs,
                dependencies,
            } => {
                let scopes = ptr(scopes_begin)?;
                let pcs = nm.checked_add(int(pcs)?)?;
                Some((
                    nm.checked_add(int(metadata)?)?,
                    scopes,
                    scopes,
                    pcs,
                    pcs,
                    nm.checked_add(int(dependencies)?)?,
                ))
            }
            Where::Outside {
                immutable,
                immutable_size,
                pcs,
                scopes,
                mutable,
                mutable_size,
                relocation_size,
            } => {
                let data = ptr(immutable)?;
                let end = data.checked_add(int(immutable_size)?)?;
                let mutable = ptr(mutable)?;
                Some((
                    mutable.checked_add(int(relocation_size)?)?,
                    mutable.checked_add(int(mutable_size)?)?,
                    data.checked_add(int(scopes)?)?,
                    end,
                    data.checked_add(int(pcs)?)?,
                    data.checked_add(int(scopes)?)?,
                ))
            }
        }
    }

    /// The methods (`Method*`, bci) at `pc` of the nmethod at `nm` whose code begins at
    /// `code_begin`, innermost (inlined deepest) first, the nmethod's own method last. A return
    /// address (`exact`) must be a debug point; a top frame's pc is matched with HotSpot's
    /// `pc_desc_near` rule, the next debug point (`code/nmethod.cpp`). `None` when the debug info
    /// cannot be read or has no scope there.
    pub fn methods_at(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        nm: u64,
        code_begin: u64,
        pc: u64,
        exact: bool,
    ) -> Option<Vec<(u64, i32)>> {
        let (meta_begin, meta_end, scopes_begin, scopes_end, pcs_begin, pcs_end) =
            self.ranges(mem, nm)?;
        let wanted = i32::try_from(pc.checked_sub(code_begin)?).ok()?;
        let decode = self.find_pc_desc(mem, (pcs_begin, pcs_end), wanted, exact)?;
        let scopes_len = scopes_end.checked_sub(scopes_begin)?;
        let metadata_len = meta_end.checked_sub(meta_begin)? / 8;
        if scopes_len > MAX_TABLE_BYTES {
            return None;
        }
        let mut chain = Vec::new();
        let mut offset = u64::try_from(decode).ok()?;
        while offset != 0 && chain.len() < MAX_DEPTH {
            if offset >= scopes_len {
                return None;
            }
            let n = (scopes_len - offset).min(MAX_SCOPE_BYTES as u64) as usize;
            let mut bytes = [0u8; MAX_SCOPE_BYTES];
            mem.read(scopes_begin + offset, &mut bytes[..n]).ok()?;
            let mut at = 0;
            let mut next = || unsigned5::read(&bytes[..n], &mut at, self.bias);
            let (sender, index, bci_plus_1) = (next()?, next()?, next()?);
            let index = u64::from(index);
            if index == 0 || index > metadata_len {
                return None;
            }
            let method = mem.read_u64(meta_begin + 8 * (index - 1)).ok()?;
            chain.push((method, bci_plus_1 as i32 - 1));
            offset = u64::from(sender);
        }
        (!chain.is_empty() && offset == 0).then_some(chain)
    }

    /// The scope decode offset of the PcDesc for pc offset `wanted`.
    fn find_pc_desc(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        (begin, end): (u64, u64),
        wanted: i32,
        exact: bool,
    ) -> Option<i32> {
        let len = end.checked_sub(begin)?;
        if len > MAX_TABLE_BYTES || self.pc_desc_size < 8 {
            return None;
        }
        let mut table = vec![0u8; len as usize];
        mem.read(begin, &mut table).ok()?;
        let field = |desc: &[u8], off: u64| -> Option<i32> {
            let at = off as usize;
            Some(i32::from_le_bytes(desc.get(at..at + 4)?.try_into().ok()?))
        };
        // Sorted by pc offset (the first one a sentinel at -1): the first at or after `wanted`.
        for desc in table.chunks_exact(self.pc_desc_size as usize) {
            let pc_offset = field(desc, self.pc_offset)?;
            if pc_offset == wanted || (!exact && pc_offset > wanted) {
                return field(desc, self.scope_offset);
            }
            if pc_offset > wanted {
                return None;
            }
        }
        None
    }
}
