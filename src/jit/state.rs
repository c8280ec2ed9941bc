//! Folding the shim's records into the daemon's state: the code map, thread names, and counters.

use crate::jit::codemap::CodeMap;
use crate::shim::protocol::{Frame, Record, ShimStats};
use std::collections::HashMap;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetransformResult {
    pub requested: u32,
    pub retransformed: u32,
    pub jvmti_error: i32,
}

#[derive(Debug, Default)]
pub struct JitState {
    pub code: CodeMap,
    /// Java thread names by tid, from THREAD_START.
    pub thread_names: HashMap<u32, String>,
    pub ended_threads: Vec<(u32, u64)>,
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
                self.thread_names.insert(tid, name);
            }
            Record::ThreadEnd { tid } => self.ended_threads.push((tid, t)),
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
