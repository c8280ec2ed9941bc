//! Test helpers: real register sets and stack copies, from this process or a live JVM thread.

use super::unwind::NativeRegs;
use crate::process::{ProcessMemory, TargetMemory, TargetProcess};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Registers of one thread and a copy of its stack from sp up to the end of the stack mapping,
/// as perf's user-stack sample would give.
pub struct Captured {
    pub regs: NativeRegs,
    pub stack: Vec<u8>,
}

impl Captured {
    pub fn read(&self, addr: u64) -> Result<u64, ()> {
        let off = usize::try_from(addr.checked_sub(self.regs.sp).ok_or(())?).map_err(|_| ())?;
        let bytes = self
            .stack
            .get(off..off.checked_add(8).ok_or(())?)
            .ok_or(())?;
        Ok(u64::from_le_bytes(bytes.try_into().unwrap()))
    }
}

/// The registers at a point inside this function and a copy of the current thread's stack.
#[inline(never)]
pub fn capture_here() -> Captured {
    let (pc, sp, bp): (u64, u64, u64);
    // SAFETY: only reads rip, rsp and rbp into registers.
    unsafe {
        std::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        );
    }
    copy_stack(std::process::id(), NativeRegs { pc, sp, bp })
}

fn copy_stack(pid: u32, regs: NativeRegs) -> Captured {
    let maps = TargetProcess::open(pid).unwrap().maps().unwrap();
    let stack_end = maps
        .iter()
        .find(|m| (m.start..m.end).contains(&regs.sp))
        .expect("sp is in a mapping")
        .end;
    let mut stack = vec![0u8; (stack_end - regs.sp) as usize];
    ProcessMemory { pid }.read(regs.sp, &mut stack).unwrap();
    Captured { regs, stack }
}

/// A JVM running a class that sleeps; killed on drop.
pub struct SleepingJvm {
    pub child: Child,
    dir: PathBuf,
}

/// The JDK the JVM tests run on: `JVMPERF_TEST_JAVA_HOME` (as for the integration tests), else
/// JDK 17.
pub fn test_java_home() -> PathBuf {
    std::env::var_os("JVMPERF_TEST_JAVA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(JDK17))
}

/// JDK 17, whose javac compiles the test class (the other test JDKs may be runtimes only).
const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

impl SleepingJvm {
    /// `None` when the test JDK or JDK 17's javac is not installed (say so on stderr).
    pub fn start() -> Option<Self> {
        let java = test_java_home().join("bin/java");
        let javac = Path::new(JDK17).join("bin/javac");
        for tool in [&java, &javac] {
            if !tool.exists() {
                eprintln!(
                    "skipping: {} is not installed (scripts/setup-debian.sh --tests)",
                    tool.display()
                );
                return None;
            }
        }
        let dir = std::env::temp_dir().join(format!(
            "jvmperf-native-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("Sleep.java");
        std::fs::write(
            &source,
            "public class Sleep { public static void main(String[] a) throws Exception {\n\
             System.out.println(\"ready\"); System.out.flush(); Thread.sleep(120_000); } }\n",
        )
        .unwrap();
        let compiled = Command::new(javac)
            .args(["--release", "11", "-d"])
            .arg(&dir)
            .arg(&source)
            .status()
            .unwrap();
        assert!(compiled.success(), "javac Sleep.java");
        // From an argument file, as launchers start JVMs: the command line names no class.
        let args = dir.join("args");
        std::fs::write(&args, format!("-cp {}\nSleep\n", dir.display())).unwrap();
        let mut child = Command::new(java)
            .args(["-Xmx64m", "-XX:TieredStopAtLevel=1"])
            .arg(format!("@{}", args.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Some(SleepingJvm { child, dir })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The thread whose comm is `name`.
    pub fn thread(&self, name: &str) -> u32 {
        let p = TargetProcess::open(self.pid()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = p
                .threads()
                .into_iter()
                .find(|&t| p.thread_comm(t).as_deref() == Some(name));
            match found {
                Some(t) => return t,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                None => panic!("no thread {name} in JVM {}", self.pid()),
            }
        }
    }
}

impl Drop for SleepingJvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Stop one thread of another process with ptrace, take its registers and stack, let it go.
pub fn capture_thread(pid: u32, tid: u32) -> Captured {
    let t = tid as libc::pid_t;
    // SAFETY: plain ptrace calls on a thread we seized; `regs` is a properly sized out-buffer.
    unsafe {
        let null = std::ptr::null_mut::<libc::c_void>();
        assert_eq!(
            libc::ptrace(libc::PTRACE_SEIZE, t, null, null),
            0,
            "PTRACE_SEIZE {tid}"
        );
        assert_eq!(libc::ptrace(libc::PTRACE_INTERRUPT, t, null, null), 0);
        let mut status = 0;
        assert_eq!(libc::waitpid(t, &mut status, libc::__WALL), t);
        let mut regs: libc::user_regs_struct = std::mem::zeroed();
        let out = &mut regs as *mut libc::user_regs_struct as *mut libc::c_void;
        assert_eq!(libc::ptrace(libc::PTRACE_GETREGS, t, null, out), 0);
        let captured = copy_stack(
            pid,
            NativeRegs {
                pc: regs.rip,
                sp: regs.rsp,
                bp: regs.rbp,
            },
        );
        libc::ptrace(libc::PTRACE_DETACH, t, null, null);
        captured
    }
}

/// Anonymous and file-backed resident memory of this process, in KiB.
pub fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// Build a shared library with debug info from C sources; `None` (said on stderr) without a C
/// compiler.
pub fn build_c_library(dir: &Path, name: &str, sources: &[(&str, &str)]) -> Option<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    for (file, text) in sources {
        std::fs::write(dir.join(file), text).unwrap();
    }
    let lib = dir.join(name);
    let built = Command::new("cc")
        .current_dir(dir)
        .args(["-shared", "-fPIC", "-g", "-O1", "-o"])
        .arg(&lib)
        .args(
            sources
                .iter()
                .filter(|(f, _)| f.ends_with(".c"))
                .map(|(f, _)| f),
        )
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("skipping: no C compiler (apt-get install gcc)");
        return None;
    }
    Some(lib)
}

/// A library loaded into this process with `dlopen`.
pub struct Loaded(*mut libc::c_void);

impl Loaded {
    pub fn open(path: &Path) -> Self {
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: the test libraries have no initialisers, only pure functions.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null(), "dlopen {}", path.display());
        Loaded(handle)
    }

    pub fn symbol(&self, name: &std::ffi::CStr) -> u64 {
        // SAFETY: a valid handle and a NUL-terminated name.
        let addr = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        assert!(!addr.is_null());
        addr as u64
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: nothing from the library is used after the handle is dropped.
        unsafe { libc::dlclose(self.0) };
    }
}

/// A symbolizer whose caches go to a scratch directory: libraries the tests build (and the test
/// binary itself) get new build-ids every time and do not belong in the user's cache.
pub fn scratch_symbolizer() -> super::NativeSymbolizer {
    let dir = std::env::temp_dir().join("jvmperf-test-symbol-cache");
    super::NativeSymbolizer::with_cache(super::symcache::CacheDir::at(&dir))
}
