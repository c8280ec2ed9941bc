//! Folding the shim's records into the daemon's state: the code map, thread names, and counters.

use crate::jit::codemap::CodeMap;
use crate::shim::protocol::{Frame, Record, ShimStats};
use std::collections::{HashMap, VecDeque};

/// Names of ended threads kept for their samples still to be named; older ones are forgotten
/// (their samples keep the thread's kernel name), so thread churn cannot grow memory without end.
pub const MAX_ENDED_THREAD_NAMES: usize = 4096;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetransformResult {
    pub requested: u32,
    pub retransformed: u32,
    pub jvmti_error: i32,
}

#[derive(Debug, Default)]
pub struct JitState {
    pub code: CodeMap,
    /// Java thread names by tid, from THREAD_START, of threads that have not ended.
    pub thread_names: HashMap<u32, String>,
    /// Names of the latest ended threads, oldest first (at most `MAX_ENDED_THREAD_NAMES`).
    pub ended_thread_names: VecDeque<(u32, String)>,
    /// THREAD_START records seen.
    pub threads_started: u64,
    pub dropped_records: u64,
    pub dropped_bytes: u64,
    /// (nmethods, code blobs) once the attach-time replay finished, with its time.
    pub replay_done: Option<(u32, u32, u64)>,
    pub retransform: Option<RetransformResult>,
    /// Time of the latest NMETHOD_LOAD that was not part of a replay.
    pub last_live_load: Option<u64>,
    pub records: u64,
    /// Loads, unloads and stubs seen: when this changes, cached code-cache facts may be stale.
    pub code_events: u64,
    /// The shim's latest report of its own memory.
    pub shim_stats: Option<ShimStats>,
    /// METHODS_FORGOTTEN records seen, and how many methods the code map kept at the latest.
    pub methods_forgotten: u64,
    pub methods_kept: usize,
}

impl JitState {
    pub fn apply(&mut self, frame: Frame) {
        self.records += 1;
        let t = frame.time;
        if matches!(
            frame.record,
            Record::NmethodLoad(_) | Record::NmethodUnload { .. } | Record::CodeBlob { .. }
        ) {
            self.code_events += 1;
        }
        match frame.record {
            Record::Method(m) => self.code.add_method(m),
            Record::NmethodLoad(nm) => {
                if !nm.replayed {
                    self.last_live_load = Some(t);
                }
                self.code.add_nmethod(t, nm)
            }
            Record::NmethodUnload { method, code_addr } => {
                self.code.unload_nmethod(t, method, code_addr)
            }
            Record::CodeBlob {
                addr,
                size,
                replayed,
                name,
            } => self.code.add_blob(t, addr, size, replayed, name),
            Record::ThreadStart { tid, name } => {
                self.threads_started += 1;
                self.thread_names.insert(tid, name);
            }
            Record::ThreadEnd { tid } => {
                if let Some(name) = self.thread_names.remove(&tid) {
                    if self.ended_thread_names.len() == MAX_ENDED_THREAD_NAMES {
                        self.ended_thread_names.pop_front();
                    }
                    self.ended_thread_names.push_back((tid, name));
                }
            }
            Record::Dropped { records, bytes } => {
                self.dropped_records = records;
                self.dropped_bytes = bytes;
            }
            Record::ReplayDone {
                nmethods,
                code_blobs,
            } => self.replay_done = Some((nmethods, code_blobs, t)),
            Record::RetransformDone {
                requested,
                retransformed,
                jvmti_error,
            } => {
                self.retransform = Some(RetransformResult {
                    requested,
                    retransformed,
                    jvmti_error,
                })
            }
            Record::Stats(stats) => self.shim_stats = Some(stats),
            Record::MethodsForgotten => {
                // From here on every load resends the methods it refers to: keep only those the
                // code map still needs.
                self.code.retain_referenced_methods();
                self.methods_forgotten += 1;
                self.methods_kept = self.code.method_count();
            }
            Record::Hello(_) | Record::Busy { .. } | Record::Unknown(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads that keep starting and ending (pools, per-request threads) leave a bounded table.
    #[test]
    fn thread_names_stay_bounded_under_thread_churn() {
        let mut state = JitState::default();
        let frame = |record| Frame { time: 1, record };
        state.apply(frame(Record::ThreadStart {
            tid: 1,
            name: "main".into(),
        }));
        for tid in 2..100_000u32 {
            state.apply(frame(Record::ThreadStart {
                tid,
                name: format!("worker-{tid}"),
            }));
            state.apply(frame(Record::ThreadEnd { tid }));
        }
        assert_eq!(state.threads_started, 99_999);
        assert_eq!(state.thread_names.len(), 1, "only main is alive");
        assert_eq!(state.ended_thread_names.len(), MAX_ENDED_THREAD_NAMES);
        assert_eq!(
            state.ended_thread_names.back(),
            Some(&(99_999, "worker-99999".to_string())),
            "the latest ended thread keeps its name"
        );
    }
}
