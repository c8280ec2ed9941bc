use clap::Parser;
use jvmperf::cli::{Cli, Command};
use jvmperf::cmd;
use jvmperf::error::{Error, ErrorKind};

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
