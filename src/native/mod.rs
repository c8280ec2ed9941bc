//! Native (non-Java) frames: the target's loaded ELF modules, one-frame-at-a-time unwinding with
//! framehop, symbolization with addr2line (own DWARF, separate debug files, symbol tables), and
//! kernel symbols from `/proc/kallsyms`.

mod debuginfo;
pub mod functions;
pub mod kernel;
pub mod modules;
pub mod sigframe;
pub mod symbols;
pub mod symcache;
pub mod unwind;

pub use kernel::{KernelSymbol, KernelSymbols};
pub use modules::{Module, ModuleChanges, ModuleRef, Modules};
pub use sigframe::Interrupted;
pub use symbols::{NativeFrame, NativeSymbolizer};
pub use unwind::{NativeRegs, NativeUnwinder, StepOutcome};

#[cfg(test)]
pub(crate) mod testutil;

// The profiler may unwind and symbolize on worker threads.
const _: () = {
    const fn send<T: Send>() {}
    const fn sync<T: Sync>() {}
    send::<NativeUnwinder>();
    sync::<NativeUnwinder>();
    send::<NativeSymbolizer>();
    sync::<KernelSymbols>();
};

/// The separate debug file for a module (build-id or `.gnu_debuglink`), without loading it.
pub fn separate_debug_file(module: &Module) -> Option<std::path::PathBuf> {
    let elf = object::File::parse(module.data()).ok()?;
    debuginfo::find_debug_file(module, &elf)
}
