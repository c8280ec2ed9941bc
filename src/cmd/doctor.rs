//! `jvmperf doctor -p PID`: checks, without changing anything, whether jvmperf can profile a JVM, and
//! names the fix for every check that fails.

use crate::attach;
use crate::error::{Error, ErrorKind, Result};
use crate::hotspot::HotSpot;
use crate::native::NativeUnwinder;
use crate::process::TargetProcess;
use crate::sampler::{Host, Sampler, SamplerConfig, Sampling};
use std::fs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub verdict: Verdict,
    pub what: &'static str,
    pub detail: String,
}

fn check(verdict: Verdict, what: &'static str, detail: impl Into<String>) -> Check {
    Check {
        verdict,
        what,
        detail: detail.into(),
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Effective capabilities of this process (`CapEff`).
fn own_capabilities() -> u64 {
    procfs::process::Process::myself()
        .and_then(|me| me.status())
        .map_or(0, |status| status.capeff)
}

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_NICE: u32 = 23;
const CAP_PERFMON: u32 = 38;

fn has_cap(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// Which sampling strategy `record` would use on this JVM, why, and what the other would cost or
/// need.
fn sampling_check(pid: u32) -> (Check, Option<Sampling>) {
    match Sampler::choose(pid, &SamplerConfig::default()) {
        Ok(strategy) => (
            check(Verdict::Ok, "sampling", strategy.describe()),
            Some(strategy.kind),
        ),
        Err(e) => (check(Verdict::Fail, "sampling", e.message), None),
    }
}

/// Locked memory for ring buffers, one per CPU or one per thread, as the sampler would size them
/// at the default -F and --stack-size within what the kernel lets us lock.
fn ring_buffer_check(threads: usize, sampling: Option<Sampling>) -> Check {
    let host = Host::current();
    let budget = host.budget();
    if sampling == Some(Sampling::PerCpu) {
        let cpus = host.online_cpus;
        let plan = SamplerConfig::default().ring_plan(cpus, budget.clone());
        let pages = plan.pages_per_cpu(cpus, budget.pages);
        let verdict = if pages < plan.cpu_pages {
            Verdict::Warn
        } else {
            Verdict::Ok
        };
        return check(
            verdict,
            "locked memory",
            format!(
                "{cpus} CPUs get ring buffers of {} KiB each ({} ms of a busy CPU's samples, {} ms \
                 wanted) at the default -F and --stack-size, within {}",
                pages * plan.page_size / 1024,
                plan.hold_ms(pages),
                plan.hold_ms(plan.cpu_pages),
                budget.source
            ),
        );
    }
    let plan = SamplerConfig::default().ring_plan(threads, budget.clone());
    let kib = |pages: usize| pages * plan.page_size / 1024;
    let at_least = threads * (plan.min_pages + 1);
    if budget.pages < at_least {
        return check(
            Verdict::Fail,
            "locked memory",
            format!(
                "{threads} threads need at least {} KiB of ring buffers, but {} allows {} KiB \
                 (fix: sysctl kernel.perf_event_mlock_kb={}, ulimit -l, or run as root)",
                kib(at_least),
                budget.source,
                kib(budget.pages),
                kib(at_least).div_ceil(Host::current().online_cpus),
            ),
        );
    }
    match plan.note(budget.pages, threads) {
        Some(note) => check(Verdict::Warn, "locked memory", note),
        None => check(
            Verdict::Ok,
            "locked memory",
            format!(
                "{threads} threads get ring buffers of {} KiB, {} KiB once busy, at the default -F \
                 and --stack-size, within {}",
                kib(plan.base_pages),
                kib(plan.busy_pages),
                budget.source
            ),
        ),
    }
}

fn perf_checks(process: &TargetProcess, out: &mut Vec<Check>) {
    let caps = own_capabilities();
    let privileged = has_cap(caps, CAP_PERFMON) || has_cap(caps, CAP_SYS_ADMIN);
    let paranoid: Option<i32> =
        read_trimmed("/proc/sys/kernel/perf_event_paranoid").and_then(|s| s.parse().ok());
    out.push(match paranoid {
        None => check(Verdict::Fail, "perf events", "/proc/sys/kernel/perf_event_paranoid is missing: the kernel has no perf events (CONFIG_PERF_EVENTS)"),
        Some(p) if p > 2 && !privileged => check(
            Verdict::Fail,
            "perf events",
            format!("perf_event_paranoid is {p}: unprivileged profiling is disabled (fix: sysctl kernel.perf_event_paranoid=2, or run with CAP_PERFMON)"),
        ),
        Some(p) if p > 1 && !privileged => check(
            Verdict::Warn,
            "perf events",
            format!("perf_event_paranoid is {p}: user-space stacks only; --kernel needs kernel.perf_event_paranoid=1 or CAP_PERFMON"),
        ),
        Some(p) => check(Verdict::Ok, "perf events", format!("perf_event_paranoid is {p}{}", if privileged { " (and we have CAP_PERFMON/CAP_SYS_ADMIN)" } else { "" })),
    });
    let (sampling, kind) = sampling_check(process.pid);
    out.push(sampling);
    out.push(ring_buffer_check(process.threads().len(), kind));
    out.push(match read_trimmed("/proc/sys/kernel/kptr_restrict").as_deref() {
        Some("0") => check(Verdict::Ok, "kernel symbols", "kptr_restrict is 0"),
        Some(v) if nix::unistd::geteuid().is_root() && v == "1" => check(Verdict::Ok, "kernel symbols", "kptr_restrict is 1 (root can read them)"),
        Some(v) => check(Verdict::Warn, "kernel symbols", format!("kptr_restrict is {v}: kernel frames will be [unknown] (fix: sysctl kernel.kptr_restrict=0)")),
        None => check(Verdict::Warn, "kernel symbols", "no /proc/sys/kernel/kptr_restrict"),
    });
}

fn ptrace_checks(process: &TargetProcess, out: &mut Vec<Check>) {
    let scope = read_trimmed("/proc/sys/kernel/yama/ptrace_scope");
    let caps = own_capabilities();
    let same_user = nix::unistd::geteuid().as_raw() == process.euid;
    let detail = match scope.as_deref() {
        None | Some("0") => None,
        Some("1") if has_cap(caps, CAP_SYS_PTRACE) => None,
        Some("1") => Some("Yama ptrace_scope is 1: only ancestors may read the JVM's memory (fix: run as root or with CAP_SYS_PTRACE, or sysctl kernel.yama.ptrace_scope=0)"),
        Some("2") if has_cap(caps, CAP_SYS_PTRACE) => None,
        Some("2") => Some("Yama ptrace_scope is 2: only CAP_SYS_PTRACE may read other processes' memory (fix: run with CAP_SYS_PTRACE)"),
        Some(_) => Some("Yama ptrace_scope is 3: ptrace is disabled until reboot"),
    };
    out.push(match detail {
        Some(d) => check(Verdict::Fail, "ptrace", d),
        None if !same_user && !nix::unistd::geteuid().is_root() => check(
            Verdict::Fail,
            "ptrace",
            format!(
                "the JVM runs as uid {}, we as {}: run as that user or root",
                process.euid,
                nix::unistd::geteuid()
            ),
        ),
        None => check(
            Verdict::Ok,
            "ptrace",
            format!(
                "Yama ptrace_scope {}",
                scope.unwrap_or_else(|| "absent".into())
            ),
        ),
    });
}

fn namespace_checks(process: &TargetProcess, out: &mut Vec<Check>) {
    let ns = |pid: &str, kind: &str| fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok();
    let pid = process.pid.to_string();
    if ns(&pid, "mnt").is_none() {
        out.push(check(
            Verdict::Warn,
            "namespaces",
            format!("cannot read /proc/{pid}/ns (run as the JVM's user or root to tell)"),
        ));
        return;
    }
    let differs: Vec<&str> = ["mnt", "pid", "user", "time"]
        .into_iter()
        .filter(|k| ns("self", k) != ns(&pid, k))
        .collect();
    out.push(if differs.is_empty() {
        check(Verdict::Ok, "namespaces", "the JVM shares our mount, pid, user and time namespaces")
    } else {
        check(
            Verdict::Ok,
            "namespaces",
            format!(
                "the JVM is in its own {} namespace(s) (pid {} inside); jvmperf reaches it through /proc/{}/root",
                differs.join(", "),
                process.nspid,
                process.pid
            ),
        )
    });
}

fn jvm_checks(process: &TargetProcess, out: &mut Vec<Check>) -> Option<HotSpot> {
    let jvm = match HotSpot::open(process) {
        Ok(j) => j,
        Err(e) => {
            out.push(check(Verdict::Fail, "HotSpot", e.message));
            return None;
        }
    };
    let release = jvm.vm_release().unwrap_or_else(|| "unknown version".into());
    out.push(check(
        Verdict::Ok,
        "HotSpot",
        format!("HotSpot JVM {release}, libjvm at {}", jvm.libjvm.path),
    ));
    let flags = attach::read_attach_flags(&jvm);
    let usable = attach::check_flags(process, &flags)
        .and_then(|()| attach::foreign_socket(process).map_or(Ok(()), Err));
    out.push(match usable {
        Err(e) => check(
            Verdict::Fail,
            "attach",
            format!(
                "{}; `record`, `top` and `dump` work without the agent (frames named from the \
                 JVM's own tables), `jitmap` and `daemon` need it",
                e.message
            ),
        ),
        Ok(()) => {
            let socket = process
                .path_in_root(std::path::Path::new(&format!("/tmp/.java_pid{}", process.nspid)))
                .exists();
            let reduced = jvm.read_bool_flag("ReduceSignalUsage") == Some(true);
            if !socket && !process.catches_signal(3) {
                check(Verdict::Fail, "attach", format!("the JVM does not handle SIGQUIT{} and has no attach socket: restart it without -Xrs or with -XX:+StartAttachListener", if reduced { " (-Xrs)" } else { "" }))
            } else if socket {
                check(Verdict::Ok, "attach", "the Attach Listener is already running")
            } else {
                check(Verdict::Ok, "attach", "attach possible (the Attach Listener starts on SIGQUIT with a trigger file)")
            }
        }
    });
    if flags.enable_dynamic_agent_loading == Some(true) {
        out.push(check(Verdict::Ok, "agent loading", "EnableDynamicAgentLoading is on (JDK 21+ prints a one-time warning on the JVM's stderr when the shim loads; -XX:+EnableDynamicAgentLoading at start silences it)"));
    }
    Some(jvm)
}

fn debug_info_checks(process: &TargetProcess, out: &mut Vec<Check>) {
    let Ok(native) = NativeUnwinder::new(process) else {
        return;
    };
    let Some(libjvm) = native
        .modules()
        .all()
        .iter()
        .find(|m| m.name == "libjvm.so")
    else {
        return;
    };
    let debug_file = crate::native::separate_debug_file(libjvm);
    out.push(match &debug_file {
        Some(path) => check(Verdict::Ok, "libjvm debug info", format!("{}", path.display())),
        None if libjvm.build_id_hex().is_some() => check(
            Verdict::Warn,
            "libjvm debug info",
            format!(
                "none for build-id {}: native HotSpot frames get exported names only (fix on Debian: apt-get install openjdk-<N>-dbg matching the JDK's exact version)",
                libjvm.build_id_hex().unwrap_or_default()
            ),
        ),
        None => check(Verdict::Warn, "libjvm debug info", "libjvm has no build-id and no debug info"),
    });
    if let (Some(_), Some(build_id)) = (debug_file, libjvm.build_id_hex()) {
        out.push(symbol_cache_check(&build_id));
    }
}

fn symbol_cache_check(libjvm_build_id: &str) -> Check {
    let dir = match crate::native::symcache::CacheDir::default_location() {
        Ok(dir) => dir,
        Err(why) => {
            return check(
                Verdict::Warn,
                "symbol cache",
                format!(
                "{why}: libjvm's frames get symbol-table names only (no file:line, no inlined frames)"
            ),
            )
        }
    };
    match dir.cached_size(libjvm_build_id) {
        Some(bytes) => check(
            Verdict::Ok,
            "symbol cache",
            format!(
                "libjvm's is in {} ({} MB)",
                dir.path().display(),
                bytes >> 20
            ),
        ),
        None => check(
            Verdict::Ok,
            "symbol cache",
            format!(
                "libjvm's is not in {} yet: the first recording builds it once (~5 CPU-s, ~700 MB in a child process)",
                dir.path().display()
            ),
        ),
    }
}

pub fn run(pid: u32) -> Result<()> {
    let process = TargetProcess::open(pid)?;
    let mut checks = vec![check(
        Verdict::Ok,
        "process",
        format!("pid {pid} ({}) runs as uid {}", process.name, process.euid),
    )];
    ptrace_checks(&process, &mut checks);
    let jvm = jvm_checks(&process, &mut checks);
    perf_checks(&process, &mut checks);
    let may_raise = nix::unistd::geteuid().is_root() || has_cap(own_capabilities(), CAP_SYS_NICE);
    let (ok, detail) = crate::priority::describe(pid, may_raise);
    checks.push(check(
        if ok { Verdict::Ok } else { Verdict::Warn },
        "priority",
        detail,
    ));
    namespace_checks(&process, &mut checks);
    if jvm.is_some() {
        debug_info_checks(&process, &mut checks);
    }
    for c in &checks {
        let tag = match c.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        println!("{tag} {:<18} {}", c.what, c.detail);
    }
    let failed: Vec<&Check> = checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(Error::new(
            if first.what == "HotSpot" {
                ErrorKind::NotJvm
            } else if first.what == "attach" {
                ErrorKind::Attach
            } else if first.what == "locked memory" {
                ErrorKind::Sampling
            } else {
                ErrorKind::Permission
            },
            format!(
                "{} check(s) failed; first: {}: {}",
                failed.len(),
                first.what,
                first.detail
            ),
        )),
    }
}
