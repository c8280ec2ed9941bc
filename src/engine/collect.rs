//! Walked samples waiting to be named: raw stacks interned (raw frames are stable per code
//! address; names depend on time) and the samples that point at them.

use crate::live_jvm::LiveJvm;
use crate::walker::{RawFrame, StackWalker};
use foldhash::HashMap;

/// A sample as walked, before symbolization.
pub(super) struct RawSample {
    pub time: u64,
    pub tid: u32,
    pub stack: u32,
    pub kernel: Vec<u64>,
    pub in_kernel: bool,
}

/// Walked stacks, interned (raw frames are stable per code address; names depend on time), and
/// the samples that point at them.
#[derive(Default)]
pub(super) struct Collected {
    pub stacks: Vec<Vec<RawFrame>>,
    ids: HashMap<Vec<RawFrame>, u32>,
    pub samples: Vec<RawSample>,
    pub walked: u64,
    pub rooted: u64,
}

impl Collected {
    pub fn add(&mut self, walker: &mut StackWalker, s: &crate::sampler::Sample<'_>) {
        let walk = walker.walk(&s.regs, s.stack);
        self.walked += 1;
        self.rooted += u64::from(walk.rooted);
        let stack = match self.ids.get(&walk.frames) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                self.stacks.push(walk.frames.clone());
                self.ids.insert(walk.frames, id);
                id
            }
        };
        self.samples.push(RawSample {
            time: s.time,
            tid: s.tid,
            stack,
            kernel: s.kernel_ips.to_vec(),
            in_kernel: s.in_kernel,
        });
    }

    /// Forget the raw stacks no waiting sample uses: they are named already, and code churn makes
    /// new ones (new pcs) without end.
    pub fn forget_named_stacks(&mut self) {
        let mut old = std::mem::take(&mut self.stacks);
        self.ids.clear();
        let mut renumbered: HashMap<u32, u32> = HashMap::default();
        for s in &mut self.samples {
            s.stack = *renumbered.entry(s.stack).or_insert_with(|| {
                let frames = std::mem::take(&mut old[s.stack as usize]);
                let id = self.stacks.len() as u32;
                self.ids.insert(frames.clone(), id);
                self.stacks.push(frames);
                id
            });
        }
    }

    /// Methods owning replayed (pre-attach) code that is hot in the samples so far.
    pub fn hot_replayed_methods(&self, live: &LiveJvm) -> Vec<u64> {
        let mut counts: HashMap<u64, u64> = HashMap::default();
        for s in &self.samples {
            for f in &self.stacks[s.stack as usize] {
                if let RawFrame::Compiled { pc, .. } = f {
                    if let Some(e) = live.state.code.lookup(*pc, s.time).filter(|e| e.replayed) {
                        if let Some(m) = e.method() {
                            *counts.entry(m).or_default() += 1;
                        }
                    }
                    break;
                }
            }
        }
        let threshold = (self.samples.len() as u64 / 200).max(1);
        let mut hot: Vec<(u64, u64)> = counts
            .into_iter()
            .filter(|&(_, c)| c >= threshold)
            .collect();
        hot.sort_by_key(|&(_, c)| std::cmp::Reverse(c));
        hot.into_iter().take(64).map(|(m, _)| m).collect()
    }
}
