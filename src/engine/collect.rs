//! Walked samples waiting to be named: raw stacks interned (raw frames are stable per code
//! address; names depend on time) and the samples that point at them.

use super::off_cpu_reads::{Back, OffCpuReads};
use super::probes::{Hit, Leaf, ProbeSource};
use super::wall::OffCpu;
use crate::hotspot::scopes::ScopeLayout;
use crate::hotspot::HotSpot;
use crate::live_jvm::LiveJvm;
use crate::process::ProcessMemory;
use crate::sampler::{Sample, SampleKind};
use crate::walker::{RawFrame, ScopeChain, StackWalker};
use foldhash::HashMap;

/// Stacks whose waits' leaf is remembered, at most (a JVM's wait sites are far fewer).
const MAX_LEAVES_OF_STACKS: usize = 4096;

/// A sample as walked, before symbolization.
#[derive(Clone)]
pub(super) struct RawSample {
    pub time: u64,
    pub tid: u32,
    pub stack: u32,
    pub kernel: Vec<u64>,
    pub in_kernel: bool,
    /// Periods it counts for: 1 on a CPU, the periods spent off one in wall-clock mode; bytes
    /// for an allocation; nanoseconds for a wait for a lock.
    pub weight: u64,
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
    /// Without the agent: compiled frames are named from their nmethod's debug info as they are
    /// walked, while the code still exists.
    scopes: Option<Scopes>,
    /// Wall-clock mode: threads off a CPU.
    pub wall: Option<OffCpu>,
    /// Per-CPU wall-clock mode: their stacks, read from outside.
    pub off_cpu_reads: Option<OffCpuReads>,
    /// Probes' samples (allocations, lock waits): their class leaves and weights.
    pub probes: Option<Box<dyn ProbeSource>>,
    /// Waits begun (a probe's [`Hit::Begin`]) and not yet ended, by thread, with their tags.
    waits: HashMap<u32, (RawSample, u8)>,
    /// The leaf last known for a wait begun at each stack ([`Leaf::OfStack`]).
    leaf_of_stack: HashMap<Vec<RawFrame>, RawFrame>,
}

/// Decoded debug info of compiled code, by (pc, is a return address), until the code changes.
struct Scopes {
    layout: ScopeLayout,
    mem: ProcessMemory,
    at: HashMap<(u64, bool), Option<ScopeChain>>,
}

impl Collected {
    /// Collects samples of a JVM profiled without the agent: compiled frames become
    /// [`RawFrame::Scoped`] (when the JVM's VMStructs describe its debug info).
    pub fn decoding_scopes(hotspot: &HotSpot) -> Self {
        Collected {
            scopes: ScopeLayout::discover(&hotspot.vmstructs, &hotspot.mem).map(|layout| Scopes {
                layout,
                mem: hotspot.mem,
                at: HashMap::default(),
            }),
            ..Collected::default()
        }
    }

    /// Forget decoded debug info: code may have been freed and its addresses reused.
    pub fn code_changed(&mut self) {
        if let Some(scopes) = self.scopes.as_mut() {
            scopes.at.clear();
        }
    }

    /// A sample (or, in wall-clock mode, a thread's switch) from the sampler.
    pub fn add(&mut self, walker: &mut StackWalker, s: &Sample<'_>) {
        if let Some(mut source) = self.probes.take() {
            self.add_probed(walker, s, source.as_mut());
            self.probes = Some(source);
            return;
        }
        if self.wall.is_none() {
            let raw = self.walk(walker, s);
            self.samples.push(raw);
            return;
        }
        match s.kind {
            SampleKind::SwitchIn => self.came_back(walker, s.tid, s.time),
            SampleKind::OnCpu => {
                let raw = self.walk(walker, s);
                self.samples.push(raw);
                if let Some(wall) = self.wall.as_mut() {
                    match self.off_cpu_reads {
                        Some(_) => wall.on_cpu_ordered(s.tid, s.time),
                        None => wall.on_cpu(s.tid),
                    }
                }
            }
            SampleKind::SwitchOut => {
                let raw = self.walk(walker, s);
                if let Some(wall) = self.wall.as_mut() {
                    wall.switched_out(raw);
                }
            }
            SampleKind::LeftCpu | SampleKind::Exited => {
                if let (Some(wall), Some(reads)) = (self.wall.as_mut(), self.off_cpu_reads.as_mut())
                {
                    match s.kind {
                        SampleKind::Exited => {
                            wall.exited(s.tid);
                            reads.exited(s.tid);
                        }
                        _ if wall.is_late(s.tid, s.time) => {}
                        _ => {
                            wall.left_again(s.tid, s.time, &mut self.samples);
                            reads.left(s);
                        }
                    }
                }
            }
        }
    }

