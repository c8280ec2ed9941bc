//! Symbol caches: a module's DWARF (libjvm's is ~150 MB compressed, ~320 MB inflated) turned once
//! per build-id into Sentry's SymCache format — address ranges → function, inlined chain,
//! file:line — and memory-mapped by every later run. A lookup touches a few pages of the file,
//! which the page cache shares between runs and between JVMs of the same JDK build.
//!
//! The cache lives in `$JVMPERF_CACHE_DIR`, else `$XDG_CACHE_HOME/jvmperf`, else
//! `~/.cache/jvmperf` (`/var/cache/jvmperf` for root without a home), in `symbols/`: one
//! `<build-id>.v<format>.symcache` file per module, mode 0600 in a 0700 directory owned by the
//! user. Files are written under a temporary name and renamed, so a reader never sees half a file,
//! and an exclusive lock per build-id makes concurrent jvmperfs build a file once.

use super::symbols::NativeFrame;
use memmap2::Mmap;
use std::borrow::Cow;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use symbolic_symcache::{SymCache, SymCacheConverter, SYMCACHE_VERSION};

/// The executable that builds caches in a child process (`jvmperf build-symbol-cache`), so the
/// ~700 MB a build of libjvm's cache takes never stays in the profiler's own memory. Unset (as in
/// unit tests), caches are built in this process.
static BUILDER_EXE: OnceLock<PathBuf> = OnceLock::new();

/// The builder child running now (0: none), so that a recording that ended can hurry it.
static BUILDER_PID: AtomicU32 = AtomicU32::new(0);

/// Give a running cache build the caller's priority: it starts at the debug-info thread's (nice
/// +10 from jvmperf's own, below the JVM), which a busy host starves, and now a person waits for
/// it. Raising a priority needs root or CAP_SYS_NICE; without them the build goes on as it was.
pub fn hurry_build() {
    let pid = BUILDER_PID.load(Ordering::Relaxed);
    if pid != 0 {
        // SAFETY: setpriority with integer arguments only.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, pid, crate::priority::own_nice()) };
    }
}

/// Build caches with `exe build-symbol-cache DEBUG_FILE OUT` from now on.
pub fn build_in_child_process(exe: PathBuf) {
    let _ = BUILDER_EXE.set(exe);
}

/// Where caches are kept: checked to be a directory of ours that nobody else may write.
#[derive(Clone, Debug)]
pub struct CacheDir {
    dir: PathBuf,
}

impl CacheDir {
    /// The user's cache directory (see the module documentation), created if missing.
    pub fn default_location() -> Result<Self, String> {
        let env = |name| std::env::var_os(name).map(PathBuf::from);
        let base = if let Some(dir) = env("JVMPERF_CACHE_DIR") {
            dir
        } else if let Some(dir) = env("XDG_CACHE_HOME").filter(|d| d.is_absolute()) {
            dir.join("jvmperf")
        } else if let Some(home) = env("HOME").filter(|d| d.is_absolute()) {
            home.join(".cache/jvmperf")
        } else if nix::unistd::geteuid().is_root() {
            PathBuf::from("/var/cache/jvmperf")
        } else {
            return Err("no cache directory: set HOME or JVMPERF_CACHE_DIR".to_string());
        };
        Self::at(&base)
    }

