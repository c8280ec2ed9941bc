//! The perf event we open on each thread, the `perf_event_open` call, and what its errors mean.

use super::{SamplerConfig, Uprobes};
use crate::error::{Error, ErrorKind};
use perf_event_open_sys::bindings as sys;
use perf_event_open_sys::{ioctls, perf_event_open};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// AX BX CX DX SI DI BP SP IP (bits 0–8) and R8–R15 (bits 16–23). FLAGS/CS/SS are not needed
/// for unwinding, and DS/ES/FS/GS (12–15) make x86_64 kernels fail with EINVAL.
pub(super) const REGS_MASK: u64 = 0x1ff | (0xff << 16);

pub(super) fn sample_type(config: &SamplerConfig) -> u64 {
    let mut t = sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_REGS_USER
        | sys::PERF_SAMPLE_STACK_USER;
    if config.kernel_callchain {
        t |= sys::PERF_SAMPLE_CALLCHAIN;
    }
    if config.wall {
        // Two events share each ring in wall mode: the id tells their samples apart.
        t |= sys::PERF_SAMPLE_IDENTIFIER;
    }
    u64::from(t)
}

/// Attributes for a CPU-clock sampling event, sampling every `config.period_ns()` of CPU time,
/// created enabled. The fill level at which epoll reports the buffer readable is set per event by
/// [`open`].
pub(super) fn event_attr(config: &SamplerConfig) -> sys::perf_event_attr {
    let mut attr = sys::perf_event_attr {
        type_: sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: u64::from(sys::PERF_COUNT_SW_CPU_CLOCK),
        sample_type: sample_type(config),
        sample_regs_user: REGS_MASK,
        sample_stack_user: config.stack_size,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    // cpu-clock has no frequency mode: the kernel turns a frequency into this fixed period at
    // open and clears `freq` (`perf_swevent_init_hrtimer`, kernel/events/core.c), so that
    // PERF_EVENT_IOC_PERIOD takes nanoseconds. A period is also the unit wall-clock mode counts
    // time off a CPU in (see `engine::wall`).
    attr.sample_period = config.period_ns();
    // read() gives the samples the kernel dropped for a full buffer (Linux ≥ 6.0), including
    // those no LOST record reports yet: see `Sampler::count_unreported_lost`.
    attr.read_format = u64::from(sys::PERF_FORMAT_LOST);
    attr.set_watermark(1);
    attr.set_use_clockid(1);
    attr.set_sample_id_all(1);
    attr.set_exclude_hv(1);
    if config.kernel_callchain {
        // The kernel's user callchain follows frame pointers, which JIT code does not keep.
        attr.set_exclude_callchain_user(1);
    }
    // Time in system calls and page faults is sampled too (its user registers and stack are
    // those at kernel entry) unless perf_event_paranoid forbids it: see `open`.
    attr
}

/// Attributes for wall-clock mode's second event on a thread: a sample with the same registers
/// and stack copy each time the thread leaves a CPU (the context-switch software event fires only
/// on the way out, in `perf_event_task_sched_out`), and a `PERF_RECORD_SWITCH` record
/// (`context_switch`) each time it comes back. Its output goes to the CPU-clock event's ring.
pub(super) fn switch_attr(cpu_clock: &sys::perf_event_attr) -> sys::perf_event_attr {
    let mut attr = *cpu_clock;
    attr.config = u64::from(sys::PERF_COUNT_SW_CONTEXT_SWITCHES);
    attr.set_freq(0);
    attr.sample_period = 1;
    attr.set_context_switch(1);
    // The switch happens in the kernel: an event excluding kernel time would never fire.
    attr.set_exclude_kernel(0);
    attr
}

/// Attributes for per-CPU wall-clock mode's second event on a CPU: a sample with the user
/// registers of every task that leaves the CPU (no stack copy: the stack is read from outside
/// while the thread is off, see `engine::off_cpu_reads`), and `PERF_RECORD_SWITCH_CPU_WIDE`
/// records for every switch, in a ring of its own. Its own ring, not the CPU clock's with an
/// identifier to tell the samples apart: while another tool sampled context switches on the
/// same CPUs, none of this event's samples in a shared ring were told apart by their identifier
/// any more (Linux 6.18): the waits they began went uncounted.
pub(super) fn cpu_switch_attr(cpu_clock: &sys::perf_event_attr) -> sys::perf_event_attr {
    let mut attr = switch_attr(cpu_clock);
    attr.sample_type =
        u64::from(sys::PERF_SAMPLE_TID | sys::PERF_SAMPLE_TIME | sys::PERF_SAMPLE_REGS_USER);
    attr.sample_stack_user = 0;
    attr.set_exclude_callchain_user(0);
    // FORK and EXIT records: a thread's last switch follows its exit, and is no wait.
    attr.set_task(1);
    attr
}

/// `/sys/bus/event_source/devices/uprobe/type`: the dynamic PMU number of the kernel's `uprobe`
/// PMU, which takes the probed file's path and offset in the attributes (no tracefs needed).
pub(super) fn uprobe_pmu_type() -> io::Result<u32> {
    let text = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")?;
    text.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad uprobe PMU type"))
}

/// Attributes for a uprobe on `probes`' function `index`: a sample with the user registers and
/// stack copy every `probes.period`-th time a thread runs its first instruction, or returns
/// from it. `config1` points at the path, `config2` is the function's file offset
/// (`perf_uprobe_init`, kernel/trace/trace_event_perf.c); `config` bit 0 makes it a return probe
/// (the PMU's `format/retprobe`). A prompt probe wakes its ring's reader at each sample. A
/// return probe copies no stack: the record keeps the ring's
/// layout with an empty stack (`perf_output_sample_ustack` writes its size alone). The path is
/// read by the kernel at each open: `probes` must outlive them.
pub(super) fn uprobe_attr(
    config: &SamplerConfig,
    pmu_type: u32,
    probes: &Uprobes,
    index: usize,
) -> sys::perf_event_attr {
    let mut attr = event_attr(config);
    attr.type_ = pmu_type;
    let probe = probes.probes[index];
    attr.config = u64::from(probe.on_return);
    attr.config1 = probes.path.as_ptr() as u64;
    attr.config2 = probe.offset;
    if probe.on_return {
        attr.sample_stack_user = 0;
    }
    if probe.prompt {
        attr.set_watermark(0);
        attr.wakeup_events = 1;
    }
    attr.sample_period = probes.period.max(1);
    attr
}

/// Whether the open failed for want of privilege.
pub(super) fn denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM))
}

