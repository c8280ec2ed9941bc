//! `cargo xtask dist [--check]`: the Debian package `target/dist/jvmperf_<version>-1_amd64.deb`.
//!
//! The binary is built with cargo-zigbuild against glibc 2.28 (RHEL 8, Debian 10, Ubuntu 20.04):
//! zig links against stubs of that glibc's symbols, and compiles the C code (the JVMTI shim,
//! ring) for it too. The man pages and shell completions come from jvmperf's clap definition
//! (xtask/dist-assets); cargo-deb packages them with the binary, the systemd unit (installed
//! disabled) and its options file, as `[package.metadata.deb]` in Cargo.toml lists. cargo-zigbuild,
//! cargo-deb (crates.io) and zig (PyPI's `ziglang`) are installed into target/dist-tools when
//! missing, at the versions below.
//!
//! Every run then checks the package: the highest `GLIBC_` version its binary and the embedded
//! shim need (`objdump -T`) is at most 2.28, and it holds the binary, a man page per command, the
//! completions and the unit. `--check` also installs it into a fresh Debian root (mmdebstrap,
//! minbase, from deb.debian.org) and runs `jvmperf --version`, `man jvmperf-record`, and
//! `jvmperf doctor` and `jvmperf record` on a JVM of this host from inside (the root shares the
//! host's /proc, /sys and /tmp, where the JVM's attach socket and jvmperf's agent files are); it
//! needs root.

use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::bench_jvm::{self, BenchJvm};
use crate::paths;

/// The oldest glibc the release binary runs on.
const GLIBC: (u32, u32) = (2, 28);
const RUST_TARGET: &str = "x86_64-unknown-linux-gnu";
const CARGO_ZIGBUILD: &str = "0.24.1";
const CARGO_DEB: &str = "3.8.0";
const ZIGLANG: &str = "0.15.2";
/// The Debian release `--check` installs the package into.
const CHECK_SUITE: &str = "bookworm";
const CHECK_MIRROR: &str = "http://deb.debian.org/debian";

pub fn main(args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [a] if a == "--check" => true,
        [a] if a == "-h" || a == "--help" => {
            println!("usage: cargo xtask dist [--check]\n\n{}", usage_text());
            return Ok(());
        }
        _ => bail!("usage: cargo xtask dist [--check]"),
    };
    let start = Instant::now();
    let zig = install_tools()?;
    let dist = dist_dir();
    build_binary(&zig)?;
    step("man pages and completions", || {
        cargo()
            .args([
                "run",
                "--release",
                "--locked",
                "--quiet",
                "-p",
                "dist-assets",
                "--",
            ])
            .arg(&dist)
            .status()
            .checked("cargo run -p dist-assets")
    })?;
    let deb = step("cargo deb", || package(&dist))?;
    let max = verify(&deb)?;
    println!(
        "dist: {} ({:.1} MiB, needs glibc {}.{}) in {:.0} s",
        deb.display(),
        std::fs::metadata(&deb)?.len() as f64 / (1 << 20) as f64,
        max.0,
        max.1,
        start.elapsed().as_secs_f64()
    );
    if check {
        install_check(&deb)?;
    }
    Ok(())
}

fn usage_text() -> &'static str {
    "Builds target/dist/jvmperf_<version>-1_amd64.deb (binary for glibc 2.28, man pages, \
     completions, the disabled jvmperf-daemon unit) and checks its glibc floor and contents. \
     --check also installs it into a fresh Debian root and runs it there (needs root)."
}

/// Where the man pages, completions and the package go: `<workspace>/target/dist` whatever
/// `CARGO_TARGET_DIR` says, as `[package.metadata.deb]` names the generated files by that path.
fn dist_dir() -> PathBuf {
    paths::workspace_root().join("target/dist")
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(paths::workspace_root());
    cmd
}

/// Runs `f`, printing how long it took.
fn step<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let out = f()?;
    println!("dist: {name}: {:.1} s", t.elapsed().as_secs_f64());
    Ok(out)
}

/// Turns a finished command's status into an error naming it.
trait Checked {
    fn checked(self, what: &str) -> Result<()>;
}

impl Checked for std::io::Result<std::process::ExitStatus> {
    fn checked(self, what: &str) -> Result<()> {
        let status = self.with_context(|| format!("cannot run {what}"))?;
        ensure!(status.success(), "{what} failed ({status})");
        Ok(())
    }
}

