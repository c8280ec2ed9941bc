//! jvmperf: a stack-sampling profiler for HotSpot JVMs on Linux.

pub(crate) mod attach;
pub mod calltree;
pub mod cli;
pub mod cmd;
pub(crate) mod engine;
pub mod error;
pub mod hotspot;
pub mod input;
pub(crate) mod interrupt;
pub mod java_names;
pub mod jit;
pub mod live_jvm;
pub mod native;
pub(crate) mod output;
pub(crate) mod priority;
pub mod process;
pub mod profile;
pub mod sampler;
pub mod shim;
pub mod shim_lib;
pub(crate) mod symbolize;
pub(crate) mod walker;
