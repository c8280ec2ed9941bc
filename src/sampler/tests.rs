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
    fn shell(script: &str) -> Spinner {
        Spinner(
            Command::new("sh")
                .args(["-c", script])
                .spawn()
                .expect("spawn sh"),
        )
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

fn config(frequency_hz: u64, stack_size: u32) -> SamplerConfig {
    SamplerConfig {
        frequency_hz,
        stack_size,
        ..SamplerConfig::default()
    }
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
    assert!(!sampler.thread_ids().any(|t| t == tid));
    assert!(sampler.rescan_threads() >= 1);
    assert!(sampler.thread_ids().any(|t| t == tid));
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
    while sampler.thread_ids().any(|t| t == tid) && Instant::now() < deadline {
        sampler
            .poll(Duration::from_millis(100), &mut |_| {})
            .unwrap();
    }
    assert!(
        !sampler.thread_ids().any(|t| t == tid),
        "exited thread still open"
    );
    assert!(sampler.stats().threads_exited >= 1);
}

#[test]
fn a_tiny_ring_buffer_at_a_high_rate_loses_samples_without_crashing() {
    let child = Spinner::start();
    let cfg = SamplerConfig {
        frequency_hz: 10_000,
        stack_size: 2048,
        ring_pages: Some(2),
        ..SamplerConfig::default()
    };
    let mut sampler = Sampler::open(child.pid(), &cfg).unwrap();
    assert_eq!(sampler.ring_buffer_bytes(), 2 * ring::page_size());
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

#[test]
fn ring_sizes_follow_rate_and_stack_size() {
    let pages = |hz, stack| config(hz, stack).data_pages() * ring::page_size() / 1024;
    assert_eq!(pages(99, 16384), 128);
    assert_eq!(pages(99, 32768), 256);
    assert_eq!(pages(999, 8192), 512);
    assert_eq!(pages(99, 65528), 512);
    assert_eq!(pages(5000, 16384), 2048);
    assert_eq!(pages(1, 0), 32);
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
            sampler.ring_buffer_bytes() / 1024,
        );
    }
}
