//! The named samples of a recording in progress, spooled to disk so memory does not grow with the
//! recording's length, and the `.jvmperf` file written from them at the end.

use super::raw::{decode_varint, header, put, put_sample, put_tail, tables, unzigzag};
use crate::error::{Error, ErrorKind, Result};
use crate::profile::{Profile, Sample};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::{Compression, CrcWriter};
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The named samples of a recording in progress, in an unlinked temporary file (gzip-compressed,
/// in the sample encoding of the format but with tids for thread indices), so memory does not grow
/// with the recording's length.
pub struct SampleSpill {
    out: GzEncoder<BufWriter<File>>,
    dir: PathBuf,
    start_ns: u64,
    prev: u64,
    count: u64,
    tids: HashSet<u32>,
    buf: Vec<u8>,
    failed: Option<std::io::Error>,
}

impl SampleSpill {
    /// A spill file in `dir` (next to the output: on the disk the output will need anyway). It is
    /// unlinked at once, so nothing is left behind however the recording ends.
    pub fn create(dir: &Path, start_ns: u64) -> Result<Self> {
        let path = dir.join(format!(".jvmperf-samples.{}.partial", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| spill_error(dir, &e))?;
        let _ = std::fs::remove_file(&path);
        Ok(SampleSpill {
            out: GzEncoder::new(BufWriter::new(file), Compression::fast()),
            dir: dir.to_path_buf(),
            start_ns,
            prev: start_ns,
            count: 0,
            tids: HashSet::new(),
            buf: Vec::with_capacity(32),
            failed: None,
        })
    }

    /// Append a sample. A write error is kept and reported by [`save_streamed`].
    pub fn push(&mut self, s: &Sample) {
        if self.failed.is_some() {
            return;
        }
        self.buf.clear();
        put_sample(&mut self.buf, &mut self.prev, s, s.tid as u64);
        match self.out.write_all(&self.buf) {
            Ok(()) => {
                self.count += 1;
                self.tids.insert(s.tid);
            }
            Err(e) => self.failed = Some(e),
        }
    }

    /// The samples in a finished spill `file`, read back in order.
    fn replay(
        mut file: &File,
        start_ns: u64,
    ) -> std::io::Result<impl Iterator<Item = std::io::Result<Sample>> + '_> {
        file.rewind()?;
        let mut r = BufReader::new(GzDecoder::new(BufReader::new(file)));
        let mut time = start_ns;
        Ok(std::iter::from_fn(move || {
            let next = (|| {
                if r.fill_buf()?.is_empty() {
                    return Ok(None);
                }
                let delta = unzigzag(read_varint(&mut r)?) as u64;
                let tid = read_varint(&mut r)? as u32;
                let stack = read_varint(&mut r)? as u32;
                let weight = read_varint(&mut r)?;
                time = time.wrapping_add(delta);
                Ok(Some(Sample {
                    time,
                    tid,
                    stack,
                    weight,
                }))
            })();
            next.transpose()
        }))
    }
}

fn spill_error(dir: &Path, e: &std::io::Error) -> Error {
    Error::new(
        ErrorKind::Output,
        format!(
            "cannot keep the recording's samples in {}: {e} (a .jvmperf recording spools its samples next to the output: free space there or choose another -o)",
            dir.display()
        ),
    )
}

fn read_varint(r: &mut impl Read) -> std::io::Result<u64> {
    let next = || {
        let mut b = [0u8];
        r.read_exact(&mut b).map(|()| b[0])
    };
    decode_varint(next, || {
        std::io::Error::other("bad number in the sample spill")
    })
}

/// Write `profile`'s frames, stacks and threads with the samples in `spill` (the profile's own
/// samples are not used) as a `.jvmperf` file at `path`: a temporary file renamed when complete,
/// or written in place when `path` is not a regular file (`/dev/null`). When `path` cannot be
/// written, the recording goes to $TMPDIR (or /tmp), else the current directory, and the error
/// names it, as for other formats.
pub fn save_streamed(profile: &Profile, spill: SampleSpill, path: &Path) -> Result<()> {
    save_streamed_or_rescue(profile, spill, path, &super::file::rescue_dirs())
}

fn save_streamed_or_rescue(
    profile: &Profile,
    spill: SampleSpill,
    path: &Path,
    rescue_dirs: &[PathBuf],
) -> Result<()> {
    let SampleSpill {
        out,
        dir,
        start_ns,
        count,
        tids,
        failed,
        ..
    } = spill;
    let spilled = match failed {
        Some(e) => Err(e),
        None => out
            .finish()
            .and_then(|w| w.into_inner().map_err(|e| e.into_error())),
    };
    let file = spilled.map_err(|e| spill_error(&dir, &e))?;
    let (tables, threads) = tables(profile, tids.into_iter());
    let body = |w: &mut dyn Write| -> std::io::Result<()> {
        w.write_all(&tables)?;
        let mut buf = Vec::with_capacity(64 << 10);
        put(&mut buf, count);
        let mut prev = profile.start_ns;
        for s in SampleSpill::replay(&file, start_ns)? {
            let s = s?;
            let thread = *threads
                .get(&s.tid)
                .ok_or_else(|| std::io::Error::other("a spilled sample's thread is unknown"))?;
            put_sample(&mut buf, &mut prev, &s, thread);
            if buf.len() >= 60 << 10 {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
        put_tail(&mut buf, profile);
        w.write_all(&buf)
    };
    let mut crc = CrcWriter::new(std::io::sink());
    body(&mut crc).map_err(|e| spill_error(&dir, &e))?;
    let (body_crc, body_len) = (crc.crc().sum(), crc.crc().amount() as u64);
    let write = |f: &mut std::fs::File| -> std::io::Result<()> {
        f.write_all(&header(body_crc, body_len))?;
        let mut gz = GzEncoder::new(BufWriter::new(f), Compression::fast());
        body(&mut gz)?;
        gz.finish()?.flush()
    };
    super::write_with(path, write).map_err(|failed| {
        let rescued = super::file::rescue(path, rescue_dirs, write);
        super::file::rescue_error(failed, count, path, rescued)
    })
}

/// Where a recording to `output` spools its samples: next to it, or in the temporary directory
/// when `output` is not a regular file (`/dev/null`).
pub fn spill_dir(output: &Path) -> PathBuf {
    if std::fs::metadata(output).is_ok_and(|m| !m.file_type().is_file()) {
        return std::env::temp_dir();
    }
    match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::raw::{parse, tests::fixture};

    #[test]
    fn streamed_recording_equals_the_rendered_one() {
        let p = fixture();
        let dir = std::env::temp_dir().join(format!("jvmperf-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut spill = SampleSpill::create(&dir, p.start_ns).unwrap();
        for s in &p.samples {
            spill.push(s);
        }
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the spill is unlinked from the start"
        );
        let out = dir.join("r.jvmperf");
        let mut tables_only = p.clone();
        tables_only.samples.clear();
        save_streamed(&tables_only, spill, &out).unwrap();
        let q = parse(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!((q.frames, q.stacks), (p.frames.clone(), p.stacks.clone()));
        assert_eq!(
            (q.samples, q.thread_names),
            (p.samples.clone(), p.thread_names.clone())
        );
        save_streamed(
            &tables_only,
            SampleSpill::create(&dir, 0).unwrap(),
            Path::new("/dev/null"),
        )
        .unwrap();
        // The output cannot be written: the samples are rescued as a recording of their own.
        let mut spill = SampleSpill::create(&dir, p.start_ns).unwrap();
        for s in &p.samples {
            spill.push(s);
        }
        let e = save_streamed_or_rescue(
            &tables_only,
            spill,
            Path::new("/dev/full"),
            &[PathBuf::from("/nonexistent-jvmperf"), dir.clone()],
        )
        .unwrap_err();
        assert!(
            e.message.contains("cannot write /dev/full"),
            "{}",
            e.message
        );
        let rescued: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|f| f != &out)
            .collect();
        assert_eq!(
            rescued.len(),
            1,
            "the output and one rescued file: {rescued:?}"
        );
        assert!(
            e.message
                .contains(&format!("were saved to {}", rescued[0].display())),
            "{}",
            e.message
        );
        let r = parse(&std::fs::read(&rescued[0]).unwrap()).unwrap();
        assert_eq!(r.samples, p.samples);
        std::fs::remove_dir_all(&dir).unwrap();
        let e = SampleSpill::create(Path::new("/nonexistent-jvmperf"), 0)
            .err()
            .unwrap();
        assert!(e.message.contains("cannot keep the recording's samples"));
    }
}
