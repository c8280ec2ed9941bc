//! `jvmperf dump -p PID`: every thread's stack at one instant — Java (compiled, interpreted),
//! native and kernel frames — printed like jstack, without attaching to the JVM and without a
//! safepoint, so it works on a JVM that is stuck (where jstack and jcmd hang) and on one that
//! refuses attach. Each thread is stopped only for a register read and one stack read (see
//! `process::freeze`); walking and naming happen after it runs on.
//!
//! Compiled frames, and the methods inlined into them, are named from the nmethod's own debug
//! info (`hotspot::scopes`), since the shim's records are not there without an attach. Without
//! `DebugNonSafepoints` (off unless jvmperf attached once, or set on the command line) C2 keeps
//! debug info only at calls and safepoint polls, and a top frame between two is named by the next.

use crate::error::Result;
use crate::hotspot::scopes::ScopeLayout;
use crate::hotspot::{threads, HotSpot};
use crate::jit::codemap::CodeMap;
use crate::native::NativeUnwinder;
use crate::process::freeze::{self, Captured};
use crate::process::{TargetMemory, TargetProcess};
use crate::profile::{Frame, FrameId, FrameKind, Profile};
use crate::symbolize::{Symbolizer, WarmingSymbols};
use crate::walker::{RawFrame, StackWalker, Walk};
use serde::Serialize;
use std::collections::HashMap;

#[derive(clap::Args)]
pub struct DumpOptions {
    /// Process id of the JVM.
    #[arg(short, long)]
    pub pid: u32,
    /// Print JSON (one object: the threads with their frames) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Bytes of each thread's stack read while it is stopped; frames beyond are read after it
    /// runs on, while the stack there is unchanged.
    #[arg(long, default_value_t = 65536)]
    pub stack_size: usize,
}

#[derive(Serialize)]
struct Dump {
    pid: u32,
    /// CLOCK_MONOTONIC ns (as System.nanoTime) just before the first thread was stopped.
    time_ns: u64,
    threads: Vec<ThreadDump>,
}

#[derive(Serialize)]
struct ThreadDump {
    tid: u32,
    name: String,
    /// The kernel's state letter (R running, S sleeping, D uninterruptible, …).
    os_state: String,
    /// HotSpot's state of a Java thread (in Java, in VM, in native, blocked); none for others.
    java_state: Option<String>,
    /// How the registers were taken: `stopped` (ptrace), `blocked` (/proc syscall file).
    captured: Option<&'static str>,
    /// Why the thread has no stack, or why its stack ends before the thread's root.
    note: Option<String>,
    /// Leaf first.
    frames: Vec<DumpFrame>,
}

#[derive(Serialize)]
struct DumpFrame {
    name: String,
    kind: &'static str,
    file: Option<String>,
    line: Option<u32>,
    bci: Option<i32>,
    module: Option<String>,
}

pub fn run(opts: &DumpOptions) -> Result<()> {
    // Threads stand stopped while jvmperf reads them: it must not wait for a CPU meanwhile.
    let _priority = crate::priority::raise(&[opts.pid]);
    let dump = take(opts)?;
    if opts.json {
        let text = serde_json::to_string_pretty(&dump).expect("a dump serializes");
        println!("{text}");
    } else {
        print!("{}", text(&dump));
    }
    Ok(())
}

fn take(opts: &DumpOptions) -> Result<Dump> {
    let process = TargetProcess::open(opts.pid)?;
    process.maps()?;
    let hotspot = HotSpot::open(&process)?;
    let mut walker = StackWalker::new(&hotspot, NativeUnwinder::new(&process)?);
    let warming = WarmingSymbols::start(&walker.native);
    let java_threads = threads::JavaThreads::read(&hotspot.vmstructs, &hotspot.mem);
    let ours_to_theirs: HashMap<u32, u32> = process
        .ns_tid_map()
        .into_iter()
        .map(|(theirs, ours)| (ours, theirs))
        .collect();
    let time_ns = crate::profile::monotonic_now_ns();
    // Each thread's HotSpot state is read while it is held, with its registers.
    let captured: Vec<_> = process
        .threads()
        .into_iter()
        .map(|tid| {
            let theirs = ours_to_theirs.get(&tid).copied().unwrap_or(tid);
            let mut java_state = None;
            let snapshot = freeze::capture(opts.pid, tid, opts.stack_size, &mut || {
                java_state = java_threads
                    .as_ref()
                    .and_then(|t| t.state(&hotspot.mem, theirs));
            });
            (tid, java_state, snapshot)
        })
        .collect();

    let (native, _) = warming.join();
    let mut symbolizer = Symbolizer::new(walker.method_layout().cloned(), hotspot.mem, native);
    let scopes = ScopeLayout::discover(&hotspot.vmstructs, &hotspot.mem);
    let code = CodeMap::new();
    let mut profile = Profile::default();
    let mut threads = Vec::new();
    for (tid, java_state, snapshot) in captured {
        let mut thread = ThreadDump {
            tid,
            name: process.thread_comm(tid).unwrap_or_default(),
            os_state: freeze::os_state(opts.pid, tid)
                .map(String::from)
                .unwrap_or_default(),
            java_state,
            captured: None,
            note: None,
            frames: kernel_frames(opts.pid, tid),
        };
        match snapshot {
            Err(why) => thread.note = Some(why),
            Ok(snap) => {
                thread.captured = Some(match snap.captured {
                    Captured::Stopped => "stopped",
                    Captured::Blocked => "blocked",
                });
                let walk = walker.walk(&snap.regs, &snap.stack);
                let naming = Naming {
                    symbolizer: &mut symbolizer,
                    scopes: scopes.as_ref(),
                    code: &code,
                    time_ns,
                };
                let ids = naming.name(&walk, &mut walker, &mut profile);
                thread.frames.extend(
                    ids.iter()
                        .map(|&id| dump_frame(&profile.frames[id as usize])),
                );
                if let Some(why) = walk.truncated {
                    thread.note = Some(format!("stack ends early: {why:?}"));
                }
            }
        }
        threads.push(thread);
    }
    Ok(Dump {
        pid: opts.pid,
        time_ns,
        threads,
    })
}

