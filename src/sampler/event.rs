//! One open perf event with its mapped ring buffer, as both strategies hold them (one per thread or
//! one per CPU), and the drain that hands its records out.

use super::budget::Locked;
use super::record::{RecordLayout, Regs, Sample, SampleKind};
use super::ring::RingBuffer;
use super::{attr, parse_record, ParsedRecord, SamplerStats};
use std::os::fd::OwnedFd;

pub(super) struct MappedEvent {
    /// How this ring's records are laid out.
    pub layout: RecordLayout,
    // Declared before `fd`: unmap before closing (and only then give back the locked pages).
    pub ring: RingBuffer,
    _locked: Locked,
    pub fd: OwnedFd,
    /// Data pages of `ring`.
    pub pages: usize,
    /// Samples its LOST records reported, and those counted as lost so far (more when the
    /// kernel's count was read before a LOST record came).
    lost_records: u64,
    lost_counted: u64,
}

/// What one drain of a ring found.
pub(super) struct Drained {
    /// Bytes the ring held when the drain began.
    pub fill: usize,
    /// Samples newly counted as lost (not yet in [`SamplerStats::lost`]: the caller adds them).
    pub lost: u64,
}

impl MappedEvent {
    /// The event's descriptor, its ring unmapped: closing it is then what ends the event.
    pub fn into_fd(self) -> OwnedFd {
        let MappedEvent {
            ring, _locked, fd, ..
        } = self;
        drop(ring);
        drop(_locked);
        fd
    }

    pub fn new(fd: OwnedFd, ring: RingBuffer, pages: usize, layout: RecordLayout) -> MappedEvent {
        MappedEvent {
            layout,
            ring,
            _locked: Locked::new(pages),
            fd,
            pages,
            lost_records: 0,
            lost_counted: 0,
        }
    }

    /// The samples dropped that no LOST record reported yet (none will while the event is
    /// disabled or after its thread exited), for the caller to count. LOST records count the
    /// drops of every event writing into the ring, so the kernel's counts of `others` writing
    /// there too are added to the event's own.
    pub fn unreported_lost(&mut self, counts_lost: bool, others: &[OwnedFd]) -> u64 {
        if !counts_lost {
            return 0;
        }
        let total = std::iter::once(&self.fd)
            .chain(others)
            .map(attr::read_lost)
            .try_fold(0u64, |sum, lost| lost.map(|n| sum + n));
        match total {
            Ok(total) if total > self.lost_counted => {
                let new = total - self.lost_counted;
                self.lost_counted = total;
                new
            }
            _ => 0,
        }
    }

    /// Reads the ring up to the head seen when starting on it, handing samples, switch-ins and
    /// thread names to `on_record` (which says whether a sample was taken: counted in `stats`)
    /// and counting the rest in `stats`, lost samples excepted (see [`Drained::lost`]).
    pub fn drain(
        &mut self,
        scratch: &mut Vec<u8>,
        kernel_ips: &mut Vec<u64>,
        stats: &mut SamplerStats,
        on_record: &mut dyn FnMut(&ParsedRecord<'_>) -> bool,
    ) -> Drained {
        let mut lost = 0;
        let layout = self.layout;
        let drained = self.ring.drain(scratch, |bytes| {
            match parse_record(bytes, layout, kernel_ips) {
                Some(ParsedRecord::Lost(n)) => lost += n,
                Some(ParsedRecord::Throttle) => stats.throttled += 1,
                Some(ParsedRecord::Unthrottle) => stats.unthrottled += 1,
                Some(ParsedRecord::Other) => {}
                Some(record @ ParsedRecord::Sample(sample)) => {
                    if on_record(&record) {
                        stats.samples += 1;
                        stats.switches += u64::from(matches!(
                            sample.kind,
                            SampleKind::SwitchOut | SampleKind::LeftCpu
                        ));
                    }
                }
                Some(record) => {
                    on_record(&record);
                }
                None => stats.malformed += 1,
            }
        });
        self.lost_records += lost;
        let new_lost = self.lost_records.saturating_sub(self.lost_counted);
        self.lost_counted = self.lost_counted.max(self.lost_records);
        stats.bytes += drained.bytes;
        stats.malformed += u64::from(drained.resynced);
        let size = self.ring.data_size();
        let fill = usize::try_from(drained.fill)
            .unwrap_or(usize::MAX)
            .min(size);
        let percent = u8::try_from(fill * 100 / size).unwrap_or(100);
        stats.peak_fill_percent = stats.peak_fill_percent.max(percent);
        Drained {
            fill,
            lost: new_lost,
        }
    }
}

/// The sample a switch-in record stands for: no registers, no stack.
pub(super) fn switch_in(pid: u32, tid: u32, time: u64) -> Sample<'static> {
    Sample {
        kind: SampleKind::SwitchIn,
        pid,
        tid,
        time,
        regs: Regs::default(),
        stack: &[],
        kernel_ips: &[],
        in_kernel: false,
    }
}