    /// The `symbols` directory under `base`, created with mode 0700 if missing.
    pub fn at(base: &Path) -> Result<Self, String> {
        let dir = base.join("symbols");
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                format!(
                    "cannot create the symbol cache {}: {e} (set JVMPERF_CACHE_DIR to a writable directory)",
                    dir.display()
                )
            })?;
        let meta =
            std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let euid = nix::unistd::geteuid().as_raw();
        if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o022 != 0 {
            return Err(format!(
                "the symbol cache {} is not a directory of uid {euid} that only it may write: fix its \
                 owner and mode (chmod 700) or set JVMPERF_CACHE_DIR",
                dir.display()
            ));
        }
        Ok(CacheDir { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn file_for(&self, build_id: &str) -> PathBuf {
        self.dir
            .join(format!("{build_id}.v{SYMCACHE_VERSION}.symcache"))
    }

    /// The cache of the module with `build_id`, whose DWARF is in `debug_file`: mapped from the
    /// cache if it is there, else built first (once per build-id, also across processes).
    /// The size of the cache file of `build_id`, if there is one.
    pub fn cached_size(&self, build_id: &str) -> Option<u64> {
        std::fs::metadata(self.file_for(build_id))
            .ok()
            .map(|m| m.len())
    }

    /// `on_build` is called before a build starts.
    pub fn open_or_build(
        &self,
        build_id: &str,
        debug_file: &Path,
        on_build: impl FnOnce(),
    ) -> Result<Opened, String> {
        let path = self.file_for(build_id);
        if let Ok(symbols) = CachedSymbols::open(&path) {
            return Ok(Opened {
                symbols,
                built: None,
            });
        }
        let lock = lock_of(&path);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock)
            .map_err(|e| format!("{}: {e}", lock.display()))?;
        let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| format!("cannot lock the symbol cache: {e}"))?;
        // Another jvmperf may have built it while we waited for the lock.
        if let Ok(symbols) = CachedSymbols::open(&path) {
            return Ok(Opened {
                symbols,
                built: None,
            });
        }
        enough_memory_to_build(debug_file)?;
        on_build();
        let started = Instant::now();
        match BUILDER_EXE.get() {
            Some(exe) => build_in_child(exe, debug_file, &path)?,
            None => build(debug_file, &path)?,
        }
        let symbols = CachedSymbols::open(&path)?;
        self.prune(MAX_CACHE_BYTES);
        Ok(Opened {
            symbols,
            built: Some(started.elapsed()),
        })
    }

    /// Delete the least recently used cache files until the rest take at most `max_bytes`, and
    /// leftovers of builds that were killed.
    fn prune(&self, max_bytes: u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut caches = Vec::new();
        for entry in entries.flatten() {
            let (path, Ok(meta)) = (entry.path(), entry.metadata()) else {
                continue;
            };
            let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".tmp.") && age.is_some_and(|a| a > Duration::from_secs(3600)) {
                let _ = std::fs::remove_file(&path);
            } else if name.ends_with(".symcache") {
                caches.push((meta.mtime(), meta.len(), path));
            }
        }
        caches.sort();
        let mut total: u64 = caches.iter().map(|c| c.1).sum();
        for (_, len, path) in caches {
            if total <= max_bytes {
                break;
            }
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(lock_of(&path));
            total -= len;
        }
    }
}

/// The cache keeps the most recently used files that fit in this many bytes. libjvm's is ~50 MB
/// a JDK build, so this holds those of a dozen JDK builds and the libraries around them.
const MAX_CACHE_BYTES: u64 = 1 << 30;

fn lock_of(cache_file: &Path) -> PathBuf {
    let name = cache_file.file_name().unwrap_or_default().to_string_lossy();
    let build_id = name.split('.').next().unwrap_or_default();
    cache_file.with_file_name(format!("{build_id}.lock"))
}

/// A build holds the inflated DWARF and the cache being assembled: about 4.5 times the
/// compressed debug file at its peak (libjvm's: 156 MB → 690 MB).
const BUILD_MEMORY_PER_DEBUG_BYTE: u64 = 5;

/// Refuse a build that could push the host (or our memory cgroup) into the OOM killer, which
/// might pick the JVM.
fn enough_memory_to_build(debug_file: &Path) -> Result<(), String> {
    let size = std::fs::metadata(debug_file).map_or(0, |m| m.len());
    let need = size * BUILD_MEMORY_PER_DEBUG_BYTE;
    let available = [host_available_memory(), cgroup_available_memory()]
        .into_iter()
        .flatten()
        .min();
    match available {
        Some(free) if free < 2 * need => Err(format!(
            "not building the symbol cache of {} now: it needs ~{} MB and only {} MB are available \
             (run jvmperf once where memory allows, or copy the cache file of the same build-id \
             into the cache directory)",
            debug_file.display(),
            need >> 20,
            free >> 20
        )),
        _ => Ok(()),
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn host_available_memory() -> Option<u64> {
    use procfs::Current;
    procfs::Meminfo::current().ok()?.mem_available
}

/// What our cgroup v2 memory limit leaves, if one is set.
fn cgroup_available_memory() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    };
    let max = read("memory.max")?; // "max" (no limit) does not parse
    Some(max.saturating_sub(read("memory.current")?))
}

