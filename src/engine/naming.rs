//! Naming walked samples into the profile: frames and stacks interned, samples merged or spilled.

use super::collect::{Collected, RawSample};
use crate::jit::codemap::CodeMap;
use crate::output::SampleSpill;
use crate::profile::{Frame, FrameId, FrameKind, Profile, Sample};
use crate::symbolize::Symbolizer;
use crate::walker::StackWalker;
use foldhash::HashMap;
use std::time::{Duration, Instant};

/// Samples already named, and what the summary reports about them. Samples are named about a second
/// after they were taken (late code-load records still arrive in time) and their raw form dropped, so
/// memory follows the number of distinct stacks; unless the output keeps every sample's time (the
/// raw format, whose samples go to a spill file on disk), samples of the same stack and thread are
/// merged into one weighted sample.
pub(super) struct Named {
    pub profile: Profile,
    merged: Option<HashMap<(u32, u32), usize>>,
    pub spill: Option<SampleSpill>,
    pub count: u64,
    pub first: Option<u64>,
    pub last: u64,
    pub jit_top: u64,
    pub precise_hits: u64,
    /// The `[kernel]` leaf of samples in kernel code without a callchain.
    kernel_leaf: Option<FrameId>,
    max_stacks: usize,
    /// The frame that ends stacks cut at `max_stacks`, and how many samples were cut.
    cut_marker: Option<FrameId>,
    pub cut: u64,
}

impl Named {
    /// Samples are merged unless they go to `spill` or `keep_times` asks to keep them apart.
    pub fn new(spill: Option<SampleSpill>, keep_times: bool, max_stacks: usize) -> Self {
        Named {
            profile: Profile::default(),
            merged: (spill.is_none() && !keep_times).then(HashMap::default),
            spill,
            count: 0,
            first: None,
            last: 0,
            jit_top: 0,
            precise_hits: 0,
            kernel_leaf: None,
            max_stacks,
            cut_marker: None,
            cut: 0,
        }
    }

    /// The profile named so far; naming goes on into a new one (the frame ids a symbolizer
    /// cached point into the old one: forget them).
    pub fn take_profile(&mut self) -> Profile {
        if let Some(merged) = self.merged.as_mut() {
            merged.clear();
        }
        self.kernel_leaf = None;
        self.cut_marker = None;
        std::mem::take(&mut self.profile)
    }

    /// Name the collected samples taken before `before` and drop them from `collected`, within
    /// `budget` if given (the ring buffers must be drained meanwhile); true when all were named.
    pub fn take(
        &mut self,
        collected: &mut Collected,
        before: u64,
        symbolizer: &mut Symbolizer,
        code: &CodeMap,
        walker: &mut StackWalker,
        budget: Option<Duration>,
    ) -> bool {
        let deadline = budget.map(|b| Instant::now() + b);
        let mut stopped_at = None;
        let mut leaf_first: Vec<FrameId> = Vec::new();
        // Raw stack ids are stable within a pass, and most samples of a pass repeat a stack
        // named moments before: its named stack holds for samples in the same code versions.
        let mut named_stacks: HashMap<(u32, bool), NamedStack> = HashMap::default();
        for (i, s) in collected.samples.iter().enumerate() {
            if i % 64 == 63 && deadline.is_some_and(|d| Instant::now() >= d) {
                stopped_at = Some(i + 1);
                break;
            }
            if s.time >= before {
                continue;
            }
            let key = (s.stack, s.in_kernel);
            let cached = named_stacks
                .get(&key)
                .filter(|n| s.kernel.is_empty() && n.same_names.contains(&s.time));
            let named = match cached {
                Some(n) => n.clone(),
                None => {
                    let n =
                        self.name_stack(collected, s, symbolizer, code, walker, &mut leaf_first);
                    if s.kernel.is_empty() {
                        named_stacks.insert(key, n.clone());
                    }
                    n
                }
            };
            if let Some(precise) = named.top_compiled {
                self.jit_top += 1;
                self.precise_hits += u64::from(precise);
            }
            let stack = named.stack;
            self.cut += u64::from(named.cut);
            self.count += s.weight;
            self.first = Some(self.first.map_or(s.time, |f| f.min(s.time)));
            self.last = self.last.max(s.time);
            let samples = &mut self.profile.samples;
            let merged_into = self.merged.as_mut().map(|m| {
                *m.entry((stack, s.tid)).or_insert_with(|| {
                    samples.push(Sample {
                        time: s.time,
                        tid: s.tid,
                        stack,
                        weight: 0,
                    });
                    samples.len() - 1
                })
            });
            match merged_into {
                Some(i) => samples[i].weight += s.weight,
                None => samples.push(Sample {
                    time: s.time,
                    tid: s.tid,
                    stack,
                    weight: s.weight,
                }),
            }
        }
        let named_up_to = stopped_at.unwrap_or(collected.samples.len());
        let mut index = 0;
        collected.samples.retain(|s| {
            index += 1;
            index > named_up_to || s.time >= before
        });
        if let Some(spill) = self.spill.as_mut() {
            self.profile.samples.drain(..).for_each(|s| spill.push(&s));
        }
        if stopped_at.is_some() {
            return false;
        }
        collected.forget_named_stacks();
        true
    }

    /// Name one sample's stack and intern it (cut at `max_stacks`).
    fn name_stack(
        &mut self,
        collected: &Collected,
        s: &RawSample,
        symbolizer: &mut Symbolizer,
        code: &CodeMap,
        walker: &mut StackWalker,
        leaf_first: &mut Vec<FrameId>,
    ) -> NamedStack {
        leaf_first.clear();
        for ip in &s.kernel {
            leaf_first.push(symbolizer.kernel_frame(&mut self.profile, *ip));
        }
        if s.in_kernel && s.kernel.is_empty() {
            // Time in a system call or fault, without --kernel's callchain.
            let profile = &mut self.profile;
            let kernel = *self.kernel_leaf.get_or_insert_with(|| {
                profile.intern_frame(Frame::named("[kernel]", FrameKind::Kernel))
            });
            leaf_first.push(kernel);
        }
        let mut top_compiled = None;
        let mut same_names = 0..u64::MAX;
        for f in &collected.stacks[s.stack as usize] {
            let precise = symbolizer.frames(
                &mut self.profile,
                code,
                walker,
                (f, s.time),
                &mut same_names,
                leaf_first,
            );
            top_compiled = top_compiled.or(precise);
        }
        leaf_first.reverse();
        // The marker frame exists only in profiles that reached the limit.
        let marker = if self.profile.stacks.len() >= self.max_stacks {
            let profile = &mut self.profile;
            *self.cut_marker.get_or_insert_with(|| {
                profile.intern_frame(Frame::named("[truncated: --max-stacks]", FrameKind::Stub))
            })
        } else {
            FrameId::MAX
        };
        let (stack, cut) = self
            .profile
            .intern_stack_within(leaf_first, self.max_stacks, marker);
        NamedStack {
            stack,
            cut,
            top_compiled,
            same_names,
        }
    }
}

/// A raw stack as named for samples taken within `same_names`.
#[derive(Clone)]
struct NamedStack {
    stack: u32,
    cut: bool,
    /// Whether the top compiled frame's code was compiled after the attach, if there is one.
    top_compiled: Option<bool>,
    same_names: std::ops::Range<u64>,
}
