//! The `.jvmperf` raw recording: every sample with its CLOCK_MONOTONIC time and thread, already
//! symbolized, so a recording can be converted, windowed and filtered later.
//!
//! Layout (version 1.6; integers are unsigned LEB128 varints unless noted):
//!
//! ```text
//! header (24 bytes, fixed):
//!   magic        8 bytes  "JVMPERF\0"
//!   major, minor 2 × u8   1, 6 — a reader refuses another major and reads any minor
//!   flags        u8       bit 0: the body is gzip-compressed
//!   reserved     u8       0
//!   crc32        u32 LE   of the uncompressed body
//!   body_len     u64 LE   length of the uncompressed body
//! body:
//!   period_ns, start_ns
//!   strings:  n, n × (len, UTF-8 bytes)
//!   threads:  n, n × (tid, name)                      name = string index + 1, 0 = unnamed
//!   frames:   n, n × (kind u8, name, file, line, bci, signature, module, start_line)
//!             name is a string index; the others are optional: 0 = absent, else value + 1
//!             (bci zigzag-encoded first); kind numbers follow `FrameKind::ALL` (7, the
//!             allocated class, from 1.5; 8, the class of a lock, from 1.6: older readers
//!             refuse such a file as corrupt)
//!   stacks:   n, n × (depth, depth × frame index)      root first
//!   samples:  n, n × (time delta, thread index, stack index, weight)
//!             time delta: zigzag(time − previous time), the first against start_ns
//!   compiled (1.1): n, n × (frame index, level, compile id, osr bci, code size)
//!             the code version of compiled frames; osr bci: 0 = not OSR, else zigzag(bci) + 1
//!   clock (1.2): 0 = CPU time, 1 = wall-clock time (`record --wall`), 2 (1.5) = bytes
//!             allocated (`record -e alloc`; weights are bytes), 3 (1.6) = nanoseconds
//!             waited for locks (`record -e lock`)
//!   cpu time (1.3): the target's CPU time over the sampled window in ns + 1, 0 = unknown
//!             (samples on a CPU were expected to number it / period_ns)
//!   span (1.4): its start in ns since the Unix epoch + 1 (0 = unknown, nothing follows), then
//!             its length in ns
//!   labels (1.4): n, n × (key, value), each len + UTF-8 bytes (host, pid, main class…)
//! ```
//!
//! Later minor versions may append fields after the samples; readers ignore them (a 1.0 reader
//! reads a 1.1 file without its compiled-code table, a 1.1 reader a 1.0 file as having none).
//!
//! A recording in progress keeps its named samples in a spill file on disk, not in memory
//! (`output::spill`), and writes the file from it at the end.

use crate::error::{Error, ErrorKind, Result};
use crate::profile::{
    Clock, CompiledCode, Frame, FrameKind, Profile, Sample, WallInterval, MAX_WEIGHT,
};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::{Compression, Crc};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::Arc;

pub const MAGIC: &[u8; 8] = b"JVMPERF\0";
const MAJOR: u8 = 1;
const MINOR: u8 = 6;
const FLAG_GZIP: u8 = 1;
const HEADER_LEN: usize = 24;
/// Larger bodies are refused rather than allocated (a corrupt length).
const MAX_BODY: u64 = 1 << 36;

pub(super) fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

#[derive(Default)]
struct Strings<'a> {
    ids: HashMap<&'a str, u64>,
    list: Vec<&'a str>,
}

impl<'a> Strings<'a> {
    fn id(&mut self, s: &'a str) -> u64 {
        *self.ids.entry(s).or_insert_with(|| {
            self.list.push(s);
            self.list.len() as u64 - 1
        })
    }

    fn opt(&mut self, s: Option<&'a str>) -> u64 {
        s.map_or(0, |s| self.id(s) + 1)
    }
}

fn kind_code(kind: FrameKind) -> u8 {
    FrameKind::ALL.iter().position(|&k| k == kind).unwrap_or(0) as u8
}

