//! JDK Flight Recorder files (`.jfr`): written for JDK Mission Control, IntelliJ IDEA and the JDK's
//! own `jfr` tool, and read from the JDK's JFR and from async-profiler.
//!
//! The format is the one the JDK's parser accepts (`src/jdk.jfr/share/classes/jdk/jfr/internal/`
//! in openjdk/jdk: `consumer/ChunkHeader.java`, `consumer/ChunkParser.java`, `MetadataReader.java`):
//!
//! - A file is a sequence of chunks. A chunk starts with a 68-byte big-endian header: magic
//!   `FLR\0`, version (u16 major 2, u16 minor), chunk size, offsets of the last constant-pool
//!   (checkpoint) event and of the metadata event, the start on the wall clock (ns since the Unix
//!   epoch), the duration in ns, the start in ticks, ticks per second, and a feature word (bit 0:
//!   integers are compressed, bit 1: final chunk).
//! - Then events, each `size` (including itself), `type id`, fields. Integers are JFR's varints:
//!   7 bits a byte, low bits first, high bit set on all but the last byte; the ninth byte carries 8.
//! - Event type 0 is the metadata: a string table and an element tree (`class` elements with
//!   their `field`s and `annotation`s) describing every type by name and id.
//! - Event type 1 is a checkpoint: constant pools (threads, stack traces, methods, classes,
//!   packages, symbols, frame types, thread states) that events refer to by key; checkpoints
//!   chain backwards by a relative offset, 0 ending the chain.
//!
//! Samples are `jdk.ExecutionSample` events (CPU), `jdk.NativeMethodSample` (the JDK's samples of
//! threads in native code), `jdk.CPUTimeSample` (JDK 25's CPU-time sampler) and async-profiler's
//! `profiler.WallClockSample` (wall clock, with a `samples` count).

#[cfg(test)]
mod fixture;
mod metadata;
mod read;
mod write;

pub use read::parse;
pub use write::render;

use crate::error::{Error, ErrorKind, Result};

pub const MAGIC: &[u8; 4] = b"FLR\0";
const HEADER_LEN: usize = 68;
const METADATA_EVENT: u64 = 0;
const CHECKPOINT_EVENT: u64 = 1;
/// Feature bits of the header's last byte (`ChunkHeader.java`; JMC reads bit 0).
const COMPRESSED_INTS: u8 = 1;
const FINAL_CHUNK: u8 = 2;

const EXECUTION_SAMPLE: &str = "jdk.ExecutionSample";
const NATIVE_METHOD_SAMPLE: &str = "jdk.NativeMethodSample";
/// JDK 25's CPU-time sampler (JEP 509): samples of threads in Java and native code by the CPU
/// time they used, each with its `samplingPeriod`.
const CPU_TIME_SAMPLE: &str = "jdk.CPUTimeSample";
/// Settings in effect (the JDK's sampling periods among them).
const ACTIVE_SETTING: &str = "jdk.ActiveSetting";
/// async-profiler's wall-clock sample (`src/jfrMetadata.cpp`), with a `samples` count.
const WALL_CLOCK_SAMPLE: &str = "profiler.WallClockSample";
/// The JDK's allocation sample: the allocating stack, the class and the bytes it stands for.
const OBJECT_ALLOCATION_SAMPLE: &str = "jdk.ObjectAllocationSample";
/// A contended `synchronized` enter, and a park for a `java.util.concurrent` lock (JDK event types;
/// their fields as `jfr metadata` lists them).
const JAVA_MONITOR_ENTER: &str = "jdk.JavaMonitorEnter";
const THREAD_PARK: &str = "jdk.ThreadPark";

/// Frame types: the JDK's four, and async-profiler's names for the rest (its
/// `writeFrameTypes`).
const INTERPRETED: &str = "Interpreted";
const JIT_COMPILED: &str = "JIT compiled";
const INLINED: &str = "Inlined";
const NATIVE: &str = "Native";
const CPP: &str = "C++";
const KERNEL: &str = "Kernel";
const C1_COMPILED: &str = "C1 compiled";

/// The "class" of HotSpot stub frames and of kernel frames (pprof's mapping names for them).
const STUBS_CLASS: &str = "[jvm stubs]";
const KERNEL_CLASS: &str = "[kernel.kallsyms]";

