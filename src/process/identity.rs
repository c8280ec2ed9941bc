//! Facts about the target process read from `/proc/<pid>`: namespaces, credentials, signals, mappings.
//!
//! The files `procfs` parses (status, stat, maps, the task list) are read through it; the rest
//! (`timens_offsets`, and the `root`/`cwd` paths) by hand.

use crate::error::{Error, ErrorKind, Result};
use procfs::process::{MMapPath, MemoryMap, Process, Status};
use procfs::ProcError;
use std::fs;
use std::path::{Path, PathBuf};

/// A process we profile, identified by its pid in our own pid namespace.
#[derive(Debug, Clone)]
pub struct TargetProcess {
    pub pid: u32,
    /// The pid as the target sees itself (last entry of `NSpid:`), which names its attach files.
    pub nspid: u32,
    pub euid: u32,
    pub egid: u32,
    /// Signals the process has a handler for (`SigCgt`) and ignores (`SigIgn`), as bit masks.
    pub sig_caught: u64,
    pub sig_ignored: u64,
    pub name: String,
    /// When it started (see [`start_time`]): a later process given the same pid is not it.
    pub start_time: Option<u64>,
    /// Its program (see [`program`]): after an `execve` of another one, it is not the process
    /// opened.
    pub program: Option<PathBuf>,
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub dev: String,
    pub inode: u64,
    pub path: String,
}

/// `/proc/<pid>` of a process of our pid namespace, through `procfs`.
pub(crate) fn proc_process(pid: u32) -> procfs::ProcResult<Process> {
    match i32::try_from(pid) {
        Ok(pid) => Process::new(pid),
        Err(_) => Err(ProcError::NotFound(Some(PathBuf::from(format!(
            "/proc/{pid}"
        ))))),
    }
}

