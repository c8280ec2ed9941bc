//! Tests against real perf events (software cpu-clock) on this machine.

use super::*;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// A child process spinning in a shell loop, killed on drop.
struct Spinner(Child);

impl Spinner {
    fn start() -> Spinner {
        Spinner::shell("while :; do :; done")
    }
    /// `sh -c script`, once the program that runs it (`sh`, or what the script `exec`s) has
    /// started: a sample taken while the child is still exec'ing has no user stack to copy (its
    /// registers point into the old image).
    fn shell(script: &str) -> Spinner {
        let child = Spinner(
            Command::new("sh")
                .args(["-c", script])
                .spawn()
                .expect("spawn sh"),
        );
        let program = script
            .strip_prefix("exec ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("sh");
        let comm = format!("/proc/{}/comm", child.pid());
        let start = Instant::now();
        while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != program) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{program} did not start"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        child
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// utime + stime of a process, in clock ticks (1/100 s).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A thread of the test process spinning until dropped.
struct SpinThread {
    tid: u32,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl SpinThread {
    fn start() -> SpinThread {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let mut x = 0u64;
            while !flag.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        });
        SpinThread {
            tid: rx.recv().unwrap(),
            stop,
            handle: Some(handle),
        }
    }
    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap();
    }
}

impl Drop for SpinThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// An owned copy of the parts of a sample the tests check.
#[derive(Debug, Clone)]
struct Seen {
    pid: u32,
    tid: u32,
    time: u64,
    regs: Regs,
    stack_len: usize,
}

/// Samples until `enough` holds of them (or 20 s pass: a loaded machine may give the sampled
/// thread little CPU, and cpu-clock samples follow CPU time, not wall time).
fn collect_until(sampler: &mut Sampler, enough: impl Fn(&[Seen]) -> bool) -> Vec<Seen> {
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_secs(20);
    while !enough(&seen) && Instant::now() < end {
        sampler
            .poll(Duration::from_millis(50), &mut |s| {
                seen.push(Seen {
                    pid: s.pid,
                    tid: s.tid,
                    time: s.time,
                    regs: s.regs,
                    stack_len: s.stack.len(),
                })
            })
            .unwrap();
    }
    seen
}

/// Per-thread sampling: most tests here are of its thread bookkeeping and rings.
fn config(frequency_hz: u64, stack_size: u32) -> SamplerConfig {
    SamplerConfig {
        frequency_hz,
        stack_size,
        sampling: Sampling::PerThread,
        ..SamplerConfig::default()
    }
}

/// Whether `sampler` has an open event on thread `tid`.
fn samples_thread(sampler: &Sampler, tid: u32) -> bool {
    sampler.thread_ring_bytes(tid).is_some()
}

fn mapping_of(pid: u32, addr: u64) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines()
        .find(|line| {
            let range = line.split(' ').next().unwrap_or("");
            let Some((lo, hi)) = range.split_once('-') else {
                return false;
            };
            let lo = u64::from_str_radix(lo, 16).unwrap_or(u64::MAX);
            let hi = u64::from_str_radix(hi, 16).unwrap_or(0);
            (lo..hi).contains(&addr)
        })
        .map(str::to_string)
}

#[test]
fn samples_a_busy_child_with_registers_stack_and_monotonic_time() {
    let child = Spinner::start();
    let before = monotonic_ns();
    let mut sampler = Sampler::open(child.pid(), &config(999, 8192)).unwrap();
    let seen = collect_until(&mut sampler, |seen| seen.len() >= 100);
    sampler.disable();
    let mut rest = Vec::new();
    sampler
        .poll(Duration::ZERO, &mut |s| rest.push(s.time))
        .unwrap();
    let after = monotonic_ns();

    let stats = sampler.stats();
    assert!(seen.len() >= 100, "only {} samples: {stats:?}", seen.len());
    assert_eq!(stats.samples as usize, seen.len() + rest.len());
    assert_eq!((stats.threads_open, stats.threads_failed), (1, 0));
    assert_eq!(stats.malformed, 0);
    for s in &seen {
        assert_eq!((s.pid, s.tid), (child.pid(), child.pid()));
        assert!(
            (before..=after).contains(&s.time),
            "time {} not in [{before}, {after}]",
            s.time
        );
        assert_eq!(s.regs.abi, 2, "64-bit user registers");
        assert!(s.regs.ip != 0 && s.regs.sp != 0, "{:?}", s.regs);
        assert!(
            s.stack_len > 0 && s.stack_len <= 8192,
            "stack {}",
            s.stack_len
        );
    }
    assert!(
        seen.windows(2).all(|w| w[0].time <= w[1].time),
        "one thread's samples are in order"
    );
    // The registers are the child's: SP in its stack, IP in an executable mapping.
    let last = seen.last().unwrap();
    let stack_map = mapping_of(child.pid(), last.regs.sp).expect("sp is mapped");
    assert!(stack_map.ends_with("[stack]"), "{stack_map}");
    let code_map = mapping_of(child.pid(), last.regs.ip).expect("ip is mapped");
    assert!(
        code_map.split(' ').nth(1).unwrap().contains('x'),
        "{code_map}"
    );
}

