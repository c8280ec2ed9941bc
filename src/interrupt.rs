//! Ctrl-C and SIGTERM as a process-wide request to stop: recording loops finish and write what
//! they have, and the waits of an attach (listener, shim connection, code replay) give up at once.

use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

fn flag() -> &'static Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Catch SIGINT and SIGTERM from now on (instead of dying at once).
pub fn install() -> Result<()> {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag().clone())
            .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot handle signals: {e}")))?;
    }
    Ok(())
}

/// Whether Ctrl-C or SIGTERM arrived since `install`.
pub fn requested() -> bool {
    flag().load(Ordering::Relaxed)
}

/// An error when a stop was requested while attaching to `pid`.
pub fn check_while_attaching(pid: u32) -> Result<()> {
    if requested() {
        return Err(Error::new(
            ErrorKind::Interrupted,
            format!("interrupted while attaching to JVM {pid}: nothing was recorded"),
        ));
    }
    Ok(())
}
