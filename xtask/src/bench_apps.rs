//! `cargo xtask bench-apps`: compiles the Java bench apps used by the integration tests.
//!
//! - `bench-apps/src/bench/*.java` → `<target>/bench-apps/classes`
//! - generated `bench.gen` sources (see [`crate::many_methods_gen`]) →
//!   `<target>/bench-apps/gen/bench/gen/*.java` → `<target>/bench-apps/many-classes`
//!
//! Both are compiled with `javac --release 11 -g`, so the classes run on JDK 11 and newer. Each
//! output directory has a stamp file recording what it was built from (javac path, source paths
//! and modification times, generator parameters); when the stamp still matches, the step is
//! skipped.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use anyhow::{bail, Context, Result};

use crate::many_methods_gen::{self, Params};
use crate::{jdk, paths};

const STAMP_VERSION: u32 = 1;

const USAGE: &str = "\
usage: cargo xtask bench-apps [options]

Compiles bench-apps/src/bench/*.java into <target>/bench-apps/classes and generates and
compiles the ManyMethods classes (package bench.gen) into <target>/bench-apps/many-classes.
javac is taken from $JAVA_HOME, else /usr/lib/jvm/java-17-openjdk-amd64, else PATH.

options:
  --force          recompile even if the outputs are up to date
  --classes N      number of generated classes (default 400)
  --methods M      methods per generated class (default 60)
  -h, --help       print this message
";

struct Options {
    force: bool,
    params: Params,
}

fn parse_args(args: &[String]) -> Result<Option<Options>> {
    let mut opts = Options {
        force: false,
        params: Params::default(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> Result<u32> {
            let v = it.next().with_context(|| format!("{name} needs a value"))?;
            v.parse()
                .with_context(|| format!("{name}: `{v}` is not a number"))
        };
        match arg.as_str() {
            "--force" => opts.force = true,
            "--classes" => opts.params.classes = value("--classes")?,
            "--methods" => opts.params.methods = value("--methods")?,
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(None);
            }
            other => {
                eprint!("{USAGE}");
                bail!("unknown option `{other}`");
            }
        }
    }
    opts.params.validate()?;
    Ok(Some(opts))
}

pub fn main(args: &[String]) -> Result<()> {
    let Some(opts) = parse_args(args)? else {
        return Ok(());
    };
    let javac = jdk::tool("javac")?;
    let out = paths::bench_apps_out();
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    // Serialize concurrent runs (e.g. several test binaries building the apps at once); the lock
    // is released when the file is closed.
    let lock_path = out.join(".lock");
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;

    let classes = build_bench_classes(&javac, &out, opts.force)?;
    let many = build_many_methods(&javac, &out, opts.params, opts.force)?;

    println!("bench-apps: classes      {}", classes.display());
    println!("bench-apps: many-classes {}", many.display());
    drop(lock);
    Ok(())
}

/// Compiles `bench-apps/src/bench/*.java` into `<out>/classes`.
fn build_bench_classes(javac: &Path, out: &Path, force: bool) -> Result<PathBuf> {
    let src_dir = paths::workspace_root().join("bench-apps/src/bench");
    let sources = java_sources(&src_dir)?;
    if sources.is_empty() {
        bail!("no .java files in {}", src_dir.display());
    }
    let classes = out.join("classes");
    let stamp_path = out.join("classes.stamp");

    let mut stamp = format!("v{STAMP_VERSION}\njavac {}\n", javac.display());
    for src in &sources {
        stamp.push_str(&format!("{} {}\n", mtime_nanos(src)?, src.display()));
    }
    if !force && classes.is_dir() && read_stamp(&stamp_path) == Some(stamp.clone()) {
        eprintln!("bench-apps: {} is up to date", classes.display());
        return Ok(classes);
    }

    eprintln!(
        "bench-apps: compiling {} sources -> {}",
        sources.len(),
        classes.display()
    );
    remove_stamp(&stamp_path)?;
    recreate_dir(&classes)?;
    javac_compile(javac, &sources, &classes, &out.join("classes.argfile"))?;
    fs::write(&stamp_path, stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
    Ok(classes)
}

/// Generates the `bench.gen` sources into `<out>/gen` and compiles them into
/// `<out>/many-classes`.
fn build_many_methods(javac: &Path, out: &Path, params: Params, force: bool) -> Result<PathBuf> {
    let gen_root = out.join("gen");
    let many = out.join("many-classes");
    let stamp_path = out.join("many-classes.stamp");
    let stamp = format!(
        "v{STAMP_VERSION}\ngenerator {}\nclasses {}\nmethods {}\njavac {}\n",
        many_methods_gen::GENERATOR_VERSION,
        params.classes,
        params.methods,
        javac.display()
    );
    let index_class = many.join("bench/gen/Index.class");
    if !force && index_class.is_file() && read_stamp(&stamp_path) == Some(stamp.clone()) {
        eprintln!("bench-apps: {} is up to date", many.display());
        return Ok(many);
    }

    eprintln!(
        "bench-apps: generating {} classes x {} methods -> {}",
        params.classes,
        params.methods,
        gen_root.display()
    );
    remove_stamp(&stamp_path)?;
    recreate_dir(&gen_root)?;
    let pkg_dir = gen_root.join(many_methods_gen::PACKAGE.replace('.', "/"));
    fs::create_dir_all(&pkg_dir).with_context(|| format!("creating {}", pkg_dir.display()))?;
    let mut sources = Vec::new();
    for file in many_methods_gen::generate(params)? {
        let path = pkg_dir.join(&file.file_name);
        fs::write(&path, file.contents).with_context(|| format!("writing {}", path.display()))?;
        sources.push(path);
    }

    eprintln!(
        "bench-apps: compiling {} generated sources -> {}",
        sources.len(),
        many.display()
    );
    recreate_dir(&many)?;
    javac_compile(javac, &sources, &many, &out.join("many-classes.argfile"))?;
    fs::write(&stamp_path, stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
    Ok(many)
}

/// `javac --release 11 -g -encoding UTF-8 -d <dest> @<argfile>` (the source list goes through an
/// argument file to keep the command line short).
fn javac_compile(javac: &Path, sources: &[PathBuf], dest: &Path, argfile: &Path) -> Result<()> {
    let mut list = String::new();
    for src in sources {
        // javac argument files: quote each path, escape backslashes and quotes.
        let s = src.display().to_string();
        list.push('"');
        list.push_str(&s.replace('\\', "\\\\").replace('"', "\\\""));
        list.push_str("\"\n");
    }
    fs::write(argfile, list).with_context(|| format!("writing {}", argfile.display()))?;
    let status = Command::new(javac)
        .args(["--release", "11", "-g", "-encoding", "UTF-8", "-d"])
        .arg(dest)
        .arg(format!("@{}", argfile.display()))
        .status()
        .with_context(|| format!("running {}", javac.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", javac.display());
    }
    Ok(())
}

/// The `.java` files directly in `dir`, sorted.
fn java_sources(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "java") && path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

fn mtime_nanos(path: &Path) -> Result<u128> {
    let modified = fs::metadata(path)
        .and_then(|m| m.modified())
        .with_context(|| format!("stat {}", path.display()))?;
    Ok(modified
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0))
}

fn read_stamp(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

fn remove_stamp(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// Removes `dir` (if present) and creates it empty, so deleted sources leave no stale classes.
fn recreate_dir(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", dir.display())),
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}
