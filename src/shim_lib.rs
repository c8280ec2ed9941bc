//! The JVMTI shim (`java-agent-shim/`), built by `build.rs` and embedded in the binary.

/// `libjvmperf-shim.so`: copied to a file the target JVM can read, then loaded with the attach `load` command.
pub const SHIM_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libjvmperf-shim.so"));

/// The version the shim reports in HELLO: the crate version plus a short hash of the shim sources.
pub const SHIM_VERSION: &str = env!("JVMPERF_SHIM_VERSION");

#[cfg(test)]
mod tests {
    use object::{Object, ObjectSymbol};

    /// The shim keeps its symbol table, so profiles name its frames (its thread, its callbacks).
    #[test]
    fn the_shim_names_its_own_functions() {
        let elf = object::File::parse(super::SHIM_SO).unwrap();
        let names: Vec<&str> = elf.symbols().filter_map(|s| s.name().ok()).collect();
        for f in ["shim_main", "on_compiled_method_load", "on_thread_start"] {
            assert!(names.contains(&f), "{f} not in the shim's symbols");
        }
    }
}