#[test]
fn rescan_picks_up_a_new_thread_and_its_exit_is_cleaned_up() {
    let pid = std::process::id();
    let mut sampler = Sampler::open(pid, &config(499, 1024)).unwrap();
    let spinner = SpinThread::start();
    let tid = spinner.tid;
    assert!(!samples_thread(&sampler, tid));
    assert!(sampler.rescan_threads() >= 1);
    assert!(samples_thread(&sampler, tid));
    assert!(
        !sampler.add_thread(tid).unwrap(),
        "add_thread is idempotent"
    );

    let seen = collect_until(&mut sampler, |seen| seen.iter().any(|s| s.tid == tid));
    let mine: Vec<_> = seen.iter().filter(|s| s.tid == tid).collect();
    assert!(
        !mine.is_empty(),
        "no samples for the new thread among {}",
        seen.len()
    );
    assert!(mine.iter().all(|s| s.pid == pid && s.regs.sp != 0));

    spinner.stop();
    let deadline = Instant::now() + Duration::from_secs(5);
    while samples_thread(&sampler, tid) && Instant::now() < deadline {
        sampler
            .poll(Duration::from_millis(100), &mut |_| {})
            .unwrap();
    }
    assert!(!samples_thread(&sampler, tid), "exited thread still open");
    assert!(sampler.stats().threads_exited >= 1);
}

#[test]
fn a_tiny_ring_buffer_at_a_high_rate_loses_samples_without_crashing() {
    let child = Spinner::start();
    let cfg = SamplerConfig {
        frequency_hz: 10_000,
        stack_size: 2048,
        ring_pages: Some(2),
        ..config(10_000, 2048)
    };
    let mut sampler = Sampler::open(child.pid(), &cfg).unwrap();
    assert_eq!(
        sampler.thread_ring_bytes(child.pid()),
        Some(2 * ring::page_size())
    );
    // At 10 kHz, 50 ms of the spinner's CPU time is hundreds of samples: far more than two pages
    // hold. Waiting for CPU time, not wall time, keeps this true on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(20);
    while cpu_ticks(child.pid()) < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut samples = 0u64;
    for _ in 0..3 {
        sampler
            .poll(Duration::from_millis(10), &mut |s| {
                assert!(s.stack.len() <= 2048);
                samples += 1;
            })
            .unwrap();
    }
    let stats = sampler.stats();
    assert!(samples >= 1, "{stats:?}");
    assert!(stats.lost > 0, "expected LOST records: {stats:?}");
    assert_eq!(stats.malformed, 0);
}

#[test]
fn kernel_callchains_when_requested() {
    let child = Spinner::start();
    let cfg = SamplerConfig {
        kernel_callchain: true,
        ..config(999, 1024)
    };
    let mut sampler = match Sampler::open(child.pid(), &cfg) {
        Err(e) if e.kind == ErrorKind::Permission => {
            eprintln!("skipped: kernel callchains not permitted here: {e}");
            return;
        }
        other => other.unwrap(),
    };
    let mut with_kernel = 0;
    let mut total = 0;
    let end = Instant::now() + Duration::from_millis(500);
    while Instant::now() < end {
        sampler
            .poll(Duration::from_millis(50), &mut |s| {
                total += 1;
                if !s.kernel_ips.is_empty() {
                    with_kernel += 1;
                    assert!(s
                        .kernel_ips
                        .iter()
                        .all(|&ip| ip < perf_event_open_sys::bindings::PERF_CONTEXT_MAX));
                }
            })
            .unwrap();
    }
    // A shell loop runs in user mode: kernel frames are rare, but samples must still flow.
    assert!(total > 0);
    eprintln!("kernel callchains: {with_kernel} of {total} samples");
}

