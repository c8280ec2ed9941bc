//! The JVMTI shim (`java-agent-shim/`), built by `build.rs` and embedded in the binary.

/// `libjvmperf-shim.so`: copied to a file the target JVM can read, then loaded with the attach `load` command.
pub const SHIM_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libjvmperf-shim.so"));

/// The version the shim reports in HELLO: the crate version plus a short hash of the shim sources.
pub const SHIM_VERSION: &str = env!("JVMPERF_SHIM_VERSION");