/// Whether a failed open may succeed with kernel time excluded (`perf_event_paranoid` 2 lets
/// unprivileged users count user time only).
pub(super) fn retry_without_kernel(attr: &mut sys::perf_event_attr, e: &io::Error) -> bool {
    if !denied(e)
        || attr.exclude_kernel() == 1
        || attr.context_switch() == 1
        || attr.sample_type & u64::from(sys::PERF_SAMPLE_CALLCHAIN) != 0
    {
        return false;
    }
    attr.set_exclude_kernel(1);
    true
}

/// Whether a failed open may succeed without the lost-sample count in `read_format`, which
/// kernels before 6.0 reject.
pub(super) fn retry_without_lost_count(attr: &mut sys::perf_event_attr, e: &io::Error) -> bool {
    let lost = u64::from(sys::PERF_FORMAT_LOST);
    if e.raw_os_error() != Some(libc::EINVAL) || attr.read_format & lost == 0 {
        return false;
    }
    attr.read_format &= !lost;
    true
}

/// Whether read() on events opened with `attr` gives their lost-sample count.
pub(super) fn counts_lost(attr: &sys::perf_event_attr) -> bool {
    attr.read_format & u64::from(sys::PERF_FORMAT_LOST) != 0
}

/// Samples the event dropped for a full buffer so far (its `PERF_FORMAT_LOST` count).
pub(super) fn read_lost(fd: &OwnedFd) -> io::Result<u64> {
    // read_format LOST alone: { u64 value; u64 lost; }.
    let mut values = [0u64; 2];
    // SAFETY: `values` is 16 writable bytes, the size of what the kernel writes for this format.
    let n = unsafe { libc::read(fd.as_raw_fd(), values.as_mut_ptr().cast(), 16) };
    if n != 16 {
        return Err(if n < 0 {
            io::Error::last_os_error()
        } else {
            io::Error::from(io::ErrorKind::UnexpectedEof)
        });
    }
    Ok(values[1])
}

