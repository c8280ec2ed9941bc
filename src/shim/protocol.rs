//! Decoding and encoding of the shim ⇄ daemon frames (`java-agent-shim/PROTOCOL.md`). Every length is
//! checked against the frame; nothing here trusts the peer.

use crate::profile::CompiledCode;

pub const PROTOCOL_VERSION: u32 = 1;
/// Frame header after the length word: kind (u16), flags (u16), time (u64).
pub const HEADER_LEN: usize = 12;
pub const MAX_FRAME: usize = 16 << 20;

pub const KIND_HELLO: u16 = 1;
pub const KIND_METHOD: u16 = 2;
pub const KIND_NMETHOD_LOAD: u16 = 3;
pub const KIND_NMETHOD_UNLOAD: u16 = 4;
pub const KIND_CODE_BLOB: u16 = 5;
pub const KIND_THREAD_START: u16 = 6;
pub const KIND_THREAD_END: u16 = 7;
pub const KIND_DROPPED: u16 = 8;
pub const KIND_REPLAY_DONE: u16 = 9;
pub const KIND_RETRANSFORM_DONE: u16 = 10;
pub const KIND_STATS: u16 = 11;
pub const KIND_METHODS_FORGOTTEN: u16 = 12;
pub const KIND_BUSY: u16 = 13;
pub const KIND_RETRANSFORM: u16 = 100;
pub const KIND_FORGET_METHODS: u16 = 101;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub protocol_version: u32,
    pub pid: u32,
    pub attach_count: u32,
    pub shim_version: String,
    pub vm_version: String,
    pub java_version: String,
    pub vm_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodInfo {
    pub id: u64,
    pub class_signature: String,
    pub name: String,
    pub signature: String,
    pub source_file: String,
    pub access_flags: u32,
    pub bytecode_len: i32,
    /// (start bci, line), as JVMTI's GetLineNumberTable returns them.
    pub lines: Vec<(u32, u32)>,
}

/// One debug point of an nmethod: the inlined chain at `pc`, innermost first, with bcis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcInfo {
    pub pc: u64,
    pub frames: Vec<(u64, i32)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NmethodLoad {
    pub method: u64,
    pub code_addr: u64,
    pub code_size: u32,
    pub replayed: bool,
    pub pcs: Vec<PcInfo>,
    /// Tier and compile id, read from the nmethod's header by the daemon (not part of the
    /// record the shim sends).
    pub compiled: Option<CompiledCode>,
}

/// The shim's own memory and costs (STATS; version 1 fields, and version 2's when sent; later
/// versions append more, ignored here).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShimStats {
    pub version: u32,
    /// Everything below added up: what the shim holds in the target right now.
    pub total_bytes: u64,
    pub queue_capacity: u64,
    pub queue_used: u64,
    pub queue_high_water: u64,
    pub sent_method_ids: u64,
    pub sent_ids_bytes: u64,
    pub command_buffer_bytes: u64,
    pub write_buffer_bytes: u64,
    pub methods_forgotten: u64,
    /// Version 2: what the shim has in the target beyond memory.
    pub extra: Option<ShimStatsV2>,
}

/// STATS version 2 fields.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShimStatsV2 {
    /// Records dropped on this connection (the queue was full), as DROPPED says.
    pub dropped_records: u64,
    pub dropped_bytes: u64,
    /// ThreadStart/ThreadEnd callbacks the shim served on application threads, and the time those
    /// threads spent in them (total and longest), in ns.
    pub thread_events: u64,
    pub thread_event_ns: u64,
    pub thread_event_max_ns: u64,
    /// Whether the shim holds `can_retransform_classes` now (it gives it back after a retransform).
    pub holds_retransform: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Hello(Hello),
    Method(MethodInfo),
    NmethodLoad(NmethodLoad),
    NmethodUnload {
        method: u64,
        code_addr: u64,
    },
    CodeBlob {
        addr: u64,
        size: u32,
        replayed: bool,
        name: String,
    },
    ThreadStart {
        tid: u32,
        name: String,
    },
    ThreadEnd {
        tid: u32,
    },
    Dropped {
        records: u64,
        bytes: u64,
    },
    ReplayDone {
        nmethods: u32,
        code_blobs: u32,
    },
    RetransformDone {
        requested: u32,
        retransformed: u32,
        jvmti_error: i32,
    },
    Stats(ShimStats),
    /// The shim cleared its set of sent method ids: later loads resend the METHODs they refer to.
    MethodsForgotten,
    /// The shim serves another daemon, still connected, and refused this one (the only record it
    /// sends then). `version` 1 fields; later versions append more, ignored here.
    Busy {
        version: u32,
        /// The other daemon's pid, as it gave it in its agent options (0 if it gave none).
        daemon_pid: u32,
    },
    /// A kind this daemon does not know (a newer shim); skipped.
    Unknown(u16),
}

