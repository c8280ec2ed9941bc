//! The command line: its definition ([`Cli`], which `cargo xtask dist` also turns into man pages
//! and shell completions), the value parsers shared by the commands' options, and the version the
//! CLI prints.

use crate::cmd;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

/// What `jvmperf --version` prints after the program's name: the crate version, the git commit it
/// was built from (`unknown` outside a git checkout, see build.rs) and the JDKs it supports, e.g.
/// `0.1.0 (commit 42a572d1b2c3, HotSpot JDK 11-25)`. Every HotSpot layout fact is read from the
/// target's VMStructs; 11, 17, 21 and 25 are tested.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("JVMPERF_GIT_COMMIT"),
    ", HotSpot JDK 11-25)"
);

/// A number of seconds (`2.5`).
pub fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .ok_or_else(|| format!("{s} is not a valid number of seconds"))
}

#[derive(Parser)]
#[command(
    name = "jvmperf",
    version = VERSION,
    about = "Sampling profiler for running HotSpot JVMs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Check, without changing anything, whether jvmperf can profile a JVM; names the fix for
    /// every failing check.
    Doctor {
        /// Process id of the JVM.
        #[arg(short, long)]
        pid: u32,
    },
    /// Print every thread's stack at one instant, like jstack, without attaching to the JVM or
    /// waiting for a safepoint (works on a stuck JVM).
    Dump(cmd::dump::DumpOptions),
    /// A live view of a JVM's hottest methods (self and total), refreshed every second.
    Top(cmd::top::TopOptions),
    /// Sample a running JVM and write a flame graph, collapsed stacks, iprof, pprof, JFR or a raw
    /// recording.
    Record(cmd::record::RecordOptions),
    /// Print the target's JIT code (stubs, nmethods, inline trees, lines); optionally a perf map.
    Jitmap(cmd::jitmap::JitmapOptions),
    /// Convert a profile (.jvmperf, .jfr, .iprof, .pb.gz, .collapsed) to another format, optionally
    /// cut to a time window and to threads.
    Convert(cmd::convert::ConvertOptions),
    /// Print the hottest methods of a profile by self and total samples.
    Report(cmd::report::ReportOptions),
    /// Write a differential flame graph of two profiles.
    Diff(cmd::diff::DiffOptions),
    /// List the Java methods with samples that a native-image call tree report does not reach.
    Reachability(cmd::reachability::ReachabilityOptions),
    /// Profile every HotSpot JVM on the host continuously at a low rate, a file per JVM per
    /// interval (in the foreground; the systemd unit jvmperf-daemon.service runs it as root).
    Daemon(cmd::daemon::DaemonOptions),
    /// Build a native symbol cache file from a debug file (run by jvmperf itself, in a child
    /// process, the first time it meets a module).
    #[command(hide = true)]
    BuildSymbolCache { debug_file: PathBuf, out: PathBuf },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_release_the_commit_and_the_jdks() {
        assert!(VERSION.starts_with(concat!(env!("CARGO_PKG_VERSION"), " (commit ")));
        let commit = env!("JVMPERF_GIT_COMMIT");
        assert!(
            commit == "unknown"
                || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_alphanumeric())),
            "{commit:?}"
        );
    }
}
