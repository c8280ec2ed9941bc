//! Native symbolization: function names (with inlined frames), file and line from a module's
//! DWARF or its separate debug file — through the on-disk symbol cache where the module has a
//! build-id — else from its ELF symbol table.

use super::debuginfo::{find_debug_file, find_sup_file};
use super::modules::ModuleRef;
use super::symcache::{CacheDir, CachedSymbols};
use object::{Object, ObjectSegment, SymbolMap, SymbolMapEntry};
use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Symbolizes native pcs; debug info is opened once per file (by build-id), on first use. It
/// keeps no cache of its answers: its caller interns them once per distinct pc.
pub struct NativeSymbolizer {
    modules: HashMap<Arc<str>, ModuleSymbols>,
    separate_debug_files: bool,
    /// Where symbol caches are kept, or why there is none (DWARF is then read in memory).
    cache: Result<CacheDir, String>,
    /// Time spent building caches of modules seen for the first time on this host.
    pub built: Vec<(String, Duration)>,
}

impl Default for NativeSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl NativeSymbolizer {
    /// Symbol caches in the user's cache directory.
    pub fn new() -> Self {
        Self::with_cache(CacheDir::default_location())
    }

    pub fn with_cache(cache: Result<CacheDir, String>) -> Self {
        NativeSymbolizer {
            modules: HashMap::new(),
            separate_debug_files: true,
            cache,
            built: Vec::new(),
        }
    }

    /// The symbol cache directory, or why there is none.
    pub fn cache(&self) -> &Result<CacheDir, String> {
        &self.cache
    }

    /// Open (building its cache if needed) the debug info of `module` ahead of its first pc,
    /// saying in `activity` when a cache is being built.
    pub fn prepare(&mut self, module: &ModuleRef, activity: &Mutex<String>) {
        self.module(module, Some(activity));
    }

    fn module(&mut self, module: &ModuleRef, activity: Option<&Mutex<String>>) -> &ModuleSymbols {
        let (cache, built) = (&self.cache, &mut self.built);
        let debug_files = self.separate_debug_files;
        self.modules.entry(module.key.clone()).or_insert_with(|| {
            let on_build = || {
                if let Some(mut a) = activity.and_then(|a| a.lock().ok()) {
                    *a = format!(
                        "building the symbol cache of {} (once per build of it on this host)",
                        module.name
                    );
                }
            };
            let symbols = ModuleSymbols::load(module, debug_files, cache.as_ref().ok(), on_build);
            built.extend(symbols.built.map(|t| (module.name.clone(), t)));
            symbols
        })
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
        let mut frames = self.module(module, None).frames(probe);
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

    /// Whether a symbolized module's DWARF is read through the symbol cache.
    pub fn is_cached(&self, module: &ModuleRef) -> bool {
        self.modules
            .get(&module.key)
            .is_some_and(|m| matches!(m.dwarf, Ok(Dwarf::Cached { .. })))
    }

    /// Why a symbolized module's debug file could not be loaded, if it could not.
    pub fn dwarf_error(&self, module: &ModuleRef) -> Option<&str> {
        let symbols = self.modules.get(&module.key)?;
        symbols.debug_file.as_ref()?;
        symbols.dwarf.as_ref().err().map(String::as_str)
    }
}

/// Where a module's DWARF is read from.
enum Dwarf {
    /// The symbol cache of its build-id (which also holds its debug file's symbol table).
    /// Addresses there are relative to the module's first loadable segment.
    Cached {
        symbols: CachedSymbols,
        load_address: u64,
    },
    /// Read into memory: modules without a build-id to key a cache by, debug info split by dwz
    /// (which the cache's converter cannot follow), or when no cache directory can be used.
    Loaded(Box<addr2line::Loader>),
}

struct ModuleSymbols {
    module: ModuleRef,
    /// DWARF from the module itself or its debug file.
    dwarf: std::result::Result<Dwarf, String>,
    debug_file: Option<PathBuf>,
    /// How long building the module's symbol cache took, if it was built now.
    built: Option<Duration>,
    /// The module's own `.symtab` (else `.dynsym`), built only if DWARF and its file have no name.
    own_symbols: OnceCell<SymbolMap<OwnedSymbol>>,
}

impl ModuleSymbols {
    fn load(
        module: &ModuleRef,
        separate_debug_files: bool,
        cache: Option<&CacheDir>,
        on_build: impl FnOnce(),
    ) -> Self {
        let mut symbols = ModuleSymbols {
            module: module.clone(),
            dwarf: Err("no debug info".to_string()),
            debug_file: None,
            built: None,
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
        let Some(path) = symbols.debug_file.clone() else {
            return symbols;
        };
        let sup = find_sup_file(module, &path);
        let cache = cache.zip(module.build_id_hex()).filter(|_| sup.is_none());
        let cache_error = match cache {
            Some((cache, build_id)) => match cache.open_or_build(&build_id, &path, on_build) {
                Ok(opened) => {
                    let load_address = elf.segments().next().map_or(0, |s| s.address());
                    symbols.built = opened.built;
                    symbols.dwarf = Ok(Dwarf::Cached {
                        symbols: opened.symbols,
                        load_address,
                    });
                    return symbols;
                }
                Err(e) => e,
            },
            None if sup.is_some() => {
                "its debug info is split by dwz, which the symbol cache cannot read".to_string()
            }
            None if module.build_id.is_none() => {
                "it has no build-id to key a symbol cache by".to_string()
            }
            None => "no symbol cache directory (set JVMPERF_CACHE_DIR)".to_string(),
        };
        if too_big_to_read_in_memory(&path) {
            eprintln!(
                "jvmperf: {}: {cache_error}; its frames are named from its symbol table",
                module.name
            );
            symbols.dwarf = Err(cache_error);
            return symbols;
        }
        symbols.dwarf = addr2line::Loader::new_with_sup(&path, sup.as_ref())
            .map(|l| Dwarf::Loaded(Box::new(l)))
            .map_err(|e| format!("{}: {e}", path.display()));
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
        let loader = match &self.dwarf {
            Ok(Dwarf::Cached {
                symbols,
                load_address,
            }) => return symbols.frames(probe.wrapping_sub(*load_address)),
            Ok(Dwarf::Loaded(loader)) => loader,
            Err(_) => return out,
        };
        let Ok(mut iter) = loader.find_frames(probe) else {
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
        let loaded = match &self.dwarf {
            Ok(Dwarf::Loaded(loader)) => loader.find_symbol(probe),
            _ => None,
        };
        let name = match loaded {
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

/// Debug files this large are read only through the symbol cache: inflated in memory, libjvm's
/// 156 MB take ~500 MB and seconds of CPU in every recording.
fn too_big_to_read_in_memory(debug_file: &Path) -> bool {
    std::fs::metadata(debug_file).is_ok_and(|m| m.len() > 32 << 20)
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
