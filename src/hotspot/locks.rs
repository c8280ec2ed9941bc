//! What a Java thread waits for and which thread holds it, read from outside without a safepoint:
//! the monitor a thread blocks on (`JavaThread::_current_pending_monitor`), the object whose
//! monitor it is (`ObjectMonitor::_object`), and its owner (`ObjectMonitor::_owner`). The owner
//! field holds, by JDK and locking mode (runtime/objectMonitor.hpp, runtime/lockStack.hpp):
//! - the owning `JavaThread*`, or the address of a `BasicLock` on the owner's stack when the
//!   owner had stack-locked the object before it was inflated (legacy locking, JDK 11–23);
//! - the owner's `JavaThread::_monitor_owner_id` (JDK 24+);
//! - `ANONYMOUS_OWNER` (1) when another thread inflated an object the owner had fast-locked
//!   (lightweight locking, JDK 21+): the owner is the thread whose lock stack
//!   (`JavaThread::_lock_stack`, its `LockStack::_base[0]` oops up to `_top`, a byte offset
//!   from the thread) holds the object.

use super::oops::{ObjectLayout, RefField};
use super::vmstructs::VmStructs;
use super::HotSpot;
use crate::process::TargetMemory;

/// The static holding `java.lang.Thread.parkBlocker`'s field offset (classfile/javaClasses.cpp),
/// in libjvm's symbol table.
pub const PARK_BLOCKER_OFFSET: &str = "java_lang_Thread::_park_blocker_offset";
/// A field offset past this is a misread.
const MAX_FIELD_OFFSET: u32 = 4096;
/// `ObjectMonitor::ANONYMOUS_OWNER`.
const ANONYMOUS_OWNER: u64 = 1;
/// More lock-stack entries than this mean a misread `_top`.
const MAX_LOCK_STACK: u64 = 64;

/// Where this JVM keeps threads' monitors and their owners.
#[derive(Debug, Clone, Copy)]
pub struct LockLayout {
    pub objects: ObjectLayout,
    /// `JavaThread::_threadObj`: the thread's `java.lang.Thread`.
    pub thread_object: RefField,
    /// `ObjectMonitor::_object`.
    pub monitor_object: RefField,
    pending_monitor: Option<u64>,
    owner: Option<u64>,
    /// `Thread::_stack_base` and `_stack_size`.
    stack: Option<(u64, u64)>,
    owner_id: Option<u64>,
    /// `JavaThread::_lock_stack` plus `LockStack::_base`, and `LockStack::_top`.
    lock_stack: Option<(u64, u64)>,
}

/// A monitor a thread waits to enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingMonitor {
    /// The object whose monitor it is.
    pub object: u64,
    pub klass: Option<u64>,
    /// The owning `JavaThread*`, where it could be told.
    pub owner: Option<u64>,
}

impl LockLayout {
    pub fn discover<M: TargetMemory>(hotspot: &HotSpot<M>) -> Option<LockLayout> {
        let vs = &hotspot.vmstructs;
        let thread_object = RefField::discover(vs, "JavaThread", "_threadObj")?;
        // `ObjectMonitor::_object` is exported without its type: the object itself through JDK
        // 15, a `WeakHandle` since 16 (JDK-8247281), the release `_threadObj` became an
        // `OopHandle` in (JDK-8244997), whose type is exported.
        let monitor_object =
            RefField::discover(vs, "ObjectMonitor", "_object")?.held_as(thread_object);
        let in_thread = |field: &str| {
            vs.offset("JavaThread", field)
                .or_else(|| vs.offset("Thread", field))
        };
        Some(LockLayout {
            objects: ObjectLayout::discover(hotspot)?,
            thread_object,
            monitor_object,
            pending_monitor: in_thread("_current_pending_monitor"),
            owner: vs.offset("ObjectMonitor", "_owner"),
            stack: in_thread("_stack_base").zip(in_thread("_stack_size")),
            owner_id: vs.offset("JavaThread", "_monitor_owner_id"),
            lock_stack: lock_stack(vs),
        })
    }

    /// The monitor `thread` (a `JavaThread*`) blocks on now, of the JVM's `threads`.
    pub fn pending_monitor(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        thread: u64,
        threads: &[u64],
    ) -> Option<PendingMonitor> {
        let monitor = mem
            .read_u64(thread.wrapping_add(self.pending_monitor?))
            .ok()
            .filter(|&m| m != 0)?;
        let object = self.monitor_object.read(mem, monitor)?;
        let owner = self.owner.and_then(|offset| {
            let value = mem.read_u64(monitor.wrapping_add(offset)).ok()?;
            self.owner_of(mem, value, object, threads)
        });
        Some(PendingMonitor {
            object,
            klass: self.objects.klass_of(mem, object),
            owner,
        })
    }

