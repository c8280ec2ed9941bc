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
//!
//! Locks as jstack shows them (`hotspot::locks`): the monitor a thread waits to enter, with its
//! owner, the lock a thread parks for (with libjvm's symbols), and the cycles of threads waiting
//! for monitors each other holds: Java-level deadlocks, found without the safepoint jstack needs.

use crate::error::Result;
use crate::hotspot::locks::{self, LockLayout, PARK_BLOCKER_OFFSET};
use crate::hotspot::method::MethodLayout;
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
    /// Java-level deadlocks: cycles of threads (ids) each waiting for a monitor the next holds.
    deadlocks: Vec<Vec<u32>>,
}

/// A lock a thread waits for.
#[derive(Serialize, Clone)]
struct LockRef {
    /// The locked object's address.
    address: u64,
    /// Its class, where it could be read.
    class: Option<String>,
    /// The thread that holds it, where it could be told.
    owner_tid: Option<u32>,
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
    /// The monitor it blocks on (`synchronized`).
    waiting_to_lock: Option<LockRef>,
    /// The object it parks for (`LockSupport.park(blocker)`).
    parking_for: Option<LockRef>,
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
    let lock_reader = LockReader::new(&hotspot, &process, java_threads.as_ref());
    let time_ns = crate::profile::monotonic_now_ns();
    // Each thread's HotSpot state and what it waits for are read while it is held, with its
    // registers.
    let captured: Vec<_> = process
        .threads()
        .into_iter()
        .map(|tid| {
            let theirs = ours_to_theirs.get(&tid).copied().unwrap_or(tid);
            let mut java_state = None;
            let mut waits = Waits::default();
            let snapshot = freeze::capture(opts.pid, tid, opts.stack_size, &mut || {
                java_state = java_threads
                    .as_ref()
                    .and_then(|t| t.state(&hotspot.mem, theirs));
                if let Some(reader) = &lock_reader {
                    waits = reader.waits(&hotspot.mem, theirs);
                }
            });
            (tid, java_state, waits, snapshot)
        })
        .collect();
    let ours_of = |thread: u64| {
        let theirs = lock_reader.as_ref()?.tid_of(thread)?;
        Some(process_tid(&ours_to_theirs, theirs))
    };