/// Everything before the samples (period, start, strings, threads, frames, stacks), and the thread
/// table index of each tid. The thread table holds `sample_tids` and every named thread.
pub(super) fn tables(
    profile: &Profile,
    sample_tids: impl Iterator<Item = u32>,
) -> (Vec<u8>, HashMap<u32, u64>) {
    let mut strings = Strings::default();
    let mut rest = Vec::with_capacity(1024);

    let mut tids: Vec<u32> = sample_tids
        .chain(profile.thread_names.keys().copied())
        .collect();
    tids.sort_unstable();
    tids.dedup();
    let thread_index: HashMap<u32, u64> = tids
        .iter()
        .enumerate()
        .map(|(i, &t)| (t, i as u64))
        .collect();
    put(&mut rest, tids.len() as u64);
    for &tid in &tids {
        put(&mut rest, tid as u64);
        let name = strings.opt(profile.thread_names.get(&tid).map(String::as_str));
        put(&mut rest, name);
    }

    put(&mut rest, profile.frames.len() as u64);
    for f in &profile.frames {
        rest.push(kind_code(f.kind));
        let name = strings.id(&f.name);
        put(&mut rest, name);
        let file = strings.opt(f.file.as_deref());
        put(&mut rest, file);
        put(&mut rest, f.line.map_or(0, |l| l as u64 + 1));
        put(&mut rest, f.bci.map_or(0, |b| zigzag(b as i64) + 1));
        let sig = strings.opt(f.signature.as_deref());
        put(&mut rest, sig);
        let module = strings.opt(f.module.as_deref());
        put(&mut rest, module);
        put(&mut rest, f.start_line.map_or(0, |l| l as u64 + 1));
    }

    put(&mut rest, profile.stacks.len() as u64);
    for stack in profile.stacks.iter() {
        put(&mut rest, stack.len() as u64);
        for &f in &stack {
            put(&mut rest, f as u64);
        }
    }

    let mut body = Vec::with_capacity(rest.len() + 64 * strings.list.len() + 32);
    put(&mut body, profile.period_ns);
    put(&mut body, profile.start_ns);
    put(&mut body, strings.list.len() as u64);
    for s in &strings.list {
        put(&mut body, s.len() as u64);
        body.extend_from_slice(s.as_bytes());
    }
    body.extend_from_slice(&rest);
    (body, thread_index)
}

/// One sample as the format stores it, `thread` being its thread table index; `prev` is the time
/// of the sample before (the start time for the first).
pub(super) fn put_sample(buf: &mut Vec<u8>, prev: &mut u64, s: &Sample, thread: u64) {
    put(buf, zigzag(s.time.wrapping_sub(*prev) as i64));
    *prev = s.time;
    put(buf, thread);
    put(buf, s.stack as u64);
    put(buf, s.weight);
}

/// What follows the samples: the compiled-code table (1.1), the clock (1.2), the CPU time
/// (1.3), the span and the labels (1.4).
pub(super) fn put_tail(buf: &mut Vec<u8>, profile: &Profile) {
    put_compiled(buf, profile);
    put(
        buf,
        match profile.clock {
            Clock::Cpu => 0,
            Clock::Wall => 1,
            Clock::Alloc => 2,
            Clock::Lock => 3,
        },
    );
    put(
        buf,
        profile.cpu_time_ns.map_or(0, |ns| ns.saturating_add(1)),
    );
    match profile.interval {
        Some(span) => {
            put(buf, span.start_unix_ns.saturating_add(1));
            put(buf, span.duration_ns);
        }
        None => put(buf, 0),
    }
    put(buf, profile.labels.len() as u64);
    for (key, value) in &profile.labels {
        for text in [key, value] {
            put(buf, text.len() as u64);
            buf.extend_from_slice(text.as_bytes());
        }
    }
}

/// The compiled-code table (1.1).
fn put_compiled(buf: &mut Vec<u8>, profile: &Profile) {
    let compiled: Vec<_> = profile
        .frames
        .iter()
        .enumerate()
        .filter_map(|(i, f)| Some((i, f.code?)))
        .collect();
    put(buf, compiled.len() as u64);
    for (i, c) in compiled {
        put(buf, i as u64);
        put(buf, c.level as u64);
        put(buf, c.compile_id as u64);
        put(buf, c.osr_bci.map_or(0, |b| zigzag(b as i64) + 1));
        put(buf, c.code_size as u64);
    }
}

pub(super) fn header(body_crc: u32, body_len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[MAJOR, MINOR, FLAG_GZIP, 0]);
    out.extend_from_slice(&body_crc.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out
}

