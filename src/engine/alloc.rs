//! Allocation samples (`record -e alloc`): uprobes on the two functions HotSpot calls for every
//! TLAB refill and every allocation outside a TLAB, whether JFR records or not (JDK 10+,
//! `MemAllocator::Allocation::notify_allocation_jfr_sampler` in gc/shared/memAllocator.cpp):
//!
//! - `AllocTracer::send_allocation_in_new_tlab(Klass*, HeapWord*, size_t tlab_size, size_t
//!   alloc_size, JavaThread*)`
//! - `AllocTracer::send_allocation_outside_tlab(Klass*, HeapWord*, size_t alloc_size,
//!   JavaThread*)`
//!
//! Both are static (gc/shared/allocTracer.hpp): at their first instruction the System V
//! arguments are in rdi, rsi, rdx…: the class allocated is rdi, and rdx the bytes the sample
//! stands for: the new TLAB's size (the thread allocated about that much since its last refill)
//! or the object's. A sample becomes the thread's walked stack with the class as its leaf,
//! weighted by those bytes times the period.

use super::probes::{ClassNames, Hit, Libjvm, ProbeSource, ProbeSummary};
use crate::error::Result;
use crate::hotspot::HotSpot;
use crate::process::TargetProcess;
use crate::profile::FrameKind;
use crate::sampler::{Sample, Uprobe, Uprobes};
use crate::walker::RawFrame;

const IN_NEW_TLAB: &str = "AllocTracer::send_allocation_in_new_tlab";
const OUTSIDE_TLAB: &str = "AllocTracer::send_allocation_outside_tlab";

/// How `-e alloc` samples, as asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocOptions {
    /// A sample every this many probe hits (`-c`).
    pub period: u64,
}

/// Where the probes go in the target's libjvm.
pub struct AllocProbes {
    pub uprobes: Uprobes,
    /// Run-time addresses of the two functions (in new TLAB, outside TLAB): a sample's ip.
    addresses: [u64; 2],
    libjvm: String,
}

impl AllocProbes {
    /// Finds the two functions in the target's libjvm (its `.symtab`, else its debug file).
    pub fn find(process: &TargetProcess, opts: AllocOptions) -> Result<AllocProbes> {
        let libjvm = Libjvm::of(process)?;
        let found = [
            libjvm.function("alloc", &[IN_NEW_TLAB])?.1,
            libjvm.function("alloc", &[OUTSIDE_TLAB])?.1,
        ];
        Ok(AllocProbes {
            uprobes: Uprobes {
                path: libjvm.path.clone(),
                probes: found
                    .iter()
                    .map(|f| Uprobe {
                        offset: f.file_offset,
                        on_return: false,
                        prompt: false,
                    })
                    .collect(),
                period: opts.period.max(1),
            },
            addresses: found.map(|f| libjvm.address(f)),
            libjvm: libjvm.module.path.clone(),
        })
    }

    /// The summary's name of the mechanism.
    pub fn describe(&self) -> String {
        let every = match self.uprobes.period {
            1 => "every hit".to_string(),
            n => format!("every {n}th hit"),
        };
        format!(
            "uprobes on {IN_NEW_TLAB} and {OUTSIDE_TLAB} of {}, opened on each thread, a sample at {every}",
            self.libjvm
        )
    }
}

/// What an allocation recording sampled.
#[derive(Debug, Clone, Default)]
pub struct AllocSummary {
    pub mechanism: String,
    /// Samples at each probe (in new TLAB, outside TLAB), and the bytes they stand for.
    pub samples: [u64; 2],
    pub bytes: u64,
    /// Samples whose class could not be read (left without a class leaf).
    pub unnamed: u64,
}

/// Turns probe hits into weighted samples with their class leaf.
pub(super) struct AllocSource {
    addresses: [u64; 2],
    period: u64,
    names: ClassNames,
    pub summary: AllocSummary,
}

impl AllocSource {
    pub fn new(probes: &AllocProbes, hotspot: &HotSpot) -> AllocSource {
        AllocSource {
            addresses: probes.addresses,
            period: probes.uprobes.period,
            names: ClassNames::new(hotspot),
            summary: AllocSummary {
                mechanism: probes.describe(),
                ..AllocSummary::default()
            },
        }
    }
}

impl ProbeSource for AllocSource {
    /// The leaf (the class allocated) and weight (bytes) of a probe's sample.
    fn hit(&mut self, s: &Sample<'_>) -> Hit {
        let Some(probe) = self.addresses.iter().position(|&a| a == s.regs.ip) else {
            return Hit::Skip;
        };
        let bytes = s.regs.dx.saturating_mul(self.period);
        self.summary.samples[probe] += 1;
        self.summary.bytes = self.summary.bytes.saturating_add(bytes);
        let suffix = match probe {
            1 => " (outside TLAB)",
            _ => "",
        };
        let class = self.names.name(s.regs.di, suffix, s.time);
        if class.is_none() {
            self.summary.unnamed += 1;
        }
        Hit::Now {
            leaf: class.map(|class| RawFrame::Object {
                class,
                kind: FrameKind::Allocated,
            }),
            weight: bytes,
        }
    }

    fn waited(&mut self, _tag: u8, _ns: u64) -> Option<u64> {
        None
    }

    fn summary(&self) -> ProbeSummary {
        ProbeSummary::Alloc(self.summary.clone())
    }
}