/// Thread ids in `/proc/<pid>/task`, sorted. Threads that exit while the directory is read are
/// left out.
fn thread_ids(pid: u32) -> procfs::ProcResult<Vec<u32>> {
    let mut tids: Vec<u32> = proc_process(pid)?
        .tasks()?
        .filter_map(|t| u32::try_from(t.ok()?.tid).ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// A `procfs` error as the `std::io::Error` of the read that failed, whose text (`Permission
/// denied (os error 13)`) our messages quote.
fn io_error(e: ProcError) -> std::io::Error {
    match e {
        ProcError::PermissionDenied(_) => std::io::Error::from_raw_os_error(libc::EACCES),
        ProcError::NotFound(_) => std::io::Error::from_raw_os_error(libc::ENOENT),
        ProcError::Io(e, _) => e,
        e => std::io::Error::other(e),
    }
}

/// An error of reading `/proc/<pid>/<file>`: one the OS gave means we may not read it (or the
/// process has gone), one of parsing is an internal error.
fn read_error(path: &str, e: ProcError) -> Error {
    match e {
        ProcError::InternalError(_) | ProcError::Other(_) => {
            Error::new(ErrorKind::Internal, format!("cannot parse {path}: {e}"))
        }
        e => Error::new(
            ErrorKind::Permission,
            format!(
                "cannot read {path}: {} (run as the JVM's user or root)",
                io_error(e)
            ),
        ),
    }
}

impl TargetProcess {
    pub fn open(pid: u32) -> Result<Self> {
        let status_path = format!("/proc/{pid}/status");
        let status = proc_process(pid)
            .and_then(|p| p.status())
            .map_err(|e| match e {
                ProcError::NotFound(_) => Error::new(
                    ErrorKind::NoProcess,
                    format!(
                        "process {pid} does not exist (check the pid with `jps` or `pgrep java`)"
                    ),
                ),
                e => read_error(&status_path, e),
            })?;
        let mut process = from_status(pid, &status);
        process.start_time = start_time(pid);
        process.program = program(pid);
        Ok(process)
    }

    /// Not exited, not a zombie, not another process given its pid since (its start time
    /// differs), and still running the program it ran when opened (an `execve` keeps the pid
    /// and the start time). Read from the main thread's `stat`, not the process's: that one
    /// sums the CPU time of every thread.
    pub fn is_alive(&self) -> bool {
        let running = main_thread_stat(self.pid).is_some_and(|(state, start)| {
            !matches!(state, 'Z' | 'X') && self.start_time.is_none_or(|s| s == start)
        });
        running
            && self
                .program
                .as_ref()
                .is_none_or(|p| program(self.pid).as_ref() == Some(p))
    }

    /// `/proc/<pid>/root`: the target's view of the file system (its mount namespace and chroot).
    pub fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.pid))
    }

    /// A path inside the target's file system, reached from ours.
    pub fn path_in_root(&self, inner: &Path) -> PathBuf {
        let rel = inner.strip_prefix("/").unwrap_or(inner);
        self.root().join(rel)
    }

    pub fn cwd(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/cwd", self.pid))
    }

    pub fn catches_signal(&self, sig: i32) -> bool {
        let bit = 1u64 << (sig - 1);
        self.sig_caught & bit != 0 && self.sig_ignored & bit == 0
    }

    pub fn maps(&self) -> Result<Vec<Mapping>> {
        let path = format!("/proc/{}/maps", self.pid);
        let maps = proc_process(self.pid)
            .and_then(|p| p.maps())
            .map_err(|e| read_error(&path, e))?;
        Ok(maps.into_iter().map(Mapping::from).collect())
    }

    /// Thread ids currently in the process.
    pub fn threads(&self) -> Vec<u32> {
        thread_ids(self.pid).unwrap_or_default()
    }

    /// Thread ids as the target sees them (its pid namespace) → ours. Identity outside containers.
    pub fn ns_tid_map(&self) -> std::collections::HashMap<u32, u32> {
        let Ok(tasks) = proc_process(self.pid).and_then(|p| p.tasks()) else {
            return Default::default();
        };
        tasks
            .filter_map(|task| {
                let task = task.ok()?;
                let tid = u32::try_from(task.tid).ok()?;
                let status = task.status().ok()?;
                Some((last_nspid(&status).unwrap_or(tid), tid))
            })
            .collect()
    }

    /// CPU time of all the process's threads so far, ended ones included: utime + stime of
    /// `/proc/<pid>/stat`, which the kernel scales to sum to the threads' scheduled runtime
    /// (`cputime_adjust`), in clock ticks (10 ms at USER_HZ 100). `None` once it has exited.
    pub fn cpu_time_ns(&self) -> Option<u64> {
        let stat = proc_process(self.pid).and_then(|p| p.stat()).ok()?;
        let ticks = stat.utime.saturating_add(stat.stime);
        Some(ticks.saturating_mul(1_000_000_000) / procfs::ticks_per_second().max(1))
    }

    /// The short (15-byte) kernel name of a thread.
    pub fn thread_comm(&self, tid: u32) -> Option<String> {
        let tid = i32::try_from(tid).ok()?;
        let stat = proc_process(self.pid)
            .and_then(|p| p.task_from_tid(tid)?.stat())
            .ok()?;
        Some(stat.comm)
    }

    /// Offset of the target's CLOCK_MONOTONIC relative to ours (time namespaces), in ns.
    pub fn monotonic_offset_ns(&self) -> i64 {
        fs::read_to_string(format!("/proc/{}/timens_offsets", self.pid))
            .ok()
            .and_then(|text| parse_timens_monotonic(&text))
            .unwrap_or(0)
    }
}

/// When process `pid` started: clock ticks after boot (field 22 of `/proc/<pid>/stat`, see
/// proc(5)). With the pid, it names one process: a pid is reused, a start time with it is not.
pub fn start_time(pid: u32) -> Option<u64> {
    main_thread_stat(pid).map(|(_, start)| start)
}

