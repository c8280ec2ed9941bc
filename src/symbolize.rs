//! Names for raw frames: compiled Java frames through the time-versioned code map (inlined chain,
//! bci, line), interpreted frames through `Method*` (VMStructs), native frames through the ELF/DWARF
//! symbolizer, kernel frames through kallsyms. Frames are interned into the profile once per distinct
//! address (and code version); naming a sample is a few hash lookups.

use crate::hotspot::method::{MethodLayout, MethodName, MethodNames};
use crate::java_names::class_name;
use crate::jit::codemap::{CodeEntry, CodeKind, CodeMap};
use crate::native::{KernelSymbols, NativeSymbolizer, NativeUnwinder};
use crate::process::{ProcessMemory, TargetMemory};
use crate::profile::{Frame, FrameId, FrameKind, Profile};
use crate::walker::{RawFrame, StackWalker};
use foldhash::{HashMap, HashSet};
use nix::time::{clock_gettime, ClockId};
use std::sync::Arc;
use std::time::Duration;

/// Names frames; lives for a whole recording so its caches (and loaded debug info) are built once.
/// `Method*`s are read through `M`: the live process, or a snapshot in tests.
pub struct Symbolizer<M = ProcessMemory> {
    methods: Option<MethodLayout>,
    mem: M,
    native_symbols: NativeSymbolizer,
    pub kernel: Option<KernelSymbols>,
    method_cache: HashMap<u64, Option<MethodName>>,
    /// Frames by (code entry start, its load time, pc): one entry per version of the code.
    compiled_cache: HashMap<(u64, u64, u64), Vec<FrameId>>,
    /// By (`Method*`, bci, version of its name in the walker's [`MethodNames`]).
    interpreted_cache: HashMap<(u64, i32, u32), FrameId>,
    /// By (pc, is a return address): where its frames are in `native_frames` (start, count).
    /// Native pcs only add up over a recording (the compiler threads reach new ones for as long
    /// as it runs), so their frames share one arena.
    native_cache: HashMap<(u64, bool), (u32, u32)>,
    native_frames: Vec<FrameId>,
    stub_cache: HashMap<String, FrameId>,
    kernel_cache: HashMap<u64, FrameId>,
    /// Sizes of the code-versioned caches after they were last cleaned of stale versions.
    cleaned_sizes: (usize, usize),
    /// Compiled frames whose code was unknown to the code map (resolved through `Method*`).
    pub unresolved_compiled: u64,
    /// CPU time spent loading native debug info ahead of the first naming pass.
    pub debug_info_cpu: Duration,
}

fn java_frame(
    qualified: String,
    kind: FrameKind,
    m_sig: &str,
    file: &str,
    line: Option<u32>,
    bci: i32,
    start_line: Option<u32>,
) -> Frame {
    Frame {
        name: qualified,
        kind,
        file: (!file.is_empty()).then(|| file.into()),
        line,
        bci: Some(bci),
        signature: Some(m_sig.to_string()),
        module: None,
        start_line,
        code: None,
    }
}

/// A Java frame from a method read through VMStructs; unknown methods share one name (their
/// `Method*` may be gone or reused), so they cannot multiply distinct stacks.
fn frame_from_method(method: Option<&MethodName>, bci: i32, kind: FrameKind) -> Frame {
    let Some(m) = method else {
        return Frame {
            bci: Some(bci),
            ..Frame::named("[unknown Method*]", kind)
        };
    };
    let line = if bci >= 0 {
        m.lines
            .iter()
            .filter(|l| i64::from(l.0) <= i64::from(bci))
            .max_by_key(|l| l.0)
            .map(|l| l.1)
    } else {
        None
    };
    java_frame(
        format!("{}.{}", class_name(&m.class), m.name),
        kind,
        &m.signature,
        "",
        line,
        bci,
        m.lines.iter().min_by_key(|l| l.0).map(|l| l.1),
    )
}

/// Native debug info being opened on a thread of its own, and what it is doing now.
pub struct WarmingSymbols {
    thread: std::thread::JoinHandle<(NativeSymbolizer, Duration)>,
    activity: Arc<std::sync::Mutex<String>>,
}

