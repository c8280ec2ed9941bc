//! Builds the JVMTI shim (`java-agent-shim/src/*.c`) into `$OUT_DIR/libjvmperf-shim.so`, which
//! `src/shim_lib.rs` embeds, and derives the shim version shared by the C code and Rust. Also
//! records the git commit being built, for `jvmperf --version` (`JVMPERF_GIT_COMMIT`).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const SHIM_SRC: &str = "java-agent-shim/src";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let src_dir = manifest_dir.join(SHIM_SRC);

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={SHIM_SRC}");
    println!("cargo:rerun-if-env-changed={}", zigbuild_var());

    let mut sources: Vec<PathBuf> = fs::read_dir(&src_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", src_dir.display()))
        .map(|entry| entry.expect("read_dir entry").path())
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("c" | "h")))
        .collect();
    sources.sort();
    for path in &sources {
        println!("cargo:rerun-if-changed={}", path.display());
    }

    let version = shim_version(&sources);
    println!("cargo:rustc-env=JVMPERF_SHIM_VERSION={version}");
    println!(
        "cargo:rustc-env=JVMPERF_GIT_COMMIT={}",
        git_commit(&manifest_dir)
    );

    let c_sources: Vec<&PathBuf> = sources
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    let so = out_dir.join("libjvmperf-shim.so");
    let mut cmd = shim_command(&version, &c_sources, &so);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler: {e}"));
    if !status.success() {
        panic!("building the JVMTI shim failed ({status}): {cmd:?}");
    }

    // The same shim under AddressSanitizer and UndefinedBehaviorSanitizer, for tests/shim.rs (a JVM
    // runs it with the ASan runtime preloaded). Best effort: a compiler without the sanitizer
    // runtimes leaves the path empty and that test says so.
    let sanitized = out_dir.join("libjvmperf-shim-sanitized.so");
    let mut cmd = shim_command(&version, &c_sources, &sanitized);
    cmd.args([
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
    ]);
    let built = cmd.status().is_ok_and(|s| s.success());
    println!(
        "cargo:rustc-env=JVMPERF_SHIM_SANITIZED={}",
        if built {
            sanitized.to_string_lossy().into_owned()
        } else {
            String::new()
        }
    );

    // The same shim with a 16 KiB queue, for tests/shim.rs: a reader that falls behind makes it drop
    // records within seconds.
    let small_queue = out_dir.join("libjvmperf-shim-small-queue.so");
    let mut cmd = shim_command(&version, &c_sources, &small_queue);
    cmd.arg("-DQUEUE_CAP=(16u << 10)");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler: {e}"));
    if !status.success() {
        panic!("building the JVMTI shim with a small queue failed ({status}): {cmd:?}");
    }
    println!(
        "cargo:rustc-env=JVMPERF_SHIM_SMALL_QUEUE={}",
        small_queue.display()
    );
}

/// The compiler command that builds the shim from `sources` into `so`.
fn shim_command(version: &str, sources: &[&PathBuf], so: &Path) -> Command {
    // Without cc's warnings: probing zig cc (`cargo xtask dist`) prints a harmless error about the
    // glibc version in its target, three times; the compiler's own errors reach the build's output.
    let compiler = cc::Build::new().cargo_warnings(false).get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args([
        "-std=gnu11",
        "-shared",
        "-fPIC",
        "-O2",
        "-fvisibility=hidden",
    ])
    // No debug info (cc's compiler adds -g in debug builds), but the symbol table is kept: it names
    // the shim's own frames in profiles (its thread, its callbacks under
    // JvmtiExport::post_compiled_method_load) instead of `libjvmperf-shim…+0x…`.
    .args([
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pthread",
        "-g0",
        "-Wl,--strip-debug",
    ])
    .arg(format!("-DJVMPERF_SHIM_VERSION=\"{version}\""))
    .arg("-o")
    .arg(so)
    .args(sources)
    .arg("-Wl,--no-undefined");
    if env::var_os(zigbuild_var()).is_some() {
        // cargo-zigbuild (`cargo xtask dist`): zig links against stubs of the target's glibc (2.28,
        // whose libpthread.so.0 has pthread_create), and its linker has no --push-state.
        cmd.arg("-lpthread");
    } else if env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
        // glibc < 2.34 keeps pthread_create in libpthread.so.0 (see the .symver in shim.c); on newer ones
        // `-lpthread` is an empty archive, so name the shared object.
        cmd.args([
            "-Wl,--push-state,--no-as-needed",
            "-l:libpthread.so.0",
            "-Wl,--pop-state",
        ]);
    }
    cmd
}

/// The variable cargo-zigbuild sets for the target it builds for (to the zig target, with its glibc
/// version).
fn zigbuild_var() -> String {
    let target = env::var("TARGET").expect("TARGET");
    format!("CARGO_ZIGBUILD_TARGET_{}", target.replace('-', "_"))
}

/// `CARGO_PKG_VERSION` plus a short hash of the shim sources (names and contents, FNV-1a 64).
fn shim_version(sources: &[PathBuf]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for path in sources {
        let name = path.file_name().expect("file name").to_string_lossy();
        let text = fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        feed(name.as_bytes());
        feed(&[0]);
        feed(&(text.len() as u64).to_le_bytes());
        feed(&text);
    }
    let pkg = env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION");
    let version = format!("{pkg}-{:08x}", h >> 32);
    // It becomes a C string literal through -D: keep it to characters that need no escaping.
    assert!(
        version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+-_".contains(&b)),
        "unexpected characters in shim version {version:?}"
    );
    version
}

/// The commit being built (12 hex digits): `$JVMPERF_GIT_COMMIT` if set (a build from a source
/// tarball can name its commit), else `git rev-parse HEAD` in the crate's directory, else
/// "unknown" (no git, or not a checkout). Outside a checkout nothing is watched, so the build
/// script does not run again on every build.
fn git_commit(manifest_dir: &Path) -> String {
    println!("cargo:rerun-if-env-changed=JVMPERF_GIT_COMMIT");
    if let Some(commit) = env::var("JVMPERF_GIT_COMMIT")
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
    {
        return sanitize_commit(&commit);
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(manifest_dir)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]) else {
        return "unknown".to_string();
    };
    // Run again when HEAD moves: HEAD itself (a checkout), the branch it points to (a commit),
    // and packed-refs (where a branch's ref may live instead).
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
            .map(PathBuf::from)
            .unwrap_or_else(|| git_dir.clone());
        let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]).map(|b| common.join(b)) {
            // A packed branch has no file of its own until a commit writes one: watch its
            // directory then (a path that does not exist would run this script on every build).
            match (branch.is_file(), branch.parent()) {
                (false, Some(dir)) => watched.push(dir.to_path_buf()),
                _ => watched.push(branch),
            }
        }
        for path in watched.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    sanitize_commit(&commit)
}

/// At most 12 characters of `[0-9A-Za-z]`: the short form of a hash, and nothing that could
/// break the string it is embedded in.
fn sanitize_commit(commit: &str) -> String {
    let short: String = commit
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(12)
        .collect();
    if short.is_empty() {
        "unknown".to_string()
    } else {
        short
    }
}
