//! Stack sampling with `perf_event_open`: one CPU-clock event per thread of the target (no
//! inherit), each with its own ring buffer, all watched by one epoll. Samples carry the user
//! registers and a copy of the top of the user stack for unwinding, and optionally the kernel
//! callchain. They are handed out borrowed from the ring buffer, without copying.

mod attr;
mod record;
mod ring;
#[cfg(test)]
mod tests;

pub use record::{Regs, Sample};

use crate::error::{err, Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use perf_event_open_sys::bindings::perf_event_attr;
use record::Record;
use ring::RingBuffer;
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::time::Duration;

/// Largest `sample_stack_user` the kernel accepts (a multiple of 8 below `USHRT_MAX`).
pub const MAX_STACK_SIZE: u32 = 65528;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Samples per second of CPU time, per thread.
    pub frequency_hz: u64,
    /// Bytes of user stack copied from the sampled SP (multiple of 8, at most [`MAX_STACK_SIZE`]).
    /// Stacks deeper than this lose their outermost frames.
    pub stack_size: u32,
    /// Also record the kernel callchain (needs `perf_event_paranoid` ≤ 1 or CAP_PERFMON).
    pub kernel_callchain: bool,
    /// Data pages per thread's ring buffer (rounded up to a power of two); `None` sizes it from
    /// the frequency and the stack size.
    pub ring_pages: Option<usize>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            frequency_hz: 99,
            // Measured on JDK 17: a Java thread's base (TLS, thread start, call stub) takes about
            // 7 KiB and each level of a JIT-compiled Java call chain about 180 bytes, so 32 KiB
            // reaches the thread's base for about 140 levels (16 KiB: about 50).
            stack_size: 32768,
            kernel_callchain: false,
            ring_pages: None,
        }
    }
}

impl SamplerConfig {
    fn validate(&self) -> Result<()> {
        if self.frequency_hz == 0 {
            return err(
                ErrorKind::Usage,
                "the sampling frequency must be at least 1 Hz",
            );
        }
        if let Some(max) = attr::max_sample_rate() {
            if self.frequency_hz > max {
                return err(
                    ErrorKind::Usage,
                    format!(
                        "sampling frequency {} Hz exceeds kernel.perf_event_max_sample_rate={max} \
                         (lower the frequency or raise the sysctl)",
                        self.frequency_hz
                    ),
                );
            }
        }
        if self.stack_size % 8 != 0 || self.stack_size > MAX_STACK_SIZE {
            return err(
                ErrorKind::Usage,
                format!(
                    "stack size {} must be a multiple of 8 and at most {MAX_STACK_SIZE}",
                    self.stack_size
                ),
            );
        }
        Ok(())
    }

    /// Locked memory one thread's ring buffer takes: its data pages and the header page.
    pub fn ring_locked_bytes(&self) -> usize {
        (self.data_pages() + 1) * ring::page_size()
    }

    /// The largest sample record these settings produce.
    fn max_record_bytes(&self) -> usize {
        // Header, pid/tid, time, regs (abi + 17), stack (size, data, dyn_size).
        let mut bytes = 8 + 8 + 8 + 8 * (1 + record::REG_COUNT) + 8 + self.stack_size as usize + 8;
        if self.kernel_callchain {
            // kernel.perf_event_max_stack defaults to 127, plus one context marker.
            bytes += 8 * (1 + 128);
        }
        bytes
    }

    fn data_pages(&self) -> usize {
        if let Some(pages) = self.ring_pages {
            return pages.max(1).next_power_of_two();
        }
        const MIN_PAGES: usize = 8;
        const MAX_PAGES: usize = 512;
        // A running thread produces `frequency_hz` samples per second: hold at least 50 ms of them
        // and at least 4 records, so that the wakeup at a quarter full leaves headroom. Every
        // thread gets a buffer, busy or not, hence no more.
        let record = self.max_record_bytes();
        let rate = usize::try_from(self.frequency_hz).unwrap_or(usize::MAX);
        let want = (record.saturating_mul(rate) / 20).max(4 * record);
        want.div_ceil(ring::page_size())
            .next_power_of_two()
            .clamp(MIN_PAGES, MAX_PAGES)
    }
}

/// One ring-buffer record as the sampler reads it.
#[derive(Debug)]
pub enum ParsedRecord<'a> {
    /// A sample; its `kernel_ips` borrow the vector passed to [`parse_record`].
    Sample(Sample<'a>),
    /// The kernel dropped this many samples (buffer full).
    Lost(u64),
    Throttle,
    Unthrottle,
    /// A kind the sampler ignores.
    Other,
}

