//! User-facing errors: one line naming the cause and the fix, plus a distinct exit code per class.

use std::fmt;

/// What went wrong, coarse enough to map onto an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad command line or input file.
    Usage,
    /// The pid does not exist or exited.
    NoProcess,
    /// The pid is not a HotSpot JVM.
    NotJvm,
    /// The JVM refuses or cannot accept an attach (flags, signals, timeout, agent load failure).
    Attach,
    /// Another jvmperf profiles the JVM (its shim serves one at a time).
    Busy,
    /// We lack a permission (ptrace, perf, file ownership).
    Permission,
    /// The shim connection failed or sent something malformed.
    Shim,
    /// perf_event_open / sampling failure.
    Sampling,
    /// Writing output failed.
    Output,
    /// Ctrl-C or SIGTERM before there was anything to write.
    Interrupted,
    /// Anything else.
    Internal,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Usage => 2,
            ErrorKind::NoProcess => 3,
            ErrorKind::NotJvm => 4,
            ErrorKind::Attach | ErrorKind::Busy => 5,
            ErrorKind::Permission => 6,
            ErrorKind::Shim => 7,
            ErrorKind::Sampling => 8,
            ErrorKind::Output => 9,
            ErrorKind::Interrupted => 130,
            ErrorKind::Internal => 70,
        }
    }
}

/// An error with a kind and a one-line message that names the fix where there is one.
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand constructor used across modules: `err(ErrorKind::Attach, format!(..))`.
pub fn err<T>(kind: ErrorKind, message: impl Into<String>) -> Result<T> {
    Err(Error::new(kind, message))
}
