//! Facts about the target process read from `/proc/<pid>`: namespaces, credentials, signals, mappings.

use crate::error::{err, Error, ErrorKind, Result};
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

impl TargetProcess {
    pub fn open(pid: u32) -> Result<Self> {
        let status_path = format!("/proc/{pid}/status");
        let status = fs::read_to_string(&status_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::new(
                ErrorKind::NoProcess,
                format!("process {pid} does not exist (check the pid with `jps` or `pgrep java`)"),
            ),
            _ => Error::new(
                ErrorKind::Permission,
                format!("cannot read {status_path}: {e} (run as the JVM's user or root)"),
            ),
        })?;
        parse_status(pid, &status)
    }

    /// The process still exists and is not a zombie.
    pub fn is_alive(&self) -> bool {
        match fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => stat
                .rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
                .unwrap_or(false),
            Err(_) => false,
        }
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
        let text = fs::read_to_string(&path).map_err(|e| {
            Error::new(
                ErrorKind::Permission,
                format!("cannot read {path}: {e} (run as the JVM's user or root)"),
            )
        })?;
        Ok(text.lines().filter_map(parse_maps_line).collect())
    }

    /// Thread ids currently in the process.
    pub fn threads(&self) -> Vec<u32> {
        let mut tids: Vec<u32> = fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        tids.sort_unstable();
        tids
    }

    /// Thread ids as the target sees them (its pid namespace) → ours. Identity outside containers.
    pub fn ns_tid_map(&self) -> std::collections::HashMap<u32, u32> {
        self.threads()
            .into_iter()
            .filter_map(|tid| {
                let status =
                    fs::read_to_string(format!("/proc/{}/task/{tid}/status", self.pid)).ok()?;
                let inner = status
                    .lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .and_then(|v| v.split_whitespace().last()?.parse().ok())
                    .unwrap_or(tid);
                Some((inner, tid))
            })
            .collect()
    }

    /// The short (15-byte) kernel name of a thread.
    pub fn thread_comm(&self, tid: u32) -> Option<String> {
        fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid))
            .ok()
            .map(|s| s.trim_end_matches('\n').to_string())
    }

    /// Offset of the target's CLOCK_MONOTONIC relative to ours (time namespaces), in ns.
    pub fn monotonic_offset_ns(&self) -> i64 {
        fs::read_to_string(format!("/proc/{}/timens_offsets", self.pid))
            .ok()
            .and_then(|text| parse_timens_monotonic(&text))
            .unwrap_or(0)
    }
}

fn parse_status(pid: u32, status: &str) -> Result<TargetProcess> {
    let field = |name: &str| -> Option<&str> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let second =
        |name: &str| -> Option<u32> { field(name)?.split_whitespace().nth(1)?.parse().ok() };
    let hex = |name: &str| -> u64 {
        field(name)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or(0)
    };
    let nspid = field("NSpid")
        .and_then(|v| v.split_whitespace().last()?.parse().ok())
        .unwrap_or(pid);
    let (Some(euid), Some(egid)) = (second("Uid"), second("Gid")) else {
        return err(
            ErrorKind::Internal,
            format!("/proc/{pid}/status has no Uid/Gid lines"),
        );
    };
    Ok(TargetProcess {
        pid,
        nspid,
        euid,
        egid,
        sig_caught: hex("SigCgt"),
        sig_ignored: hex("SigIgn"),
        name: field("Name").unwrap_or("").to_string(),
    })
}

fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.to_string();
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let dev = it.next()?.to_string();
    let inode = it.next()?.parse().ok()?;
    let path = it.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        dev,
        inode,
        path,
    })
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

    #[test]
    fn status_of_a_containerised_jvm() {
        let status =
            "Name:\tjava\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\n\
            Uid:\t1000\t1001\t1001\t1001\nGid:\t100\t101\t101\t101\nNSpid:\t4242\t7\n\
            SigIgn:\t0000000000000000\nSigCgt:\t0000000101001cce\n";
        let p = parse_status(4242, status).unwrap();
        assert_eq!((p.nspid, p.euid, p.egid), (7, 1001, 101));
        assert!(p.catches_signal(3), "SIGQUIT is bit 2 of SigCgt");
        assert_eq!(p.name, "java");
    }

    #[test]
    fn sigquit_not_caught_under_xrs() {
        let status = "Name:\tjava\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nSigIgn:\t0000000000000000\nSigCgt:\t0000000101001cc8\n";
        let p = parse_status(1, status).unwrap();
        assert!(!p.catches_signal(3));
        assert_eq!(p.nspid, 1, "no NSpid line: fall back to the pid");
    }

    #[test]
    fn maps_lines() {
        let m = parse_maps_line(
            "7f0e2c000000-7f0e2c200000 r-xp 00001000 fd:00 1234    /usr/lib/jvm/x/lib/server/libjvm.so",
        )
        .unwrap();
        assert_eq!(m.start, 0x7f0e2c000000);
        assert_eq!(m.offset, 0x1000);
        assert_eq!(m.path, "/usr/lib/jvm/x/lib/server/libjvm.so");
        let anon = parse_maps_line("7f0e2c000000-7f0e2c200000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(anon.path, "");
    }

    #[test]
    fn timens_offsets() {
        assert_eq!(
            parse_timens_monotonic("monotonic           5         100\nboottime 0 0\n"),
            Some(5_000_000_100)
        );
    }
}