#[test]
fn time_in_system_calls_is_sampled_and_marked() {
    // dd copying 1 MiB blocks from /dev/zero spends nearly all its time in read(2)/write(2).
    let child = Spinner::shell("exec dd if=/dev/zero of=/dev/null bs=1M count=100000000");
    let mut sampler = Sampler::open(child.pid(), &config(999, 512)).unwrap();
    let (mut in_kernel, mut total) = (0, 0);
    let end = Instant::now() + Duration::from_millis(700);
    while Instant::now() < end {
        sampler
            .poll(Duration::from_millis(50), &mut |s| {
                total += 1;
                in_kernel += u32::from(s.in_kernel);
            })
            .unwrap();
    }
    assert!(total > 50, "only {total} samples");
    if sampler.samples_kernel_time() {
        assert!(
            2 * in_kernel > total,
            "{in_kernel} of {total} samples in the kernel"
        );
    } else {
        eprintln!("kernel time not permitted here: perf_event_paranoid");
        assert_eq!(in_kernel, 0);
    }
}

#[test]
fn bad_configs_and_missing_processes_are_reported() {
    let usage = |cfg: SamplerConfig| Sampler::open(std::process::id(), &cfg).err().unwrap().kind;
    assert_eq!(usage(config(0, 8192)), ErrorKind::Usage);
    assert_eq!(usage(config(99, 100)), ErrorKind::Usage);
    assert_eq!(usage(config(99, MAX_STACK_SIZE + 8)), ErrorKind::Usage);
    assert_eq!(usage(config(u64::MAX, 8192)), ErrorKind::Usage);
    let gone = Sampler::open(u32::MAX - 1, &SamplerConfig::default())
        .err()
        .unwrap();
    assert_eq!(gone.kind, ErrorKind::NoProcess);
}

fn plan(hz: u64, stack: u32, threads: usize, budget: Budget) -> RingPlan {
    let available = budget.pages;
    config(hz, stack).ring_plan_with(threads, budget, available)
}

fn kib(plan: &RingPlan, pages: usize) -> usize {
    pages * plan.page_size / 1024
}

#[test]
fn ring_sizes_follow_rate_and_stack_size() {
    // (Hz, stack) → (KiB of a new thread's ring, KiB of a busy thread's ring).
    let sizes = |hz, stack| {
        let p = plan(hz, stack, 20, Budget::unlimited());
        (kib(&p, p.base_pages), kib(&p, p.busy_pages))
    };
    assert_eq!(sizes(99, 32768), (256, 1024));
    assert_eq!(sizes(999, 32768), (2048, 8192));
    assert_eq!(sizes(999, 8192), (512, 2048));
    assert_eq!(sizes(99, 65528), (512, 2048));
    // Capped: 16 MiB is ~100 ms at 5 kHz with 32 KiB stacks.
    assert_eq!(sizes(4999, 32768), (2048, 16384));
    assert_eq!(sizes(1, 0), (4, 4));
    for (hz, stack) in [(99, 32768), (999, 32768), (999, 8192), (99, 0), (499, 1024)] {
        let p = plan(hz, stack, 20, Budget::unlimited());
        assert!(
            p.hold_ms(p.busy_pages) >= budget::BUSY_HOLD_MS,
            "{hz} Hz, {stack}: {p:?}"
        );
        assert!(p.hold_ms(p.base_pages) >= budget::BASE_HOLD_MS, "{p:?}");
        assert_eq!(p.note(usize::MAX, 20), None);
    }
    // Kernel callchains make records larger.
    let with_kernel = SamplerConfig {
        kernel_callchain: true,
        ..config(999, 8192)
    }
    .ring_plan_with(1, Budget::unlimited(), usize::MAX);
    assert_eq!(kib(&with_kernel, with_kernel.busy_pages), 4096);
    // An explicit size is taken as it is, for every ring.
    let fixed = SamplerConfig {
        ring_pages: Some(3),
        ..config(999, 32768)
    }
    .ring_plan_with(20, Budget::unlimited(), usize::MAX);
    assert_eq!((fixed.base_pages, fixed.busy_pages), (4, 4));
}

/// A 2-CPU host with the kernel's default perf_event_mlock_kb and an 8 MiB RLIMIT_MEMLOCK.
fn unprivileged_host() -> Host {
    Host {
        page_size: 4096,
        perf_event_mlock_kb: 516,
        online_cpus: 2,
        rlimit_memlock: 8 << 20,
        pinned_pages: 0,
        cap_ipc_lock: false,
        perf_event_paranoid: 2,
        mem_available: Some(16 << 30),
    }
}