impl WarmingSymbols {
    /// Open the debug info of every native module of the target (libjvm first), building the
    /// symbol caches a first run on this host lacks, on a thread of its own so sampling never
    /// waits for it. The thread reports the CPU time it took: a one-off cost, apart from the
    /// per-sample work.
    pub fn start(native: &NativeUnwinder) -> Self {
        let mut modules: Vec<_> = native
            .modules()
            .all()
            .iter()
            .filter(|m| m.opened_from.is_some())
            .cloned()
            .collect();
        modules.sort_by_key(|m| m.name != "libjvm.so");
        let activity = Arc::new(std::sync::Mutex::new(String::new()));
        let status = activity.clone();
        let own_nice = crate::priority::own_nice();
        let thread = std::thread::spawn(move || {
            // Below the thread that drains the ring buffers: they hold only ~250 ms of samples.
            // nix's gettid: glibc's is newer than the release binary's floor (priority.rs).
            let tid = nix::unistd::gettid().as_raw() as libc::id_t;
            // SAFETY: setpriority on this thread's own tid has no memory effects.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, (own_nice + 10).min(19)) };
            let mut symbols = NativeSymbolizer::new();
            for m in &modules {
                symbols.prepare(m, &status);
            }
            let cpu = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
                .map(Duration::from)
                .unwrap_or_default();
            (symbols, cpu)
        });
        WarmingSymbols { thread, activity }
    }

    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// What the thread is busy with, e.g. building the symbol cache of libjvm.so.
    pub fn activity(&self) -> String {
        self.activity.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// The ready symbolizer and the CPU time its warm-up took.
    pub fn join(self) -> (NativeSymbolizer, Duration) {
        self.thread
            .join()
            .unwrap_or_else(|_| (NativeSymbolizer::new(), Duration::ZERO))
    }
}

impl<M: TargetMemory> Symbolizer<M> {
    pub fn new(methods: Option<MethodLayout>, mem: M, native_symbols: NativeSymbolizer) -> Self {
        Symbolizer {
            methods,
            mem,
            native_symbols,
            kernel: None,
            method_cache: HashMap::default(),
            compiled_cache: HashMap::default(),
            interpreted_cache: HashMap::default(),
            native_cache: HashMap::default(),
            native_frames: Vec::new(),
            stub_cache: HashMap::default(),
            kernel_cache: HashMap::default(),
            cleaned_sizes: (0, 0),
            unresolved_compiled: 0,
            debug_info_cpu: Duration::ZERO,
        }
    }

    /// Where native symbols came from, for the record summary: the cache directory, and which
    /// caches were built by this run.
    pub fn native_symbol_caches(&self) -> String {
        let dir = match self.native_symbols.cache() {
            Ok(dir) => dir.path().display().to_string(),
            Err(why) => return format!("no symbol cache ({why}): debug info was read into memory"),
        };
        if self.native_symbols.built.is_empty() {
            return format!("native symbols from the cache in {dir}");
        }
        let built = &self.native_symbols.built;
        let total: Duration = built.iter().map(|(_, took)| *took).sum();
        let slow: Vec<String> = built
            .iter()
            .filter(|(_, took)| *took >= Duration::from_millis(100))
            .map(|(name, took)| format!("{name} {:.1} s", took.as_secs_f64()))
            .collect();
        let slow = if slow.is_empty() {
            String::new()
        } else {
            format!(" ({})", slow.join(", "))
        };
        format!(
            "built the symbol caches of {} modules in {:.1} s{slow} in {dir}: the first use of these builds on this host, later runs reuse them",
            built.len(),
            total.as_secs_f64(),
        )
    }

    fn method_by_ptr(&mut self, method: u64) -> Option<&MethodName> {
        let (layout, mem) = (self.methods.as_ref()?, &self.mem);
        self.method_cache
            .entry(method)
            .or_insert_with(|| layout.read(mem, method))
            .as_ref()
    }

    /// Forget cached names of code versions no longer in `code` (unloaded and pruned) and of
    /// `Method*`s re-read for a new method: a JVM that keeps loading classes makes new versions
    /// without end, while the frames they named stay interned in the profile. Each cache is
    /// cleaned only once it has doubled since its last cleaning, so the work is amortized.
    pub fn forget_stale_versions(&mut self, code: &CodeMap, names: &MethodNames) {
        const MIN: usize = 4096;
        let (compiled, interpreted) = self.cleaned_sizes;
        if self.compiled_cache.len() > (2 * compiled).max(MIN) {
            let live: HashSet<(u64, u64)> = code
                .entries()
                .iter()
                .map(|e| (e.start, e.load_time))
                .collect();
            self.compiled_cache
                .retain(|&(start, load_time, _), _| live.contains(&(start, load_time)));
            self.cleaned_sizes.0 = self.compiled_cache.len();
        }
        if self.interpreted_cache.len() > (2 * interpreted).max(MIN) {
            self.interpreted_cache.retain(|&(method, _, version), _| {
                names.get(method).map_or(u32::MAX, |(_, v)| v) == version
            });
            self.cleaned_sizes.1 = self.interpreted_cache.len();
        }
    }