pub fn render(profile: &Profile) -> Result<Vec<u8>> {
    let (mut body, threads) = tables(profile, profile.samples.iter().map(|s| s.tid));
    body.reserve(16 * profile.samples.len());
    put(&mut body, profile.samples.len() as u64);
    let mut prev = profile.start_ns;
    for s in &profile.samples {
        put_sample(&mut body, &mut prev, s, threads[&s.tid]);
    }
    put_tail(&mut body, profile);
    let mut crc = Crc::new();
    crc.update(&body);
    let mut gz = GzEncoder::new(header(crc.sum(), body.len() as u64), Compression::fast());
    gz.write_all(&body)
        .and_then(|_| gz.finish())
        .map_err(|e| Error::new(ErrorKind::Output, format!("cannot compress: {e}")))
}

/// A LEB128 `u64` (as [`put`] writes it) from `next` bytes; `bad()` when it does not fit.
pub(super) fn decode_varint<E>(
    mut next: impl FnMut() -> std::result::Result<u8, E>,
    bad: impl FnOnce() -> E,
) -> std::result::Result<u64, E> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = next()?;
        if shift == 63 && b > 1 {
            break;
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(bad())
}

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Usage,
        format!(
            "corrupt .jvmperf file: {what} (the file is damaged or truncated: copy it again or record again)"
        ),
    )
}

/// Bounds-checked reading of the body.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn byte(&mut self, what: &str) -> Result<u8> {
        let b = *self
            .buf
            .get(self.at)
            .ok_or_else(|| corrupt(format!("truncated in {what}")))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self, what: &str) -> Result<u64> {
        decode_varint(
            || self.byte(what),
            || corrupt(format!("bad number in {what}")),
        )
    }

    /// A count of elements that each take at least `min_size` bytes.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize> {
        let n = self.varint(what)?;
        let left = (self.buf.len() - self.at) as u64;
        if n.saturating_mul(min_size as u64) > left {
            return Err(corrupt(format!("{what}: {n} entries in {left} bytes")));
        }
        Ok(n as usize)
    }

    fn index(&mut self, what: &str, len: usize) -> Result<usize> {
        let v = self.varint(what)?;
        if v >= len as u64 {
            return Err(corrupt(format!("{what} {v} out of range (0..{len})")));
        }
        Ok(v as usize)
    }

    /// An optional value stored as value + 1 (0 = absent).
    fn opt(&mut self, what: &str) -> Result<Option<u64>> {
        Ok(self.varint(what)?.checked_sub(1))
    }

    fn opt_u32(&mut self, what: &str) -> Result<Option<u32>> {
        self.opt(what)?
            .map(|v| u32::try_from(v).map_err(|_| corrupt(format!("{what} {v} too large"))))
            .transpose()
    }

    fn opt_string(&mut self, what: &str, strings: &[String]) -> Result<Option<String>> {
        match self.opt(what)? {
            None => Ok(None),
            Some(i) => strings
                .get(i as usize)
                .cloned()
                .map(Some)
                .ok_or_else(|| corrupt(format!("{what} names string {i} of {}", strings.len()))),
        }
    }

    fn string(&mut self, what: &str, strings: &[String]) -> Result<String> {
        Ok(strings[self.index(what, strings.len())?].clone())
    }

    /// A string written in place: its length, then its bytes.
    fn inline_string(&mut self, what: &str) -> Result<String> {
        let len = self.count(what, 1)?;
        let text = String::from_utf8_lossy(&self.buf[self.at..self.at + len]).into_owned();
        self.at += len;
        Ok(text)
    }
}

/// The uncompressed, checksum-verified body of a `.jvmperf` file.
fn body(bytes: &[u8]) -> Result<Vec<u8>> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(corrupt("no jvmperf header"));
    }
    let (major, minor, flags) = (bytes[8], bytes[9], bytes[10]);
    if major != MAJOR {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "this .jvmperf file is format version {major}.{minor}; this jvmperf reads version {MAJOR}.x: use the jvmperf that recorded it"
            ),
        ));
    }
    let crc = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or_default());
    let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap_or_default());
    if len > MAX_BODY {
        return Err(corrupt(format!("body length {len}")));
    }
    let payload = &bytes[HEADER_LEN..];
    let body = if flags & FLAG_GZIP != 0 {
        let mut out = Vec::with_capacity((len as usize).min(64 << 20));
        GzDecoder::new(payload)
            .take(len + 1)
            .read_to_end(&mut out)
            .map_err(|e| corrupt(format!("compressed body: {e}")))?;
        out
    } else {
        payload.to_vec()
    };
    if body.len() as u64 != len {
        return Err(corrupt(format!(
            "body is {} bytes, header says {len}",
            body.len()
        )));
    }
    let mut c = Crc::new();
    c.update(&body);
    if c.sum() != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(body)
}