#[test]
fn the_budget_is_what_the_kernel_lets_us_lock() {
    let host = unprivileged_host();
    let budget = host.budget();
    // 516 KiB per CPU for the user, then RLIMIT_MEMLOCK.
    assert_eq!(budget.pages, 129 * 2 + 2048);
    assert!(budget.kernel_limited);
    assert!(budget.source.contains("perf_event_mlock_kb=516 × 2 CPUs"));
    assert!(budget.source.contains("RLIMIT_MEMLOCK 8192 KiB"));
    // Pages the process pinned already count against RLIMIT_MEMLOCK.
    let pinned = Host {
        pinned_pages: 48,
        ..host
    };
    assert_eq!(pinned.budget().pages, 258 + 2000);
    let unlimited_rlimit = Host {
        rlimit_memlock: u64::MAX,
        ..host
    };
    assert!(unlimited_rlimit.budget().pages > 1 << 40);
    // CAP_IPC_LOCK (root) and perf_event_paranoid -1 lift the kernel's limits: our own
    // ceiling is 256 MiB, or 1/32 of the available memory on a small host.
    for privileged in [
        Host {
            cap_ipc_lock: true,
            ..host
        },
        Host {
            perf_event_paranoid: -1,
            ..host
        },
    ] {
        let budget = privileged.budget();
        assert_eq!(budget.pages, 65536, "{budget:?}");
        assert!(!budget.kernel_limited);
    }
    let small = Host {
        cap_ipc_lock: true,
        mem_available: Some(2 << 30),
        ..host
    };
    assert_eq!(small.budget().pages, (64 << 20) / 4096);
}

#[test]
fn rings_shrink_to_the_budget_and_say_why() {
    let budget = unprivileged_host().budget();
    let total = budget.pages;
    // 22 threads at 999 Hz with 32 KiB stacks want 2 MiB each to begin with, 8 MiB when busy;
    // half of the 9 MiB budget is shared by 22 + 5 planned threads: 128 KiB each.
    let p = plan(999, 32768, 22, budget);
    assert_eq!(p.threads, 27);
    assert_eq!(kib(&p, p.base_pages), 128);
    assert!(p.threads * (p.base_pages + 1) <= total / 2);
    let mut available = total - 22 * (p.base_pages + 1);
    // Busy threads grow into the other half, each into at most half of what is left.
    let first = p.pages_for_busy(p.base_pages, available, 22);
    assert_eq!(kib(&p, first), 2048);
    available -= first + 1;
    let second = p.pages_for_busy(p.base_pages, available, 22);
    assert_eq!(kib(&p, second), 1024);
    // Nothing left: the ring stays as it is.
    assert_eq!(p.pages_for_busy(p.base_pages, 100, 22), p.base_pages);
    let note = p.note(total - 22 * (p.base_pages + 1), 22).expect("a note");
    for part in [
        "2048 KiB for a busy thread",
        "128 KiB for the others",
        "63 and 3 ms",
        "at 999 Hz",
        "perf_event_mlock_kb=516",
        "~27 threads",
        "ulimit -l",
    ] {
        assert!(note.contains(part), "{part:?} not in {note}");
    }
    assert!(!note.contains('\n'));
    // At 99 Hz the same budget leaves room for busy rings as large as wanted.
    let p = plan(99, 32768, 22, unprivileged_host().budget());
    let available = total - 22 * (p.base_pages + 1);
    assert_eq!(p.pages_for_busy(p.base_pages, available, 22), p.busy_pages);
}

#[test]
fn threads_past_the_plan_get_smaller_rings_not_none() {
    let budget = unprivileged_host().budget();
    let mut p = plan(99, 32768, 20, budget.clone());
    let mut available = budget.pages;
    let mut sizes = Vec::new();
    for _ in 0..200 {
        let pages = p.pages_for_new(available);
        if pages + 1 > available {
            break;
        }
        p.mapped(pages, pages, false);
        available -= pages + 1;
        sizes.push(pages);
    }
    // The planned threads (and more: busy rings have half the budget) get the base size, the
    // next ones smaller and smaller rings, down to one record.
    assert!(sizes[..p.threads].iter().all(|&s| s == p.base_pages));
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
    assert_eq!(*sizes.last().unwrap(), p.min_pages);
    assert!(p.min_pages * p.page_size >= 32768 + 200);
    assert!(sizes.len() > p.threads + 10, "{} rings", sizes.len());
    let note = p.note(available, sizes.len()).expect("a note");
    assert!(note.contains("64 KiB for the others"), "{note}");
}

