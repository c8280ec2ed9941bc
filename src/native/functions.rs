//! Finding a function of a module by its demangled name, for probing it: in the module's own
//! `.symtab` (where distributions keep it), else in its separate debug file's.

use super::debuginfo::find_debug_file;
use super::modules::Module;
use object::{Object, ObjectSegment, ObjectSymbol};
use std::borrow::Cow;

/// Where a function was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundFunction {
    /// The address the ELF file states for its first instruction.
    pub svma: u64,
    /// Its offset in the module's file (what a uprobe takes).
    pub file_offset: u64,
}

/// The function `qualified` (`AllocTracer::send_allocation_in_new_tlab`: the demangled name
/// without its parameters, whatever they are in this build) of `module`. Copies the compiler
/// made of part of a function (`.part.N`, `.cold`, `.isra.N`, `.constprop.N`) are not it.
pub fn find_function(module: &Module, qualified: &str) -> Option<FoundFunction> {
    let elf = object::File::parse(module.data()).ok()?;
    let svma = symbol_of(module, &elf, qualified, object::SymbolKind::Text)?;
    Some(FoundFunction {
        svma,
        file_offset: file_offset(&elf, svma)?,
    })
}

/// The stated address of static variable `qualified` (`java_lang_Thread::_park_blocker_offset`)
/// of `module`, looked up as [`find_function`] does.
pub fn find_static(module: &Module, qualified: &str) -> Option<u64> {
    let elf = object::File::parse(module.data()).ok()?;
    symbol_of(module, &elf, qualified, object::SymbolKind::Data)
}

fn symbol_of(
    module: &Module,
    elf: &object::File,
    qualified: &str,
    kind: object::SymbolKind,
) -> Option<u64> {
    match symbol_in(elf, qualified, kind) {
        Some(svma) => Some(svma),
        None => {
            let path = find_debug_file(module, elf)?;
            let file = std::fs::File::open(path).ok()?;
            // SAFETY: a read-only mapping of a debug file, which packages replace, not rewrite.
            let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
            symbol_in(&object::File::parse(&*map).ok()?, qualified, kind)
        }
    }
}

fn symbol_in(elf: &object::File, qualified: &str, kind: object::SymbolKind) -> Option<u64> {
    // Demangling every symbol of libjvm takes a while: only those naming the function's last
    // component are.
    let last = qualified.rsplit("::").next().unwrap_or(qualified);
    elf.symbols().find_map(|sym| {
        let name = sym.name().ok()?;
        if !sym.is_definition() || sym.kind() != kind || !name.contains(last) || name.contains('.')
        {
            return None;
        }
        let demangled = addr2line::demangle_auto(Cow::Borrowed(name), None);
        let without_params = demangled.split('(').next().unwrap_or_default();
        (without_params == qualified).then(|| sym.address())
    })
}

/// The file offset of stated address `svma`, by the loadable segment holding it.
fn file_offset(elf: &object::File, svma: u64) -> Option<u64> {
    elf.segments().find_map(|seg| {
        let (offset, size) = seg.file_range();
        (seg.address() <= svma && svma < seg.address() + size)
            .then(|| svma - seg.address() + offset)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function_in(elf: &object::File, qualified: &str) -> Option<u64> {
        symbol_in(elf, qualified, object::SymbolKind::Text)
    }

    const LIBJVM_17: &str = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";

    #[test]
    fn finds_a_local_function_of_libjvm_by_its_demangled_name_and_its_file_offset() {
        let data = std::fs::read(LIBJVM_17).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let svma = function_in(&elf, "AllocTracer::send_allocation_outside_tlab").unwrap();
        let sym = elf
            .symbols()
            .find(|s| s.address() == svma && s.name().is_ok_and(|n| n.contains("outside_tlab")))
            .unwrap();
        assert!(sym
            .name()
            .unwrap()
            .starts_with("_ZN11AllocTracer28send_allocation_outside"));
        // The text segment's offset equals its address in this build: check it by the bytes.
        let offset = file_offset(&elf, svma).unwrap();
        let text = elf.section_by_name(".text").unwrap();
        let (text_offset, _) = object::ObjectSection::file_range(&text).unwrap();
        assert_eq!(
            offset - text_offset,
            svma - object::ObjectSection::address(&text)
        );
        assert_eq!(function_in(&elf, "AllocTracer::send_allocation"), None);
        let blocker = symbol_in(
            &elf,
            "java_lang_Thread::_park_blocker_offset",
            object::SymbolKind::Data,
        );
        assert!(
            blocker.is_some_and(|a| a > svma),
            "a static in .bss, after .text"
        );
        assert_eq!(
            function_in(&elf, "java_lang_Thread::_park_blocker_offset"),
            None
        );
        assert_eq!(
            function_in(&elf, "NoSuchClass::send_allocation_outside_tlab"),
            None
        );
    }
}
