//! `jvmperf dump -p PID`: every thread's stack at one instant — Java (compiled, interpreted),
//! native and kernel frames — printed like jstack, without attaching to the JVM and without a
//! safepoint, so it works on a JVM that is stuck (where jstack and jcmd hang) and on one that
//! refuses attach. Each thread is stopped only for a register read and one stack read (see
//! `target::freeze`); walking and naming happen after it runs on.
//!
//! Compiled frames are named from their nmethod's `Method*` (the shim's inline records are not
//! there without an attach), so a method inlined into compiled code shows as its compiled caller.

use crate::error::Result;
use crate::hotspot::{threads, HotSpot};
use crate::jit::codemap::CodeMap;
use crate::native::NativeUnwinder;
use crate::profile::{Frame, FrameKind, Profile};
use crate::symbolize::{Symbolizer, WarmingSymbols};
use crate::target::freeze::{self, Captured};
use crate::target::TargetProcess;
use crate::walker::StackWalker;
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
                let mut ids = Vec::new();
                for raw in &walk.frames {
                    let mut same = 0..u64::MAX;
                    symbolizer.frames(
                        &mut profile,
                        &code,
                        &mut walker,
                        (raw, time_ns),
                        &mut same,
                        &mut ids,
                    );
                }
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