#[test]
fn a_refused_ring_caps_later_ones() {
    let mut p = plan(999, 32768, 4, unprivileged_host().budget());
    assert!(!p.refused);
    // The kernel took only 256 KiB where the plan asked for more.
    p.mapped(64, p.base_pages, false);
    assert!(p.refused);
    assert_eq!(p.pages_for_new(usize::MAX), 64);
    let note = p.note(usize::MAX, 4).expect("a note");
    assert!(note.contains("refused"), "{note}");
}

const SPIN_CHILD_ENV: &str = "JVMPERF_TEST_SPIN_CHILD";

fn thread_cpu_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Not a test: the child process of [`a_busy_thread_gets_a_large_ring_and_loses_nothing`]
/// (this test binary, run again). Prints `ready <tid>`, then for each line of stdin spins for
/// that many milliseconds of its own CPU time and prints `spun`.
#[test]
#[ignore]
fn spin_child() {
    use std::io::{BufRead, Write};
    if std::env::var_os(SPIN_CHILD_ENV).is_none() {
        return;
    }
    let mut out = std::io::stdout().lock();
    // SAFETY: gettid has no preconditions.
    writeln!(out, "ready {}", unsafe { libc::gettid() }).unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let ms: u64 = line.unwrap().trim().parse().unwrap();
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < ms * 1_000_000 {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        writeln!(out, "spun").unwrap();
        out.flush().unwrap();
    }
}

/// A child that burns exactly the CPU time asked of it, then idles: what it makes between two
/// drains is known without timing anything.
struct SpinChild {
    child: Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    tid: u32,
}

impl SpinChild {
    fn start() -> SpinChild {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "sampler::tests::spin_child", "--ignored"])
            .args(["--nocapture", "--test-threads", "1", "-q"])
            .env(SPIN_CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the test binary");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let tid = loop {
            let line = lines.next().expect("child output").unwrap();
            if let Some(tid) = line.strip_prefix("ready ") {
                break tid.parse().unwrap();
            }
        };
        SpinChild { child, lines, tid }
    }

    /// Lets the child burn `ms` of CPU time and waits until it has.
    fn spin(&mut self, ms: u64) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{ms}").unwrap();
        stdin.flush().unwrap();
        while self.lines.next().expect("child output").unwrap() != "spun" {}
    }
}

impl Drop for SpinChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_busy_thread_gets_a_large_ring_and_loses_nothing() {
    let mut child = SpinChild::start();
    let mut sampler = Sampler::open(child.child.id(), &config(999, 32768)).unwrap();
    let tid = child.tid;
    let base = sampler.thread_ring_bytes(tid).unwrap();
    assert_eq!(base, sampler.ring_plan().base_pages * ring::page_size());
    let mut times = Vec::new();
    let mut drain = |sampler: &mut Sampler| {
        sampler
            .poll(Duration::ZERO, &mut |s| {
                if s.tid == tid {
                    times.push(s.time);
                }
            })
            .unwrap();
    };
    // A first sample, which sets the thread's event to the full period (until then it samples at
    // up to 32 times the rate: at most 32 samples in this 1 ms, which the first ring holds).
    child.spin(1);
    drain(&mut sampler);
    // 40 ms of samples fill the first ring by more than a quarter: the thread is busy.
    child.spin(40);
    drain(&mut sampler);
    let busy = sampler.thread_ring_bytes(tid).unwrap();
    let plan = sampler.ring_plan().clone();
    assert!(busy > base, "ring not grown: {base} -> {busy}, {plan:?}");
    assert_eq!(sampler.stats().rings_grown, 1);
    // Then more than the first ring holds, with no drain in between: nothing is lost when
    // the busy ring holds it (it does with the planned size, 250 ms at 999 Hz).
    let hold_ms = plan.hold_ms(busy / plan.page_size);
    if busy / plan.page_size == plan.busy_pages {
        assert!(hold_ms >= budget::BUSY_HOLD_MS, "{plan:?}");
        if !plan.budget.kernel_limited {
            assert_eq!(sampler.ring_note(), None);
        }
    }
    let spin = (hold_ms * 4 / 5).min(200);
    assert!(
        spin > plan.hold_ms(base / plan.page_size),
        "the budget gives busy threads too little to test: {plan:?}"
    );
    child.spin(spin);
    drain(&mut sampler);
    // The kernel writes the LOST record for samples a full ring dropped with its next sample.
    child.spin(5);
    drain(&mut sampler);
    let stats = sampler.stats();
    assert_eq!(stats.lost, 0, "{stats:?}");
    // cpu-clock samples once per 1/999 s of the thread's CPU time: ~245 samples in all.
    let expected = (1 + 40 + spin + 5) as usize;
    assert!(
        times.len() * 10 >= expected * 9,
        "{} samples of {expected}: {stats:?}",
        times.len()
    );
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "the thread's samples stay in order across the move to a larger ring"
    );
    assert_eq!(stats.malformed, 0);
}

