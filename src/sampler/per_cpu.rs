//! Per-CPU sampling, the default where the host allows it (root, CAP_PERFMON, or
//! `perf_event_paranoid` ≤ 0: what `perf record -a` needs): one CPU-clock event per online CPU
//! (`pid = -1`) samples whatever runs there every period of that CPU's time. Such an event lives
//! in the CPU's context and is not switched with tasks (kernel/events/core.c: only task contexts
//! are scheduled in and out), so context switches cost nothing, nothing is opened per thread, and
//! a thread is sampled from its first instruction. Samples of other processes are dropped as they
//! are drained, before any walk. Thread names come with COMM records (`attr.comm`), so a thread
//! that ended before the recording did is still named.

use super::attr;
use super::budget::{self, RingPlan};
use super::event::{switch_in, MappedEvent};
use super::record::RecordLayout;
use super::ring::RingBuffer;
use super::{ParsedRecord, Sample, SamplerConfig, SamplerStats};
use crate::error::{Error, ErrorKind, Result};
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};
use perf_event_open_sys::bindings::perf_event_attr;
use std::collections::{HashMap, HashSet};

pub(super) struct CpuSampler {
    config: SamplerConfig,
    attr: perf_event_attr,
    cpus: Vec<MappedEvent>,
    pub plan: RingPlan,
    /// Data pages of each CPU's ring, and what was wanted.
    pages: usize,
    epoll: Epoll,
    stats: SamplerStats,
    scratch: Vec<u8>,
    kernel_ips: Vec<u64>,
}

/// The records of one process among those of every CPU.
#[derive(Default)]
pub(super) struct ProcessFilter {
    pid: u32,
    /// Its threads sampled so far.
    sampled: HashSet<u32>,
    /// Names its threads took while sampled (COMM records).
    pub names: HashMap<u32, String>,
}

impl ProcessFilter {
    pub fn new(pid: u32) -> ProcessFilter {
        ProcessFilter {
            pid,
            ..ProcessFilter::default()
        }
    }

    pub fn threads_sampled(&self) -> usize {
        self.sampled.len()
    }

    /// Hands `record` to `sink` if it is of this process (names are kept); whether a sample was.
    pub fn take(&mut self, record: &ParsedRecord<'_>, sink: &mut dyn FnMut(&Sample<'_>)) -> bool {
        match record {
            ParsedRecord::Sample(s) if s.pid == self.pid => {
                self.sampled.insert(s.tid);
                sink(s);
                true
            }
            ParsedRecord::Comm { pid, tid, name } if *pid == self.pid => {
                self.names
                    .insert(*tid, String::from_utf8_lossy(name).into_owned());
                false
            }
            ParsedRecord::SwitchIn { pid, tid, time } if *pid == self.pid => {
                sink(&switch_in(*pid, *tid, *time));
                false
            }
            _ => false,
        }
    }
}

