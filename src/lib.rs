//! jvmperf: a stack-sampling profiler for HotSpot JVMs on Linux.

pub mod attach;
pub mod cmd;
pub mod engine;
pub mod error;
pub mod hotspot;
pub mod input;
pub mod java_names;
pub mod jit;
pub mod live_jvm;
pub mod native;
pub mod output;
pub mod profile;
pub mod sampler;
pub mod shim;
pub mod shim_lib;
pub mod symbolize;
pub mod target;
pub mod walker;