/// Parses one complete ring-buffer record (header included), laid out for the sample type the
/// sampler configures (TID, TIME, [CALLCHAIN when `kernel_callchain`], REGS_USER, STACK_USER).
/// Kernel return addresses are decoded into `kernel_ips`. `None`: the record is malformed.
///
/// This is exactly what [`Sampler::poll`] runs on every record; it is public for the fuzz targets.
pub fn parse_record<'a>(
    bytes: &'a [u8],
    kernel_callchain: bool,
    kernel_ips: &'a mut Vec<u64>,
) -> Option<ParsedRecord<'a>> {
    Some(match record::parse(bytes, kernel_callchain)? {
        Record::Sample { sample, callchain } => {
            record::kernel_ips(callchain, kernel_ips);
            ParsedRecord::Sample(Sample {
                kernel_ips,
                ..sample
            })
        }
        Record::Lost(n) => ParsedRecord::Lost(n),
        Record::Throttle => ParsedRecord::Throttle,
        Record::Unthrottle => ParsedRecord::Unthrottle,
        Record::Other => ParsedRecord::Other,
    })
}

/// Counters since [`Sampler::open`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Samples handed to the sink.
    pub samples: u64,
    /// Samples the kernel dropped because a ring buffer was full (sum of LOST records).
    pub lost: u64,
    /// THROTTLE records: the kernel lowered the rate (`perf_event_max_sample_rate`).
    pub throttled: u64,
    pub unthrottled: u64,
    /// Threads with an open event now.
    pub threads_open: usize,
    /// Distinct threads whose event could not be opened or mapped.
    pub threads_failed: usize,
    /// Threads whose event was closed after they exited.
    pub threads_exited: u64,
    /// Bytes of records read from the ring buffers.
    pub bytes: u64,
    /// Malformed records (and stretches of a ring buffer skipped because of them).
    pub malformed: u64,
}

struct ThreadEvent {
    // Declared before `fd`: unmap before closing.
    ring: RingBuffer,
    fd: OwnedFd,
}

pub struct Sampler {
    pid: u32,
    config: SamplerConfig,
    attr: perf_event_attr,
    data_pages: usize,
    enabled: bool,
    epoll: Epoll,
    threads: HashMap<u32, ThreadEvent>,
    failed: HashSet<u32>,
    last_error: Option<Error>,
    stats: SamplerStats,
    /// Reused buffers: a record that wraps around, decoded kernel ips, epoll results, exited tids.
    scratch: Vec<u8>,
    kernel_ips: Vec<u64>,
    events: Vec<EpollEvent>,
    hung_up: Vec<u32>,
}

impl Sampler {
    /// Opens and enables an event on every current thread of `pid`.
    pub fn open(pid: u32, config: &SamplerConfig) -> Result<Sampler> {
        config.validate()?;
        let tids = list_threads(pid).map_err(|e| {
            Error::new(
                ErrorKind::NoProcess,
                format!("cannot list the threads of process {pid}: {e} (has it exited?)"),
            )
        })?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_create1: {e}")))?;
        let data_pages = config.data_pages();
        let wakeup_bytes = u32::try_from(data_pages * ring::page_size() / 4).unwrap_or(u32::MAX);
        let mut sampler = Sampler {
            pid,
            config: config.clone(),
            attr: attr::event_attr(config, wakeup_bytes),
            data_pages,
            enabled: true,
            epoll,
            threads: HashMap::new(),
            failed: HashSet::new(),
            last_error: None,
            stats: SamplerStats::default(),
            scratch: Vec::new(),
            kernel_ips: Vec::new(),
            events: vec![EpollEvent::empty(); 64],
            hung_up: Vec::new(),
        };
        for tid in tids {
            sampler.add_thread(tid)?;
        }
        if sampler.threads.is_empty() {
            return err(
                ErrorKind::NoProcess,
                format!("process {pid} has no threads left to sample (has it exited?)"),
            );
        }
        Ok(sampler)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether samples also land in kernel code (system calls, page faults); false when
    /// `perf_event_paranoid` restricts us to user time, which then goes unsampled.
    pub fn samples_kernel_time(&self) -> bool {
        self.attr.exclude_kernel() == 0
    }

    /// Bytes of one thread's ring buffer (data pages only).
    pub fn ring_buffer_bytes(&self) -> usize {
        self.data_pages * ring::page_size()
    }

    /// Threads with an open event, in no particular order.
    pub fn thread_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.threads.keys().copied()
    }

    /// Starts sampling thread `tid` (a tid of the target as seen from our pid namespace).
    /// `Ok(false)`: already sampled, not a thread of the target (any more), or failed before.
    pub fn add_thread(&mut self, tid: u32) -> Result<bool> {
        if self.threads.contains_key(&tid) || self.failed.contains(&tid) {
            return Ok(false);
        }
        if !std::path::Path::new(&format!("/proc/{}/task/{tid}", self.pid)).exists() {
            return Ok(false);
        }
        match self.open_thread(tid) {
            Ok(Some(event)) => {
                self.threads.insert(tid, event);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                self.failed.insert(tid);
                self.last_error = Some(Error::new(e.kind, e.message.clone()));
                Err(e)
            }
        }
    }

