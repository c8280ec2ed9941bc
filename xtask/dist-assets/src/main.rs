//! `dist-assets DIR`: writes jvmperf's man pages (`DIR/man/jvmperf.1`, `jvmperf-record.1`, … one
//! per subcommand) and its bash, zsh and fish completions (`DIR/completions/jvmperf.bash`,
//! `_jvmperf`, `jvmperf.fish`) from its clap definition, `jvmperf::cli::Cli`. Run by
//! `cargo xtask dist`.

use clap::CommandFactory;
use clap_complete::Shell;
use jvmperf::cli::Cli;
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: dist-assets DIR");
        std::process::exit(2);
    };
    if let Err(e) = write_assets(&PathBuf::from(dir)) {
        eprintln!("dist-assets: cannot write into {dir}: {e}");
        std::process::exit(1);
    }
}

fn write_assets(dir: &std::path::Path) -> std::io::Result<()> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        if d.exists() {
            std::fs::remove_dir_all(d)?;
        }
        std::fs::create_dir_all(d)?;
    }
    clap_mangen::generate_to(Cli::command(), &man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut Cli::command(), "jvmperf", &completions)?;
    }
    Ok(())
}