/// A decoded frame: the record and its CLOCK_MONOTONIC time in the target's time namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub time: u64,
    pub record: Record,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed shim record: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

struct Cursor<'a> {
    data: &'a [u8],
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.data.len() < n {
            return Err(ProtocolError(format!(
                "{} record is truncated (needs {n} more bytes, has {})",
                self.what,
                self.data.len()
            )));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String, ProtocolError> {
        let n = self.u32()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    /// A count of items of at least `min_item` bytes each, checked against what is left, so a
    /// hostile count cannot make us allocate.
    fn count(&mut self, min_item: usize) -> Result<usize, ProtocolError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.data.len() {
            return Err(ProtocolError(format!(
                "{} record claims {n} items but has only {} bytes",
                self.what,
                self.data.len()
            )));
        }
        Ok(n)
    }
}

/// Decode one frame body (everything after the u32 length word).
pub fn decode_frame(body: &[u8]) -> Result<Frame, ProtocolError> {
    let mut c = Cursor {
        data: body,
        what: "frame",
    };
    let kind = u16::from_le_bytes(c.take(2)?.try_into().unwrap());
    let _flags = c.take(2)?;
    let time = c.u64()?;
    c.what = kind_name(kind);
    let record = match kind {
        KIND_HELLO => Record::Hello(Hello {
            protocol_version: c.u32()?,
            pid: c.u32()?,
            attach_count: c.u32()?,
            shim_version: c.string()?,
            vm_version: c.string()?,
            java_version: c.string()?,
            vm_name: c.string()?,
        }),
        KIND_METHOD => {
            let id = c.u64()?;
            let class_signature = c.string()?;
            let name = c.string()?;
            let signature = c.string()?;
            let source_file = c.string()?;
            let access_flags = c.u32()?;
            let bytecode_len = c.i32()?;
            let n = c.count(8)?;
            let mut lines = Vec::with_capacity(n);
            for _ in 0..n {
                lines.push((c.u32()?, c.u32()?));
            }
            Record::Method(MethodInfo {
                id,
                class_signature,
                name,
                signature,
                source_file,
                access_flags,
                bytecode_len,
                lines,
            })
        }
        KIND_NMETHOD_LOAD => {
            let method = c.u64()?;
            let code_addr = c.u64()?;
            let code_size = c.u32()?;
            let replayed = c.u8()? != 0;
            c.take(3)?;
            let n_pcs = c.count(12)?;
            let mut pcs = Vec::with_capacity(n_pcs);
            for _ in 0..n_pcs {
                let pc = c.u64()?;
                let n_frames = c.count(12)?;
                let mut frames = Vec::with_capacity(n_frames);
                for _ in 0..n_frames {
                    frames.push((c.u64()?, c.i32()?));
                }
                pcs.push(PcInfo { pc, frames });
            }
            Record::NmethodLoad(NmethodLoad {
                method,
                code_addr,
                code_size,
                replayed,
                pcs,
                compiled: None,
            })
        }
        KIND_NMETHOD_UNLOAD => Record::NmethodUnload {
            method: c.u64()?,
            code_addr: c.u64()?,
        },
        KIND_CODE_BLOB => {
            let addr = c.u64()?;
            let size = c.u32()?;
            let replayed = c.u8()? != 0;
            c.take(3)?;
            Record::CodeBlob {
                addr,
                size,
                replayed,
                name: c.string()?,
            }
        }
        KIND_THREAD_START => Record::ThreadStart {
            tid: c.u32()?,
            name: c.string()?,
        },
        KIND_THREAD_END => Record::ThreadEnd { tid: c.u32()? },
        KIND_DROPPED => Record::Dropped {
            records: c.u64()?,
            bytes: c.u64()?,
        },
        KIND_REPLAY_DONE => Record::ReplayDone {
            nmethods: c.u32()?,
            code_blobs: c.u32()?,
        },
        KIND_RETRANSFORM_DONE => Record::RetransformDone {
            requested: c.u32()?,
            retransformed: c.u32()?,
            jvmti_error: c.i32()?,
        },
        KIND_STATS => Record::Stats({
            let version = c.u32()?;
            ShimStats {
                version,
                total_bytes: c.u64()?,
                queue_capacity: c.u64()?,
                queue_used: c.u64()?,
                queue_high_water: c.u64()?,
                sent_method_ids: c.u64()?,
                sent_ids_bytes: c.u64()?,
                command_buffer_bytes: c.u64()?,
                write_buffer_bytes: c.u64()?,
                methods_forgotten: c.u64()?,
                extra: if version < 2 {
                    None
                } else {
                    Some(ShimStatsV2 {
                        dropped_records: c.u64()?,
                        dropped_bytes: c.u64()?,
                        thread_events: c.u64()?,
                        thread_event_ns: c.u64()?,
                        thread_event_max_ns: c.u64()?,
                        holds_retransform: c.u64()? & 1 != 0,
                    })
                },
            }
        }),
        KIND_METHODS_FORGOTTEN => Record::MethodsForgotten,
        KIND_BUSY => Record::Busy {
            version: c.u32()?,
            daemon_pid: c.u32()?,
        },
        other => Record::Unknown(other),
    };
    Ok(Frame { time, record })
}