/// How `dump` names a walked stack: compiled frames, and the methods inlined into them, from the
/// nmethod's own debug info where `scopes` decodes it; everything else through the symbolizer and
/// `code` (empty: nothing reported code loads).
pub(crate) struct Naming<'a, M> {
    pub symbolizer: &'a mut Symbolizer<M>,
    pub scopes: Option<&'a ScopeLayout>,
    pub code: &'a CodeMap,
    pub time_ns: u64,
}

impl<M: TargetMemory + Copy> Naming<'_, M> {
    /// The frames of `walk`, leaf first, interned into `profile`.
    pub fn name(
        self,
        walk: &Walk,
        walker: &mut StackWalker<M>,
        profile: &mut Profile,
    ) -> Vec<FrameId> {
        let mut ids = Vec::new();
        for (i, raw) in walk.frames.iter().enumerate() {
            if let (RawFrame::Compiled { pc, .. }, Some(scopes)) = (raw, self.scopes) {
                let mem = walker.memory();
                let chain = walker.blob_for(*pc).and_then(|blob| {
                    scopes.methods_at(&mem, blob.start, blob.code_begin, *pc, i > 0)
                });
                if let Some(chain) = chain {
                    self.symbolizer
                        .frames_from_scopes(profile, &chain, &mut ids);
                    continue;
                }
            }
            let mut same = 0..u64::MAX;
            self.symbolizer.frames(
                profile,
                self.code,
                walker,
                (raw, self.time_ns),
                &mut same,
                &mut ids,
            );
        }
        ids
    }
}

/// The kernel's stack of a thread in a system call or fault, leaf first, from
/// `/proc/<pid>/task/<tid>/stack` (root only; empty for a thread running in user space).
fn kernel_frames(pid: u32, tid: u32) -> Vec<DumpFrame> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stack")).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            // `[<0>] futex_wait_queue+0x60/0x90`
            let symbol = line.split_once("] ")?.1;
            let name = symbol.split('+').next()?.trim();
            (!name.is_empty()).then(|| dump_frame(&Frame::named(name, FrameKind::Kernel)))
        })
        .collect()
}

fn dump_frame(f: &Frame) -> DumpFrame {
    DumpFrame {
        name: f.name.clone(),
        kind: kind_name(f.kind),
        file: f.file.as_deref().map(String::from),
        line: f.line,
        bci: f.bci.filter(|_| f.kind.is_java()),
        module: f.module.as_deref().map(String::from),
    }
}

fn kind_name(kind: FrameKind) -> &'static str {
    match kind {
        FrameKind::Jit => "compiled",
        FrameKind::Inlined => "inlined",
        FrameKind::Interpreted => "interpreted",
        FrameKind::Native => "native",
        FrameKind::Kernel => "kernel",
        FrameKind::Stub => "stub",
        FrameKind::Thread => "thread",
        FrameKind::Allocated => "allocated class",
        FrameKind::Lock => "lock class",
    }
}

/// jstack-like text: a header line per thread at column 0, its frames indented below, leaf first.
fn text(dump: &Dump) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "jvmperf dump of JVM {} at {} ns (CLOCK_MONOTONIC): {} threads\n",
        dump.pid,
        dump.time_ns,
        dump.threads.len()
    );
    for t in &dump.threads {
        let _ = write!(out, "\n\"{}\" tid={} os={}", t.name, t.tid, t.os_state);
        if let Some(state) = &t.java_state {
            let _ = write!(out, " java={state}");
        }
        out.push('\n');
        for f in &t.frames {
            let place = match (&f.file, f.line, &f.module) {
                (Some(file), Some(line), _) => format!(" ({file}:{line})"),
                (Some(file), None, _) => format!(" ({file})"),
                (None, _, Some(module)) => format!(" ({module})"),
                _ => String::new(),
            };
            let _ = writeln!(out, "    {}{place} [{}]", f.name, f.kind);
        }
        if let Some(note) = &t.note {
            let _ = writeln!(out, "    [{note}]");
        }
    }
    out
}