    /// The thread of `threads` that an `ObjectMonitor::_owner` of `value` names.
    fn owner_of(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        value: u64,
        object: u64,
        threads: &[u64],
    ) -> Option<u64> {
        if value == 0 {
            return None;
        }
        if value == ANONYMOUS_OWNER {
            return threads
                .iter()
                .copied()
                .find(|&t| self.lock_stack_holds(mem, t, object));
        }
        if let Some(id) = self.owner_id {
            return threads
                .iter()
                .copied()
                .find(|&t| mem.read_u64(t.wrapping_add(id)).ok() == Some(value));
        }
        if threads.contains(&value) {
            return Some(value);
        }
        let (base, size) = self.stack?;
        threads.iter().copied().find(|&t| {
            let top = mem.read_u64(t.wrapping_add(base)).unwrap_or(0);
            let size = mem.read_u64(t.wrapping_add(size)).unwrap_or(0);
            value < top && value >= top.saturating_sub(size)
        })
    }

    /// The object `thread` (a `JavaThread*`) parks for (`Thread.parkBlocker`, at `offset` in
    /// `java.lang.Thread`); `None` when unset.
    pub fn park_blocker(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        thread: u64,
        offset: u32,
    ) -> Option<u64> {
        let thread = self.thread_object.read(mem, thread)?;
        self.objects.reference_field(mem, thread, u64::from(offset))
    }

    /// Whether `thread`'s lock stack holds `object`.
    fn lock_stack_holds(
        &self,
        mem: &(impl TargetMemory + ?Sized),
        thread: u64,
        object: u64,
    ) -> bool {
        let Some((base, top)) = self.lock_stack else {
            return false;
        };
        let Ok(top) = mem.read_u32(thread.wrapping_add(top)) else {
            return false;
        };
        let entries = u64::from(top).saturating_sub(base) / 8;
        (0..entries.min(MAX_LOCK_STACK))
            .any(|i| mem.read_u64(thread.wrapping_add(base + 8 * i)).ok() == Some(object))
    }
}

/// `Thread.parkBlocker`'s offset, read from the static at `at` once the JVM has set it.
pub fn park_blocker_offset(mem: &(impl TargetMemory + ?Sized), at: u64) -> Option<u32> {
    mem.read_u32(at)
        .ok()
        .filter(|&o| o > 0 && o < MAX_FIELD_OFFSET)
}

/// Where a thread's lock stack entries begin (from the thread), and the offset of `_top`.
fn lock_stack(vs: &VmStructs) -> Option<(u64, u64)> {
    let at = vs.offset("JavaThread", "_lock_stack")?;
    Some((
        at + vs
            .offset("LockStack", "_base[0]")
            .or_else(|| vs.offset("LockStack", "_base"))?,
        at + vs.offset("LockStack", "_top")?,
    ))
}

/// The cycles of a waits-for graph: each thread waits for at most one other. Each cycle once,
/// from its first member in `waits_for`'s order.
pub fn deadlocks(waits_for: &[(u64, u64)]) -> Vec<Vec<u64>> {
    let next = |t: u64| waits_for.iter().find(|(w, _)| *w == t).map(|&(_, o)| o);
    let mut cycles: Vec<Vec<u64>> = Vec::new();
    for &(start, _) in waits_for {
        if cycles.iter().any(|c| c.contains(&start)) {
            continue;
        }
        let mut path = vec![start];
        let mut at = start;
        while let Some(owner) = next(at) {
            if let Some(i) = path.iter().position(|&t| t == owner) {
                if i == 0 {
                    cycles.push(path);
                }
                break;
            }
            path.push(owner);
            at = owner;
        }
    }
    cycles
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_are_found_once_and_chains_into_them_are_not_cycles() {
        // 1 → 2 → 3 → 1 is a deadlock; 4 waits on 1 (stuck behind it, not in it); 5 → 6 ends.
        let waits = [(4, 1), (1, 2), (2, 3), (3, 1), (5, 6)];
        assert_eq!(deadlocks(&waits), vec![vec![1, 2, 3]]);
        assert_eq!(deadlocks(&[(7, 8), (8, 7)]), vec![vec![7, 8]]);
        assert!(deadlocks(&[(1, 2), (2, 3)]).is_empty());
    }
}