/// Where the packaging tools are installed: cargo-zigbuild and cargo-deb in `bin/`, zig in
/// `ziglang-<version>/`. Inside the target directory, so that nothing outside the checkout changes.
fn tools_dir() -> PathBuf {
    paths::target_dir().join("dist-tools")
}

/// `cargo` with the packaging tools first in `PATH` (cargo finds `cargo-<name>` subcommands there).
fn cargo_with_tools() -> Result<Command> {
    let mut path = vec![tools_dir().join("bin")];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut cmd = cargo();
    cmd.env("PATH", std::env::join_paths(path)?);
    Ok(cmd)
}

/// cargo-zigbuild and cargo-deb (`cargo install --root`) and zig (`pip install --target`) where
/// missing or of another version; returns the zig binary.
fn install_tools() -> Result<PathBuf> {
    let root = tools_dir();
    for (tool, version) in [("zigbuild", CARGO_ZIGBUILD), ("deb", CARGO_DEB)] {
        let exe = root.join(format!("bin/cargo-{tool}"));
        // Both print `cargo-<tool> <version>`.
        let installed = Command::new(&exe).arg("--version").output();
        if installed.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(version)) {
            continue;
        }
        step(&format!("cargo install cargo-{tool}"), || {
            cargo()
                .args(["install", "--locked", "--quiet", "--force", "--root"])
                .arg(&root)
                .arg(format!("cargo-{tool}"))
                .args(["--version", version])
                .status()
                .checked(&format!("cargo install cargo-{tool}"))
        })?;
    }
    let dir = root.join(format!("ziglang-{ZIGLANG}"));
    let zig = dir.join("ziglang/zig");
    if !zig.is_file() {
        let pip = Command::new("python3")
            .args(["-m", "pip", "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !pip.is_ok_and(|s| s.success()) {
            bail!(
                "zig comes from PyPI through pip, which python3 lacks: apt-get install \
                 python3-pip (or run scripts/setup-debian.sh)"
            );
        }
        step(&format!("pip install ziglang=={ZIGLANG}"), || {
            Command::new("python3")
                .args([
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "--no-deps",
                ])
                .arg("--target")
                .arg(&dir)
                .arg(format!("ziglang=={ZIGLANG}"))
                .status()
                .checked("pip install ziglang")
        })?;
    }
    Ok(zig)
}

/// `cargo zigbuild --release` of jvmperf for glibc 2.28.
fn build_binary(zig: &Path) -> Result<()> {
    step("cargo zigbuild --release", || {
        cargo_with_tools()?
            .args([
                "zigbuild",
                "--release",
                "--locked",
                "-p",
                "jvmperf",
                "--bin",
                "jvmperf",
            ])
            .arg("--target")
            .arg(format!("{RUST_TARGET}.{}.{}", GLIBC.0, GLIBC.1))
            .env("CARGO_ZIGBUILD_ZIG_PATH", zig)
            // No debug info in the package (nor a symbol table: zig leaves it out): it would cost
            // link time and 90 MB.
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .status()
            .checked("cargo zigbuild")
    })
}

/// cargo-deb on the binary just built; returns the package's path.
fn package(dist: &Path) -> Result<PathBuf> {
    let out = cargo_with_tools()?
        .args([
            "deb",
            "--locked",
            "--no-build",
            "-p",
            "jvmperf",
            "--target",
            RUST_TARGET,
        ])
        .arg("--output")
        .arg(dist)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo deb")?;
    ensure!(out.status.success(), "cargo deb failed ({})", out.status);
    // It prints the package's path last.
    let text = String::from_utf8_lossy(&out.stdout);
    let path = text.lines().last().map(str::trim).unwrap_or_default();
    ensure!(
        path.ends_with(".deb"),
        "cargo deb printed no package path: {text}"
    );
    Ok(PathBuf::from(path))
}