    fn add_probed(
        &mut self,
        walker: &mut StackWalker,
        s: &Sample<'_>,
        source: &mut dyn ProbeSource,
    ) {
        match source.hit(s) {
            Hit::Skip => {}
            Hit::Now { leaf, weight } => {
                let raw = self.walk_under(walker, s, leaf);
                self.samples.push(RawSample { weight, ..raw });
            }
            // A wait still open from a lost end is dropped.
            Hit::Begin { leaf, tag } => {
                let mut frames = self.walk_frames(walker, s);
                let leaf = match leaf {
                    Leaf::Known(leaf) => {
                        if let Some(leaf) = &leaf {
                            if self.leaf_of_stack.len() >= MAX_LEAVES_OF_STACKS {
                                self.leaf_of_stack.clear();
                            }
                            self.leaf_of_stack.insert(frames.clone(), leaf.clone());
                        }
                        leaf
                    }
                    Leaf::OfStack => match self.leaf_of_stack.get(&frames) {
                        Some(leaf) => Some(leaf.clone()),
                        None => {
                            source.unmatched(tag);
                            return;
                        }
                    },
                };
                if let Some(leaf) = leaf {
                    frames.insert(0, leaf);
                }
                let raw = self.interned(frames, s);
                self.waits.insert(s.tid, (raw, tag));
            }
            Hit::End => {
                if let Some((raw, tag)) = self.waits.remove(&s.tid) {
                    if let Some(weight) = source.waited(tag, s.time.saturating_sub(raw.time)) {
                        self.samples.push(RawSample { weight, ..raw });
                    }
                }
            }
        }
    }

    /// Probes' waits still open at `end` count up to it.
    pub fn finish_waits(&mut self, end: u64) {
        let Some(source) = self.probes.as_mut() else {
            return;
        };
        let mut open: Vec<_> = self.waits.drain().map(|(_, w)| w).collect();
        open.sort_by_key(|(raw, _)| raw.time);
        for (raw, tag) in open {
            if let Some(weight) = source.waited(tag, end.saturating_sub(raw.time)) {
                self.samples.push(RawSample { weight, ..raw });
            }
        }
    }

    /// Wall-clock mode: thread `tid` came back on a CPU at `time`.
    fn came_back(&mut self, walker: &mut StackWalker, tid: u32, time: u64) {
        let back = match self.off_cpu_reads.take() {
            Some(mut reads) => {
                let back = reads.came_back(tid, time, &mut |s| self.walk(walker, s));
                self.off_cpu_reads = Some(reads);
                back
            }
            None => Back::Nothing,
        };
        let Some(wall) = self.wall.as_mut() else {
            return;
        };
        match back {
            Back::Nothing => {}
            Back::Left(raw) => wall.switched_out(raw),
            Back::Replace(raw) => wall.replace_stack(raw),
        }
        wall.switched_in(tid, time, &mut self.samples);
    }

    /// Per-CPU wall-clock mode: reads the stacks of the threads off a CPU whose wait counts
    /// now (see [`OffCpuReads::read_due`]).
    pub fn read_off_cpu_stacks(&mut self, walker: &mut StackWalker, now: u64) {
        let Some(mut reads) = self.off_cpu_reads.take() else {
            return;
        };
        let mut read = Vec::new();
        reads.read_due(now, &mut |s| self.walk(walker, s), &mut |raw| {
            read.push(raw)
        });
        self.off_cpu_reads = Some(reads);
        if let Some(wall) = self.wall.as_mut() {
            for raw in read {
                wall.switched_out(raw);
            }
        }
    }

