//! Lock contention (`record -e lock`): the time threads wait to enter a contended monitor or to
//! acquire a `java.util.concurrent` lock, by stack, with the lock's class as the leaf. Return and
//! entry uprobes on two libjvm functions time each wait from outside:
//!
//! - the contended monitor enter: `ObjectMonitor::EnterI(JavaThread*)` through JDK 23 (called
//!   by `ObjectMonitor::enter` once spinning failed), `ObjectMonitor::enter_with_contention_mark`
//!   from JDK 24 (runtime/objectMonitor.cpp). `this` (rdi) is the `ObjectMonitor*`, whose
//!   `_object` refers to the object locked;
//! - `Unsafe_Park(JNIEnv*, jobject, jboolean, jlong)` (prims/unsafe.cpp), under every
//!   `LockSupport.park`. `LockSupport.park(blocker)` sets the thread's `parkBlocker` first: a
//!   park counts when its blocker is an `AbstractOwnableSynchronizer` (a `ReentrantLock`'s,
//!   a `ReentrantReadWriteLock`'s or a `Semaphore`'s sync, a `ThreadPoolExecutor` worker), not
//!   when it waits for a condition, a future or work (`ConditionObject`, `FutureTask`…) or has no
//!   blocker. The field's offset in `java.lang.Thread` is libjvm's static
//!   `java_lang_Thread::_park_blocker_offset` (classfile/javaClasses.cpp).
//!
//! The entry probe's sample is walked at once; the thread's next return-probe sample ends the
//! wait and weighs it in nanoseconds (the two are one thread's events, in one ring, in order).
//! The blocker is read from outside when the sample is, a millisecond or more after the park
//! began: a park that ended meanwhile has cleared it, and counts for the lock its stack was
//! last seen parking for (a wait site waits for one kind of lock), or not at all.
//! Waits shorter than the threshold are left out. A virtual thread that parks unmounts instead
//! of calling `Unsafe_Park` (JDK 21+), and one blocked on a monitor in JDK 24+ unmounts too
//! unless pinned: their waits are not seen.

use super::probes::{ClassNames, Hit, Leaf, Libjvm, ProbeSource, ProbeSummary};
use crate::error::Result;
use crate::hotspot::locks::{self, LockLayout, PARK_BLOCKER_OFFSET};
use crate::hotspot::threads::JavaThreads;
use crate::hotspot::vmstructs::VmStructs;
use crate::hotspot::HotSpot;
use crate::process::TargetProcess;
use crate::profile::FrameKind;
use crate::sampler::{Sample, Uprobe, Uprobes};
use crate::walker::RawFrame;
use foldhash::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The contended monitor enter, by JDK: the first this libjvm has.
const MONITOR: [&str; 2] = [
    "ObjectMonitor::enter_with_contention_mark",
    "ObjectMonitor::EnterI",
];
pub const PARK: &str = "Unsafe_Park";
/// Every `java.util.concurrent` lock's synchronizer extends it.
const LOCK_BASE: &str = "java/util/concurrent/locks/AbstractOwnableSynchronizer";
/// A class hierarchy deeper than this is a misread.
const MAX_SUPERS: usize = 32;
/// The JVM's thread list is read again at most this often for a thread not in it.
const THREADS_REREAD: Duration = Duration::from_millis(50);

const TAG_MONITOR: u8 = 0;
const TAG_PARK: u8 = 1;
/// A park whose blocker was gone when read, counted as a lock when its stack was seen parking
/// for one.
const TAG_PARK_BY_STACK: u8 = 2;

/// How `-e lock` samples, as asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// Waits shorter than this are left out (`--lock-threshold`).
    pub threshold_ns: u64,
}

/// Where the probes go in the target's libjvm.
pub struct LockProbes {
    pub uprobes: Uprobes,
    monitor: (&'static str, u64),
    park: u64,
    /// Where `java_lang_Thread::_park_blocker_offset` is in the target.
    blocker_offset_at: u64,
    threshold_ns: u64,
    libjvm: String,
}

impl LockProbes {
    pub fn find(process: &TargetProcess, opts: LockOptions) -> Result<LockProbes> {
        let libjvm = Libjvm::of(process)?;
        let (monitor_name, monitor) = libjvm.function("lock", &MONITOR)?;
        let (_, park) = libjvm.function("lock", &[PARK])?;
        let blocker_offset_at = libjvm.static_address("lock", PARK_BLOCKER_OFFSET)?;
        // Entries are drained at once: what they point at (the monitor's object, the thread's
        // parkBlocker) is read while the wait lasts.
        let probe = |offset, on_return| Uprobe {
            offset,
            on_return,
            prompt: !on_return,
        };
        Ok(LockProbes {
            uprobes: Uprobes {
                path: libjvm.path.clone(),
                probes: vec![
                    probe(monitor.file_offset, false),
                    probe(monitor.file_offset, true),
                    probe(park.file_offset, false),
                    probe(park.file_offset, true),
                ],
                period: 1,
            },
            monitor: (monitor_name, libjvm.address(monitor)),
            park: libjvm.address(park),
            blocker_offset_at,
            threshold_ns: opts.threshold_ns,
            libjvm: libjvm.module.path.clone(),
        })
    }