/// The program process `pid` runs: `/proc/<pid>/exe` (proc(5)), without the ` (deleted)` the
/// kernel appends once the file is removed (a JDK upgraded under a running JVM is still its
/// program). `None` where we may not read it.
pub fn program(pid: u32) -> Option<PathBuf> {
    let path = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let text = path.to_str()?;
    Some(PathBuf::from(
        text.strip_suffix(" (deleted)").unwrap_or(text),
    ))
}

/// The state and start time of process `pid`'s main thread, from `/proc/<pid>/task/<pid>/stat`:
/// the same start time as the process's `stat`, without the sum over every thread that file
/// makes (`do_task_stat` in fs/proc/array.c).
fn main_thread_stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).ok()?;
    parse_state_and_start(&text)
}

/// State (field 3) and start time (field 22) of a `stat` line; the command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted after its last
/// `)`.
fn parse_state_and_start(stat: &str) -> Option<(char, u64)> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The pid as the process sees itself: the last entry of `NSpid:` (none before Linux 4.1).
fn last_nspid(status: &Status) -> Option<u32> {
    u32::try_from(*status.nspid.as_ref()?.last()?).ok()
}

fn from_status(pid: u32, status: &Status) -> TargetProcess {
    TargetProcess {
        pid,
        nspid: last_nspid(status).unwrap_or(pid),
        euid: status.euid,
        egid: status.egid,
        sig_caught: status.sigcgt,
        sig_ignored: status.sigign,
        name: status.name.clone(),
        start_time: None,
        program: None,
    }
}

impl From<MemoryMap> for Mapping {
    /// The line's fields as the kernel wrote them (`procfs` parses the path into a kind).
    fn from(m: MemoryMap) -> Mapping {
        let path = match m.pathname {
            MMapPath::Path(p) => p.to_string_lossy().into_owned(),
            MMapPath::Heap => "[heap]".into(),
            MMapPath::Stack => "[stack]".into(),
            MMapPath::TStack(tid) => format!("[stack:{tid}]"),
            MMapPath::Vdso => "[vdso]".into(),
            MMapPath::Vvar => "[vvar]".into(),
            MMapPath::Vsyscall => "[vsyscall]".into(),
            MMapPath::Rollup => "[rollup]".into(),
            MMapPath::Anonymous => String::new(),
            // The kernel names System V shared memory `/SYSV<key> (deleted)`.
            MMapPath::Vsys(key) => format!("/SYSV{:08x} (deleted)", key as u32),
            MMapPath::Other(name) => format!("[{name}]"),
        };
        Mapping {
            start: m.address.0,
            end: m.address.1,
            perms: m.perms.as_str(),
            offset: m.offset,
            dev: format!("{:02x}:{:02x}", m.dev.0, m.dev.1),
            inode: m.inode,
            path,
        }
    }
}