pub fn parse(bytes: &[u8]) -> Result<Profile> {
    let body = body(bytes)?;
    let mut c = Cursor { buf: &body, at: 0 };
    let mut p = Profile::default();
    p.period_ns = c.varint("header")?;
    p.start_ns = c.varint("header")?;

    let n = c.count("string table", 1)?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.count("string", 1)?;
        let raw = &body[c.at..c.at + len];
        c.at += len;
        strings.push(
            std::str::from_utf8(raw)
                .map_err(|_| corrupt("string is not UTF-8"))?
                .to_string(),
        );
    }

    let n = c.count("thread table", 2)?;
    let mut tids = Vec::with_capacity(n);
    for _ in 0..n {
        let tid = c.varint("thread table")?;
        let tid = u32::try_from(tid).map_err(|_| corrupt(format!("thread id {tid}")))?;
        if let Some(name) = c.opt_string("thread name", &strings)? {
            p.thread_names.insert(tid, name);
        }
        tids.push(tid);
    }

    let n = c.count("frame table", 8)?;
    let mut frames = Vec::with_capacity(n);
    for _ in 0..n {
        let code = c.byte("frame table")?;
        let kind = *FrameKind::ALL
            .get(code as usize)
            .ok_or_else(|| corrupt(format!("frame kind {code} (a newer jvmperf's?)")))?;
        let frame = Frame {
            kind,
            name: c.string("frame name", &strings)?,
            file: c.opt_string("frame file", &strings)?.map(Arc::from),
            line: c.opt_u32("frame line")?,
            bci: c
                .opt("frame bci")?
                .map(|b| i32::try_from(unzigzag(b)).map_err(|_| corrupt("frame bci")))
                .transpose()?,
            signature: c.opt_string("frame signature", &strings)?,
            module: c.opt_string("frame module", &strings)?.map(Arc::from),
            start_line: c.opt_u32("frame start line")?,
            code: None,
        };
        frames.push(frame);
    }

    // Frames are interned once the compiled-code table after the samples is read: frames that
    // differ only in their code version would otherwise merge.
    let n = c.count("stack table", 1)?;
    let mut stacks = Vec::with_capacity(n);
    for _ in 0..n {
        let depth = c.count("stack", 1)?;
        let mut stack = Vec::with_capacity(depth);
        for _ in 0..depth {
            stack.push(c.index("stack frame", frames.len())?);
        }
        stacks.push(stack);
    }

    let n = c.count("samples", 4)?;
    p.samples.reserve_exact(n);
    let mut time = p.start_ns;
    for _ in 0..n {
        time = time.wrapping_add(unzigzag(c.varint("sample time")?) as u64);
        let tid = tids[c.index("sample thread", tids.len())?];
        let stack = c.index("sample stack", stacks.len())? as u32;
        let weight = c.varint("sample weight")?;
        if weight > MAX_WEIGHT {
            return Err(corrupt(format!("sample weight {weight}")));
        }
        p.samples.push(Sample {
            time,
            tid,
            stack,
            weight,
        });
    }
    if c.at < body.len() {
        read_compiled(&mut c, &mut frames)?;
    }
    if c.at < body.len() {
        p.clock = match c.varint("clock")? {
            0 => Clock::Cpu,
            1 => Clock::Wall,
            2 => Clock::Alloc,
            3 => Clock::Lock,
            other => return Err(corrupt(format!("clock {other} (a newer jvmperf's?)"))),
        };
    }
    if c.at < body.len() {
        p.cpu_time_ns = c.varint("cpu time")?.checked_sub(1);
    }
    if c.at < body.len() {
        if let Some(start_unix_ns) = c.opt("span")? {
            p.interval = Some(WallInterval {
                start_unix_ns,
                duration_ns: c.varint("span length")?,
            });
        }
        let n = c.count("labels", 2)?;
        for _ in 0..n {
            p.labels
                .push((c.inline_string("label")?, c.inline_string("label")?));
        }
    }

    let frame_ids: Vec<_> = frames.into_iter().map(|f| p.intern_frame(f)).collect();
    let stack_ids: Vec<_> = stacks
        .iter()
        .map(|s| p.intern_stack(s.iter().map(|&f| frame_ids[f]).collect()))
        .collect();
    for s in &mut p.samples {
        s.stack = stack_ids[s.stack as usize];
    }
    Ok(p)
}