/// CPU time of the child processes that built caches (and were waited for).
pub fn children_cpu() -> Duration {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).map_or(
        Duration::ZERO,
        |u| {
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000)
            };
            t(u.user_time()) + t(u.system_time())
        },
    )
}

/// A cache opened for a module, and how long building it took if it was built now.
pub struct Opened {
    pub symbols: CachedSymbols,
    pub built: Option<Duration>,
}

fn build_in_child(exe: &Path, debug_file: &Path, out: &Path) -> Result<(), String> {
    let child = Command::new(exe)
        .arg("build-symbol-cache")
        .arg(debug_file)
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    BUILDER_PID.store(child.id(), Ordering::Relaxed);
    let output = child.wait_with_output();
    BUILDER_PID.store(0, Ordering::Relaxed);
    let output = output.map_err(|e| format!("{}: {e}", exe.display()))?;
    if output.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&output.stderr);
    Err(format!(
        "building the symbol cache of {} failed ({}): {}",
        debug_file.display(),
        output.status,
        err.trim()
    ))
}

/// Convert the DWARF and symbol table of `debug_file` into a cache file at `out`, written under a
/// temporary name and renamed into place.
pub fn build(debug_file: &Path, out: &Path) -> Result<(), String> {
    let fail =
        |what: &str, e: &dyn std::fmt::Display| format!("{}: {what}: {e}", debug_file.display());
    let data = map(debug_file).map_err(|e| fail("cannot read", &e))?;
    let object =
        symbolic_debuginfo::Object::parse(&data).map_err(|e| fail("not an object file", &e))?;
    let mut converter = SymCacheConverter::new();
    converter
        .process_object(&object)
        .map_err(|e| fail("cannot read its debug info", &e))?;
    let tmp = out.with_extension(format!("tmp.{}", std::process::id()));
    let written = (|| {
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut w = BufWriter::new(file);
        converter.serialize(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, out)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write the symbol cache {}: {e}", out.display())
    })
}

fn map(path: &Path) -> std::io::Result<Mmap> {
    let file = File::open(path)?;
    // SAFETY: a read-only map. Cache files are replaced by rename, never rewritten in place, and
    // debug files are installed files: neither is truncated while mapped.
    unsafe { Mmap::map(&file) }
}

/// A mapped cache file, shared by every recording of this process that needs the same module
/// (the daemon's JVMs of one JDK map libjvm's cache once).
pub struct CachedSymbols {
    map: std::sync::Arc<Mmap>,
}

/// Cache files mapped now, by path (a path names one build-id).
static MAPPED: std::sync::Mutex<Vec<(PathBuf, std::sync::Weak<Mmap>)>> =
    std::sync::Mutex::new(Vec::new());