fn parse_timens_monotonic(text: &str) -> Option<i64> {
    let line = text.lines().find(|l| l.starts_with("monotonic"))?;
    let mut it = line.split_whitespace().skip(1);
    let secs: i64 = it.next()?.parse().ok()?;
    let nanos: i64 = it.next()?.parse().ok()?;
    Some(secs * 1_000_000_000 + nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    use procfs::FromRead;

    /// A `/proc/<pid>/status` as Linux 6.x writes it, with the lines given replacing its own
    /// (`NSpid:` dropped when not given, as before Linux 4.1).
    fn status(lines: &[(&str, &str)]) -> Status {
        let mut text = String::new();
        for (key, value) in [
            ("Name", "java"),
            ("Umask", "0022"),
            ("State", "S (sleeping)"),
            ("Tgid", "4242"),
            ("Ngid", "0"),
            ("Pid", "4242"),
            ("PPid", "1"),
            ("TracerPid", "0"),
            ("Uid", "0\t0\t0\t0"),
            ("Gid", "0\t0\t0\t0"),
            ("FDSize", "256"),
            ("Groups", " "),
            ("NSpid", ""),
            ("VmPin", "       0 kB"),
            ("VmRSS", "   16920 kB"),
            ("Threads", "23"),
            ("SigQ", "0/96365"),
            ("SigPnd", "0000000000000000"),
            ("ShdPnd", "0000000000000000"),
            ("SigBlk", "0000000000000000"),
            ("SigIgn", "0000000000000000"),
            ("SigCgt", "0000000000000000"),
            ("CapInh", "0000000000000000"),
            ("CapPrm", "0000000000000000"),
            ("CapEff", "0000000000000000"),
            ("voluntary_ctxt_switches", "3"),
        ] {
            let value = lines.iter().find(|l| l.0 == key).map_or(value, |l| l.1);
            if !(key == "NSpid" && value.is_empty()) {
                text += &format!("{key}:\t{value}\n");
            }
        }
        Status::from_read(text.as_bytes()).unwrap()
    }

    #[test]
    fn status_of_a_containerised_jvm() {
        let status = status(&[
            ("Uid", "1000\t1001\t1001\t1001"),
            ("Gid", "100\t101\t101\t101"),
            ("NSpid", "4242\t7"),
            ("SigCgt", "0000000101001cce"),
        ]);
        let p = from_status(4242, &status);
        assert_eq!((p.nspid, p.euid, p.egid), (7, 1001, 101));
        assert!(p.catches_signal(3), "SIGQUIT is bit 2 of SigCgt");
        assert_eq!(p.name, "java");
    }

    #[test]
    fn sigquit_not_caught_under_xrs() {
        let p = from_status(1, &status(&[("SigCgt", "0000000101001cc8")]));
        assert!(!p.catches_signal(3));
        assert_eq!(p.nspid, 1, "no NSpid line: fall back to the pid");
    }

    #[test]
    fn our_own_status() {
        let p = TargetProcess::open(std::process::id()).unwrap();
        assert_eq!(
            p.nspid,
            std::process::id(),
            "tests run in the host's pid namespace"
        );
        assert_eq!(p.euid, nix::unistd::geteuid().as_raw());
        assert!(p.is_alive());
        assert_eq!(
            TargetProcess::open(u32::MAX).unwrap_err().kind,
            ErrorKind::NoProcess
        );
    }

    fn maps(text: &str) -> Vec<Mapping> {
        procfs::process::MemoryMaps::from_read(text.as_bytes())
            .unwrap()
            .into_iter()
            .map(Mapping::from)
            .collect()
    }

    #[test]
    fn maps_lines() {
        let text = "\
            7f0e2c000000-7f0e2c200000 r-xp 00001000 fd:00 1234                       /usr/lib/jvm/x/lib/server/libjvm.so\n\
            7f0e2c200000-7f0e2c400000 rw-p 00000000 00:00 0 \n\
            7f0e2c400000-7f0e2c500000 r--p 00000000 103:02 77                        /tmp/perf-1.map (deleted)\n\
            7f0e2c500000-7f0e2c600000 rw-s 00000000 00:01 98310                      /SYSV0000a1b2 (deleted)\n\
            7f0e2c600000-7f0e2c700000 rw-p 00000000 00:00 0                          [anon:glibc malloc]\n\
            7ffd1a2b3000-7ffd1a2d4000 rw-p 00000000 00:00 0                          [stack]\n\
            7ffd1a3c5000-7ffd1a3c7000 r-xp 00000000 00:00 0                          [vdso]\n";
        let m = maps(text);
        assert_eq!(m.len(), 7);
        assert_eq!(
            m[0],
            Mapping {
                start: 0x7f0e2c000000,
                end: 0x7f0e2c200000,
                perms: "r-xp".into(),
                offset: 0x1000,
                dev: "fd:00".into(),
                inode: 1234,
                path: "/usr/lib/jvm/x/lib/server/libjvm.so".into(),
            }
        );
        let paths: Vec<&str> = m.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(
            paths[1..],
            [
                "",
                "/tmp/perf-1.map (deleted)",
                "/SYSV0000a1b2 (deleted)",
                "[anon:glibc malloc]",
                "[stack]",
                "[vdso]"
            ]
        );
        assert_eq!((m[2].dev.as_str(), m[3].perms.as_str()), ("103:02", "rw-s"));
    }

    /// Our own maps, as procfs gives them, match the file line for line.
    #[test]
    fn our_own_maps_as_the_kernel_wrote_them() {
        let mapped = TargetProcess::open(std::process::id())
            .unwrap()
            .maps()
            .unwrap();
        let text = fs::read_to_string("/proc/self/maps").unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(mapped.len() > 10);
        for m in &mapped {
            let head = format!(
                "{:x}-{:x} {} {:08x} {} {}",
                m.start, m.end, m.perms, m.offset, m.dev, m.inode
            );
            // Mappings may come and go between the two reads (other tests run meanwhile).
            if let Some(line) = lines.iter().find(|l| l.starts_with(&format!("{head} "))) {
                assert_eq!(line[head.len()..].trim(), m.path, "{line}");
            }
        }
        assert!(mapped.iter().any(|m| m.path.ends_with("[stack]")));
    }

    #[test]
    fn our_own_threads() {
        let me = TargetProcess::open(std::process::id()).unwrap();
        let tids = me.threads();
        assert!(tids.contains(&std::process::id()));
        assert!(tids.windows(2).all(|w| w[0] < w[1]));
        let tid = nix::unistd::gettid().as_raw() as u32;
        assert_eq!(me.ns_tid_map().get(&tid), Some(&tid));
        let comm = fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
        assert_eq!(me.thread_comm(tid).as_deref(), Some(comm.trim_end()));
        assert_eq!(me.thread_comm(u32::MAX), None);
    }

    #[test]
    fn state_and_start_time_of_a_stat_line() {
        let line = "4242 (java (x) 1) S 1 4242 4242 0 -1 4194560 9 0 0 0 1 2 0 0 20 0 23 0 \
                    7788 5000000 4000 18446744073709551615 1 1 0 0 0 0 0 4096 17615 0 0 0 17 1 \
                    0 0 0 0 0\n";
        assert_eq!(parse_state_and_start(line), Some(('S', 7788)));
        assert_eq!(parse_state_and_start("4242 (java) S 1 2"), None);
        assert_eq!(parse_state_and_start(""), None);
    }

    /// A pid given to another process is not the one opened: its start time differs.
    #[test]
    fn a_process_given_a_reused_pid_is_not_alive() {
        let mut me = TargetProcess::open(std::process::id()).unwrap();
        let stat = fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(me.start_time, parse_state_and_start(&stat).map(|s| s.1));
        assert!(me.is_alive());
        me.start_time = me.start_time.map(|s| s + 1);
        assert!(!me.is_alive());
    }

    /// A process that runs another program (`execve`) keeps its pid and start time; it is no
    /// longer the process opened.
    #[test]
    fn a_process_that_execs_another_program_is_not_alive() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read line; exec sleep 30"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let opened = TargetProcess::open(child.id()).unwrap();
        assert!(opened.is_alive());
        let sh = opened.program.clone().unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
        let start = std::time::Instant::now();
        while program(child.id()).as_ref() == Some(&sh) {
            assert!(start.elapsed().as_secs() < 10, "sh did not exec sleep");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!opened.is_alive(), "{:?} after exec", program(child.id()));
        assert!(TargetProcess::open(child.id()).unwrap().is_alive());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn timens_offsets() {
        assert_eq!(
            parse_timens_monotonic("monotonic           5         100\nboottime 0 0\n"),
            Some(5_000_000_100)
        );
    }
}
