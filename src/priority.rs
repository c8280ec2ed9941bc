//! jvmperf's own scheduling priority: above the JVM it profiles, where the host allows it (root or
//! CAP_SYS_NICE), so that the thread draining the ring buffers never waits behind a JVM's
//! thousands of runnable threads, and `dump` never leaves a thread stopped while it waits.
//!
//! A nice value alone is not enough where the kernel groups processes by session
//! (`CONFIG_SCHED_AUTOGROUP`, `kernel.sched_autogroup_enabled=1`, the processes outside any cpu
//! cgroup): a nice value then only orders the processes of one session, and sessions share the
//! CPUs by their autogroup's nice (sched(7), "The autogroup feature"). jvmperf started from a
//! terminal is not in the JVM's session. So jvmperf also raises its session's autogroup while it
//! runs, and puts it back when it ends.

use std::fs;

/// The nice value jvmperf takes. Per-CPU rings hold ~1 s of samples; a JVM of 3000 threads kept
/// jvmperf at nice 0 off the CPUs for seconds at a time here and lost up to half of the samples,
/// none at nice -10. jvmperf uses ~1% of a core, which the target does not miss; its debug-info
/// work stays 10 below it.
///
/// The same JVM kept a process of another session, autogroup nice 0, off both CPUs for as long as
/// the JVM ran (a 0.2 s Python script took 39 s; 0.5 s with its autogroup at -10): hence the
/// autogroup too.
const OWN_NICE: i32 = -10;

const AUTOGROUP: &str = "/proc/self/autogroup";

/// The calling thread's nice value.
pub fn own_nice() -> i32 {
    // SAFETY: getpriority with integer arguments only; for the caller itself it cannot fail, so
    // -1 is a nice value, not an error.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

/// jvmperf's raised priority, for as long as it lives: dropping it gives the session's autogroup
/// back its nice value (the process's own nice ends with the process).
#[must_use = "the session's autogroup is put back when this is dropped"]
pub struct RaisedPriority {
    autogroup_before: Option<i32>,
}

/// Raises this process's priority to [`OWN_NICE`], and its session's autogroup too unless one of
/// `targets` (the JVMs it was asked to profile) is in the same session: raising a target along
/// with jvmperf would change what is measured. Without the privilege nothing changes.
pub fn raise(targets: &[u32]) -> RaisedPriority {
    raise_nice();
    RaisedPriority {
        autogroup_before: raise_autogroup(targets),
    }
}

/// Raises this process's priority to [`OWN_NICE`], and not its session's autogroup: for the
/// daemon, which finds JVMs as it runs, some of them perhaps in its own session, where raising
/// the autogroup would raise them too and change what is measured.
pub fn raise_process_only() {
    raise_nice();
}

fn raise_nice() {
    if own_nice() > OWN_NICE {
        // SAFETY: setpriority with integer arguments only; for the calling thread (0).
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, OWN_NICE) };
    }
}

/// The autogroup's nice before it was raised, if it was.
fn raise_autogroup(targets: &[u32]) -> Option<i32> {
    let ours = Autogroup::of("self")?;
    if ours.nice <= OWN_NICE || targets.iter().any(|&pid| ours.holds(pid)) {
        return None;
    }
    // Fails with EPERM without CAP_SYS_NICE, and with ESRCH where autogroups are off.
    fs::write(AUTOGROUP, OWN_NICE.to_string()).ok()?;
    Some(ours.nice)
}

/// What [`raise`] would do beside `target`, for `doctor`: whether jvmperf could keep up with a
/// busy JVM, and a sentence saying why. `may_raise`: root or CAP_SYS_NICE.
pub fn describe(target: u32, may_raise: bool) -> (bool, String) {
    // /proc/self/autogroup exists wherever the kernel has autogroups; they are on only if enabled.
    let enabled = fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .is_ok_and(|v| v.trim() == "1");
    let other_session = enabled && Autogroup::of("self").is_some_and(|ours| !ours.holds(target));
    match (may_raise, other_session) {
        (true, true) => (
            true,
            format!("nice {OWN_NICE}, and this session's autogroup too while jvmperf runs (autogroups are on and the JVM is in another session)"),
        ),
        (true, false) => (true, format!("nice {OWN_NICE}")),
        (false, true) => (
            false,
            format!("nice {} (raising needs root or CAP_SYS_NICE): autogroups are on and the JVM is in another session, so a busy JVM can keep jvmperf off the CPUs for seconds and its rings overflow; run it with sudo", own_nice()),
        ),
        (false, false) => (
            false,
            format!("nice {} (raising needs root or CAP_SYS_NICE): a JVM of thousands of runnable threads can delay jvmperf and its rings overflow", own_nice()),
        ),
    }
}