impl CachedSymbols {
    fn open(path: &Path) -> Result<Self, String> {
        let mut mapped = MAPPED.lock().unwrap_or_else(|e| e.into_inner());
        mapped.retain(|(_, m)| m.strong_count() > 0);
        if let Some(map) = mapped
            .iter()
            .find(|(p, _)| p == path)
            .and_then(|(_, m)| m.upgrade())
        {
            return Ok(CachedSymbols { map });
        }
        let map = map(path).map_err(|e| format!("{}: {e}", path.display()))?;
        SymCache::parse(&map).map_err(|e| format!("{}: {e}", path.display()))?;
        let map = std::sync::Arc::new(map);
        mapped.push((path.to_path_buf(), std::sync::Arc::downgrade(&map)));
        // The modification time says when the file was last used, for pruning.
        let now = nix::sys::time::TimeSpec::UTIME_NOW;
        let _ = nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            path,
            &now,
            &now,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        );
        Ok(CachedSymbols { map })
    }

    fn cache(&self) -> SymCache<'_> {
        // Parsing only checks the header and slices the tables; `open` checked it once.
        SymCache::parse(&self.map).expect("checked when opened")
    }

    /// The frames at `probe` (an address relative to the module's first loadable segment, as the
    /// cache stores them), innermost first; empty when no function covers it.
    pub fn frames(&self, probe: u64) -> Vec<NativeFrame> {
        self.cache()
            .lookup(probe)
            .map(|loc| {
                let name = loc.function().name();
                let function = if name.is_empty() || name == "?" {
                    String::new()
                } else {
                    addr2line::demangle_auto(Cow::Borrowed(name), None).into_owned()
                };
                NativeFrame {
                    function,
                    file: loc.file().map(|f| f.full_path()),
                    line: Some(loc.line()).filter(|&l| l > 0),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::testutil::build_c_library;
    use std::os::unix::fs::PermissionsExt;

    fn temp_base(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("jvmperf-symcache-{name}-{}", std::process::id()))
    }

    #[test]
    fn the_directory_is_created_private() {
        let base = temp_base("private");
        let dir = CacheDir::at(&base).unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let base = temp_base("shared");
        std::fs::create_dir_all(base.join("symbols")).unwrap();
        std::fs::set_permissions(base.join("symbols"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let err = CacheDir::at(&base).unwrap_err();
        std::fs::remove_dir_all(&base).unwrap();
        assert!(err.contains("chmod 700"), "{err}");
    }

    #[test]
    fn pruning_deletes_the_least_recently_used_files_first() {
        let base = temp_base("prune");
        let dir = CacheDir::at(&base).unwrap();
        let write = |id: &str, age_secs: i64| {
            let path = dir.file_for(id);
            std::fs::write(&path, [0u8; 1000]).unwrap();
            std::fs::write(lock_of(&path), b"").unwrap();
            let t = nix::sys::time::TimeSpec::new(1_700_000_000 - age_secs, 0);
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                &path,
                &t,
                &t,
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .unwrap();
        };
        write("aa", 300);
        write("bb", 100);
        write("cc", 200);
        dir.prune(2000);
        let left: Vec<bool> = ["aa", "bb", "cc"]
            .iter()
            .map(|id| dir.file_for(id).exists())
            .collect();
        let lock_left = lock_of(&dir.file_for("aa")).exists();
        std::fs::remove_dir_all(&base).unwrap();
        assert_eq!(left, [false, true, true]);
        assert!(!lock_left);
    }

    #[test]
    fn a_damaged_cache_file_is_rebuilt_and_names_functions_with_file_and_line() {
        let base = temp_base("damaged");
        let source = "int cached_probe(int x) {\n  return x * 7 + 1;\n}\n";
        let Some(lib) = build_c_library(&base, "libcached.so", &[("cached.c", source)]) else {
            return;
        };
        let dir = CacheDir::at(&base).unwrap();
        std::fs::write(dir.file_for("00ff"), b"not a symcache").unwrap();
        let opened = dir.open_or_build("00ff", &lib, || {});
        let again = dir.open_or_build("00ff", &lib, || panic!("built twice"));
        let elf_data = std::fs::read(&lib).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
        let opened = opened.unwrap();
        assert!(opened.built.is_some(), "rebuilt");
        let again = again.unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&opened.symbols.map, &again.symbols.map),
            "one mapping per cache file while in use"
        );
        drop(again);
        let elf = object::File::parse(&*elf_data).unwrap();
        let probe = object::Object::symbols(&elf)
            .find(|s| object::ObjectSymbol::name(s) == Ok("cached_probe"))
            .map(|s| object::ObjectSymbol::address(&s))
            .unwrap();
        let frames = opened.symbols.frames(probe);
        assert_eq!(frames.len(), 1, "{frames:#?}");
        assert_eq!(frames[0].function, "cached_probe");
        assert!(frames[0].file.as_deref().unwrap().ends_with("cached.c"));
        assert!(frames[0].line.is_some());
    }
}
