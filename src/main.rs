use clap::{Parser, Subcommand};
use jvmperf::error::{Error, ErrorKind};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "jvmperf",
    version,
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
    /// Sample a running JVM and write a flame graph, collapsed stacks, iprof, pprof or a raw
    /// recording.
    Record {
        /// Process id of the JVM.
        #[arg(short, long)]
        pid: u32,
        /// Seconds to record; without it, until Ctrl-C or SIGTERM.
        #[arg(short, long)]
        duration: Option<f64>,
        /// Samples per second per thread.
        #[arg(short = 'F', long, default_value_t = 99)]
        frequency: u64,
        /// Output file; the format follows the extension (.collapsed, .txt, .svg, .iprof, .pb.gz,
        /// .jvmperf) unless --format.
        #[arg(short, long, default_value = "profile.svg")]
        output: PathBuf,
        /// collapsed, svg, iprof, pprof or jvmperf.
        #[arg(long)]
        format: Option<String>,
        /// Add the thread name as each stack's root frame.
        #[arg(long)]
        threads: bool,
        /// Include kernel frames (needs perf_event_paranoid <= 1 or CAP_PERFMON).
        #[arg(long)]
        kernel: bool,
        /// Recompile hot code compiled before the attach so inlined frames are exact.
        #[arg(long)]
        precise_inlining: bool,
        /// Bytes of user stack copied per sample (multiple of 8, at most 65528).
        #[arg(long, default_value_t = 32768)]
        stack_size: u32,
        /// Keep at most this many distinct stacks: past it, a new stack is cut after its longest
        /// known prefix and ends in a `[truncated: --max-stacks]` frame, so memory stays bounded
        /// however long the recording runs.
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..))]
        max_stacks: u32,
        /// Print a status line to stderr every this many seconds: samples, lost, distinct stacks,
        /// jvmperf's memory and the shim's memory inside the JVM.
        #[arg(long, value_name = "SECONDS")]
        status_every: Option<f64>,
    },
    /// Print the target's JIT code (stubs, nmethods, inline trees, lines); optionally a perf map.
    Jitmap {
        /// Process id of the JVM.
        #[arg(short, long)]
        pid: u32,
        /// Write the map here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Also write /tmp/perf-<pid>.map for Linux perf.
        #[arg(long)]
        perf_map: bool,
        /// Recompile application code compiled before the attach, so every pc maps to its exact
        /// inlined chain (retransforms the classes with unchanged bytes).
        #[arg(long)]
        precise_inlining: bool,
        /// Seconds to wait for that recompilation.
        #[arg(long, default_value_t = 5.0)]
        settle: f64,
    },
    /// Convert a profile (.jvmperf, .iprof, .pb.gz, .collapsed) to another format, optionally
    /// cut to a time window and to threads.
    Convert {
        /// The profile to read.
        input: PathBuf,
        /// Output file; the format follows the extension (.collapsed, .txt, .svg, .iprof,
        /// .pb.gz, .jvmperf) unless --format.
        #[arg(short, long)]
        output: PathBuf,
        /// collapsed, svg, iprof, pprof or jvmperf.
        #[arg(long)]
        format: Option<String>,
        /// Keep samples from this time on: seconds from the start of the recording, or an
        /// absolute System.nanoTime value.
        #[arg(long, value_name = "T")]
        since: Option<String>,
        /// Keep samples before this time (same forms as --since).
        #[arg(long, value_name = "T")]
        until: Option<String>,
        /// Keep only threads with this name (repeatable).
        #[arg(long = "thread", value_name = "NAME")]
        thread: Vec<String>,
        /// Add the thread name as each stack's root frame.
        #[arg(long)]
        threads: bool,
    },
    /// Print the hottest methods of a profile by self and total samples.
    Report {
        /// The profile to read (.jvmperf, .iprof, .pb.gz, .collapsed).
        input: PathBuf,
        /// One table per thread.
        #[arg(long)]
        threads: bool,
        /// Rows per table (0 = all).
        #[arg(long, default_value_t = 30)]
        top: usize,
        /// Order by self or total samples.
        #[arg(long, default_value = "self")]
        sort: String,
    },
    /// Write a differential flame graph of two profiles.
    Diff {
        /// The profile before the change.
        before: PathBuf,
        /// The profile after the change.
        after: PathBuf,
        /// Output file: .svg, or .collapsed for differential folded lines.
        #[arg(short, long)]
        output: PathBuf,
        /// svg or collapsed.
        #[arg(long)]
        format: Option<String>,
        /// Scale BEFORE to the sample count of AFTER.
        #[arg(long)]
        normalize: bool,
        /// Add the thread name as each stack's root frame.
        #[arg(long)]
        threads: bool,
    },
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
        Command::Doctor { pid } => jvmperf::cmd::doctor::run(pid),
        Command::Record {
            pid,
            duration,
            frequency,
            output,
            format,
            threads,
            kernel,
            precise_inlining,
            stack_size,
            max_stacks,
            status_every,
        } => parse_format(format).and_then(|format| {
            jvmperf::cmd::record::run(&jvmperf::cmd::record::RecordOptions {
                pid,
                duration: duration.map(seconds),
                frequency_hz: frequency,
                stack_size,
                max_stacks: max_stacks as usize,
                output,
                format,
                threads,
                kernel,
                precise_inlining,
                status_every: status_every.map(seconds),
            })
        }),
        Command::Jitmap {
            pid,
            output,
            perf_map,
            precise_inlining,
            settle,
        } => jvmperf::cmd::jitmap::run(&jvmperf::cmd::jitmap::JitmapOptions {
            pid,
            output,
            perf_map,
            precise_inlining,
            settle: seconds(settle),
        }),
        Command::Convert {
            input,
            output,
            format,
            since,
            until,
            thread,
            threads,
        } => (|| {
            let time = |t: Option<String>| {
                t.as_deref()
                    .map(jvmperf::cmd::convert::TimeArg::parse)
                    .transpose()
            };
            jvmperf::cmd::convert::run(&jvmperf::cmd::convert::ConvertOptions {
                input,
                output,
                format: parse_format(format)?,
                filter: jvmperf::cmd::convert::Filter {
                    since: time(since)?,
                    until: time(until)?,
                    threads: thread,
                },
                threads,
            })
        })(),
        Command::Report {
            input,
            threads,
            top,
            sort,
        } => jvmperf::cmd::report::SortBy::parse(&sort).and_then(|sort| {
            jvmperf::cmd::report::run(&jvmperf::cmd::report::ReportOptions {
                input,
                threads,
                top,
                sort,
            })
        }),
        Command::Diff {
            before,
            after,
            output,
            format,
            normalize,
            threads,
        } => parse_format(format).and_then(|format| {
            jvmperf::cmd::diff::run(&jvmperf::cmd::diff::DiffOptions {
                before,
                after,
                output,
                format,
                normalize,
                threads,
            })
        }),
    };
    if let Err(e) = result {
        exit_with(e);
    }
}

fn parse_format(name: Option<String>) -> jvmperf::error::Result<Option<jvmperf::output::Format>> {
    name.as_deref()
        .map(jvmperf::output::Format::parse)
        .transpose()
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_else(|_| {
        exit_with(Error::new(
            ErrorKind::Usage,
            format!("{s} is not a valid number of seconds"),
        ))
    })
}

fn exit_with(e: Error) -> ! {
    eprintln!("jvmperf: error: {e}");
    std::process::exit(e.kind.exit_code())
}
