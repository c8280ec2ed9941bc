//! The `jvmperf` commands, one module each; `main.rs` parses the command line and calls `run`.

pub mod convert;
pub mod diff;
pub mod doctor;
pub mod dump;
pub mod jitmap;
pub mod record;
pub mod report;