impl Drop for RaisedPriority {
    fn drop(&mut self) {
        if let Some(nice) = self.autogroup_before {
            let _ = fs::write(AUTOGROUP, nice.to_string());
        }
    }
}

/// The calling thread in the real-time class (SCHED_FIFO, the lowest priority) while this lives,
/// where allowed: as `perf record --realtime` offers. A nice value is not enough beside a JVM of
/// hundreds of runnable threads on a small host: at nice -10 the draining thread got ~2% of a CPU
/// there, was off the CPUs for over a second at a time, and the rings (~1 s of samples)
/// overflowed. Its work is bounded (drain, walk, count), so it cannot hold a CPU for long.
/// Threads it starts meanwhile get the normal class (`SCHED_RESET_ON_FORK`, sched(7)) and take
/// jvmperf's nice back with [`take_own_nice`].
#[must_use = "the thread leaves the real-time class when this is dropped"]
pub struct RealTime {
    raised: bool,
}

pub fn real_time() -> RealTime {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid sched_param; it fails
    // with EPERM without CAP_SYS_NICE or an RLIMIT_RTPRIO, and then nothing changes.
    let raised = unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) == 0
    };
    RealTime { raised }
}

impl Drop for RealTime {
    fn drop(&mut self) {
        if self.raised {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: as in `real_time`; back to the normal class, its nice value kept.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
        }
    }
}

/// A thread started by one in the real-time class starts at nice 0 (`SCHED_RESET_ON_FORK` resets
/// a negative nice): it takes jvmperf's back where allowed.
pub fn take_own_nice() {
    // nix's gettid is the system call: glibc's wrapper is newer (2.30) than the release binary's
    // floor (2.28, see xtask/src/dist.rs).
    let tid = nix::unistd::gettid().as_raw() as libc::id_t;
    // SAFETY: setpriority on this thread's own tid with integer arguments only.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, OWN_NICE) };
}

/// One line of `/proc/<pid>/autogroup`: `/autogroup-97 nice 0`.
#[derive(Debug, PartialEq)]
struct Autogroup {
    name: String,
    nice: i32,
}

impl Autogroup {
    /// The autogroup of `/proc/<process>` (a pid, or `self`).
    fn of(process: &str) -> Option<Autogroup> {
        Autogroup::parse(&fs::read_to_string(format!("/proc/{process}/autogroup")).ok()?)
    }

    fn parse(line: &str) -> Option<Autogroup> {
        let mut words = line.split_whitespace();
        let name = words.next()?.to_string();
        (words.next()? == "nice").then_some(())?;
        let nice = words.next()?.parse().ok()?;
        Some(Autogroup { name, nice })
    }

    /// Whether process `pid` is in this autogroup (in the same session).
    fn holds(&self, pid: u32) -> bool {
        Autogroup::of(&pid.to_string()).is_some_and(|theirs| theirs.name == self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_autogroup_line() {
        assert_eq!(
            Autogroup::parse("/autogroup-97 nice -10\n"),
            Some(Autogroup {
                name: "/autogroup-97".into(),
                nice: -10
            })
        );
        assert_eq!(Autogroup::parse("/autogroup-97 nice\n"), None);
        assert_eq!(Autogroup::parse(""), None);
    }

    #[test]
    fn leaves_a_target_in_its_own_session_alone() {
        // This test process and itself share a session: nothing may change.
        let before = fs::read_to_string(AUTOGROUP).ok();
        let raised = raise_autogroup(&[1, std::process::id()]);
        assert_eq!(raised, None);
        assert_eq!(fs::read_to_string(AUTOGROUP).ok(), before);
    }
}
