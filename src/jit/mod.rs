//! The JIT model: what code the target's code cache held when — nmethods with their inline
//! records, stubs, methods — folded from the shim's records into a time-versioned code map.

pub mod codemap;
pub mod logcompilation;
pub mod state;