/// The descriptor of methods whose descriptor is unknown, native code's included: the JDK's
/// `jfr print` needs one in parentheses, and this one (async-profiler's) is no Java method's.
const NO_DESCRIPTOR: &str = "()L;";

/// String encodings (`RecordingInput.readEncodedString`).
const STRING_NULL: u8 = 0;
const STRING_EMPTY: u8 = 1;
const STRING_POOL: u8 = 2;
const STRING_UTF8: u8 = 3;
const STRING_CHARS: u8 = 4;
const STRING_LATIN1: u8 = 5;

/// A chunk's header; offsets are from the chunk's start.
struct ChunkHeader {
    size: usize,
    checkpoint: usize,
    metadata: usize,
    start_unix_ns: u64,
    duration_ns: u64,
    start_ticks: i64,
    ticks_per_second: u64,
}

impl ChunkHeader {
    /// The header of a complete chunk, version 2.0, integers compressed, the final chunk.
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = Vec::with_capacity(HEADER_LEN);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&2u16.to_be_bytes());
        h.extend_from_slice(&0u16.to_be_bytes());
        for v in [
            self.size as u64,
            self.checkpoint as u64,
            self.metadata as u64,
            self.start_unix_ns,
            self.duration_ns,
            self.start_ticks as u64,
            self.ticks_per_second,
        ] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        // File state 0 (finished), then the feature bits.
        h.extend_from_slice(&[0, 0, 0, COMPRESSED_INTS | FINAL_CHUNK]);
        h.try_into().unwrap_or([0; HEADER_LEN])
    }
}

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Usage,
        format!("not a valid JFR file: {what} (is it complete? a recording still being written, or cut short, cannot be read)"),
    )
}

/// JFR's varint (`RecordingInput.readLong`).
fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    for _ in 0..8 {
        if v < 0x80 {
            buf.push(v as u8);
            return;
        }
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// The bytes [`put_varint`] takes for `v`.
fn varint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.div_ceil(7).clamp(1, 9)
}

/// An `int` field: its 32 bits, as the JDK reads ints as the low bits of a varint long.
fn put_int(buf: &mut Vec<u8>, v: i32) {
    put_varint(buf, v as u32 as u64);
}

