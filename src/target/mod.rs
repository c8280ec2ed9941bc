//! The profiled process: its identity under /proc, and access to its memory.

pub mod freeze;
pub mod mapped;
pub mod memory;
pub mod process;

pub use memory::{
    MemError, MemFault, PageCachedMemory, ProcessMemory, SnapshotMemory, TargetMemory,
};
pub use process::{Mapping, TargetProcess};
