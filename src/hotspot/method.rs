//! Reading a `Method*` from the target: holder class, name, signature, bytecode bounds and the line
//! table (JDK `oops/method.hpp`, `oops/constMethod.hpp`; the line table's encoding is
//! `CompressedLineNumberReadStream` in `oops/method.hpp`).

use super::vmstructs::VmStructs;
use crate::process::TargetMemory;
use foldhash::HashMap;

const MAX_SYMBOL: u64 = 1 << 16;
const MAX_LINE_ENTRIES: usize = 1 << 16;

#[derive(Debug, Clone)]
pub struct MethodLayout {
    const_method: u64,
    cm_constants: u64,
    cm_code_size: u64,
    cm_name_index: u64,
    cm_signature_index: u64,
    cm_flags: (u64, u64),
    cm_size: u64,
    has_line_table: u32,
    cp_holder: u64,
    cp_size: u64,
    klass_name: u64,
    sym_length: u64,
    sym_body: u64,
}

/// A method as read from the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodName {
    /// Internal form, e.g. `bench/Phases`.
    pub class: String,
    pub name: String,
    pub signature: String,
    pub code_size: u32,
    /// (start bci, line), ascending bci.
    pub lines: Vec<(u32, u32)>,
}

/// Names of `Method*`s read while the stack walker saw them live. Naming happens later, when a
/// class may have been unloaded and its metadata freed or reused, so interpreted frames are named
/// from here. An entry is re-read when the `Method*` shows another bytecode start (reused).
#[derive(Default)]
pub struct MethodNames {
    by_ptr: HashMap<u64, MethodEntry>,
}

struct MethodEntry {
    code_start: u64,
    name: Option<MethodName>,
    /// Bumped when the entry is re-read for a reused `Method*`.
    version: u32,
}

impl MethodNames {
    /// Makes sure `method`, whose bytecodes start at `code_start`, has its name read.
    pub fn note(
        &mut self,
        layout: &MethodLayout,
        mem: &(impl TargetMemory + ?Sized),
        method: u64,
        code_start: u64,
    ) {
        let version = match self.by_ptr.get(&method) {
            Some(e) if e.code_start == code_start => return,
            Some(e) => e.version.wrapping_add(1),
            None => 0,
        };
        let entry = MethodEntry {
            code_start,
            name: layout.read(mem, method),
            version,
        };
        self.by_ptr.insert(method, entry);
    }

    /// The name read for `method`, and its version (to key caches built from it).
    pub fn get(&self, method: u64) -> Option<(Option<&MethodName>, u32)> {
        self.by_ptr
            .get(&method)
            .map(|e| (e.name.as_ref(), e.version))
    }
}

impl MethodLayout {
    pub fn discover(vs: &VmStructs) -> Option<Self> {
        let off = |t: &str, f: &str| vs.offset(t, f);
        let flags = vs
            .field("ConstMethod", "_flags._flags")
            .or_else(|| vs.field("ConstMethod", "_flags"))?;
        Some(MethodLayout {
            const_method: off("Method", "_constMethod")?,
            cm_constants: off("ConstMethod", "_constants")?,
            cm_code_size: off("ConstMethod", "_code_size")?,
            cm_name_index: off("ConstMethod", "_name_index")?,
            cm_signature_index: off("ConstMethod", "_signature_index")?,
            cm_flags: (flags.offset, if flags.type_string == "u2" { 2 } else { 4 }),
            cm_size: vs.size("ConstMethod")?,
            has_line_table: vs
                .int_constants
                .get("ConstMethod::_has_linenumber_table")
                .copied()
                .unwrap_or(1) as u32,
            cp_holder: off("ConstantPool", "_pool_holder")?,
            cp_size: vs.size("ConstantPool")?,
            klass_name: off("Klass", "_name")?,
            sym_length: off("Symbol", "_length")?,
            sym_body: off("Symbol", "_body").or_else(|| off("Symbol", "_body[0]"))?,
        })
    }

    /// The internal name of a `Klass*` (`java/lang/String`, `[J`): its `_name` Symbol.
    pub fn klass_name(&self, mem: &(impl TargetMemory + ?Sized), klass: u64) -> Option<String> {
        let sym = mem
            .read_u64(klass.wrapping_add(self.klass_name))
            .ok()
            .filter(|&p| p != 0)?;
        self.symbol(mem, sym).filter(|name| !name.is_empty())
    }