/// Opens the event on thread `pid` (any CPU), or with `pid` -1 on CPU `cpu` (any process),
/// which epoll reports readable once its buffer holds `wakeup_bytes`. What the kernel or
/// `perf_event_paranoid` does not allow is dropped from `attr` once an open without it succeeded
/// (so that one failure for another reason does not change later events). `Ok(None)`: the
/// thread no longer exists, or the CPU is offline.
pub(super) fn open(
    attr: &mut sys::perf_event_attr,
    wakeup_bytes: usize,
    pid: i32,
    cpu: i32,
) -> io::Result<Option<OwnedFd>> {
    let mut trial = *attr;
    loop {
        match open_once(&trial, wakeup_bytes, pid, cpu) {
            Err(e)
                if retry_without_lost_count(&mut trial, &e)
                    || retry_without_kernel(&mut trial, &e) => {}
            Ok(Some(fd)) => {
                *attr = trial;
                return Ok(Some(fd));
            }
            other => return other,
        }
    }
}

fn open_once(
    attr: &sys::perf_event_attr,
    wakeup_bytes: usize,
    pid: i32,
    cpu: i32,
) -> io::Result<Option<OwnedFd>> {
    let mut attr = *attr;
    if attr.watermark() == 1 {
        attr.wakeup_watermark = u32::try_from(wakeup_bytes).unwrap_or(u32::MAX);
    }
    // SAFETY: `attr` is a fully initialised perf_event_attr that the kernel may write back to.
    let fd = unsafe {
        perf_event_open(
            &mut attr,
            pid,
            cpu,
            -1,
            libc::c_ulong::from(sys::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Ok(None),
            Some(libc::ENODEV) if pid == -1 => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: the kernel just handed us this descriptor.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Sends `fd`'s records to `target`'s ring buffer (both events on the same thread).
pub(super) fn set_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    // SAFETY: both are perf event descriptors; SET_OUTPUT takes the target's descriptor.
    let rc = unsafe { ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The kernel's id of the event, as its records' `PERF_SAMPLE_IDENTIFIER` gives it.
pub(super) fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: `fd` is a perf event descriptor and `id` outlives the call.
    let rc = unsafe { ioctls::ID(fd.as_raw_fd(), &mut id) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(id)
    }
}

pub(super) fn set_enabled(fd: &OwnedFd, enabled: bool) -> io::Result<()> {
    // SAFETY: `fd` is a perf event descriptor; ENABLE/DISABLE take no pointer argument.
    let rc = unsafe {
        if enabled {
            ioctls::ENABLE(fd.as_raw_fd(), 0)
        } else {
            ioctls::DISABLE(fd.as_raw_fd(), 0)
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets a running CPU-clock event's period in nanoseconds (`PERF_EVENT_IOC_PERIOD`; the next
/// sample comes a full period later: kernel/events/core.c, `__perf_event_period`).
pub(super) fn set_period(fd: &OwnedFd, period_ns: u64) -> io::Result<()> {
    let mut value = period_ns;
    // The ioctl takes a pointer to the value; the crate's binding types its argument as u64, so
    // the pointer is passed as one.
    // SAFETY: `fd` is a perf event descriptor and `value` outlives the call.
    let rc = unsafe { ioctls::PERIOD(fd.as_raw_fd(), std::ptr::addr_of_mut!(value) as u64) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub(super) fn read_sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `kernel.perf_event_max_sample_rate`, above which a frequency is rejected with EINVAL.
pub(super) fn max_sample_rate() -> Option<u64> {
    read_sysctl("perf_event_max_sample_rate").and_then(|v| u64::try_from(v).ok())
}

/// What a perf event was opened on, for messages.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    Thread(u32),
    Cpu(u32),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Thread(tid) => write!(f, "thread {tid}"),
            Target::Cpu(cpu) => write!(f, "CPU {cpu}"),
        }
    }
}

/// A one-line error for a failed `perf_event_open` on `target`, naming the fix where there is
/// one.
pub(super) fn open_error(e: &io::Error, target: Target, config: &SamplerConfig) -> Error {
    let paranoid = read_sysctl("perf_event_paranoid")
        .map(|v| format!("kernel.perf_event_paranoid={v}"))
        .unwrap_or_else(|| "kernel.perf_event_paranoid".to_string());
    // Kernel callchains and context switches (`--wall`) happen in the kernel.
    let level = if config.kernel_callchain || config.wall {
        1
    } else {
        2
    };
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => Error::new(
            ErrorKind::Permission,
            format!(
                "perf_event_open on {target} denied ({paranoid}): run as root or with \
                 CAP_PERFMON, or `sysctl kernel.perf_event_paranoid={level}` and profile as the \
                 target's user"
            ),
        ),
        Some(libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP) => Error::new(
            ErrorKind::Sampling,
            format!(
                "perf_event_open on {target} failed: {e} (this kernel or container offers no \
                 software cpu-clock perf events; check that perf_event_open is not blocked by \
                 seccomp)"
            ),
        ),
        Some(libc::EMFILE | libc::ENFILE) => {
            let (each, or_per_cpu) = match target {
                Target::Thread(_) => (
                    " (one per thread)",
                    ", or sample per CPU, one event per CPU (as root or with CAP_PERFMON)",
                ),
                Target::Cpu(_) => ("", ""),
            };
            Error::new(
                ErrorKind::Sampling,
                format!(
                    "out of file descriptors opening perf events{each} at {target}: raise the \
                     limit with `ulimit -n` (jvmperf raises its soft limit to the hard \
                     one){or_per_cpu}"
                ),
            )
        }
        Some(libc::ENOMEM) => Error::new(ErrorKind::Sampling, memory_hint(&target.to_string(), e)),
        Some(libc::EINVAL) => {
            let rate = max_sample_rate()
                .map(|m| format!(" (kernel.perf_event_max_sample_rate={m})"))
                .unwrap_or_default();
            Error::new(
                ErrorKind::Sampling,
                format!(
                    "perf_event_open on {target} rejected the event: {e}; check the frequency \
                     {} Hz{rate} and the stack size {}",
                    config.frequency_hz, config.stack_size
                ),
            )
        }
        _ => Error::new(
            ErrorKind::Sampling,
            format!("perf_event_open on {target} failed: {e}"),
        ),
    }
}

/// A one-line error for a failed per-CPU `perf_event_open`, naming the fix where there is one.
pub(super) fn cpu_open_error(e: &io::Error, cpu: u32, config: &SamplerConfig) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => Error::new(
            ErrorKind::Permission,
            format!(
                "per-CPU perf events denied ({}): run as root or with CAP_PERFMON, or `sysctl \
                 kernel.perf_event_paranoid=0`, or sample per thread (--sampling per-thread)",
                privilege()
            ),
        ),
        _ => open_error(e, Target::Cpu(cpu), config),
    }
}

/// What this process may do with perf events, for messages: the paranoid level and the
/// capabilities that lift it.
pub(super) fn privilege() -> String {
    let paranoid = read_sysctl("perf_event_paranoid")
        .map(|v| format!("kernel.perf_event_paranoid={v}"))
        .unwrap_or_else(|| "kernel.perf_event_paranoid".to_string());
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    let caps = procfs::process::Process::myself()
        .and_then(|me| me.status())
        .map_or(0, |s| s.capeff);
    let has = |cap: u32| caps & (1 << cap) != 0;
    let cap = if has(CAP_PERFMON) || has(CAP_SYS_ADMIN) {
        "with CAP_PERFMON"
    } else {
        "without CAP_PERFMON"
    };
    format!("{paranoid}, {cap}")
}

/// A one-line error for a ring buffer that could not be mapped, for `what` ("thread 42").
pub(super) fn mmap_error(e: &io::Error, what: &str, bytes: usize) -> Error {
    Error::new(
        ErrorKind::Sampling,
        format!("{} ({} KiB buffer)", memory_hint(what, e), bytes / 1024),
    )
}

fn memory_hint(what: &str, e: &io::Error) -> String {
    format!(
        "cannot lock perf ring-buffer memory for {what}: {e}; raise \
         `sysctl kernel.perf_event_mlock_kb` or RLIMIT_MEMLOCK (`ulimit -l`), run as root, or \
         lower the stack size or frequency"
    )
}

#[cfg(test)]
mod tests {
    use super::super::Uprobe;
    use super::*;

    fn error_for(errno: i32) -> Error {
        open_error(
            &io::Error::from_raw_os_error(errno),
            Target::Thread(42),
            &SamplerConfig::default(),
        )
    }

    #[test]
    fn errors_name_their_fix() {
        let e = error_for(libc::EACCES);
        assert_eq!(e.kind, ErrorKind::Permission);
        assert!(e.message.contains("perf_event_paranoid") && e.message.contains("CAP_PERFMON"));
        assert_eq!(error_for(libc::EPERM).kind, ErrorKind::Permission);
        for errno in [libc::ENOENT, libc::ENODEV, libc::EOPNOTSUPP] {
            assert_eq!(error_for(errno).kind, ErrorKind::Sampling);
        }
        assert!(error_for(libc::EMFILE).message.contains("ulimit -n"));
        assert!(error_for(libc::ENOMEM)
            .message
            .contains("perf_event_mlock_kb"));
        let mmap = mmap_error(
            &io::Error::from_raw_os_error(libc::EPERM),
            "thread 42",
            1 << 20,
        );
        assert!(mmap.message.contains("RLIMIT_MEMLOCK") && mmap.message.contains("1024 KiB"));
        assert!(!error_for(libc::EINVAL).message.contains('\n'));
    }

    #[test]
    fn per_cpu_errors_name_the_cpu_and_advise_no_mode_already_in_use() {
        let config = SamplerConfig::default();
        for errno in [libc::EMFILE, libc::ENOMEM, libc::EINVAL, libc::ENOENT] {
            let e = cpu_open_error(&io::Error::from_raw_os_error(errno), 3, &config);
            assert!(e.message.contains("CPU 3"), "{}", e.message);
            assert!(!e.message.contains("thread"), "{}", e.message);
            assert!(!e.message.contains("sample per CPU"), "{}", e.message);
        }
    }

    #[test]
    fn an_open_failing_for_another_reason_leaves_the_attributes_as_they_were() {
        let mut attr = event_attr(&SamplerConfig::default());
        attr.set_disabled(1);
        // The kernel rejects a stack size that is not a multiple of 8 with EINVAL, with or
        // without the lost-sample count.
        attr.sample_stack_user = 1001;
        let wanted = attr.read_format;
        assert!(open(&mut attr, 0, 0, -1).is_err());
        assert_eq!(attr.read_format, wanted);
        assert_eq!(attr.exclude_kernel(), 0);
    }

    #[test]
    fn a_uprobe_samples_registers_and_stack_at_the_function_in_the_file() {
        let probes = Uprobes {
            path: std::sync::Arc::new(std::ffi::CString::new("/lib/libjvm.so").unwrap()),
            probes: vec![
                Uprobe {
                    offset: 0x3bc550,
                    on_return: false,
                    prompt: false,
                },
                Uprobe {
                    offset: 0x3bc670,
                    on_return: false,
                    prompt: true,
                },
                Uprobe {
                    offset: 0x3bc670,
                    on_return: true,
                    prompt: false,
                },
            ],
            period: 3,
        };
        let config = SamplerConfig::default();
        let attr = uprobe_attr(&config, 8, &probes, 1);
        assert_eq!(attr.type_, 8);
        assert_eq!(attr.config, 0, "an entry probe, not a return probe");
        assert_eq!(attr.config1, probes.path.as_ptr() as u64);
        assert_eq!(attr.config2, 0x3bc670);
        assert_eq!(attr.sample_period, 3);
        assert_eq!(attr.freq(), 0);
        assert_eq!(attr.sample_type, sample_type(&config));
        assert_ne!(attr.sample_type & u64::from(sys::PERF_SAMPLE_STACK_USER), 0);
        // The allocated class is the first argument (rdi) and the bytes the third (rdx):
        // perf register bits 5 and 3 (arch/x86/include/uapi/asm/perf_regs.h).
        assert_ne!(attr.sample_regs_user & (1 << 5), 0);
        assert_ne!(attr.sample_regs_user & (1 << 3), 0);
        assert_eq!(attr.sample_stack_user, config.stack_size);
        assert_eq!((attr.watermark(), attr.wakeup_events), (0, 1), "prompt");
        let first = uprobe_attr(&config, 8, &probes, 0);
        assert_eq!(first.watermark(), 1, "woken by the ring's fill level");
        assert_eq!(attr.clockid, libc::CLOCK_MONOTONIC);
        assert_eq!(attr.use_clockid(), 1);
        let ret = uprobe_attr(&config, 8, &probes, 2);
        assert_eq!(ret.config, 1, "a return probe");
        assert_eq!(ret.config2, 0x3bc670);
        assert_eq!(ret.sample_type, attr.sample_type, "one layout in the ring");
        assert_eq!(ret.sample_stack_user, 0);
    }

    #[test]
    fn register_mask_skips_segment_registers() {
        assert_eq!(
            REGS_MASK.count_ones() as usize,
            super::super::record::REG_COUNT
        );
        assert_eq!(REGS_MASK & (0xf << 12), 0);
    }
}