    /// The summary's name of the mechanism.
    pub fn describe(&self) -> String {
        format!(
            "uprobes on entry to and return from {} and {PARK} of {}, opened on each thread, \
             waits of {} µs or more",
            self.monitor.0,
            self.libjvm,
            self.threshold_ns / 1000
        )
    }
}

/// What a lock recording sampled.
#[derive(Debug, Clone, Default)]
pub struct LockSummary {
    pub mechanism: String,
    /// Waits counted, and their nanoseconds: on monitors, on `java.util.concurrent` locks.
    pub waits: [u64; 2],
    pub waited_ns: [u64; 2],
    /// Waits shorter than the threshold, left out.
    pub short: u64,
    /// Parks for something else than a lock (a condition, a future, work), left out.
    pub other_parks: u64,
    /// Parks without a blocker when their sample was read (left out): parks without one, and
    /// parks that ended before jvmperf got to their sample, at a stack not seen parking for a
    /// lock.
    pub unset_parks: u64,
    /// Parks whose blocker was gone when read, counted for the lock their stack was last seen
    /// waiting for.
    pub by_stack: u64,
    /// Parks whose blocker could not be read (left out), and waits whose lock's class could not
    /// be read (counted without a class leaf).
    pub unread_parks: u64,
    pub unnamed: u64,
}

/// A park's blocker.
enum Blocker {
    Lock(Arc<str>),
    Other,
    /// None when read: a park without one, or one that ended before the sample was read.
    Unset,
    Unread,
}

/// Turns the probes' samples into waits with their lock's class as the leaf.
pub(super) struct LockSource {
    monitor: u64,
    park: u64,
    threshold_ns: u64,
    names: ClassNames,
    layout: Option<LockLayout>,
    blocker_offset_at: u64,
    blocker_offset: Option<u32>,
    vmstructs: VmStructs,
    process: TargetProcess,
    /// `JavaThread*` by thread id (ours), and when the list was read.
    threads: HashMap<u32, u64>,
    threads_read: Option<Instant>,
    /// Whether a class is a lock's (extends [`LOCK_BASE`]).
    lock_classes: HashMap<u64, bool>,
    summary: LockSummary,
}

impl LockSource {
    pub fn new(probes: &LockProbes, hotspot: &HotSpot, process: &TargetProcess) -> LockSource {
        LockSource {
            monitor: probes.monitor.1,
            park: probes.park,
            threshold_ns: probes.threshold_ns,
            names: ClassNames::new(hotspot),
            layout: LockLayout::discover(hotspot),
            blocker_offset_at: probes.blocker_offset_at,
            blocker_offset: None,
            vmstructs: hotspot.vmstructs.clone(),
            process: process.clone(),
            threads: HashMap::default(),
            threads_read: None,
            lock_classes: HashMap::default(),
            summary: LockSummary {
                mechanism: probes.describe(),
                ..LockSummary::default()
            },
        }
    }

    /// The class of the object whose monitor `monitor` (an `ObjectMonitor*`) is.
    fn monitor_class(&mut self, monitor: u64, time: u64) -> Option<Arc<str>> {
        let mem = *self.names.mem();
        let layout = self.layout?;
        let object = layout.monitor_object.read(&mem, monitor)?;
        let klass = layout.objects.klass_of(&mem, object)?;
        self.names.name(klass, "", time)
    }