impl CpuSampler {
    /// Opens an event, enabled, on every online CPU. Fails with [`ErrorKind::Permission`] where
    /// per-CPU events are not allowed.
    pub fn open(config: &SamplerConfig, epoll: Epoll) -> Result<CpuSampler> {
        let cpus = online_cpus()?;
        let mut plan = config.ring_plan(cpus.len(), super::Host::current().budget());
        let wanted = plan.cpu_pages;
        let mut pages = plan.pages_per_cpu(cpus.len(), budget::available(&plan.budget));
        let mut attr = attr::event_attr(config);
        attr.sample_period = config.period_ns();
        attr.set_comm(1);
        let mut events = Vec::with_capacity(cpus.len());
        for (i, &cpu) in cpus.iter().enumerate() {
            let (fd, ring) = loop {
                let opened = attr::open(&mut attr, pages * plan.page_size / 4, -1, cpu as i32);
                let fd = match opened {
                    Ok(Some(fd)) => fd,
                    Ok(None) => return Err(offline(cpu)),
                    Err(e) => return Err(attr::cpu_open_error(&e, cpu, config)),
                };
                match RingBuffer::map(&fd, pages) {
                    Ok(ring) => break (fd, ring),
                    Err(e)
                        if pages > plan.min_pages
                            && matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOMEM)) =>
                    {
                        pages /= 2;
                    }
                    Err(e) => {
                        let bytes = pages * plan.page_size;
                        return Err(attr::mmap_error(&e, &format!("CPU {cpu}"), bytes));
                    }
                }
            };
            plan.mapped(pages, wanted, true);
            epoll
                .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_ctl: {e}")))?;
            let layout = RecordLayout {
                kernel_callchain: config.kernel_callchain,
                switch_event: None,
            };
            events.push(MappedEvent::new(fd, ring, pages, layout));
        }
        Ok(CpuSampler {
            config: config.clone(),
            attr,
            cpus: events,
            plan,
            pages,
            epoll,
            stats: SamplerStats::default(),
            scratch: Vec::new(),
            kernel_ips: Vec::new(),
        })
    }

    pub fn samples_kernel_time(&self) -> bool {
        self.attr.exclude_kernel() == 0
    }

    pub fn epoll(&self) -> &Epoll {
        &self.epoll
    }

    /// Drains every CPU's ring, handing each sample, switch-in and thread name to `on_record`,
    /// which says whether it took a sample (the others are dropped: other processes').
    pub fn drain_all(&mut self, on_record: &mut dyn FnMut(&ParsedRecord<'_>) -> bool) {
        let CpuSampler {
            cpus,
            stats,
            scratch,
            kernel_ips,
            ..
        } = self;
        for event in cpus.iter_mut() {
            let drained = event.drain(scratch, kernel_ips, stats, on_record);
            stats.lost += drained.lost;
        }
    }

    pub fn stats(&self) -> SamplerStats {
        self.stats
    }

    /// The period of every CPU's event from now on.
    pub fn set_period(&mut self, config: SamplerConfig) {
        let period = config.period_ns();
        self.config = config;
        for event in &self.cpus {
            let _ = attr::set_period(&event.fd, period);
        }
    }

    pub fn set_enabled(&mut self, enabled: bool) {
        for event in &self.cpus {
            let _ = attr::set_enabled(&event.fd, enabled);
        }
        if !enabled {
            let counts_lost = attr::counts_lost(&self.attr);
            for event in &mut self.cpus {
                self.stats.lost += event.unreported_lost(counts_lost, None);
            }
        }
    }

    /// One line saying that the rings are smaller than wanted, and why.
    pub fn ring_note(&self) -> Option<String> {
        if self.pages >= self.plan.cpu_pages {
            return None;
        }
        let why = if self.plan.refused {
            "the kernel refused larger ones (other perf buffers of this user count too)"
        } else {
            "the locked-memory budget is short"
        };
        Some(format!(
            "perf ring buffers of {} KiB per CPU hold {} ms of a busy CPU's samples at {} Hz ({} ms \
             wanted): {why} ({}); samples are lost when a drain comes later than that (lower -F or \
             --stack-size)",
            self.pages * self.plan.page_size / 1024,
            self.plan.hold_ms(self.pages),
            self.config.frequency_hz,
            budget::CPU_HOLD_MS,
            self.plan.budget.source,
        ))
    }
}

/// The online CPUs (`/sys/devices/system/cpu/online`: ranges such as `0-3,6`).
pub(super) fn online_cpus() -> Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").map_err(|e| {
        Error::new(
            ErrorKind::Sampling,
            format!("cannot read /sys/devices/system/cpu/online: {e} (is /sys mounted?)"),
        )
    })?;
    parse_cpu_list(&text).ok_or_else(|| {
        Error::new(
            ErrorKind::Sampling,
            format!(
                "cannot parse /sys/devices/system/cpu/online: {:?}",
                text.trim()
            ),
        )
    })
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?);
                if hi < lo || hi - lo >= 65536 {
                    return None;
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

fn offline(cpu: u32) -> Error {
    Error::new(
        ErrorKind::Sampling,
        format!("CPU {cpu} went offline while its perf event was opened: run again"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_sysfs_writes_them() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("0-x"), None);
        assert_eq!(parse_cpu_list("0-4294967295"), None);
    }
}