#[test]
fn sampler_can_move_to_a_collector_thread() {
    fn is_send<T: Send>() {}
    is_send::<Sampler>();
}

/// Drain cost and data rate at ~5 kHz with 16 KiB stacks:
/// `cargo test --release --lib sampler::tests::measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_drain_cost() {
    for touch_stack in [false, true] {
        let child = Spinner::start();
        let mut sampler = Sampler::open(child.pid(), &config(5000, 16384)).unwrap();
        let mut busy = Duration::ZERO;
        let mut checksum = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(20));
            let t = Instant::now();
            sampler
                .poll(Duration::ZERO, &mut |s| {
                    checksum = checksum.wrapping_add(s.regs.ip);
                    if touch_stack {
                        checksum = s
                            .stack
                            .iter()
                            .fold(checksum, |a, &b| a.wrapping_add(b as u64));
                    }
                })
                .unwrap();
            busy += t.elapsed();
        }
        let secs = start.elapsed().as_secs_f64();
        let stats = sampler.stats();
        eprintln!(
            "touch_stack={touch_stack}: {} samples in {secs:.2} s ({:.0}/s), {:.2} µs/sample, \
             {:.1} MB/s, lost {}, throttled {}, ring {} KiB, checksum {checksum:x}",
            stats.samples,
            stats.samples as f64 / secs,
            busy.as_secs_f64() * 1e6 / stats.samples.max(1) as f64,
            stats.bytes as f64 / secs / 1e6,
            stats.lost,
            stats.throttled,
            sampler.ring_plan().base_pages * ring::page_size() / 1024,
        );
    }
}

#[test]
fn drops_no_lost_record_reported_are_counted_once_sampling_stops() {
    let mut child = SpinChild::start();
    // Three records fit: 50 ms at 999 Hz overflow the ring.
    let cfg = SamplerConfig {
        ring_pages: Some(2),
        ..config(999, 2048)
    };
    let mut sampler = Sampler::open(child.child.id(), &cfg).unwrap();
    let mut probe = attr::event_attr(&cfg);
    probe.set_disabled(1);
    attr::open(&mut probe, 0, 0, -1).unwrap();
    if !attr::counts_lost(&probe) {
        eprintln!("skipped: this kernel (< 6.0) has no PERF_FORMAT_LOST");
        return;
    }
    // A first sample sets the event to the full period; what its short first period dropped is
    // counted while disabled.
    child.spin(1);
    sampler.poll(Duration::ZERO, &mut |_| {}).unwrap();
    sampler.disable();
    sampler.poll(Duration::ZERO, &mut |_| {}).unwrap();
    let before = sampler.stats();
    sampler.enable();
    child.spin(50);
    // The kernel writes a LOST record with the next sample that fits, and none comes: the
    // child idles from now on.
    sampler.poll(Duration::ZERO, &mut |_| {}).unwrap();
    sampler.disable();
    sampler.poll(Duration::ZERO, &mut |_| {}).unwrap();
    let stats = sampler.stats();
    assert!(stats.lost > before.lost, "{stats:?}");
    // Every sample of the child's 50 ms of CPU time was either taken or counted lost, once.
    let made = stats.samples + stats.lost - before.samples - before.lost;
    assert!((45..=55).contains(&made), "{stats:?}");
    sampler.poll(Duration::ZERO, &mut |_| {}).unwrap();
    assert_eq!(sampler.stats().lost, stats.lost);
}

/// A thread of ours that sleeps 5 ms at a time, 40 times, once `go` is sent; and its tid.
fn sleeper() -> (std::thread::JoinHandle<()>, mpsc::Sender<()>, u32) {
    let (tx, rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let sleeper = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() } as u32).unwrap();
        go_rx.recv().unwrap();
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let tid = rx.recv().unwrap();
    (sleeper, go_tx, tid)
}

