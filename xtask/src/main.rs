//! Workspace automation for jvmperf: `cargo xtask <command>`.
//!
//! Each command lives in its own module; `main` only dispatches. To add a command, add a module,
//! an entry in [`COMMANDS`] and a match arm in [`run`].

mod bench_alloc;
mod bench_apps;
mod bench_attach;
mod bench_convert;
mod bench_daemon;
mod bench_footprint;
mod bench_html;
mod bench_jvm;
mod bench_record;
mod bench_soak;
mod bench_switch;
mod bench_tomcat;
mod demo;
mod dist;
mod jdk;
mod many_methods_gen;
mod paths;

use anyhow::{bail, Result};

/// (name, one-line summary) of every command, for the usage text.
const COMMANDS: &[(&str, &str)] = &[
    (
        "bench-apps",
        "compile the Java bench apps (bench-apps/src) and the generated ManyMethods classes",
    ),
    (
        "bench",
        "benchmarks: `bench attach` (time to a complete code map, replay rate), `bench record` (all-in cost per sample by wall-clock throughput, with bare perf, perf --call-graph dwarf and JFR measured alongside), `bench convert` (raw recording to every format), `bench html` (size of the HTML page of `bench soak`'s recording and its load and redraw time in headless Chromium), `bench footprint` (wall time, memory and CPU of one recording, first and warm run), `bench soak` (memory and lost samples over a long recording), `bench daemon` (jvmperf daemon on 3 JVMs: CPU, RSS, files and samples per JVM), `bench tomcat` (Tomcat's request rate under wrk while recording at 99 and 999 Hz, against the rate without), `bench switch` (throughput a JVM handing work between threads keeps while sampled per CPU and per thread, beside perf and async-profiler), `bench alloc` (throughput an allocation-heavy JVM keeps under `record -e alloc`, beside perf on the same uprobes, async-profiler and JFR, and the attach's one-off cost)",
    ),
    (
        "demo",
        "start a bundled bench app and run jvmperf against it",
    ),
    (
        "dist",
        "build the Debian package target/dist/jvmperf_*.deb (binary for glibc 2.28, man pages, completions, systemd unit) and check it; `--check` also installs it into a fresh Debian root and runs it (root)",
    ),
    ("help", "print this message"),
];

fn usage() -> String {
    let mut s = String::from("usage: cargo xtask <command> [options]\n\ncommands:\n");
    for (name, summary) in COMMANDS {
        s.push_str(&format!("  {name:<12} {summary}\n"));
    }
    s.push_str("\nrun `cargo xtask <command> --help` for a command's options\n");
    s
}

fn run(args: &[String]) -> Result<()> {
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{}", usage());
        bail!("no command given");
    };
    match cmd.as_str() {
        "bench-apps" => bench_apps::main(rest),
        "bench" => match rest.split_first() {
            Some((name, args)) if name == "attach" => bench_attach::main(args),
            Some((name, args)) if name == "record" => bench_record::main(args),
            Some((name, args)) if name == "convert" => bench_convert::main(args),
            Some((name, args)) if name == "html" => bench_html::main(args),
            Some((name, args)) if name == "soak" => bench_soak::main(args),
            Some((name, args)) if name == "footprint" => bench_footprint::main(args),
            Some((name, args)) if name == "daemon" => bench_daemon::main(args),
            Some((name, args)) if name == "tomcat" => bench_tomcat::main(args),
            Some((name, args)) if name == "switch" => bench_switch::main(args),
            Some((name, args)) if name == "alloc" => bench_alloc::main(args),
            _ => {
                bail!("usage: cargo xtask bench attach|record|convert|html|soak|footprint|daemon|tomcat|switch|alloc")
            }
        },
        "demo" => demo::main(rest),
        "dist" => dist::main(rest),
        "help" | "-h" | "--help" => {
            print!("{}", usage());
            Ok(())
        }
        other => {
            eprint!("{}", usage());
            bail!("unknown command `{other}`");
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
