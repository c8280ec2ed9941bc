//! The in-JVM agent ("shim"): placing it where the target can load it, and talking to it.

pub mod placement;
pub mod protocol;
pub mod session;