    let (native, _) = warming.join();
    let mut symbolizer = Symbolizer::new(walker.method_layout().cloned(), hotspot.mem, native);
    let scopes = ScopeLayout::discover(&hotspot.vmstructs, &hotspot.mem);
    let code = CodeMap::new();
    let mut profile = Profile::default();
    let mut threads = Vec::new();
    let mut waits_for = Vec::new();
    for (tid, java_state, waits, snapshot) in captured {
        let lock_ref = |w: Option<&Wait>| {
            w.map(|w| LockRef {
                address: w.object,
                class: w.class.clone(),
                owner_tid: w.owner.and_then(ours_of),
            })
        };
        let waiting_to_lock = lock_ref(waits.monitor.as_ref());
        if let Some(owner) = waiting_to_lock.as_ref().and_then(|l| l.owner_tid) {
            waits_for.push((u64::from(tid), u64::from(owner)));
        }
        let mut thread = ThreadDump {
            tid,
            name: process.thread_comm(tid).unwrap_or_default(),
            os_state: freeze::os_state(opts.pid, tid)
                .map(String::from)
                .unwrap_or_default(),
            java_state,
            captured: None,
            note: None,
            waiting_to_lock,
            parking_for: lock_ref(waits.park.as_ref()),
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
    let deadlocks = locks::deadlocks(&waits_for)
        .into_iter()
        .map(|cycle| cycle.into_iter().map(|t| t as u32).collect())
        .collect();
    Ok(Dump {
        pid: opts.pid,
        time_ns,
        threads,
        deadlocks,
    })
}

/// Our id of a thread the JVM numbers `theirs` in its pid namespace.
fn process_tid(ours_to_theirs: &HashMap<u32, u32>, theirs: u32) -> u32 {
    ours_to_theirs
        .iter()
        .find_map(|(&ours, &t)| (t == theirs).then_some(ours))
        .unwrap_or(theirs)
}

/// A lock one thread waits for, as read.
struct Wait {
    object: u64,
    class: Option<String>,
    /// The owner's `JavaThread*`.
    owner: Option<u64>,
}

#[derive(Default)]
struct Waits {
    monitor: Option<Wait>,
    park: Option<Wait>,
}

/// Reads what Java threads wait for.
struct LockReader {
    layout: LockLayout,
    methods: Option<MethodLayout>,
    /// `JavaThread*` by the JVM's thread id, and the list of them.
    by_tid: HashMap<u32, u64>,
    threads: Vec<u64>,
    /// `Thread.parkBlocker`'s offset, with libjvm's symbols.
    blocker_offset: Option<u32>,
}

impl LockReader {
    fn new(
        hotspot: &HotSpot,
        process: &TargetProcess,
        java_threads: Option<&threads::JavaThreads>,
    ) -> Option<LockReader> {
        let by_tid: HashMap<u32, u64> = java_threads?.by_tid.clone().into_iter().collect();
        let blocker_offset = crate::engine::probes::Libjvm::of(process)
            .and_then(|libjvm| libjvm.static_address("lock", PARK_BLOCKER_OFFSET))
            .ok()
            .and_then(|at| locks::park_blocker_offset(&hotspot.mem, at));
        Some(LockReader {
            layout: LockLayout::discover(hotspot)?,
            methods: MethodLayout::discover(&hotspot.vmstructs),
            threads: by_tid.values().copied().collect(),
            by_tid,
            blocker_offset,
        })
    }

    fn tid_of(&self, thread: u64) -> Option<u32> {
        self.by_tid
            .iter()
            .find_map(|(&tid, &t)| (t == thread).then_some(tid))
    }

    fn class(&self, mem: &dyn TargetMemory, object: u64) -> Option<String> {
        let klass = self.layout.objects.klass_of(mem, object)?;
        let name = self.methods.as_ref()?.klass_name(mem, klass)?;
        Some(crate::java_names::class_name(&name))
    }

    /// What thread `tid` (the JVM's id) waits for now.
    fn waits(&self, mem: &dyn TargetMemory, tid: u32) -> Waits {
        let Some(&thread) = self.by_tid.get(&tid) else {
            return Waits::default();
        };
        let monitor = self
            .layout
            .pending_monitor(mem, thread, &self.threads)
            .map(|m| Wait {
                object: m.object,
                class: self.class(mem, m.object),
                owner: m.owner,
            });
        let park = self
            .blocker_offset
            .and_then(|offset| self.layout.park_blocker(mem, thread, offset))
            .map(|object| Wait {
                object,
                class: self.class(mem, object),
                owner: None,
            });
        Waits { monitor, park }
    }
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
        let name_of = |tid: u32| {
            dump.threads
                .iter()
                .find(|t| t.tid == tid)
                .map_or_else(String::new, |t| t.name.clone())
        };
        for (what, lock) in [
            ("waiting to lock", &t.waiting_to_lock),
            ("parking to wait for", &t.parking_for),
        ] {
            if let Some(l) = lock {
                let _ = write!(out, "    - {what} {}", lock_text(l));
                if let Some(owner) = l.owner_tid {
                    let _ = write!(out, " owned by \"{}\" tid={owner}", name_of(owner));
                }
                out.push('\n');
            }
        }
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
    for cycle in &dump.deadlocks {
        let _ = writeln!(
            out,
            "\nFound one Java-level deadlock:\n============================="
        );
        for (i, &tid) in cycle.iter().enumerate() {
            let Some(t) = dump.threads.iter().find(|t| t.tid == tid) else {
                continue;
            };
            let next = cycle[(i + 1) % cycle.len()];
            let held_by = dump
                .threads
                .iter()
                .find(|t| t.tid == next)
                .map_or("", |t| t.name.as_str());
            if let Some(l) = &t.waiting_to_lock {
                let _ = writeln!(
                    out,
                    "\"{}\" tid={tid}:\n  waiting to lock monitor {},\n  which is held by \"{held_by}\" tid={next}",
                    t.name,
                    lock_text(l)
                );
            }
        }
    }
    out
}

/// `<0x…> (a Class)`, as jstack writes a lock.
fn lock_text(l: &LockRef) -> String {
    format!(
        "<{:#018x}> (a {})",
        l.address,
        l.class.as_deref().unwrap_or("class not read")
    )
}