    /// Interns the frames of compiled code from its decoded debug info (`hotspot::scopes`):
    /// `chain` is (`Method*`, bci), innermost first, the nmethod's own method last.
    pub fn frames_from_scopes(
        &mut self,
        profile: &mut Profile,
        chain: &[(u64, i32)],
        out: &mut Vec<FrameId>,
    ) {
        let last = chain.len().saturating_sub(1);
        for (i, &(method, bci)) in chain.iter().enumerate() {
            let kind = if i == last {
                FrameKind::Jit
            } else {
                FrameKind::Inlined
            };
            // HotSpot's method-entry bci (-1) reads as bytecode 0, as in `compiled`.
            let frame = self.frame_from_method_ptr(method, bci.max(0), kind);
            out.push(profile.intern_frame(frame));
        }
    }

    /// Forget every cached frame id: the profile they point into was taken away (a daemon's
    /// interval) and the next frames go to a new one. Names read from the target stay cached.
    pub fn forget_frames(&mut self) {
        self.compiled_cache.clear();
        self.interpreted_cache.clear();
        self.native_cache.clear();
        self.native_frames.clear();
        self.stub_cache.clear();
        self.kernel_cache.clear();
        self.cleaned_sizes = (0, 0);
    }

    /// A compiled frame the code map could not name, named through its `Method*` now.
    fn frame_from_method_ptr(&mut self, method: u64, bci: i32, kind: FrameKind) -> Frame {
        frame_from_method(self.method_by_ptr(method), bci, kind)
    }

    /// Interns the frames (leaf first) of one raw frame of a sample taken at `time` into `profile`,
    /// resolving compiled code against `code` and native code against the walker's modules. Names
    /// are built once per distinct code version and address; a sample costs hash lookups.
    /// For compiled code, returns whether it was compiled after the attach (exact inline info).
    /// `same_names` is narrowed to the times around `time` at which the frame gets the same names.
    pub fn frames<W: TargetMemory + Copy>(
        &mut self,
        profile: &mut Profile,
        code: &CodeMap,
        walker: &mut StackWalker<W>,
        (raw, time): (&RawFrame, u64),
        same_names: &mut std::ops::Range<u64>,
        out: &mut Vec<FrameId>,
    ) -> Option<bool> {
        if let RawFrame::Compiled { pc, .. } | RawFrame::Stub { pc, .. } = *raw {
            let owner = code.same_owner(pc, time);
            *same_names = same_names.start.max(owner.start)..same_names.end.min(owner.end);
        }
        match *raw {
            RawFrame::Compiled { pc, method } => {
                let entry = code.lookup(pc, time);
                let precise = entry.is_some_and(|e| !e.replayed);
                let key = entry.map(|e| (e.start, e.load_time, pc));
                if let Some(ids) = key.and_then(|k| self.compiled_cache.get(&k)) {
                    out.extend_from_slice(ids);
                    return Some(precise);
                }
                let start = out.len();
                let cacheable = self.compiled(profile, code, entry, pc, method, out);
                if let (Some(key), true) = (key, cacheable) {
                    self.compiled_cache.insert(key, out[start..].to_vec());
                }
                return Some(precise);
            }
            RawFrame::Scoped { ref methods, .. } => {
                self.frames_from_scopes(profile, methods, out);
                return Some(false);
            }
            RawFrame::Interpreted { method, bci } => {
                let named = walker.method_names.get(method);
                let key = (method, bci, named.map_or(u32::MAX, |(_, version)| version));
                let id = match self.interpreted_cache.get(&key) {
                    Some(&id) => id,
                    None => {
                        let frame = match named {
                            Some((name, _)) => frame_from_method(name, bci, FrameKind::Interpreted),
                            None => self.frame_from_method_ptr(method, bci, FrameKind::Interpreted),
                        };
                        let id = profile.intern_frame(frame);
                        self.interpreted_cache.insert(key, id);
                        id
                    }
                };
                out.push(id);
            }
            RawFrame::Stub { pc, ref blob } => {
                let name = match code.lookup(pc, time).map(|e| &e.kind) {
                    Some(CodeKind::Blob { name }) => name.as_str(),
                    _ => blob.as_ref(),
                };
                let id = match self.stub_cache.get(name) {
                    Some(&id) => id,
                    None => {
                        let id = profile.intern_frame(Frame::named(name, FrameKind::Stub));
                        self.stub_cache.insert(name.to_string(), id);
                        id
                    }
                };
                out.push(id);
            }
            RawFrame::Object { ref class, kind } => {
                out.push(profile.intern_frame(Frame::named(&**class, kind)));
            }
            RawFrame::Native { pc, return_address } => {
                let key = (pc, return_address);
                if let Some(&(start, n)) = self.native_cache.get(&key) {
                    out.extend_from_slice(&self.native_frames[start as usize..][..n as usize]);
                    return None;
                }
                let frames: Vec<Frame> = match walker.native.module_for(pc) {
                    Some(module) => self
                        .native_symbols
                        .symbolize(&module, pc, return_address)
                        .into_iter()
                        .map(|f| Frame {
                            file: f.file.map(Arc::from),
                            line: f.line,
                            module: Some(module.name.as_str().into()),
                            ..Frame::named(f.function, FrameKind::Native)
                        })
                        .collect(),
                    None => vec![Frame::named(
                        format!("[unknown {pc:#x}]"),
                        FrameKind::Native,
                    )],
                };
                let start = self.native_frames.len();
                self.native_frames
                    .extend(frames.into_iter().map(|f| profile.intern_frame(f)));
                out.extend_from_slice(&self.native_frames[start..]);
                let n = self.native_frames.len() - start;
                self.native_cache.insert(key, (start as u32, n as u32));
            }
        }
        None
    }