    fn open_thread(&mut self, tid: u32) -> Result<Option<ThreadEvent>> {
        let opened = match attr::open_thread(&self.attr, tid) {
            Err(e) if attr::retry_without_kernel(&mut self.attr, &e) => {
                attr::open_thread(&self.attr, tid)
            }
            other => other,
        };
        let Some(fd) = opened.map_err(|e| attr::open_error(&e, tid, &self.config))? else {
            return Ok(None);
        };
        let ring = RingBuffer::map(&fd, self.data_pages)
            .map_err(|e| attr::mmap_error(&e, tid, self.ring_buffer_bytes()))?;
        self.epoll
            .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, u64::from(tid)))
            .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_ctl: {e}")))?;
        if self.enabled {
            attr::set_enabled(&fd, true).map_err(|e| {
                Error::new(
                    ErrorKind::Sampling,
                    format!("cannot enable the perf event of thread {tid}: {e}"),
                )
            })?;
        }
        Ok(Some(ThreadEvent { ring, fd }))
    }

    /// Opens events for threads that appeared since the last scan; returns how many were added.
    /// Failures are counted in [`SamplerStats::threads_failed`] and kept in [`Self::last_error`].
    pub fn rescan_threads(&mut self) -> usize {
        let Ok(tids) = list_threads(self.pid) else {
            return 0;
        };
        // Forget failures of threads that are gone, so a reused tid gets a fresh try.
        self.failed.retain(|tid| tids.binary_search(tid).is_ok());
        tids.into_iter()
            .filter(|&tid| matches!(self.add_thread(tid), Ok(true)))
            .count()
    }

    /// The most recent failure to open or map a thread's event.
    pub fn last_error(&self) -> Option<&Error> {
        self.last_error.as_ref()
    }

    /// Waits up to `timeout` for a ring buffer to fill a quarter or a thread to exit, then drains
    /// every ring buffer, calling `sink` for each sample. Events of exited threads are closed.
    pub fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(&Sample<'_>)) -> Result<()> {
        let millis = i32::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let ready = match self.epoll.wait(
            &mut self.events,
            EpollTimeout::try_from(millis).unwrap_or(EpollTimeout::MAX),
        ) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => return err(ErrorKind::Internal, format!("epoll_wait: {e}")),
        };
        self.hung_up.clear();
        for event in &self.events[..ready] {
            if event
                .events()
                .intersects(EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR)
            {
                self.hung_up.push(event.data() as u32);
            }
        }
        self.drain(sink);
        let hung_up = std::mem::take(&mut self.hung_up);
        for tid in &hung_up {
            if let Some(event) = self.threads.remove(tid) {
                let _ = self.epoll.delete(&event.fd);
                self.stats.threads_exited += 1;
            }
        }
        self.hung_up = hung_up;
        Ok(())
    }

    /// Reads every ring buffer once, up to the head seen when starting on it.
    fn drain(&mut self, sink: &mut dyn FnMut(&Sample<'_>)) {
        let has_callchain = self.config.kernel_callchain;
        let Sampler {
            threads,
            scratch,
            kernel_ips,
            stats,
            ..
        } = self;
        for event in threads.values() {
            let drained = event.ring.drain(scratch, |bytes| {
                match parse_record(bytes, has_callchain, kernel_ips) {
                    Some(ParsedRecord::Sample(sample)) => {
                        stats.samples += 1;
                        sink(&sample);
                    }
                    Some(ParsedRecord::Lost(n)) => stats.lost += n,
                    Some(ParsedRecord::Throttle) => stats.throttled += 1,
                    Some(ParsedRecord::Unthrottle) => stats.unthrottled += 1,
                    Some(ParsedRecord::Other) => {}
                    None => stats.malformed += 1,
                }
            });
            stats.bytes += drained.bytes;
            stats.malformed += u64::from(drained.resynced);
        }
    }

    pub fn stats(&self) -> SamplerStats {
        SamplerStats {
            threads_open: self.threads.len(),
            threads_failed: self.failed.len(),
            ..self.stats
        }
    }

    /// Samples per second per thread from now on, for every thread (and threads added later).
    pub fn set_frequency(&mut self, hz: u64) -> Result<()> {
        let config = SamplerConfig {
            frequency_hz: hz,
            ..self.config.clone()
        };
        config.validate()?;
        self.config = config;
        self.attr.sample_freq = hz;
        for event in self.threads.values() {
            // Fails only for an event whose thread is gone, which the next poll cleans up.
            let _ = attr::set_frequency(&event.fd, hz);
        }
        Ok(())
    }

    /// Stops sampling on every thread (and on threads added later), e.g. before a final drain.
    pub fn disable(&mut self) {
        self.set_enabled(false);
    }

    /// Resumes sampling after [`Self::disable`].
    pub fn enable(&mut self) {
        self.set_enabled(true);
    }

    fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        for event in self.threads.values() {
            // Fails only for an event whose thread is gone, which the next poll cleans up.
            let _ = attr::set_enabled(&event.fd, enabled);
        }
    }
}

/// Thread ids in `/proc/<pid>/task`, sorted.
fn list_threads(pid: u32) -> std::io::Result<Vec<u32>> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}