    fn symbol(&self, mem: &(impl TargetMemory + ?Sized), sym: u64) -> Option<String> {
        let len = mem.read_u16(sym.wrapping_add(self.sym_length)).ok()? as u64;
        if len > MAX_SYMBOL {
            return None;
        }
        let mut buf = vec![0u8; len as usize];
        mem.read(sym.wrapping_add(self.sym_body), &mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf).into_owned())
    }

    fn pool_symbol(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        cp: u64,
        index: u16,
    ) -> Option<String> {
        let slot_addr = cp
            .wrapping_add(self.cp_size)
            .wrapping_add(8 * u64::from(index));
        let slot = mem.read_u64(slot_addr).ok()?;
        self.symbol(mem, slot & !1)
    }

    /// The `ConstMethod*` of a `Method*`, and where its bytecodes start.
    pub fn code_start(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        method: u64,
    ) -> Option<(u64, u32)> {
        let cm = mem
            .read_u64(method.wrapping_add(self.const_method))
            .ok()
            .filter(|&p| p != 0)?;
        let size = mem.read_u16(cm.wrapping_add(self.cm_code_size)).ok()? as u32;
        Some((cm.checked_add(self.cm_size)?, size))
    }

    pub fn read(&self, mem: &(impl TargetMemory + ?Sized), method: u64) -> Option<MethodName> {
        let cm = mem
            .read_u64(method.wrapping_add(self.const_method))
            .ok()
            .filter(|&p| p != 0)?;
        let cp = mem
            .read_u64(cm.wrapping_add(self.cm_constants))
            .ok()
            .filter(|&p| p != 0)?;
        let holder = mem
            .read_u64(cp.wrapping_add(self.cp_holder))
            .ok()
            .filter(|&p| p != 0)?;
        let class = self.symbol(
            mem,
            mem.read_u64(holder.wrapping_add(self.klass_name)).ok()?,
        )?;
        let name = self.pool_symbol(
            mem,
            cp,
            mem.read_u16(cm.wrapping_add(self.cm_name_index)).ok()?,
        )?;
        let signature = self.pool_symbol(
            mem,
            cp,
            mem.read_u16(cm.wrapping_add(self.cm_signature_index))
                .ok()?,
        )?;
        let code_size = mem.read_u16(cm.wrapping_add(self.cm_code_size)).ok()? as u32;
        let flags = match self.cm_flags.1 {
            2 => mem.read_u16(cm.wrapping_add(self.cm_flags.0)).ok()? as u32,
            _ => mem.read_u32(cm.wrapping_add(self.cm_flags.0)).ok()?,
        };
        let lines = if flags & self.has_line_table != 0 {
            let at = cm
                .wrapping_add(self.cm_size)
                .wrapping_add(u64::from(code_size));
            self.line_table(mem, at, code_size).unwrap_or_default()
        } else {
            Vec::new()
        };
        Some(MethodName {
            class,
            name,
            signature,
            code_size,
            lines,
        })
    }

    /// Decode the compressed line number table that follows the bytecodes.
    ///
    /// Its escaped values are UNSIGNED5 numbers whose byte bias changed from 0 to 1 in JDK 20
    /// (JDK-8292758), and VMStructs does not say which a JVM uses; the wrong bias yields a table
    /// that does not end cleanly or points past the bytecodes, so both are tried.
    fn line_table(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        at: u64,
        code_size: u32,
    ) -> Option<Vec<(u32, u32)>> {
        let mut buf = vec![0u8; 4096];
        let n = (0..=3)
            .map(|shift| 4096usize >> (shift * 3))
            .find(|&n| mem.read(at, &mut buf[..n]).is_ok())?;
        buf.truncate(n);
        [1u8, 0]
            .into_iter()
            .filter_map(|bias| decode_line_table(&buf, bias))
            .find(|t| t.iter().all(|&(bci, _)| bci < code_size.max(1)))
    }
}

/// HotSpot's CompressedLineNumberReadStream: a 0 byte ends the table; 0xFF is followed by two signed
/// UNSIGNED5 deltas (bci, line); any other byte packs `bci_delta << 3 | line_delta`. `None` if the
/// bytes do not form a table that ends with its terminator.
pub fn decode_line_table(bytes: &[u8], bias: u8) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    let (mut bci, mut line) = (0i64, 0i64);
    let mut at = 0;
    while out.len() < MAX_LINE_ENTRIES {
        let b = *bytes.get(at)?;
        at += 1;
        match b {
            0 => return Some(out),
            0xff => {
                bci += super::unsigned5::read_signed(bytes, &mut at, bias)?;
                line += super::unsigned5::read_signed(bytes, &mut at, bias)?;
            }
            _ => {
                bci += (b >> 3) as i64;
                line += (b & 7) as i64;
            }
        }
        if bci < 0 || line < 0 {
            return None;
        }
        out.push((bci as u32, line as u32));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotspot::fixture_tests::fixture;

    #[test]
    fn method_names_are_read_once_and_again_when_the_method_pointer_is_reused() {
        let (mem, symbols) = fixture();
        let vs = VmStructs::read(&mem, &symbols).unwrap();
        let layout = MethodLayout::discover(&vs).unwrap();
        let mut names = MethodNames::default();
        let method = 0x7f00_0000_1000;
        assert!(names.get(method).is_none());
        names.note(&layout, &mem, method, 0x10);
        // Not in the snapshot: known as unreadable rather than read again per sample.
        assert_eq!(names.get(method), Some((None, 0)));
        names.note(&layout, &mem, method, 0x10);
        assert_eq!(names.get(method), Some((None, 0)));
        // Other bytecodes behind the same Method*: the class was unloaded and the memory reused.
        names.note(&layout, &mem, method, 0x20);
        assert_eq!(names.get(method), Some((None, 1)));
    }

    #[test]
    fn compact_and_escaped_line_entries() {
        // (0, 10) via escape, then +8 bci +1 line compact, then an escaped jump back of −3 lines.
        // Escape deltas are zig-zag: 10 → 20, −3 → 5; all below 192 so single bytes.
        let table = [0xff, 0, 20, (8 << 3) | 1, 0xff, 4, 5, 0];
        assert_eq!(
            decode_line_table(&table, 0),
            Some(vec![(0, 10), (8, 11), (10, 8)])
        );
        assert_eq!(
            decode_line_table(&table, 1),
            None,
            "a 0 byte is no JDK 20+ digit"
        );
        // JDK 20+: every byte is biased by 1.
        let table20 = [0xff, 1, 21, (8 << 3) | 1, 0];
        assert_eq!(decode_line_table(&table20, 1), Some(vec![(0, 10), (8, 11)]));
        assert_eq!(decode_line_table(&[0xff, 250], 0), None, "truncated escape");
        assert_eq!(decode_line_table(&[8 << 3], 0), None, "no terminator");
    }
}
