//! The JVM's Java threads as HotSpot lists them, read from outside: each one's OS thread id and
//! its `JavaThreadState` (in Java, in VM, in native, blocked). The list is
//! `ThreadsSMRSupport::_java_thread_list` (JDK `runtime/threadSMR.hpp`), a `ThreadsList` of
//! `JavaThread*`, where VMStructs has it; JDK 11's VMStructs export instead the linked list
//! `Threads::_thread_list` chained by `JavaThread::_next`. The thread id is `OSThread::_thread_id` (`os/linux/vmStructs_linux.hpp`),
//! reached through `_osthread`, a field of `JavaThread` before JDK 25 and of `Thread` since. The
//! state values are HotSpot's own `_thread_*` constants (`utilities/globalDefinitions.hpp`),
//! exported in VMStructs.
//!
//! The list is read while the JVM runs: a thread starting or exiting meanwhile may be missed or
//! read half-built, and every value read is only as good as that.

use super::vmstructs::VmStructs;
use crate::process::TargetMemory;
use std::collections::HashMap;

/// More Java threads than any JVM runs: a longer list is a misread pointer.
const MAX_THREADS: u32 = 1 << 20;

/// HotSpot's `JavaThreadState` values, by their VMStructs constant names, as a person reads them.
const STATES: [(&str, &str); 12] = [
    ("_thread_uninitialized", "uninitialized"),
    ("_thread_new", "new"),
    ("_thread_new_trans", "new (transition)"),
    ("_thread_in_native", "in native"),
    ("_thread_in_native_trans", "in native (transition)"),
    ("_thread_in_vm", "in VM"),
    ("_thread_in_vm_trans", "in VM (transition)"),
    ("_thread_in_Java", "in Java"),
    ("_thread_in_Java_trans", "in Java (transition)"),
    ("_thread_blocked", "blocked"),
    ("_thread_blocked_trans", "blocked (transition)"),
    ("_thread_max_state", "invalid"),
];

/// How the threads are listed.
enum List {
    /// `ThreadsSMRSupport::_java_thread_list`: the `ThreadsList*`, and its fields' offsets.
    Smr {
        list: u64,
        length: u64,
        threads: u64,
    },
    /// `Threads::_thread_list`, and the offset of `JavaThread::_next`.
    Linked { head: u64, next: u64 },
}

/// Where the thread list and its fields are, from VMStructs.
struct Layout {
    list: List,
    osthread: u64,
    thread_id: u64,
    state: u64,
}

impl Layout {
    fn discover(vs: &VmStructs) -> Option<Layout> {
        let smr = || {
            Some(List::Smr {
                list: vs.address("ThreadsSMRSupport", "_java_thread_list")?,
                length: vs.offset("ThreadsList", "_length")?,
                threads: vs.offset("ThreadsList", "_threads")?,
            })
        };
        let linked = || {
            Some(List::Linked {
                head: vs.address("Threads", "_thread_list")?,
                next: vs.offset("JavaThread", "_next")?,
            })
        };
        Some(Layout {
            list: smr().or_else(linked)?,
            osthread: vs
                .offset("JavaThread", "_osthread")
                .or_else(|| vs.offset("Thread", "_osthread"))?,
            thread_id: vs.offset("OSThread", "_thread_id")?,
            state: vs.offset("JavaThread", "_thread_state")?,
        })
    }
}

/// The JVM's Java threads, to read their states from.
pub struct JavaThreads {
    layout: Layout,
    names: HashMap<i64, &'static str>,
    /// `JavaThread*` by OS thread id (as the JVM's pid namespace numbers them).
    pub by_tid: HashMap<u32, u64>,
}

impl JavaThreads {
    /// The threads listed now; `None` when this JVM's VMStructs lack a field or the list
    /// cannot be read.
    pub fn read(vs: &VmStructs, mem: &dyn TargetMemory) -> Option<JavaThreads> {
        let layout = Layout::discover(vs)?;
        let names = STATES
            .iter()
            .filter_map(|&(constant, name)| Some((*vs.int_constants.get(constant)?, name)))
            .collect();
        let mut by_tid = HashMap::new();
        for thread in list_threads(&layout.list, mem)? {
            let tid = mem
                .read_u64(thread.wrapping_add(layout.osthread))
                .and_then(|os| mem.read_u32(os.wrapping_add(layout.thread_id)));
            if let Ok(tid) = tid {
                by_tid.insert(tid, thread);
            }
        }
        Some(JavaThreads {
            layout,
            names,
            by_tid,
        })
    }

    /// The state of the Java thread with OS thread id `tid` now, as a person reads it.
    pub fn state(&self, mem: &dyn TargetMemory, tid: u32) -> Option<String> {
        let thread = *self.by_tid.get(&tid)?;
        let state = mem.read_u32(thread.wrapping_add(self.layout.state)).ok()?;
        let state = i64::from(state as i32);
        Some(
            self.names
                .get(&state)
                .map_or_else(|| format!("state {state}"), |n| n.to_string()),
        )
    }
}

/// The `JavaThread*`s of the list, in its order.
fn list_threads(list: &List, mem: &dyn TargetMemory) -> Option<Vec<u64>> {
    let mut threads = Vec::new();
    match *list {
        List::Smr {
            list,
            length,
            threads: array,
        } => {
            let list = mem.read_u64(list).ok()?;
            let n = mem.read_u32(list.wrapping_add(length)).ok()?;
            if list == 0 || n > MAX_THREADS {
                return None;
            }
            let array = mem.read_u64(list.wrapping_add(array)).ok()?;
            for i in 0..u64::from(n) {
                threads.extend(mem.read_u64(array.wrapping_add(8 * i)).ok());
            }
        }
        List::Linked { head, next } => {
            let mut thread = mem.read_u64(head).ok()?;
            let mut seen = std::collections::HashSet::new();
            // Bounded: a list changing under us, or a misread pointer, may not end or may cycle.
            while thread != 0 && threads.len() < MAX_THREADS as usize && seen.insert(thread) {
                threads.push(thread);
                thread = mem.read_u64(thread.wrapping_add(next)).unwrap_or(0);
            }
        }
    }
    Some(threads)
}