    /// Frames of compiled code at `pc` owned by `entry`; false when a name came from a fallback
    /// that a later record (the method's metadata) could improve, so it must not be cached.
    fn compiled(
        &mut self,
        profile: &mut Profile,
        code: &CodeMap,
        entry: Option<&CodeEntry>,
        pc: u64,
        method: u64,
        out: &mut Vec<FrameId>,
    ) -> bool {
        let nmethod = entry.filter(|e| matches!(e.kind, CodeKind::Nmethod { .. }));
        match nmethod.and_then(|e| e.frames_at(pc)) {
            Some(chain) if !chain.is_empty() => {
                let last = chain.len() - 1;
                let mut complete = true;
                for (i, &(m, bci)) in chain.iter().enumerate() {
                    // -1 is HotSpot's method-entry bci (InvocationEntryBci); like its
                    // compiledVFrame::bci(), report it as bytecode 0.
                    let bci = if bci == -1 { 0 } else { bci };
                    let kind = if i == last {
                        FrameKind::Jit
                    } else {
                        FrameKind::Inlined
                    };
                    let mut frame = match code.method(m) {
                        Some(info) => java_frame(
                            info.qualified_name(),
                            kind,
                            &info.signature,
                            &info.source_file,
                            info.line_of(bci),
                            bci,
                            info.line_of(-1),
                        ),
                        None => {
                            complete = false;
                            self.frame_from_method_ptr(method, bci, kind)
                        }
                    };
                    if kind == FrameKind::Jit {
                        frame.code = nmethod.and_then(CodeEntry::compiled);
                    }
                    out.push(profile.intern_frame(frame));
                }
                complete
            }
            _ => {
                // Known code without a debug point here, or code the shim has not reported. For
                // known code, bci 0 as HotSpot's own walkers give it (native wrappers, and
                // fill_from_compiled_native_frame for pcs without a PcDesc).
                if let Some(info) = entry.and_then(|e| e.method()).and_then(|m| code.method(m)) {
                    let frame = Frame {
                        code: entry.and_then(CodeEntry::compiled),
                        ..java_frame(
                            info.qualified_name(),
                            FrameKind::Jit,
                            &info.signature,
                            &info.source_file,
                            None,
                            0,
                            info.line_of(-1),
                        )
                    };
                    out.push(profile.intern_frame(frame));
                    return true;
                }
                self.unresolved_compiled += 1;
                let frame = self.frame_from_method_ptr(method, -1, FrameKind::Jit);
                out.push(profile.intern_frame(frame));
                false
            }
        }
    }

    pub fn kernel_frame(&mut self, profile: &mut Profile, ip: u64) -> FrameId {
        if let Some(&id) = self.kernel_cache.get(&ip) {
            return id;
        }
        let kernel = self.kernel.get_or_insert_with(|| {
            KernelSymbols::load().unwrap_or_else(|_| KernelSymbols::parse(""))
        });
        let id = profile.intern_frame(Frame::named(kernel.symbolize(ip), FrameKind::Kernel));
        self.kernel_cache.insert(ip, id);
        id
    }
}
