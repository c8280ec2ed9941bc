//! The `jvmperf` commands, one module each; `main.rs` parses the command line (`cli::Cli`) and
//! calls `run`.

mod console;
pub mod convert;
pub mod daemon;
pub mod diff;
pub mod doctor;
pub mod dump;
mod event_args;
pub mod jitmap;
pub mod reachability;
pub mod record;
pub mod report;
pub mod report_jit;
pub mod top;