/// Wall-clock mode's records of thread `tid` while `sleeper` runs, and after: (kind, time,
/// stack bytes, stack pointer).
fn wall_records(
    sampling: Sampling,
    (sleeper, go, tid): (std::thread::JoinHandle<()>, mpsc::Sender<()>, u32),
) -> (Vec<(SampleKind, u64, usize, u64)>, SamplerStats) {
    let cfg = SamplerConfig {
        wall: true,
        sampling,
        ..config(99, 4096)
    };
    let mut sampler = Sampler::open(std::process::id(), &cfg).unwrap();
    go.send(()).unwrap();
    let mut events = Vec::new();
    let mut keep = |s: &Sample<'_>| {
        if s.tid == tid {
            events.push((s.kind, s.time, s.stack.len(), s.regs.sp));
        }
    };
    let end = Instant::now() + Duration::from_secs(20);
    while !sleeper.is_finished() && Instant::now() < end {
        sampler.poll(Duration::from_millis(20), &mut keep).unwrap();
    }
    sleeper.join().unwrap();
    sampler.disable();
    sampler.poll(Duration::ZERO, &mut keep).unwrap();
    (events, sampler.stats())
}

/// Every sleep: out, then in 5 ms or more later, all in time order.
fn assert_sleeps_seen(events: &[(SampleKind, u64, usize, u64)], out: SampleKind) {
    let sleeps = events
        .windows(2)
        .filter(|w| w[0].0 == out && w[1].0 == SampleKind::SwitchIn)
        .filter(|w| w[1].1 >= w[0].1 + 5_000_000)
        .count();
    assert!(sleeps >= 38, "{sleeps} sleeps seen: {events:?}");
    // Per CPU, a record the kernel wrote more than the merge's margin late (its vCPU preempted,
    // as on a loaded 2-CPU CI machine) comes after a later one; the engine drops such late
    // switches. Rare, not never.
    let inversions = events.windows(2).filter(|w| w[0].1 > w[1].1).count();
    assert!(
        inversions * 50 <= events.len(),
        "{inversions} of a thread's {} records out of time order",
        events.len()
    );
}

/// Wall-clock mode per thread on a thread that sleeps 5 ms at a time: each sleep gives a
/// switch-out sample with registers and stack, then a switch-in record about 5 ms later, in that
/// order, in the thread's one ring.
#[test]
fn wall_mode_reports_each_switch_out_with_its_stack_then_the_switch_in() {
    let (events, stats) = wall_records(Sampling::PerThread, sleeper());
    let outs: Vec<_> = events
        .iter()
        .filter(|e| e.0 == SampleKind::SwitchOut)
        .collect();
    assert!(outs.len() >= 40, "{} switch-outs: {events:?}", outs.len());
    assert!(outs.iter().all(|e| e.2 > 0), "switch-outs carry the stack");
    assert!(stats.switches as usize >= outs.len());
    assert_sleeps_seen(&events, SampleKind::SwitchOut);
}

/// Per CPU, the same sleeps come as a register sample per switch-out (no stack copy) and a
/// CPU-wide switch-in record, merged in time order across the CPUs' rings, with nothing lost.
#[test]
fn per_cpu_wall_mode_reports_each_switch_out_with_its_registers_then_the_switch_in() {
    let (events, stats) = wall_records(Sampling::PerCpu, sleeper());
    let outs: Vec<_> = events
        .iter()
        .filter(|e| e.0 == SampleKind::LeftCpu)
        .collect();
    assert!(outs.len() >= 40, "{} switch-outs: {events:?}", outs.len());
    assert!(
        outs.iter().all(|e| e.2 == 0 && e.3 != 0),
        "switch-outs carry registers, no stack"
    );
    assert_sleeps_seen(&events, SampleKind::LeftCpu);
    assert_eq!(stats.lost, 0, "{stats:?}");
}

fn per_cpu(frequency_hz: u64, stack_size: u32) -> SamplerConfig {
    SamplerConfig {
        sampling: Sampling::PerCpu,
        ..config(frequency_hz, stack_size)
    }
}

/// Threads of this process, each burning `ms` of its own CPU time and ending, one after another;
/// returns their tids.
fn short_lived_threads(count: usize, ms: u64, name: &'static str) -> Vec<u32> {
    (0..count)
        .map(|_| {
            std::thread::spawn(move || {
                let name = std::ffi::CString::new(name).unwrap();
                // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
                unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                let start = thread_cpu_ns();
                let mut x = 0u64;
                while thread_cpu_ns() - start < ms * 1_000_000 {
                    for _ in 0..1000 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                }
                // SAFETY: gettid has no preconditions.
                unsafe { libc::gettid() as u32 }
            })
            .join()
            .unwrap()
        })
        .collect()
}