    /// Wall-clock mode: the stack of a thread blocked since before the recording started.
    pub fn add_blocked_at_start(&mut self, walker: &mut StackWalker, s: &Sample<'_>) {
        let raw = self.walk(walker, s);
        if let Some(wall) = self.wall.as_mut() {
            wall.blocked_at_start(raw);
        }
    }

    /// Wall-clock mode: counts the time of threads still off a CPU up to `until`.
    pub fn count_off_cpu(&mut self, until: u64) {
        if let Some(wall) = self.wall.as_mut() {
            wall.count_up_to(until, &mut self.samples);
        }
    }

    /// Wall-clock mode: sampling ended at `end`; see [`OffCpu::finish`].
    pub fn finish_off_cpu(&mut self, end: u64, idle: bool) {
        if let Some(reads) = self.off_cpu_reads.as_mut() {
            reads.finish();
        }
        if let Some(wall) = self.wall.as_mut() {
            wall.finish(end, idle, &mut self.samples);
        }
    }

    fn walk(&mut self, walker: &mut StackWalker, s: &Sample<'_>) -> RawSample {
        self.walk_under(walker, s, None)
    }

    /// Walks `s`, and puts `leaf` (if any) under its innermost frame.
    fn walk_under(
        &mut self,
        walker: &mut StackWalker,
        s: &Sample<'_>,
        leaf: Option<RawFrame>,
    ) -> RawSample {
        let mut frames = self.walk_frames(walker, s);
        if let Some(leaf) = leaf {
            frames.insert(0, leaf);
        }
        self.interned(frames, s)
    }

    fn walk_frames(&mut self, walker: &mut StackWalker, s: &Sample<'_>) -> Vec<RawFrame> {
        let mut walk = walker.walk(&s.regs, s.stack);
        if let Some(scopes) = self.scopes.as_mut() {
            scopes.decode(walker, &mut walk.frames);
        }
        self.walked += 1;
        self.rooted += u64::from(walk.rooted);
        walk.frames
    }

    /// `s` with its stack `frames`, interned.
    fn interned(&mut self, frames: Vec<RawFrame>, s: &Sample<'_>) -> RawSample {
        let stack = match self.ids.get(&frames) {
            Some(&id) => id,
            None => {
                let id = self.stacks.len() as u32;
                self.stacks.push(frames.clone());
                self.ids.insert(frames, id);
                id
            }
        };
        RawSample {
            time: s.time,
            tid: s.tid,
            stack,
            kernel: s.kernel_ips.to_vec(),
            in_kernel: s.in_kernel,
            weight: 1,
        }
    }

    /// Forget the raw stacks no waiting sample uses: they are named already, and code churn makes
    /// new ones (new pcs) without end.
    pub fn forget_named_stacks(&mut self) {
        let mut old = std::mem::take(&mut self.stacks);
        self.ids.clear();
        let mut renumbered: HashMap<u32, u32> = HashMap::default();
        let held = self.wall.iter_mut().flat_map(|w| w.held_mut());
        let held = held.chain(self.off_cpu_reads.iter_mut().flat_map(|r| r.held_mut()));
        let held = held.chain(self.waits.values_mut().map(|(raw, _)| raw));
        for s in self.samples.iter_mut().chain(held) {
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

impl Scopes {
    /// Replaces each compiled frame whose methods its nmethod's debug info gives.
    fn decode(&mut self, walker: &mut StackWalker, frames: &mut [RawFrame]) {
        for (i, frame) in frames.iter_mut().enumerate() {
            let RawFrame::Compiled { pc, .. } = *frame else {
                continue;
            };
            let exact = i > 0;
            let (layout, mem) = (&self.layout, &self.mem);
            let methods = self
                .at
                .entry((pc, exact))
                .or_insert_with(|| {
                    let blob = walker.blob_for(pc)?;
                    let chain = layout.methods_at(mem, blob.start, blob.code_begin, pc, exact)?;
                    Some(chain.into())
                })
                .clone();
            if let Some(methods) = methods {
                *frame = RawFrame::Scoped { pc, methods };
            }
        }
    }
}
