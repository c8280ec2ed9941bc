//! The profiled process: its identity under /proc, and access to its memory.

pub mod freeze;
pub mod hsperf;
pub mod identity;
pub mod mapped;
pub mod memory;

pub use identity::{Mapping, TargetProcess};
pub use memory::{
    MemError, MemFault, PageCachedMemory, ProcessMemory, SnapshotMemory, TargetMemory,
};