/// Per CPU: threads that live 30 ms are sampled from their first instruction (none is opened or
/// found), with the name they took; samples of other processes never reach the sink.
#[test]
fn per_cpu_events_sample_short_lived_threads_by_name_and_no_other_process() {
    let pid = std::process::id();
    let other = Spinner::start();
    let mut sampler = Sampler::open(pid, &per_cpu(999, 1024)).unwrap();
    assert_eq!(sampler.strategy().kind, Sampling::PerCpu);
    let starter = std::thread::spawn(|| short_lived_threads(10, 30, "short-lived"));
    let mut seen: Vec<(u32, u32)> = Vec::new();
    while !starter.is_finished() {
        sampler
            .poll(Duration::from_millis(20), &mut |s| {
                seen.push((s.pid, s.tid))
            })
            .unwrap();
    }
    let tids = starter.join().unwrap();
    sampler.disable();
    sampler
        .poll(Duration::ZERO, &mut |s| seen.push((s.pid, s.tid)))
        .unwrap();
    assert!(
        seen.iter().all(|&(p, _)| p == pid),
        "another process's sample"
    );
    let per_thread: Vec<usize> = tids
        .iter()
        .map(|tid| seen.iter().filter(|s| s.1 == *tid).count())
        .collect();
    // 30 ms of CPU at 999 Hz: ~30 samples each.
    assert!(
        per_thread.iter().all(|&n| (15..=45).contains(&n)),
        "samples per 30 ms thread: {per_thread:?}"
    );
    let names = sampler.thread_names();
    assert!(
        tids.iter()
            .all(|tid| names.get(tid).map(String::as_str) == Some("short-lived")),
        "{names:?}"
    );
    assert_eq!(sampler.stats().lost, 0, "{:?}", sampler.stats());
    drop(other);
}

/// `set_frequency` sets the period in nanoseconds in both strategies: 49 Hz gives ~49 samples
/// per second of CPU time (a frequency taken for a period samples every 10 µs).
#[test]
fn a_new_rate_applies_to_open_events_in_both_strategies() {
    for sampling in [Sampling::PerThread, Sampling::PerCpu] {
        let mut child = SpinChild::start();
        let cfg = SamplerConfig {
            sampling,
            ..config(999, 512)
        };
        let mut sampler = Sampler::open(child.child.id(), &cfg).unwrap();
        child.spin(20);
        sampler.poll(Duration::ZERO, &mut |_| {}).unwrap();
        sampler.set_frequency(49).unwrap();
        let mut samples = 0;
        child.spin(400);
        sampler.disable();
        sampler.poll(Duration::ZERO, &mut |_| samples += 1).unwrap();
        // 400 ms at 49 Hz: 19.6. Samples of the 999 Hz spin not yet drained when the rate
        // changed land here too (23 seen on a loaded machine); a rate taken for a period would
        // give thousands.
        assert!(
            (15..=30).contains(&samples),
            "{sampling:?}: {samples} samples in 400 ms at 49 Hz"
        );
    }
}

/// One host's per-CPU events shared by two processes' samplers: each gets the samples of its
/// process only, and a third process no sampler asked for gets none.
#[test]
fn shared_per_cpu_events_route_samples_by_process() {
    let (a, b, other) = (Spinner::start(), Spinner::start(), Spinner::start());
    let cfg = per_cpu(499, 1024);
    let host = HostSampler::open(&cfg).unwrap();
    let mut samplers = [
        Sampler::shared(a.pid(), &cfg, host.clone()),
        Sampler::shared(b.pid(), &cfg, host.clone()),
    ];
    let mut seen: [Vec<u32>; 2] = Default::default();
    let end = Instant::now() + Duration::from_secs(20);
    while seen.iter().any(|s| s.len() < 50) && Instant::now() < end {
        for (sampler, seen) in samplers.iter_mut().zip(seen.iter_mut()) {
            sampler
                .poll(Duration::from_millis(20), &mut |s| seen.push(s.pid))
                .unwrap();
        }
    }
    assert!(seen[0].len() >= 50 && seen[1].len() >= 50, "{seen:?}");
    assert!(seen[0].iter().all(|&p| p == a.pid()));
    assert!(seen[1].iter().all(|&p| p == b.pid()));
    assert_eq!(samplers[0].stats().samples as usize, seen[0].len());
    assert_eq!(samplers[0].strategy().kind, Sampling::PerCpu);
    drop(other);
}