fn put_utf8(buf: &mut Vec<u8>, s: &str) {
    if s.is_empty() {
        buf.push(STRING_EMPTY);
        return;
    }
    buf.push(STRING_UTF8);
    put_varint(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

/// A string as JFR stores it: a constant-pool reference is resolved by the reader.
#[derive(Debug, Clone, PartialEq)]
enum Str<'a> {
    Null,
    Text(std::borrow::Cow<'a, str>),
    Pool(u64),
}

/// A bounds-checked reader of one region of the file.
#[derive(Clone)]
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], pos: usize) -> Self {
        Cursor { bytes, pos }
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(corrupt(format!(
                "{n} bytes needed at offset {} past the end of their region",
                self.pos
            )));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn raw_u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn raw_u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..8 {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Ok(v | u64::from(self.u8()?) << 56)
    }

    /// A count of items that each take at least one byte: more than the bytes left is damage.
    fn count(&mut self) -> Result<usize> {
        let n = self.varint()?;
        if n > self.remaining() as u64 {
            return Err(corrupt(format!(
                "a count of {n} at offset {} exceeds its region",
                self.pos
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<Str<'a>> {
        match self.u8()? {
            STRING_NULL => Ok(Str::Null),
            STRING_EMPTY => Ok(Str::Text("".into())),
            STRING_POOL => Ok(Str::Pool(self.varint()?)),
            STRING_UTF8 => {
                let n = self.count()?;
                Ok(Str::Text(String::from_utf8_lossy(self.take(n)?)))
            }
            STRING_CHARS => {
                let n = self.count()?;
                let mut units = Vec::with_capacity(n);
                for _ in 0..n {
                    units.push(self.varint()? as u16);
                }
                Ok(Str::Text(String::from_utf16_lossy(&units).into()))
            }
            STRING_LATIN1 => {
                let n = self.count()?;
                Ok(Str::Text(
                    self.take(n)?
                        .iter()
                        .map(|&b| b as char)
                        .collect::<String>()
                        .into(),
                ))
            }
            other => Err(corrupt(format!(
                "unknown string encoding {other} at offset {}",
                self.pos - 1
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::collapsed;
    use crate::profile::{Clock, CompiledCode, Frame, FrameKind, Profile, Sample, WallInterval};

    /// Every kind of frame, a weighted sample, two threads, times out of order.
    pub(super) fn fixture(clock: Clock) -> Profile {
        let mut p = Profile::default();
        p.clock = clock;
        p.interval = Some(WallInterval {
            start_unix_ns: 1_700_000_000_000_000_000,
            duration_ns: 2_000_000,
        });
        let java = |name: &str, kind, line| Frame {
            line: Some(line),
            bci: Some(7),
            signature: Some("(J)J".into()),
            ..Frame::named(name, kind)
        };
        let start = p.intern_frame(Frame {
            module: Some("libc.so.6".into()),
            ..Frame::named("start_thread", FrameKind::Native)
        });
        let vm = p.intern_frame(Frame {
            module: Some("libjvm.so".into()),
            ..Frame::named("JavaCalls::call_helper", FrameKind::Native)
        });
        let stub = p.intern_frame(Frame::named("call_stub", FrameKind::Stub));
        let main = p.intern_frame(java("bench.App.main", FrameKind::Interpreted, 5));
        let hot = p.intern_frame(Frame {
            code: Some(CompiledCode::TEST_VERSIONS[0]),
            ..java("bench.App$Inner.hot", FrameKind::Jit, 9)
        });
        let c1 = p.intern_frame(Frame {
            code: Some(CompiledCode::TEST_VERSIONS[1]),
            ..java("bench.App.warm", FrameKind::Jit, 19)
        });
        let helper = p.intern_frame(java("bench.App.helper", FrameKind::Inlined, 14));
        let jni = p.intern_frame(Frame {
            signature: Some("([BII)I".into()),
            ..Frame::named(
                "java.util.zip.Deflater.deflateBytesBytes",
                FrameKind::Native,
            )
        });
        // No line or bci known: JFR's -1.
        let lambda = p.intern_frame(Frame {
            signature: Some("()V".into()),
            ..Frame::named(
                "bench.App$$Lambda$14/0x0000000800c03000.run",
                FrameKind::Jit,
            )
        });
        let kernel = p.intern_frame(Frame::named("do_syscall_64", FrameKind::Kernel));
        let thread = p.intern_frame(Frame::named("worker", FrameKind::Thread));
        let s1 = p.intern_stack(vec![start, vm, stub, main, hot, helper]);
        let s2 = p.intern_stack(vec![start, vm, stub, main, c1, jni, kernel]);
        let s3 = p.intern_stack(vec![thread, main, lambda]);
        p.thread_names.insert(10, "worker".into());
        for (time, tid, stack, weight) in [
            (1_000_300, 10, s1, 1),
            (1_000_100, 11, s2, 3),
            (1_000_200, 10, s3, 1),
            (1_000_200, 10, s1, 2),
        ] {
            p.samples.push(Sample {
                time,
                tid,
                stack,
                weight,
            });
        }
        p
    }

    fn folded(p: &Profile) -> Vec<(String, u64)> {
        let opts = crate::output::OutputOptions { threads: true };
        collapsed::folded(p, &opts).into_iter().collect()
    }

    #[test]
    fn a_profile_reads_back_with_its_frames_threads_and_times() {
        for clock in [Clock::Cpu, Clock::Wall] {
            let p = fixture(clock);
            let bytes = render(&p).unwrap();
            assert!(bytes.starts_with(MAGIC));
            let back = parse(&bytes).unwrap();
            assert_eq!(back.clock, clock);
            // Thread frames are JFR's threads, not frames.
            let without_thread_frames = {
                let mut q = p.clone();
                let thread = q.frames.iter().position(|f| f.kind == FrameKind::Thread);
                let s3 = q.intern_stack(vec![3, 8]);
                for s in &mut q.samples {
                    if q.stacks.frames(s.stack).first() == thread.map(|t| t as u32).as_ref() {
                        s.stack = s3;
                    }
                }
                q
            };
            assert_eq!(folded(&back), folded(&without_thread_frames), "{clock:?}");
            assert_eq!(back.total_weight(), 7);
            assert_eq!(back.thread_name(10), "worker");
            let times: Vec<u64> = back.samples.iter().map(|s| s.time).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
            assert_eq!(times[0], 1_000_100);
            assert_eq!(
                back.interval.map(|i| i.start_unix_ns),
                Some(1_700_000_000_000_000_000)
            );
            let helper = back
                .frames
                .iter()
                .find(|f| f.name == "bench.App.helper")
                .unwrap();
            assert_eq!(
                (
                    helper.kind,
                    helper.line,
                    helper.bci,
                    helper.signature.as_deref()
                ),
                (FrameKind::Inlined, Some(14), Some(7), Some("(J)J"))
            );
            let lambda = back
                .frames
                .iter()
                .find(|f| f.name.ends_with(".run"))
                .unwrap();
            assert_eq!(
                (lambda.name.as_str(), lambda.line, lambda.bci),
                ("bench.App$$Lambda$14/0x0000000800c03000.run", None, None)
            );
            let jni = back
                .frames
                .iter()
                .find(|f| f.name.ends_with("Bytes"))
                .unwrap();
            assert_eq!(
                (jni.kind, jni.line, jni.bci),
                (FrameKind::Native, None, None)
            );
            let vm = back
                .frames
                .iter()
                .find(|f| f.name == "JavaCalls::call_helper")
                .unwrap();
            assert_eq!(vm.module.as_deref(), Some("libjvm.so"));
        }
    }

    #[test]
    fn chunks_read_one_after_another_and_a_damaged_one_is_noted() {
        let one = render(&fixture(Clock::Cpu)).unwrap();
        let mut two = one.clone();
        two.extend_from_slice(&one);
        let p = parse(&two).unwrap();
        assert_eq!(p.total_weight(), 14);
        assert!(p.comments.is_empty());
        two.extend_from_slice(&one[..one.len() / 2]);
        let p = parse(&two).unwrap();
        assert_eq!(p.total_weight(), 14);
        assert!(p.comments[0].contains("skipped"), "{:?}", p.comments);
    }

    #[test]
    fn damaged_files_are_one_line_errors() {
        let good = render(&fixture(Clock::Cpu)).unwrap();
        for n in [3, 4, 67, 68, 100, good.len() / 2, good.len() - 1] {
            let e = parse(&good[..n]).unwrap_err();
            assert!(
                e.message.contains("not a valid JFR file"),
                "{n}: {}",
                e.message
            );
            assert!(!e.message.contains('\n'));
        }
        // Every byte flipped: an error or a profile, never a panic.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            let _ = parse(&bad);
        }
        let mut v1 = good.clone();
        v1[5] = 1;
        v1[4] = 0;
        assert!(parse(&v1).unwrap_err().message.contains("version 1.0"));
    }

    #[test]
    fn varints_read_what_they_write() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            1 << 55,
            (1 << 56) + 5,
            u64::MAX,
            -1i64 as u64,
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert!(buf.len() <= 9);
            let mut c = Cursor::new(&buf, 0);
            assert_eq!(c.varint().unwrap(), v);
            assert_eq!(c.remaining(), 0);
        }
        let mut buf = Vec::new();
        put_int(&mut buf, -1);
        assert_eq!(Cursor::new(&buf, 0).varint().unwrap() as i32, -1);
    }

    #[test]
    fn strings_in_every_encoding() {
        let bytes = [
            STRING_NULL,
            STRING_EMPTY,
            STRING_POOL,
            5,
            STRING_UTF8,
            2,
            b'h',
            b'i',
            STRING_CHARS,
            1,
            0xe9,
            0x01,
            STRING_LATIN1,
            1,
            0xe9,
        ];
        let mut c = Cursor::new(&bytes, 0);
        assert_eq!(c.string().unwrap(), Str::Null);
        assert_eq!(c.string().unwrap(), Str::Text("".into()));
        assert_eq!(c.string().unwrap(), Str::Pool(5));
        assert_eq!(c.string().unwrap(), Str::Text("hi".into()));
        assert_eq!(c.string().unwrap(), Str::Text("é".into()));
        assert_eq!(c.string().unwrap(), Str::Text("é".into()));
        assert!(c.string().is_err());
        assert!(Cursor::new(&[STRING_UTF8, 9, b'a'], 0).string().is_err());
    }
}