/// The compiled-code table (1.1) into `frames`.
fn read_compiled(c: &mut Cursor, frames: &mut [Frame]) -> Result<()> {
    let n = c.count("compiled code", 5)?;
    for _ in 0..n {
        let frame = c.index("compiled frame", frames.len())?;
        let level = c.varint("compiled level")?;
        let compile_id = c.varint("compile id")?;
        let osr_bci = c
            .opt("osr bci")?
            .map(|b| i32::try_from(unzigzag(b)).map_err(|_| corrupt("osr bci")))
            .transpose()?;
        let code_size = c.varint("code size")?;
        frames[frame].code = Some(CompiledCode {
            level: u8::try_from(level).map_err(|_| corrupt(format!("level {level}")))?,
            compile_id: u32::try_from(compile_id)
                .map_err(|_| corrupt(format!("compile id {compile_id}")))?,
            osr_bci,
            code_size: u32::try_from(code_size)
                .map_err(|_| corrupt(format!("code size {code_size}")))?,
        });
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn fixture() -> Profile {
        let mut p = Profile::default();
        p.period_ns = 1_001_001;
        p.start_ns = 5_000_000_000;
        let main = p.intern_frame(Frame {
            name: "bench.App.main".into(),
            kind: FrameKind::Interpreted,
            file: Some("App.java".into()),
            line: Some(10),
            bci: Some(4),
            signature: Some("([Ljava/lang/String;)V".into()),
            module: None,
            start_line: Some(9),
            code: None,
        });
        let jit = Frame {
            bci: Some(-1),
            kind: FrameKind::Jit,
            ..p.frames[main as usize].clone()
        };
        let hot = p.intern_frame(Frame {
            code: Some(CompiledCode::TEST_VERSIONS[0]),
            ..jit.clone()
        });
        let libz = p.intern_frame(Frame {
            module: Some("libz.so.1".into()),
            ..Frame::named("deflate_slow", FrameKind::Native)
        });
        // The same method in another code version: a frame of its own.
        let hot_c1 = p.intern_frame(Frame {
            code: Some(CompiledCode::TEST_VERSIONS[1]),
            ..jit
        });
        let s1 = p.intern_stack(vec![main, hot]);
        let s2 = p.intern_stack(vec![main, hot, libz]);
        let s3 = p.intern_stack(vec![main, hot_c1]);
        p.thread_names.insert(42, "main".into());
        let samples = [(42, s1), (43, s2), (42, s2), (42, s1), (43, s3)];
        for (i, (tid, stack)) in samples.iter().enumerate() {
            p.samples.push(Sample {
                // Out of order on purpose: deltas may be negative.
                time: 5_000_000_000 + [3, 1, 2, 9, 4][i] * 1_000_000,
                tid: *tid,
                stack: *stack,
                weight: 1 + i as u64 % 2,
            });
        }
        p
    }

    #[test]
    fn round_trip_keeps_everything() {
        let p = fixture();
        let bytes = render(&p).unwrap();
        let q = parse(&bytes).unwrap();
        assert_eq!(q.frames, p.frames);
        assert_eq!(q.stacks, p.stacks);
        assert_eq!(q.samples, p.samples);
        assert_eq!(q.thread_names, p.thread_names);
        assert_eq!((q.period_ns, q.start_ns), (p.period_ns, p.start_ns));
        assert_eq!(q.clock, Clock::Cpu);
        let mut wall = fixture();
        wall.clock = Clock::Wall;
        assert_eq!(parse(&render(&wall).unwrap()).unwrap().clock, Clock::Wall);
        let mut alloc = fixture();
        alloc.clock = Clock::Alloc;
        let class = alloc.intern_frame(Frame::named("long[]", FrameKind::Allocated));
        let stack = alloc.intern_stack(vec![0, class]);
        alloc.samples[0].stack = stack;
        alloc.samples[0].weight = 4 << 20;
        let read = parse(&render(&alloc).unwrap()).unwrap();
        assert_eq!(read.clock, Clock::Alloc);
        assert_eq!(read.frames, alloc.frames);
        assert_eq!(read.samples, alloc.samples);
        assert_eq!(q.cpu_time_ns, None);
        wall.cpu_time_ns = Some(12_345_678_901);
        let read = parse(&render(&wall).unwrap()).unwrap();
        assert_eq!(read.cpu_time_ns, Some(12_345_678_901));
        assert_eq!((read.interval, read.labels.len()), (None, 0));
        wall.interval = Some(WallInterval {
            start_unix_ns: 1_764_000_000_123_456_789,
            duration_ns: 10_000_000_000,
        });
        wall.labels = vec![
            ("main".into(), "bench.Phases".into()),
            ("pid".into(), "42".into()),
        ];
        let read = parse(&render(&wall).unwrap()).unwrap();
        assert_eq!((read.interval, &read.labels), (wall.interval, &wall.labels));
    }

    /// A file written by jvmperf before the compiled-code table (format 1.0, the fixture of that
    /// version rendered then) still reads, its compiled frames without a code version.
    #[test]
    fn version_1_0_files_still_read() {
        let bytes = include_bytes!("../../tests/fixtures/profile-v1.0.jvmperf");
        assert_eq!((bytes[8], bytes[9]), (1, 0));
        let old = parse(bytes).unwrap();
        let mut now = fixture();
        now.samples.truncate(4);
        assert_eq!(old.samples, now.samples);
        assert_eq!(old.thread_names, now.thread_names);
        let names = |p: &Profile| -> Vec<(String, FrameKind)> {
            p.frames.iter().map(|f| (f.name.clone(), f.kind)).collect()
        };
        assert_eq!(names(&old), names(&now)[..3]);
        assert!(old.frames.iter().all(|f| f.code.is_none()));
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let bytes = render(&fixture()).unwrap();
        for cut in 0..bytes.len() {
            let e = parse(&bytes[..cut]).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Usage);
            assert!(e.message.contains("corrupt .jvmperf"), "{}", e.message);
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x55;
            // Flipped bits are caught by the header checks, gzip's own CRC or ours; only the
            // minor version, the reserved byte and gzip's own header (mtime, flags, OS) may
            // change without harm.
            let harmless = i == 9 || i == 11 || (HEADER_LEN + 3..HEADER_LEN + 10).contains(&i);
            if !harmless {
                assert!(parse(&b).is_err(), "flip at {i} undetected");
            } else {
                let _ = parse(&b);
            }
        }
    }

    #[test]
    fn corrupt_bodies_with_valid_checksums_are_rejected() {
        // Uncompressed bodies with the right checksum but impossible contents.
        let frame = |body: Vec<u8>| {
            let mut c = Crc::new();
            c.update(&body);
            let mut out = MAGIC.to_vec();
            out.extend_from_slice(&[MAJOR, MINOR, 0, 0]);
            out.extend_from_slice(&c.sum().to_le_bytes());
            out.extend_from_slice(&(body.len() as u64).to_le_bytes());
            out.extend_from_slice(&body);
            out
        };
        for (body, needle) in [
            (vec![0, 0, 200, 1], "string table"),
            (vec![0, 0, 1, 1, 0xff], "not UTF-8"),
            (vec![0, 0, 0, 0, 1, 9, 0, 0, 0, 0, 0, 0, 0], "frame kind"),
            (vec![0, 0, 0, 0, 1, 0, 3, 0, 0, 0, 0, 0, 0], "frame name"),
            (
                vec![0, 0, 0, 0, 0, 1, 1, 5, 0],
                "stack frame 5 out of range",
            ),
            (
                vec![
                    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
                ],
                "bad number",
            ),
        ] {
            let e = parse(&frame(body)).unwrap_err();
            assert!(e.message.contains(needle), "{needle}: {}", e.message);
        }
        let mut newer = render(&fixture()).unwrap();
        newer[8] = 2;
        let e = parse(&newer).unwrap_err();
        assert!(
            e.message.contains(&format!("version 2.{MINOR}")),
            "{}",
            e.message
        );
    }
}