fn kind_name(kind: u16) -> &'static str {
    match kind {
        KIND_HELLO => "HELLO",
        KIND_METHOD => "METHOD",
        KIND_NMETHOD_LOAD => "NMETHOD_LOAD",
        KIND_NMETHOD_UNLOAD => "NMETHOD_UNLOAD",
        KIND_CODE_BLOB => "CODE_BLOB",
        KIND_THREAD_START => "THREAD_START",
        KIND_THREAD_END => "THREAD_END",
        KIND_DROPPED => "DROPPED",
        KIND_REPLAY_DONE => "REPLAY_DONE",
        KIND_RETRANSFORM_DONE => "RETRANSFORM_DONE",
        KIND_STATS => "STATS",
        KIND_METHODS_FORGOTTEN => "METHODS_FORGOTTEN",
        KIND_BUSY => "BUSY",
        _ => "unknown",
    }
}

/// The first complete frame body in `buf`, if any. A length outside `HEADER_LEN..=MAX_FRAME` is an
/// error: the stream cannot be resynchronised.
pub fn first_frame(buf: &[u8]) -> Result<Option<&[u8]>, ProtocolError> {
    let Some(len_bytes) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
    if !(HEADER_LEN..=MAX_FRAME).contains(&len) {
        return Err(ProtocolError(format!("frame length {len} out of range")));
    }
    Ok(buf.get(4..4 + len))
}

/// Encode a daemon → shim RETRANSFORM command.
pub fn encode_retransform(time: u64, methods: &[u64]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(4 + 8 * methods.len());
    payload.extend_from_slice(&(methods.len() as u32).to_le_bytes());
    for m in methods {
        payload.extend_from_slice(&m.to_le_bytes());
    }
    encode_frame(KIND_RETRANSFORM, time, &payload)
}

/// Encode a daemon → shim FORGET_METHODS command.
pub fn encode_forget_methods(time: u64) -> Vec<u8> {
    encode_frame(KIND_FORGET_METHODS, time, &[])
}

