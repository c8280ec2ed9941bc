//! The one profile model every output reads: interned frames and stacks, and samples with their
//! thread and CLOCK_MONOTONIC time.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

mod stacks;
pub use stacks::Stacks;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// Compiled Java code (the nmethod's own method).
    Jit,
    /// A Java method inlined into compiled code.
    Inlined,
    Interpreted,
    Native,
    Kernel,
    /// HotSpot stubs, adapters, the interpreter's own code.
    Stub,
    /// The synthetic root frame naming a thread (`--threads`).
    Thread,
    /// The class of an object allocated (the leaf of an allocation sample).
    Allocated,
    /// The class of a lock waited for (the leaf of a lock sample).
    Lock,
}

impl FrameKind {
    /// Every kind, in the order of their numbers in the `.jvmperf` format: add new kinds at the end.
    pub const ALL: [FrameKind; 9] = [
        FrameKind::Jit,
        FrameKind::Inlined,
        FrameKind::Interpreted,
        FrameKind::Native,
        FrameKind::Kernel,
        FrameKind::Stub,
        FrameKind::Thread,
        FrameKind::Allocated,
        FrameKind::Lock,
    ];

    /// A frame of a Java method (compiled, inlined or interpreted).
    pub fn is_java(self) -> bool {
        matches!(
            self,
            FrameKind::Jit | FrameKind::Inlined | FrameKind::Interpreted
        )
    }
}

/// One version of a method's compiled code, as HotSpot's nmethod header describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompiledCode {
    /// HotSpot's compilation level (`compiler/compilerDefinitions.hpp CompLevel`): 1–3 C1
    /// (without, with some, with full profiling), 4 C2; 0 when unknown.
    pub level: u8,
    /// HotSpot's compile id (LogCompilation's `compile_id`); 0 when unknown.
    pub compile_id: u32,
    /// The bci an on-stack-replacement compile enters at; `None` for a normal compile.
    pub osr_bci: Option<i32>,
    /// Bytes of instructions (0 when unknown).
    pub code_size: u32,
}

impl CompiledCode {
    /// Two versions of one method's code, a C2 OSR compile and a C1 one, for format tests.
    #[cfg(test)]
    pub(crate) const TEST_VERSIONS: [CompiledCode; 2] = [
        CompiledCode {
            level: 4,
            compile_id: 812,
            osr_bci: Some(5),
            code_size: 1024,
        },
        CompiledCode {
            level: 3,
            compile_id: 700,
            osr_bci: None,
            code_size: 512,
        },
    ];

    /// Compiled by C1 (levels 1–3).
    pub fn is_c1(&self) -> bool {
        (1..=3).contains(&self.level)
    }

