//! One thread's registers and stack at one instant, taken from outside with no help from the JVM
//! (no attach, no safepoint): the thread is seized with `PTRACE_SEIZE`, stopped with
//! `PTRACE_INTERRUPT` for as long as a register read and one stack read take, and let go.
//!
//! A seized thread is never left stopped: `PTRACE_SEIZE` sends no SIGSTOP, and when the tracer
//! exits — also when it is killed — the kernel detaches its tracees, which then run on
//! (ptrace(2): "PTRACE_SEIZE", "PTRACE_INTERRUPT", "PTRACE_DETACH"). A signal that arrives while
//! the thread is held stops it in signal-delivery-stop instead; it is delivered when the thread
//! is let go. A thread in uninterruptible sleep (`D`) is not seized: it would stop only once its
//! system call returns; its stack pointer and pc come from `/proc/<pid>/task/<tid>/syscall`.

use crate::process::{ProcessMemory, TargetMemory};
use crate::sampler::Regs;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// How long a seized thread may take to stop: the kernel stops a running thread with an IPI and a
/// sleeping one by waking it, both in microseconds; a longer wait means the thread cannot stop now.
const STOP_TIMEOUT: Duration = Duration::from_millis(200);

/// How a thread's registers were taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Captured {
    /// Stopped with ptrace: every register, and the stack as it was.
    Stopped,
    /// From `/proc/…/syscall` while blocked: the stack pointer and pc only, the stack read live.
    Blocked,
}

pub struct Snapshot {
    pub regs: Regs,
    /// The stack from `regs.sp` up, as far as it was readable (at most the bytes asked for).
    pub stack: Vec<u8>,
    pub captured: Captured,
}

/// Registers and up to `stack_bytes` of stack of thread `tid` of process `pid`; `while_held` runs
/// while the thread is stopped (or blocked), to read more of its state at the same instant.
pub fn capture(
    pid: u32,
    tid: u32,
    stack_bytes: usize,
    while_held: &mut dyn FnMut(),
) -> Result<Snapshot, String> {
    let mem = ProcessMemory { pid };
    if os_state(pid, tid) == Some('D') {
        let regs =
            blocked_regs(pid, tid).ok_or("in uninterruptible sleep, outside a system call")?;
        while_held();
        return Ok(Snapshot {
            stack: read_stack(&mem, regs.sp, stack_bytes),
            regs,
            captured: Captured::Blocked,
        });
    }
    let thread = Pid::from_raw(i32::try_from(tid).map_err(|_| "bad thread id")?);
    ptrace::seize(thread, ptrace::Options::empty()).map_err(|e| format!("PTRACE_SEIZE: {e}"))?;
    let result = stopped(thread).and_then(|pending| {
        let regs = ptrace::getregs(thread).map_err(|e| format!("PTRACE_GETREGS: {e}"));
        let snapshot = regs.map(|r| {
            let regs = regs_of(&r);
            while_held();
            Snapshot {
                stack: read_stack(&mem, regs.sp, stack_bytes),
                regs,
                captured: Captured::Stopped,
            }
        });
        // Let go at once, delivering a signal that arrived meanwhile.
        let _ = ptrace::detach(thread, pending);
        snapshot
    });
    if result.is_err() {
        // Not stopped (gone, or not stoppable in time): detaching needs a stopped tracee, so the
        // kernel detaches it when this process exits, and it runs on.
        let _ = ptrace::detach(thread, None);
    }
    result
}

/// Registers (stack pointer and pc) and up to `stack_bytes` of stack of thread `tid` if it is
/// blocked in a system call (or a fault), taken without stopping it; `None` if it is running or
/// ran while its stack was read (its system-call file changed).
pub fn blocked(pid: u32, tid: u32, stack_bytes: usize) -> Option<Snapshot> {
    if !matches!(os_state(pid, tid)?, 'S' | 'D') {
        return None;
    }
    let before = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let regs = parse_syscall_file(&before)?;
    let stack = read_stack(&ProcessMemory { pid }, regs.sp, stack_bytes);
    let after = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    // The same system call with the same arguments, stack pointer and pc: very likely the same
    // wait (a thread that woke and blocked again in between would also have to rebuild the exact
    // stack pointer), and the stack above `sp` is what it was.
    (before == after).then_some(Snapshot {
        regs,
        stack,
        captured: Captured::Blocked,
    })
}

/// Interrupts a seized thread and waits until it stops; returns a signal it stopped for instead
/// (to deliver when it is let go).
fn stopped(thread: Pid) -> Result<Option<Signal>, String> {
    ptrace::interrupt(thread).map_err(|e| format!("PTRACE_INTERRUPT: {e}"))?;
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        match waitpid(thread, Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::PtraceEvent(..)) => return Ok(None),
            Ok(WaitStatus::Stopped(_, signal)) => return Ok(Some(signal)),
            Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_micros(50));
            }
            Ok(WaitStatus::StillAlive) => return Err("did not stop within 200 ms".to_string()),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                return Err("exited".to_string())
            }
            Ok(other) => return Err(format!("unexpected stop {other:?}")),
            Err(e) => return Err(format!("waitpid: {e}")),
        }
    }
}