pub fn encode_frame(kind: u16, time: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + HEADER_LEN + payload.len());
    out.extend_from_slice(&((HEADER_LEN + payload.len()) as u32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&time.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u32).to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    #[test]
    fn nmethod_load_round_trip() {
        let mut p = Vec::new();
        p.extend_from_slice(&7u64.to_le_bytes());
        p.extend_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
        p.extend_from_slice(&0x200u32.to_le_bytes());
        p.extend_from_slice(&[1, 0, 0, 0]);
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&0x7f00_0000_1040u64.to_le_bytes());
        p.extend_from_slice(&2u32.to_le_bytes());
        p.extend_from_slice(&9u64.to_le_bytes());
        p.extend_from_slice(&4i32.to_le_bytes());
        p.extend_from_slice(&7u64.to_le_bytes());
        p.extend_from_slice(&(-1i32).to_le_bytes());
        let frame = encode_frame(KIND_NMETHOD_LOAD, 55, &p);
        let body = first_frame(&frame).unwrap().unwrap();
        assert_eq!(body.len() + 4, frame.len());
        let f = decode_frame(body).unwrap();
        assert_eq!(f.time, 55);
        let Record::NmethodLoad(nm) = f.record else {
            panic!("{f:?}")
        };
        assert!(nm.replayed);
        assert_eq!(nm.pcs[0].frames, vec![(9, 4), (7, -1)]);
    }

    #[test]
    fn stats_are_read_by_version_1_fields_and_tolerate_appended_ones() {
        let mut p = 1u32.to_le_bytes().to_vec();
        for v in 1..=9u64 {
            p.extend_from_slice(&(v * 100).to_le_bytes());
        }
        let short = encode_frame(KIND_STATS, 3, &p[..p.len() - 1]);
        let e = decode_frame(&short[4..]).unwrap_err();
        assert!(e.0.contains("STATS record is truncated"), "{e}");
        p.extend_from_slice(b"from a later version");
        let frame = encode_frame(KIND_STATS, 3, &p);
        let Record::Stats(s) = decode_frame(&frame[4..]).unwrap().record else {
            panic!("not stats")
        };
        assert_eq!((s.version, s.total_bytes), (1, 100));
        assert_eq!((s.queue_high_water, s.methods_forgotten), (400, 900));
        assert_eq!(s.extra, None);

        let mut p = 2u32.to_le_bytes().to_vec();
        for v in 1..=15u64 {
            p.extend_from_slice(&(v * 100).to_le_bytes());
        }
        let frame = encode_frame(KIND_STATS, 3, &p);
        let Record::Stats(s) = decode_frame(&frame[4..]).unwrap().record else {
            panic!("not stats")
        };
        let extra = s.extra.expect("version 2 fields");
        assert_eq!(
            (extra.dropped_records, extra.thread_event_max_ns),
            (1000, 1400)
        );
        assert!(!extra.holds_retransform);
        let truncated = encode_frame(KIND_STATS, 3, &p[..p.len() - 8]);
        assert!(decode_frame(&truncated[4..]).is_err());
        let marker = encode_frame(KIND_METHODS_FORGOTTEN, 4, &[]);
        assert_eq!(
            decode_frame(&marker[4..]).unwrap().record,
            Record::MethodsForgotten
        );
        assert_eq!(encode_forget_methods(0).len(), 4 + HEADER_LEN);
    }

    #[test]
    fn busy_names_the_other_daemon_and_tolerates_appended_fields() {
        let mut p = 1u32.to_le_bytes().to_vec();
        p.extend_from_slice(&4242u32.to_le_bytes());
        let short = encode_frame(KIND_BUSY, 5, &p[..p.len() - 1]);
        let e = decode_frame(&short[4..]).unwrap_err();
        assert!(e.0.contains("BUSY record is truncated"), "{e}");
        p.extend_from_slice(b"from a later version");
        let frame = encode_frame(KIND_BUSY, 5, &p);
        let body = first_frame(&frame).unwrap().unwrap();
        assert_eq!(
            decode_frame(body).unwrap(),
            Frame {
                time: 5,
                record: Record::Busy {
                    version: 1,
                    daemon_pid: 4242
                }
            }
        );
    }

    #[test]
    fn hostile_counts_and_lengths_are_rejected() {
        let mut p = Vec::new();
        p.extend_from_slice(&1u64.to_le_bytes());
        for s in ["LA;", "m", "()V", ""] {
            p.extend_from_slice(&string(s));
        }
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&0i32.to_le_bytes());
        p.extend_from_slice(&u32::MAX.to_le_bytes());
        let frame = encode_frame(KIND_METHOD, 1, &p);
        assert!(decode_frame(&frame[4..]).is_err());
        assert!(first_frame(&[0xff, 0xff, 0xff, 0x7f, 0]).is_err());
        let partial = &encode_frame(KIND_THREAD_END, 1, &3u32.to_le_bytes())[..10];
        assert_eq!(first_frame(partial).unwrap(), None);
        let unknown = encode_frame(999, 1, b"future");
        assert_eq!(
            decode_frame(&unknown[4..]).unwrap().record,
            Record::Unknown(999)
        );
    }
}