    /// The blocker thread `tid` parks for now.
    fn blocker(&mut self, tid: u32, time: u64) -> Blocker {
        let mem = *self.names.mem();
        let Some(layout) = self.layout else {
            return Blocker::Unread;
        };
        let Some(offset) = self.blocker_offset() else {
            return Blocker::Unread;
        };
        let Some(thread) = self.java_thread(tid) else {
            return Blocker::Unread;
        };
        let Some(blocker) = layout.park_blocker(&mem, thread, offset) else {
            return Blocker::Unset;
        };
        let Some(klass) = layout.objects.klass_of(&mem, blocker) else {
            return Blocker::Unread;
        };
        if !self.is_lock(klass) {
            return Blocker::Other;
        }
        match self.names.name(klass, "", time) {
            Some(name) => Blocker::Lock(name),
            None => Blocker::Unread,
        }
    }

    /// `java.lang.Thread`'s `parkBlocker` offset, once the JVM has set it (at startup).
    fn blocker_offset(&mut self) -> Option<u32> {
        if self.blocker_offset.is_none() {
            self.blocker_offset =
                locks::park_blocker_offset(self.names.mem(), self.blocker_offset_at);
        }
        self.blocker_offset
    }

    /// The `JavaThread*` of thread `tid`, the list read again when it is not in it.
    fn java_thread(&mut self, tid: u32) -> Option<u64> {
        if let Some(&thread) = self.threads.get(&tid) {
            return Some(thread);
        }
        if self
            .threads_read
            .is_some_and(|at| at.elapsed() < THREADS_REREAD)
        {
            return None;
        }
        self.threads_read = Some(Instant::now());
        let listed = JavaThreads::read(&self.vmstructs, self.names.mem())?;
        // The JVM numbers its threads in its pid namespace.
        let ours = (self.process.nspid != self.process.pid).then(|| self.process.ns_tid_map());
        self.threads = listed
            .by_tid
            .into_iter()
            .filter_map(|(ns_tid, thread)| match &ours {
                Some(map) => Some((*map.get(&ns_tid)?, thread)),
                None => Some((ns_tid, thread)),
            })
            .collect();
        self.threads.get(&tid).copied()
    }

    /// Whether `klass` extends [`LOCK_BASE`].
    fn is_lock(&mut self, klass: u64) -> bool {
        if let Some(&known) = self.lock_classes.get(&klass) {
            return known;
        }
        let Some(objects) = self.layout.map(|l| l.objects) else {
            return false;
        };
        let mut class = Some(klass);
        let mut lock = false;
        for _ in 0..MAX_SUPERS {
            let Some(k) = class else { break };
            if self.names.internal_name(k).as_deref() == Some(LOCK_BASE) {
                lock = true;
                break;
            }
            class = objects.super_of(self.names.mem(), k);
        }
        self.lock_classes.insert(klass, lock);
        lock
    }
}

fn leaf(class: Option<Arc<str>>) -> Leaf {
    Leaf::Known(class.map(|class| RawFrame::Object {
        class,
        kind: FrameKind::Lock,
    }))
}

impl ProbeSource for LockSource {
    fn hit(&mut self, s: &Sample<'_>) -> Hit {
        if s.regs.ip == self.monitor {
            let class = self.monitor_class(s.regs.di, s.time);
            self.summary.unnamed += u64::from(class.is_none());
            return Hit::Begin {
                leaf: leaf(class),
                tag: TAG_MONITOR,
            };
        }
        if s.regs.ip == self.park {
            return match self.blocker(s.tid, s.time) {
                Blocker::Lock(class) => Hit::Begin {
                    leaf: leaf(Some(class)),
                    tag: TAG_PARK,
                },
                Blocker::Other => {
                    self.summary.other_parks += 1;
                    Hit::Skip
                }
                Blocker::Unset => Hit::Begin {
                    leaf: Leaf::OfStack,
                    tag: TAG_PARK_BY_STACK,
                },
                Blocker::Unread => {
                    self.summary.unread_parks += 1;
                    Hit::Skip
                }
            };
        }
        Hit::End
    }

    fn waited(&mut self, tag: u8, ns: u64) -> Option<u64> {
        if ns < self.threshold_ns {
            self.summary.short += 1;
            return None;
        }
        let i = usize::from(tag.min(TAG_PARK));
        self.summary.by_stack += u64::from(tag == TAG_PARK_BY_STACK);
        self.summary.waits[i] += 1;
        self.summary.waited_ns[i] = self.summary.waited_ns[i].saturating_add(ns);
        Some(ns)
    }

    fn unmatched(&mut self, _tag: u8) {
        self.summary.unset_parks += 1;
    }

    fn summary(&self) -> ProbeSummary {
        ProbeSummary::Lock(self.summary.clone())
    }
}
