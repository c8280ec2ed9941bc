//! Native symbolization: function names (with inlined frames), file and line from a module's
//! DWARF or its separate debug file, else from its ELF symbol table.

use super::debuginfo::{find_debug_file, find_sup_file};
use super::modules::ModuleRef;
use object::{Object, SymbolMap, SymbolMapEntry};
use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One frame of a native pc; inlined calls give several per pc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeFrame {
    /// Demangled function name.
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl NativeFrame {
    fn named(function: String) -> Self {
        NativeFrame {
            function,
            file: None,
            line: None,
        }
    }
}

/// Symbolizes native pcs; debug info is loaded once per file (by build-id), on first use. It
/// keeps no cache of its answers: its caller interns them once per distinct pc.
pub struct NativeSymbolizer {
    modules: HashMap<Arc<str>, ModuleSymbols>,
    separate_debug_files: bool,
}

impl Default for NativeSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl NativeSymbolizer {
    pub fn new() -> Self {
        NativeSymbolizer {
            modules: HashMap::new(),
            separate_debug_files: true,
        }
    }

    /// Skip separate debug files: names from symbol tables (and DWARF embedded in a module),
    /// without the time and memory a large debug file costs (libjvm's: seconds, ~450 MiB).
    pub fn without_debug_files() -> Self {
        NativeSymbolizer {
            separate_debug_files: false,
            ..Self::new()
        }
    }

    /// The frames at `pc` in `module`, innermost first. For a return address the call
    /// instruction (pc - 1) is looked up. Never empty: unresolved pcs read like `libz.so.1+0x1234`.
    pub fn symbolize(
        &mut self,
        module: &ModuleRef,
        pc: u64,
        is_return_address: bool,
    ) -> Vec<NativeFrame> {
        let probe = module.svma(pc).wrapping_sub(u64::from(is_return_address));
        let symbols = self
            .modules
            .entry(module.key.clone())
            .or_insert_with(|| ModuleSymbols::load(module, self.separate_debug_files));
        let mut frames = symbols.frames(probe);
        if frames.is_empty() {
            let offset = module.svma(pc);
            frames.push(NativeFrame::named(format!("{}+{offset:#x}", module.name)));
        }
        frames
    }

    /// Where a symbolized module's DWARF comes from: its separate debug file, or the module
    /// itself (as `/proc/self/fd/N`). For diagnostics.
    pub fn debug_file(&self, module: &ModuleRef) -> Option<&PathBuf> {
        self.modules.get(&module.key)?.debug_file.as_ref()
    }

    /// Whether DWARF was loaded for a symbolized module.
    pub fn has_dwarf(&self, module: &ModuleRef) -> bool {
        self.modules
            .get(&module.key)
            .is_some_and(|m| m.dwarf.is_ok())
    }

    /// Why a symbolized module's debug file could not be loaded, if it could not.
    pub fn dwarf_error(&self, module: &ModuleRef) -> Option<&str> {
        let symbols = self.modules.get(&module.key)?;
        symbols.debug_file.as_ref()?;
        symbols.dwarf.as_ref().err().map(String::as_str)
    }
}

struct ModuleSymbols {
    module: ModuleRef,
    /// DWARF from the module itself or its debug file; also holds that file's symbol table.
    dwarf: std::result::Result<addr2line::Loader, String>,
    debug_file: Option<PathBuf>,
    /// The module's own `.symtab` (else `.dynsym`), built only if DWARF and its file have no name.
    own_symbols: OnceCell<SymbolMap<OwnedSymbol>>,
}

impl ModuleSymbols {
    fn load(module: &ModuleRef, separate_debug_files: bool) -> Self {
        let mut symbols = ModuleSymbols {
            module: module.clone(),
            dwarf: Err("no debug info".to_string()),
            debug_file: None,
            own_symbols: OnceCell::new(),
        };
        let Ok(elf) = object::File::parse(module.data()) else {
            return symbols;
        };
        let own_dwarf = elf
            .section_by_name(".debug_info")
            .is_some_and(|s| object::ObjectSection::size(&s) > 0);
        symbols.debug_file = if own_dwarf {
            module.file_path()
        } else if separate_debug_files {
            find_debug_file(module, &elf)
        } else {
            None
        };
        if let Some(path) = &symbols.debug_file {
            let sup = find_sup_file(module, path);
            symbols.dwarf = addr2line::Loader::new_with_sup(path, sup.as_ref())
                .map_err(|e| format!("{}: {e}", path.display()));
        }
        symbols
    }

    fn frames(&self, probe: u64) -> Vec<NativeFrame> {
        let mut frames = self.dwarf_frames(probe);
        match frames.last_mut() {
            // DWARF may cover the address without naming the function (assembly).
            Some(outer) if outer.function.is_empty() => {
                outer.function = self.symbol(probe).unwrap_or_default();
            }
            Some(_) => {}
            None => frames.extend(self.symbol(probe).map(NativeFrame::named)),
        }
        for f in frames.iter_mut().filter(|f| f.function.is_empty()) {
            f.function = "[unknown]".to_string();
        }
        frames
    }

    fn dwarf_frames(&self, probe: u64) -> Vec<NativeFrame> {
        let mut out = Vec::new();
        let Ok(Ok(mut iter)) = self.dwarf.as_ref().map(|d| d.find_frames(probe)) else {
            return out;
        };
        while let Ok(Some(frame)) = iter.next() {
            let function = frame
                .function
                .as_ref()
                .and_then(|f| f.demangle().ok())
                .map(Cow::into_owned)
                .unwrap_or_default();
            let (file, line) = frame
                .location
                .map(|l| (l.file.map(str::to_owned), l.line))
                .unwrap_or_default();
            out.push(NativeFrame {
                function,
                file,
                line,
            });
        }
        out
    }

    fn symbol(&self, probe: u64) -> Option<String> {
        let name = match self.dwarf.as_ref().ok().and_then(|d| d.find_symbol(probe)) {
            Some(name) => name,
            None => {
                &self
                    .own_symbols
                    .get_or_init(|| own_symbol_map(&self.module))
                    .containing(probe)?
                    .name
            }
        };
        Some(addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned())
    }
}

struct OwnedSymbol {
    address: u64,
    size: u64,
    name: String,
}

impl SymbolMapEntry for OwnedSymbol {
    fn address(&self) -> u64 {
        self.address
    }
    fn size(&self) -> u64 {
        self.size
    }
}

fn own_symbol_map(module: &ModuleRef) -> SymbolMap<OwnedSymbol> {
    let Ok(elf) = object::File::parse(module.data()) else {
        return SymbolMap::new(Vec::new());
    };
    let symbols = elf
        .symbol_map()
        .symbols()
        .iter()
        .map(|s| OwnedSymbol {
            address: s.address(),
            size: s.size(),
            name: s.name().to_string(),
        })
        .collect();
    SymbolMap::new(symbols)
}

#[cfg(test)]
mod tests;