/// The highest `GLIBC_x.y` version among the dynamic symbols `objdump -T` lists, or `None`.
fn max_glibc(objdump: &str) -> Option<(u32, u32)> {
    objdump
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| {
            let (major, minor) = word.strip_prefix("GLIBC_")?.split_once('.')?;
            // GLIBC_2.2.5: the third number cannot make it newer than any 2.28 floor we check.
            let minor = minor.split('.').next()?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .max()
}

fn glibc_needed(elf: &Path) -> Result<Option<(u32, u32)>> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(elf)
        .output()
        .context("cannot run objdump: apt-get install binutils")?;
    ensure!(
        out.status.success(),
        "objdump -T {} failed: {}",
        elf.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(max_glibc(&String::from_utf8_lossy(&out.stdout)))
}

/// The shim the last zigbuild embedded in the binary (the newest of its build directories).
fn built_shim() -> Result<PathBuf> {
    let build = paths::target_dir().join(format!("{RUST_TARGET}/release/build"));
    std::fs::read_dir(&build)
        .with_context(|| format!("cannot read {}", build.display()))?
        .filter_map(|e| Some(e.ok()?.path().join("out/libjvmperf-shim.so")))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .with_context(|| format!("no libjvmperf-shim.so under {}", build.display()))
}

/// Checks the package's glibc floor and contents; returns the highest glibc version it needs.
fn verify(deb: &Path) -> Result<(u32, u32)> {
    let unpacked = dist_dir().join("unpacked");
    if unpacked.exists() {
        std::fs::remove_dir_all(&unpacked)?;
    }
    Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(&unpacked)
        .status()
        .checked("dpkg-deb -x")?;
    let mut max = (0, 0);
    for elf in [unpacked.join("usr/bin/jvmperf"), built_shim()?] {
        let need = glibc_needed(&elf)?
            .with_context(|| format!("{} has no GLIBC_ symbol versions", elf.display()))?;
        ensure!(
            need <= GLIBC,
            "{} needs glibc {}.{}, more than {}.{}: a glibc function newer than that is called \
             (objdump -T names it; call the system call instead, as for gettid)",
            elf.display(),
            need.0,
            need.1,
            GLIBC.0,
            GLIBC.1
        );
        max = max.max(need);
    }
    let depends = String::from_utf8(
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(deb)
            .arg("Depends")
            .output()?
            .stdout,
    )?;
    let floor = format!("libc6 (>= {}.{})", GLIBC.0, GLIBC.1);
    ensure!(
        depends.trim() == floor,
        "the package depends on {:?}, not {floor:?}: fix `depends` in Cargo.toml's \
         [package.metadata.deb]",
        depends.trim()
    );

    let listing = Command::new("dpkg-deb").arg("-c").arg(deb).output()?;
    ensure!(listing.status.success(), "dpkg-deb -c failed");
    let listing = String::from_utf8_lossy(&listing.stdout);
    let files: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    let mut expected: Vec<String> = [
        "./usr/bin/jvmperf",
        "./etc/default/jvmperf",
        "./usr/share/bash-completion/completions/jvmperf",
        "./usr/share/zsh/vendor-completions/_jvmperf",
        "./usr/share/fish/vendor_completions.d/jvmperf.fish",
        "./usr/share/doc/jvmperf/README.md",
        "./usr/share/doc/jvmperf/copyright",
        "./usr/share/doc/jvmperf/LICENSE-MIT",
        "./usr/share/doc/jvmperf/LICENSE-APACHE",
    ]
    .map(String::from)
    .to_vec();
    // A man page per command the CLI shows (`jvmperf --help`), besides jvmperf.1.
    expected.push("./usr/share/man/man1/jvmperf.1.gz".into());
    for sub in jvmperf_commands(&unpacked.join("usr/bin/jvmperf"))? {
        expected.push(format!("./usr/share/man/man1/jvmperf-{sub}.1.gz"));
    }
    let mut missing: Vec<&str> = expected
        .iter()
        .map(String::as_str)
        .filter(|e| !files.contains(e))
        .collect();
    if !files
        .iter()
        .any(|f| f.ends_with("/systemd/system/jvmperf-daemon.service"))
    {
        missing.push("./usr/lib/systemd/system/jvmperf-daemon.service");
    }
    ensure!(
        missing.is_empty(),
        "{} lacks {}: see [package.metadata.deb] in Cargo.toml",
        deb.display(),
        missing.join(", ")
    );
    Ok(max)
}

/// The subcommands `jvmperf --help` lists (without `help`).
fn jvmperf_commands(jvmperf: &Path) -> Result<Vec<String>> {
    let out = Command::new(jvmperf)
        .arg("--help")
        .output()
        .with_context(|| format!("cannot run {}", jvmperf.display()))?;
    ensure!(out.status.success(), "jvmperf --help failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let commands: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect();
    ensure!(!commands.is_empty(), "jvmperf --help lists no commands");
    Ok(commands)
}

/// `--check`: installs the package into a fresh Debian root and runs it there.
fn install_check(deb: &Path) -> Result<()> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        bail!("dist --check builds a Debian root and chroots into it: run it as root");
    }
    let start = Instant::now();
    if Command::new("mmdebstrap")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        bail!(
            "dist --check needs mmdebstrap: apt-get install mmdebstrap (or \
             scripts/setup-debian.sh --dist)"
        );
    }
    // The JVM to record, started on the host: the chroot shares its process namespace.
    crate::bench_apps::main(&[])?;
    let jvm = BenchJvm::start(&[], &bench_jvm::classes(), "bench.InlineHot", &[])?;
    let pid = jvm.pid().to_string();

    let root = dist_dir().join("check-root");
    let root_dir = Root::create(&root)?;
    step(&format!("mmdebstrap {CHECK_SUITE} minbase"), || {
        Command::new("mmdebstrap")
            .args([
                "--quiet",
                "--variant=minbase",
                "--include=man-db",
                CHECK_SUITE,
            ])
            .arg(&root)
            .arg(CHECK_MIRROR)
            .status()
            .checked("mmdebstrap")
    })?;
    std::fs::copy(deb, root.join("root/jvmperf.deb"))?;
    step("apt-get install ./jvmperf.deb (chroot)", || {
        chroot(&root)
            .args(["apt-get", "install", "-y", "-qq", "-o", "Dpkg::Use-Pty=0"])
            .arg("/root/jvmperf.deb")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .checked("apt-get install of the package in the Debian root")
    })?;
    let wants = root.join("etc/systemd/system/multi-user.target.wants/jvmperf-daemon.service");
    ensure!(
        !wants.exists() && root.join("etc/default/jvmperf").is_file(),
        "the package enabled jvmperf-daemon or lacks /etc/default/jvmperf: see systemd-units in \
         Cargo.toml"
    );
    root_dir.mount()?;
    let version = chroot_output(&root, &["jvmperf", "--version"])?
        .trim()
        .to_string();
    ensure!(
        version.starts_with("jvmperf ")
            && version.contains("JDK 11-25")
            && !version.contains("commit unknown"),
        "jvmperf --version printed {version:?}: the version, the commit and the JDKs expected"
    );
    let man = plain_text(&chroot_output(
        &root,
        &["man", "-P", "cat", "jvmperf-record"],
    )?);
    ensure!(
        man.contains("--duration") && man.contains("--frequency"),
        "man jvmperf-record lacks the options:\n{man}"
    );
    let doctor = chroot_output(&root, &["jvmperf", "doctor", "-p", &pid])?;
    print!("{doctor}");
    step("jvmperf record -d 3 (chroot)", || {
        chroot(&root)
            .args([
                "jvmperf",
                "record",
                "-p",
                &pid,
                "-d",
                "3",
                "-o",
                "/root/check.collapsed",
            ])
            .status()
            .checked("jvmperf record in the Debian root")
    })?;
    let collapsed = std::fs::read_to_string(root.join("root/check.collapsed"))?;
    ensure!(
        collapsed.contains("bench/InlineHot") || collapsed.contains("bench.InlineHot"),
        "the recording from the Debian root has no frame of bench.InlineHot"
    );
    println!(
        "dist --check: installed in a fresh {CHECK_SUITE} root, --version, man, doctor and record \
         ran ({version}) in {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `man`'s output without overstriking (`x\x08x`) and with ASCII hyphens.
fn plain_text(man: &str) -> String {
    let mut out = String::new();
    for c in man.chars() {
        match c {
            '\x08' => {
                out.pop();
            }
            '\u{2010}' | '\u{2212}' => out.push('-'),
            c => out.push(c),
        }
    }
    out
}

fn chroot(root: &Path) -> Command {
    let mut cmd = Command::new("chroot");
    cmd.arg(root).env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    cmd
}

fn chroot_output(root: &Path, args: &[&str]) -> Result<String> {
    let out = chroot(root)
        .args(args)
        .output()
        .context("cannot run chroot")?;
    ensure!(
        out.status.success(),
        "`{}` in the Debian root failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The Debian root of `--check`, with the host's processes (a proc file system: jvmperf reads the
/// JVM through /proc), sysfs and /tmp (the JVM's attach socket, the agent jvmperf loads into it and
/// the socket the agent connects back to) mounted in it; unmounted and removed when dropped.
struct Root {
    dir: PathBuf,
}

/// (`mount` arguments before the mount point, mount point in the root).
const MOUNTS: [(&[&str], &str); 3] = [
    (&["-t", "proc", "proc"], "proc"),
    (&["-t", "sysfs", "sysfs"], "sys"),
    (&["--bind", "/tmp"], "tmp"),
];

impl Root {
    /// Clears what an interrupted run left at `dir`.
    fn create(dir: &Path) -> Result<Root> {
        let root = Root {
            dir: dir.to_path_buf(),
        };
        root.remove()?;
        Ok(root)
    }

    fn mount(&self) -> Result<()> {
        for (args, dir) in MOUNTS {
            Command::new("mount")
                .args(args)
                .arg(self.dir.join(dir))
                .status()
                .checked(&format!("mount {}", args.join(" ")))?;
        }
        Ok(())
    }

    fn remove(&self) -> Result<()> {
        for (_, dir) in MOUNTS.iter().rev() {
            let path = self.dir.join(dir);
            if is_mount_point(&path)? {
                Command::new("umount")
                    .arg(&path)
                    .status()
                    .checked(&format!("umount {}", path.display()))?;
            }
            // Never recurse into a mounted file system: the host's /tmp is one.
            ensure!(
                !is_mount_point(&path)?,
                "{} is still mounted: unmount it, then remove {}",
                path.display(),
                self.dir.display()
            );
        }
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir)
                .with_context(|| format!("cannot remove {}", self.dir.display()))?;
        }
        Ok(())
    }
}

/// Whether `path` is a mount point, from /proc/self/mountinfo (a bind mount of a directory of the
/// same file system has the same device number: only the mount table tells).
fn is_mount_point(path: &Path) -> Result<bool> {
    let Ok(path) = path.canonicalize() else {
        return Ok(false);
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mounted = mount_points(&mountinfo).any(|m| Path::new(&m) == path);
    Ok(mounted)
}

/// The mount points (fifth field) of /proc/self/mountinfo, with its octal escapes (`\040` for a
/// space) undone; see proc_pid_mountinfo(5).
fn mount_points(mountinfo: &str) -> impl Iterator<Item = String> + '_ {
    mountinfo.lines().filter_map(|line| {
        let field = line.split(' ').nth(4)?;
        let mut out = Vec::new();
        let mut bytes = field.bytes();
        while let Some(b) = bytes.next() {
            if b == b'\\' {
                let code: String = bytes.by_ref().take(3).map(char::from).collect();
                out.push(u8::from_str_radix(&code, 8).ok()?);
            } else {
                out.push(b);
            }
        }
        String::from_utf8(out).ok()
    })
}

impl Drop for Root {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("dist: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_glibc_reads_objdump_versions() {
        let objdump = "\
0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.2.5) pthread_create
0000000000000000      DF *UND*\t0000000000000000  GLIBC_2.28  statx
0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.17) clock_gettime
0000000000000000      DO *UND*\t0000000000000000  GLIBC_PRIVATE __libc_single_threaded
";
        assert_eq!(max_glibc(objdump), Some((2, 28)));
        assert_eq!(max_glibc("no versions"), None);
        assert!(max_glibc("(GLIBC_2.34) pthread_create") > Some(GLIBC));
    }

    #[test]
    fn mount_points_reads_mountinfo() {
        let mountinfo = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
36 22 0:5 / /proc rw,nosuid shared:2 - proc proc rw
97 22 0:21 /tmp /work/target/dist/check\\040root/tmp rw shared:1 - ext4 /dev/sda1 rw
";
        let points: Vec<String> = mount_points(mountinfo).collect();
        assert_eq!(points, ["/", "/proc", "/work/target/dist/check root/tmp"]);
    }

    #[test]
    fn plain_text_undoes_overstriking_and_unicode_hyphens() {
        // Bold "--d" is each character, a backspace and the character again.
        assert_eq!(plain_text("-\x08--\x08-d\x08d \u{2010}F"), "--d -F");
    }
}
