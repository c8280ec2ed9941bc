//! Java objects read from outside: an object's class, its reference fields, and the references
//! the VM holds in handles. Compressed references are decoded with the base and shift the VM
//! chose at startup (`CompressedOops`, `CompressedKlassPointers`; `Universe::_narrow_oop` and
//! `_narrow_klass` in JDK 11), all found in VMStructs; the flags say which are compressed. With
//! `-XX:+UseCompactObjectHeaders` (JDK 24+) the class is in the mark word's upper bits
//! (`markWord::klass_shift`, oops/markWord.hpp).
//!
//! Objects move: what is read races the GC, and a reference read mid-move yields garbage that
//! the next read (a class name's Symbol) fails on or shows as it is. Callers name classes only.

use super::vmstructs::VmStructs;
use super::HotSpot;
use crate::process::TargetMemory;

/// A compressed reference: the 32-bit value shifted left and added to the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Narrow {
    base: u64,
    shift: u32,
}

impl Narrow {
    /// The first of `names` (type, base field, shift field) that VMStructs has, read now.
    fn read(
        vs: &VmStructs,
        mem: &(impl TargetMemory + ?Sized),
        names: &[(&str, &str, &str)],
    ) -> Option<Narrow> {
        let &(ty, base, shift) = names
            .iter()
            .find(|(ty, base, _)| vs.address(ty, base).is_some())?;
        Some(Narrow {
            base: mem.read_u64(vs.address(ty, base)?).ok()?,
            shift: mem.read_u32(vs.address(ty, shift)?).ok()?,
        })
    }

    fn decode(self, value: u32) -> Option<u64> {
        (value != 0).then(|| {
            self.base
                .wrapping_add(u64::from(value) << self.shift.min(32))
        })
    }
}

/// Where an object's class is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClassWord {
    /// A full `Klass*` at this offset.
    Full(u64),
    /// A narrow class pointer at this offset.
    Narrow(u64, Narrow),
    /// A narrow class pointer in the mark word's bits from this shift up (compact headers).
    InMark(u32, Narrow),
}

/// How this JVM lays out objects' headers and references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectLayout {
    class: ClassWord,
    /// `None`: reference fields hold full addresses.
    oops: Option<Narrow>,
    klass_super: u64,
}

impl ObjectLayout {
    /// `None` when VMStructs lack a field needed, or the flags cannot be read.
    pub fn discover<M: TargetMemory>(hotspot: &HotSpot<M>) -> Option<ObjectLayout> {
        let vs = &hotspot.vmstructs;
        let mem = &hotspot.mem;
        let flag = |name| hotspot.read_bool_flag(name);
        let klass_narrow = || {
            Narrow::read(
                vs,
                mem,
                &[
                    ("CompressedKlassPointers", "_base", "_shift"),
                    (
                        "CompressedKlassPointers",
                        "_narrow_klass._base",
                        "_narrow_klass._shift",
                    ),
                    ("Universe", "_narrow_klass._base", "_narrow_klass._shift"),
                ],
            )
        };
        let class = if flag("UseCompactObjectHeaders") == Some(true) {
            let shift = *vs.int_constants.get("markWord::klass_shift")?;
            ClassWord::InMark(u32::try_from(shift).ok()?, klass_narrow()?)
        } else if flag("UseCompressedClassPointers")? {
            let offset = vs.offset("oopDesc", "_metadata._compressed_klass")?;
            ClassWord::Narrow(offset, klass_narrow()?)
        } else {
            ClassWord::Full(vs.offset("oopDesc", "_metadata._klass")?)
        };
        let oops = match flag("UseCompressedOops")? {
            true => Some(Narrow::read(
                vs,
                mem,
                &[
                    ("CompressedOops", "_base", "_shift"),
                    ("CompressedOops", "_narrow_oop._base", "_narrow_oop._shift"),
                    ("Universe", "_narrow_oop._base", "_narrow_oop._shift"),
                ],
            )?),
            false => None,
        };
        Some(ObjectLayout {
            class,
            oops,
            klass_super: vs.offset("Klass", "_super")?,
        })
    }

    /// The `Klass*` of object `oop`.
    pub fn klass_of(&self, mem: &(impl TargetMemory + ?Sized), oop: u64) -> Option<u64> {
        let klass = match self.class {
            ClassWord::Full(offset) => mem.read_u64(oop.wrapping_add(offset)).ok()?,
            ClassWord::Narrow(offset, narrow) => {
                narrow.decode(mem.read_u32(oop.wrapping_add(offset)).ok()?)?
            }
            ClassWord::InMark(shift, narrow) => {
                let mark = mem.read_u64(oop).ok()?;
                narrow.decode(u32::try_from(mark >> shift.min(63)).ok()?)?
            }
        };
        (klass != 0).then_some(klass)
    }

    /// The object a reference field of `obj` at `offset` points to; `None` for null.
    pub fn reference_field(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        obj: u64,
        offset: u64,
    ) -> Option<u64> {
        let at = obj.wrapping_add(offset);
        match self.oops {
            Some(narrow) => narrow.decode(mem.read_u32(at).ok()?),
            None => mem.read_u64(at).ok().filter(|&o| o != 0),
        }
    }

    /// The superclass of `klass`; `None` for `java.lang.Object`'s.
    pub fn super_of(&self, mem: &(impl TargetMemory + ?Sized), klass: u64) -> Option<u64> {
        mem.read_u64(klass.wrapping_add(self.klass_super))
            .ok()
            .filter(|&k| k != 0)
    }
}

/// A VM field holding a reference to an object: the object directly (`oop`, JDK 11), or through
/// a handle whose first word points at the slot that holds it (`OopHandle`, `WeakHandle`,
/// oops/oopHandle.hpp, oops/weakHandle.hpp; slots hold full addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefField {
    offset: u64,
    handle: bool,
}

impl RefField {
    pub fn discover(vs: &VmStructs, type_name: &str, field: &str) -> Option<RefField> {
        let f = vs.field(type_name, field).filter(|f| !f.is_static)?;
        Some(RefField {
            offset: f.offset,
            handle: f.type_string.ends_with("Handle"),
        })
    }

    /// The field read as `like` is (a field VMStructs exports without its type).
    pub fn held_as(self, like: RefField) -> RefField {
        RefField {
            handle: like.handle,
            ..self
        }
    }

    /// The object the field of the VM structure at `holder` refers to; `None` for null.
    pub fn read(&self, mem: &(impl TargetMemory + ?Sized), holder: u64) -> Option<u64> {
        let mut value = mem.read_u64(holder.wrapping_add(self.offset)).ok()?;
        if self.handle && value != 0 {
            value = mem.read_u64(value).ok()?;
        }
        (value != 0).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_references_decode_with_base_and_shift_and_null_stays_null() {
        let n = Narrow {
            base: 0x8_0000_0000,
            shift: 3,
        };
        assert_eq!(n.decode(0), None);
        assert_eq!(n.decode(0x10), Some(0x8_0000_0080));
        assert_eq!(
            n.decode(u32::MAX),
            Some(0x8_0000_0000 + (u64::from(u32::MAX) << 3))
        );
    }
}