    /// `C1 level 3`, `C2`, with ` OSR@bci` for on-stack-replacement code.
    pub fn tier_name(&self) -> String {
        let tier = match self.level {
            4 => "C2".to_string(),
            l @ 1..=3 => format!("C1 level {l}"),
            _ => "tier ?".to_string(),
        };
        match self.osr_bci {
            Some(bci) => format!("{tier} OSR@{bci}"),
            None => tier,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// `package.Class.method` for Java, the symbol for native code.
    pub name: String,
    pub kind: FrameKind,
    /// Shared by every frame of the file (see [`Profile::intern_frame`]).
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    /// Bytecode index for Java frames (−1 when unknown).
    pub bci: Option<i32>,
    /// JVM method descriptor for Java frames, e.g. `(IJ)V`.
    pub signature: Option<String>,
    /// Native module (file name) for native frames.
    /// Shared by every frame of the module.
    pub module: Option<Arc<str>>,
    /// First line of the method's line table, for Java frames.
    pub start_line: Option<u32>,
    /// For `Jit` frames: the code version the frame ran in.
    pub code: Option<CompiledCode>,
}

impl Frame {
    /// A frame with only a name and a kind.
    pub fn named(name: impl Into<String>, kind: FrameKind) -> Frame {
        Frame {
            name: name.into(),
            kind,
            file: None,
            line: None,
            bci: None,
            signature: None,
            module: None,
            start_line: None,
            code: None,
        }
    }

    /// The method a frame is counted under by `report` (and the HTML page's tables): its name,
    /// `symbol [kernel]` for kernel code, `None` for the synthetic thread roots. Compiled, inlined
    /// and interpreted frames of one method share it.
    pub fn method_key(&self) -> Option<String> {
        match self.kind {
            FrameKind::Thread => None,
            FrameKind::Kernel => Some(format!("{} [kernel]", self.name)),
            _ => Some(self.name.clone()),
        }
    }

    /// (`package.Class`, `method`) of a Java frame's name; the class is empty when the name has
    /// no dot (a method of unknown identity).
    pub fn class_and_method(&self) -> (&str, &str) {
        match self.name.rsplit_once('.') {
            Some((class, method)) => (class, method),
            None => ("", &self.name),
        }
    }
}

/// The largest weight one sample may carry in a file read back: 2^44 is 4.9 hours of one
/// thread's waits for locks at one stack in nanoseconds, 16 TiB allocated, 17 trillion CPU samples.
/// Larger ones mean a damaged file, and bounding them keeps sums of weights from overflowing (a
/// million samples at the bound still add up within a u64).
pub const MAX_WEIGHT: u64 = 1 << 44;

pub type FrameId = u32;
pub type StackId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// CLOCK_MONOTONIC ns (0 when the source format keeps no time).
    pub time: u64,
    pub tid: u32,
    pub stack: StackId,
    /// How many samples this one stands for: 1 from a recording; aggregated formats (iprof,
    /// pprof, collapsed) read back as one weighted sample per stack.
    pub weight: u64,
}

#[derive(Debug, Default, Clone)]
pub struct Profile {
    pub frames: Vec<Frame>,
    /// Ids of `frames`, hashed by the frame (each frame is stored once, in `frames`).
    frame_ids: hashbrown::HashTable<FrameId>,
    frame_hasher: foldhash::fast::RandomState,
    /// File and module names, each stored once: native frames repeat them by the thousand.
    paths: foldhash::HashSet<Arc<str>>,
    /// Each stack root first, leaf last.
    pub stacks: Stacks,
    pub samples: Vec<Sample>,
    pub thread_names: HashMap<u32, String>,
    /// Sampling period in ns (1e9 / frequency); 0 when unknown.
    pub period_ns: u64,
    /// CLOCK_MONOTONIC ns when the recording started (0 when unknown).
    pub start_ns: u64,
    /// The span of time the profile covers, when it is one interval of a longer recording (the
    /// daemon's files): its start on the wall clock (ns since the Unix epoch) and its length.
    pub interval: Option<WallInterval>,
    /// Labels of the whole profile (host, pid, main class...): pprof puts them on every sample.
    pub labels: Vec<(String, String)>,
    /// Free-form notes on the profile (the rate in effect, samples lost): pprof comments.
    pub comments: Vec<String>,
    /// What a period is of: CPU time, or wall-clock time (`record --wall`); or that weights are
    /// bytes allocated (`record -e alloc`) or nanoseconds waited for locks (`record -e lock`).
    pub clock: Clock,
    /// The target's CPU time over the sampled window, when known: samples on a CPU are expected
    /// to number `cpu_time_ns / period_ns` (their coverage).
    pub cpu_time_ns: Option<u64>,
}

/// Samples added up: their weights, and how many there were (a lock profile's waits).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub weight: u64,
    pub samples: u64,
}

/// What a sample's weight counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// Periods of CPU time.
    #[default]
    Cpu,
    /// Periods of wall-clock time.
    Wall,
    /// Bytes allocated (`record -e alloc`).
    Alloc,
    /// Nanoseconds waited for a lock (`record -e lock`).
    Lock,
}

