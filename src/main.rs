use clap::{Parser, Subcommand};
use jvmperf::cmd;
use jvmperf::error::{Error, ErrorKind};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "jvmperf",
    version = jvmperf::cli::VERSION,
    about = "Sampling profiler for running HotSpot JVMs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// interval (in the foreground; see contrib/jvmperf-daemon.service).
    Daemon(cmd::daemon::DaemonOptions),
    /// Build a native symbol cache file from a debug file (run by jvmperf itself, in a child
    /// process, the first time it meets a module).
    #[command(hide = true)]
    BuildSymbolCache { debug_file: PathBuf, out: PathBuf },
}

fn main() {
    let cli = Cli::parse();
    if let Ok(exe) = std::env::current_exe() {
        jvmperf::native::symcache::build_in_child_process(exe);
    }
    let result = match cli.command {
        Command::BuildSymbolCache { debug_file, out } => {
            // Nothing to build for once the jvmperf that asked is gone.
            // SAFETY: prctl with integer arguments only.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            jvmperf::native::symcache::build(&debug_file, &out)
                .map_err(|e| Error::new(ErrorKind::Internal, e))
        }
        Command::Doctor { pid } => cmd::doctor::run(pid),
        Command::Dump(opts) => cmd::dump::run(&opts),
        Command::Record(opts) => cmd::record::run(&opts),
        Command::Top(opts) => cmd::top::run(&opts),
        Command::Jitmap(opts) => cmd::jitmap::run(&opts),
        Command::Convert(opts) => cmd::convert::run(&opts),
        Command::Report(opts) => cmd::report::run(&opts),
        Command::Diff(opts) => cmd::diff::run(&opts),
        Command::Reachability(opts) => cmd::reachability::run(&opts),
        Command::Daemon(opts) => cmd::daemon::run(&opts),
    };
    if let Err(e) = result {
        eprintln!("jvmperf: error: {e}");
        std::process::exit(e.kind.exit_code())
    }
}