fn regs_of(r: &libc::user_regs_struct) -> Regs {
    Regs {
        // PERF_SAMPLE_REGS_ABI_64: registers of a 64-bit task.
        abi: 2,
        ax: r.rax,
        bx: r.rbx,
        cx: r.rcx,
        dx: r.rdx,
        si: r.rsi,
        di: r.rdi,
        bp: r.rbp,
        sp: r.rsp,
        ip: r.rip,
        r8: r.r8,
        r9: r.r9,
        r10: r.r10,
        r11: r.r11,
        r12: r.r12,
        r13: r.r13,
        r14: r.r14,
        r15: r.r15,
    }
}

/// The stack from `sp` up: `max` bytes, or up to the first unreadable page.
pub fn read_stack(mem: &ProcessMemory, sp: u64, max: usize) -> Vec<u8> {
    const PAGE: u64 = 4096;
    let mut stack = vec![0u8; max];
    if mem.read(sp, &mut stack).is_ok() {
        return stack;
    }
    // The stack's end is within `max` bytes: a page at a time up to it.
    stack.clear();
    let mut at = sp;
    while stack.len() < max {
        let n = ((PAGE - at % PAGE) as usize).min(max - stack.len());
        let mut chunk = vec![0u8; n];
        if mem.read(at, &mut chunk).is_err() {
            break;
        }
        stack.extend_from_slice(&chunk);
        match at.checked_add(n as u64) {
            Some(next) => at = next,
            None => break,
        }
    }
    stack
}

/// The one-letter state of `/proc/<pid>/task/<tid>/stat` (R running, S sleeping, D disk, …).
pub fn os_state(pid: u32, tid: u32) -> Option<char> {
    let tid = i32::try_from(tid).ok()?;
    let stat = super::identity::proc_process(pid)
        .and_then(|p| p.task_from_tid(tid)?.stat())
        .ok()?;
    Some(stat.state)
}

/// Stack pointer and pc of a thread blocked in a system call: `/proc/…/syscall` is
/// `NR arg1 … arg6 SP PC` then (proc(5)); `running` or `-1 SP PC` otherwise. Read by hand:
/// `procfs`'s `Task::syscall` fails on the `-1 SP PC` form.
fn blocked_regs(pid: u32, tid: u32) -> Option<Regs> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    parse_syscall_file(&text)
}

fn parse_syscall_file(text: &str) -> Option<Regs> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() < 3 {
        return None;
    }
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let sp = hex(fields[fields.len() - 2])?;
    let ip = hex(fields[fields.len() - 1])?;
    Some(Regs {
        abi: 2,
        sp,
        ip,
        ..Regs::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syscall_file_gives_sp_and_pc_of_a_blocked_thread() {
        let blocked = "202 0x7f0c4c0a5f08 0x80 0x0 0x0 0x0 0x0 0x7f0c2b5fe9c0 0x7f0c4ba8e3fd\n";
        let regs = parse_syscall_file(blocked).unwrap();
        assert_eq!((regs.sp, regs.ip), (0x7f0c2b5fe9c0, 0x7f0c4ba8e3fd));
        assert_eq!(regs.abi, 2);
        assert!(parse_syscall_file("running\n").is_none());
        // Blocked outside a system call: no arguments (procfs's parser rejects this form).
        let regs = parse_syscall_file("-1 0x7f0c2b5fe9c0 0x7f0c4ba8e3fd\n").unwrap();
        assert_eq!((regs.sp, regs.ip), (0x7f0c2b5fe9c0, 0x7f0c4ba8e3fd));
    }

    /// Kills the child when the test ends, passed or not.
    struct Busy(std::process::Child);

    impl Drop for Busy {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A busy thread of a child process is stopped, read and let go: it keeps running after.
    #[test]
    fn a_running_thread_is_captured_and_runs_on() {
        let child = Busy(
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap(),
        );
        let pid = child.0.id();
        // Running its loop, not still starting (exec, loading: blocked in the kernel).
        let deadline = Instant::now() + Duration::from_secs(20);
        while os_state(pid, pid) != Some('R') && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut held = false;
        let snap = capture(pid, pid, 16384, &mut || held = true).unwrap();
        assert!(held);
        assert_eq!(snap.captured, Captured::Stopped);
        assert!(snap.regs.sp != 0 && snap.regs.ip != 0);
        assert!(!snap.stack.is_empty() && snap.stack.len() <= 16384);
        let cpu = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let after = stat.rsplit_once(')').unwrap().1.to_string();
            after
                .split_whitespace()
                .nth(11)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let before = cpu();
        let deadline = Instant::now() + Duration::from_secs(20);
        while cpu() == before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            cpu() > before,
            "the thread did not run on after the capture"
        );
        assert_ne!(os_state(pid, pid), Some('t'), "left in a tracing stop");
    }
}