impl Clock {
    /// As pprof names the sample type.
    pub fn name(self) -> &'static str {
        match self {
            Clock::Cpu => "cpu",
            Clock::Wall => "wall",
            Clock::Alloc => "alloc_space",
            Clock::Lock => "delay",
        }
    }

    /// What one unit of weight is, as outputs label it.
    pub fn unit(self) -> &'static str {
        match self {
            Clock::Cpu | Clock::Wall => "samples",
            Clock::Alloc => "bytes",
            Clock::Lock => "nanoseconds",
        }
    }

    /// Weights are periods of time (`period_ns` each), not counts of something else.
    pub fn is_time(self) -> bool {
        matches!(self, Clock::Cpu | Clock::Wall)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallInterval {
    pub start_unix_ns: u64,
    pub duration_ns: u64,
}

impl Profile {
    pub fn intern_frame(&mut self, mut frame: Frame) -> FrameId {
        let hash = self.frame_hasher.hash_one(&frame);
        let frames = &self.frames;
        if let Some(&id) = self
            .frame_ids
            .find(hash, |&id| frames[id as usize] == frame)
        {
            return id;
        }
        let id = frames.len() as FrameId;
        for path in [&mut frame.file, &mut frame.module].into_iter().flatten() {
            match self.paths.get(path) {
                Some(shared) => *path = shared.clone(),
                None => {
                    self.paths.insert(path.clone());
                }
            }
        }
        self.frames.push(frame);
        let (frames, hasher) = (&self.frames, &self.frame_hasher);
        self.frame_ids
            .insert_unique(hash, id, |&id| hasher.hash_one(&frames[id as usize]));
        id
    }

    pub fn intern_stack(&mut self, root_to_leaf: Vec<FrameId>) -> StackId {
        self.intern_stack_slice(&root_to_leaf)
    }

    pub fn intern_stack_slice(&mut self, root_to_leaf: &[FrameId]) -> StackId {
        self.stacks.intern(root_to_leaf)
    }

    /// Like [`Self::intern_stack_slice`] while there are fewer than `limit` stacks; past it, a new
    /// stack is cut after its longest known prefix and ends in `marker` (the flag says so).
    pub fn intern_stack_within(
        &mut self,
        root_to_leaf: &[FrameId],
        limit: usize,
        marker: FrameId,
    ) -> (StackId, bool) {
        self.stacks.intern_within(root_to_leaf, limit, marker)
    }

    /// Intern `root_to_leaf` and add `weight` samples of it without a time, as formats that keep
    /// only counts read back.
    pub fn add_counted(&mut self, root_to_leaf: Vec<FrameId>, tid: u32, weight: u64) {
        let stack = self.intern_stack(root_to_leaf);
        if weight > 0 {
            self.samples.push(Sample {
                time: 0,
                tid,
                stack,
                weight,
            });
        }
    }

    pub fn thread_name(&self, tid: u32) -> String {
        self.thread_names
            .get(&tid)
            .cloned()
            .unwrap_or_else(|| format!("tid-{tid}"))
    }

    /// Samples counted with their weights.
    pub fn total_weight(&self) -> u64 {
        self.samples.iter().map(|s| s.weight).sum()
    }

    /// Summed weight per stack, indexed by stack id.
    pub fn stack_weights(&self) -> Vec<u64> {
        let mut w = vec![0u64; self.stacks.len()];
        for s in &self.samples {
            w[s.stack as usize] += s.weight;
        }
        w
    }

    /// Summed weight per (stack, thread), in order of first appearance.
    pub fn weights_by_stack_and_thread(&self) -> Vec<((StackId, u32), Tally)> {
        let mut index: HashMap<(StackId, u32), usize> = HashMap::new();
        let mut out: Vec<((StackId, u32), Tally)> = Vec::new();
        for s in &self.samples {
            let key = (s.stack, s.tid);
            let i = *index.entry(key).or_insert_with(|| {
                out.push((key, Tally::default()));
                out.len() - 1
            });
            out[i].1.weight += s.weight;
            out[i].1.samples += 1;
        }
        out
    }

    /// A compact copy holding only the samples `keep` accepts, and only the stacks, frames and
    /// thread names they use.
    pub fn retain_samples(&self, keep: impl Fn(&Sample) -> bool) -> Profile {
        let mut out = Profile {
            period_ns: self.period_ns,
            start_ns: self.start_ns,
            interval: self.interval,
            labels: self.labels.clone(),
            clock: self.clock,
            ..Default::default()
        };
        out.add_samples_of(self, keep);
        out
    }

    /// Add the samples of `other` that `keep` accepts, with their stacks, frames and thread
    /// names (a thread name already known for a tid stays).
    pub fn add_samples_of(&mut self, this: &Profile, keep: impl Fn(&Sample) -> bool) {
        let out = self;
        let mut frame_map: Vec<Option<FrameId>> = vec![None; this.frames.len()];
        let mut stack_map: Vec<Option<StackId>> = vec![None; this.stacks.len()];
        for s in this.samples.iter().filter(|s| keep(s)) {
            let stack = match stack_map[s.stack as usize] {
                Some(id) => id,
                None => {
                    let ids = this
                        .stacks
                        .frames(s.stack)
                        .into_iter()
                        .map(|f| {
                            *frame_map[f as usize].get_or_insert_with(|| {
                                out.intern_frame(this.frames[f as usize].clone())
                            })
                        })
                        .collect();
                    let id = out.intern_stack(ids);
                    stack_map[s.stack as usize] = Some(id);
                    id
                }
            };
            if let Some(name) = this.thread_names.get(&s.tid) {
                out.thread_names
                    .entry(s.tid)
                    .or_insert_with(|| name.clone());
            }
            out.samples.push(Sample { stack, ..*s });
        }
    }
}

/// CLOCK_MONOTONIC now, in ns: the clock of sample times and of Java's `System.nanoTime`.
/// The wall-clock time (ns since the Unix epoch) of a CLOCK_MONOTONIC instant in the past.
pub fn unix_ns_of_monotonic(monotonic_ns: u64) -> u64 {
    let ago = monotonic_now_ns().saturating_sub(monotonic_ns);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now.saturating_sub(ago)
}

pub fn monotonic_now_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_share_their_file_and_module_names() {
        let mut p = Profile::default();
        let at = |line: u32| Frame {
            file: Some("opto/compile.cpp".into()),
            line: Some(line),
            module: Some("libjvm.so".into()),
            ..Frame::named("Compile::Optimize", FrameKind::Native)
        };
        let (a, b) = (p.intern_frame(at(10)), p.intern_frame(at(20)));
        assert_ne!(a, b);
        assert_eq!(p.intern_frame(at(20)), b);
        let (fa, fb) = (&p.frames[a as usize], &p.frames[b as usize]);
        assert!(Arc::ptr_eq(
            fa.file.as_ref().unwrap(),
            fb.file.as_ref().unwrap()
        ));
        assert!(Arc::ptr_eq(
            fa.module.as_ref().unwrap(),
            fb.module.as_ref().unwrap()
        ));
    }

    #[test]
    fn retain_keeps_only_what_the_kept_samples_use() {
        let mut p = Profile {
            period_ns: 1000,
            start_ns: 5,
            ..Default::default()
        };
        let a = p.intern_frame(Frame::named("a", FrameKind::Native));
        let b = p.intern_frame(Frame::named("b", FrameKind::Native));
        let c = p.intern_frame(Frame::named("c", FrameKind::Native));
        let s1 = p.intern_stack(vec![a, b]);
        let s2 = p.intern_stack(vec![c]);
        p.thread_names.insert(7, "main".into());
        p.thread_names.insert(8, "other".into());
        for (time, tid, stack) in [(10, 7, s1), (20, 8, s2), (30, 7, s1)] {
            p.samples.push(Sample {
                time,
                tid,
                stack,
                weight: 1,
            });
        }
        let kept = p.retain_samples(|s| s.tid == 7);
        assert_eq!(kept.samples.len(), 2);
        assert_eq!(kept.frames.len(), 2);
        assert_eq!(kept.stacks.iter().collect::<Vec<_>>(), [[0, 1]]);
        assert_eq!(kept.thread_names.len(), 1);
        assert_eq!((kept.period_ns, kept.start_ns), (1000, 5));
        assert_eq!(kept.total_weight(), 2);
        assert_eq!(p.stack_weights(), vec![2, 1]);
    }
}
