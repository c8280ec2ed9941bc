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
    /// Sample a running JVM and write a flame graph or collapsed stacks.
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
        /// Output file; the format follows the extension (.collapsed, .txt, .svg) unless --format.
        #[arg(short, long, default_value = "profile.svg")]
        output: PathBuf,
        /// collapsed or svg.
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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
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
        } => format
            .as_deref()
            .map(jvmperf::output::Format::parse)
            .transpose()
            .and_then(|format| {
                jvmperf::record::run(&jvmperf::record::RecordOptions {
                    pid,
                    duration: duration.map(seconds),
                    frequency_hz: frequency,
                    stack_size,
                    output,
                    format,
                    threads,
                    kernel,
                    precise_inlining,
                })
            }),
        Command::Jitmap {
            pid,
            output,
            perf_map,
            precise_inlining,
            settle,
        } => jvmperf::jitmap::run(&jvmperf::jitmap::JitmapOptions {
            pid,
            output,
            perf_map,
            precise_inlining,
            settle: seconds(settle),
        }),
    };
    if let Err(e) = result {
        exit_with(e);
    }
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
