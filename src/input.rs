//! Reading profiles back: every format jvmperf writes except SVG, told apart by content (then by
//! extension), into the one profile model.

use crate::error::{Error, ErrorKind, Result};
use crate::output::{collapsed, iprof, jfr, pprof, raw, Format};
use crate::profile::{Profile, WallInterval};
use std::path::{Path, PathBuf};

/// A profile read from a file (or merged from several), with the format it was in.
#[derive(Debug)]
pub struct Recording {
    pub path: PathBuf,
    pub format: Format,
    pub profile: Profile,
}

impl Recording {
    pub fn new(path: PathBuf, format: Format, profile: Profile) -> Self {
        Recording {
            path,
            format,
            profile,
        }
    }

    /// Whether each sample's thread is known.
    pub fn keeps_threads(&self) -> bool {
        self.format.keeps_threads()
    }

    /// Whether each sample's time is known: every sample of a `.jvmperf` recording, the
    /// interval's start for those of the daemon's pprof files.
    pub fn keeps_times(&self) -> bool {
        self.format.keeps_times() || self.profile.interval.is_some()
    }

    /// An error unless the file keeps each sample's thread (for `--threads`, `--thread`).
    pub fn require_threads(&self, option: &str) -> Result<()> {
        self.require(
            self.keeps_threads(),
            option,
            "thread",
            ".jvmperf, .jfr or .pb.gz recording",
        )
    }

    /// An error unless the file keeps each sample's time (for `--since`, `--until`).
    pub fn require_times(&self, option: &str) -> Result<()> {
        self.require(
            self.keeps_times(),
            option,
            "time",
            ".jvmperf or .jfr recording (or the daemon's .pb.gz interval files)",
        )
    }

    fn require(&self, kept: bool, option: &str, what: &str, use_instead: &str) -> Result<()> {
        if kept {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{option} needs each sample's {what}, which {} ({}) does not keep: use the {use_instead}",
                self.path.display(),
                self.format.name()
            ),
        ))
    }
}

/// The format of `bytes` by its first bytes, if they tell.
fn sniff(bytes: &[u8]) -> Option<Format> {
    let text_start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map(|i| &bytes[i..])
        .unwrap_or_default();
    if bytes.starts_with(raw::MAGIC) {
        Some(Format::Raw)
    } else if bytes.starts_with(jfr::MAGIC) {
        Some(Format::Jfr)
    } else if bytes.starts_with(&[0x1f, 0x8b]) {
        Some(Format::Pprof)
    } else if text_start.starts_with(b"{") {
        let head = &text_start[..text_start.len().min(200)];
        let speedscope = crate::output::speedscope::SCHEMA.as_bytes();
        if head.windows(speedscope.len()).any(|w| w == speedscope) {
            Some(Format::Speedscope)
        } else {
            Some(Format::Iprof)
        }
    } else if text_start.starts_with(b"<?xml") || text_start.starts_with(b"<svg") {
        Some(Format::Svg)
    } else if text_start.starts_with(b"<!DOCTYPE html") {
        Some(Format::Html)
    } else {
        None
    }
}

/// Parse `bytes` (the contents of `path`, whose extension is only a hint).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Recording> {
    let format = sniff(bytes)
        .or_else(|| Format::from_path(path).ok())
        .unwrap_or(Format::Collapsed);
    let profile = match format {
        Format::Raw => raw::parse(bytes),
        Format::Pprof => pprof::parse(bytes),
        Format::Iprof => iprof::parse(bytes),
        Format::Collapsed => collapsed::parse(bytes),
        Format::Jfr => jfr::parse(bytes),
        Format::Svg | Format::Speedscope | Format::Html => Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{} cannot be read back: use the recording it was made from (.jvmperf, .jfr, .iprof, .pb.gz or .collapsed)",
                match format {
                    Format::Svg => "an SVG flame graph",
                    Format::Html => "an HTML page",
                    _ => "a speedscope profile",
                }
            ),
        )),
    }
    .map_err(|e| Error::new(e.kind, format!("{}: {}", path.display(), e.message)))?;
    if profile.samples.is_empty() {
        let fix = match format {
            Format::Jfr => "record with method sampling on (`-XX:StartFlightRecording:settings=profile`, async-profiler's `-e cpu` or `-e wall`)",
            _ => "record again (is the JVM idle?)",
        };
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{} ({}) holds no samples: {fix}",
                path.display(),
                format.name()
            ),
        ));
    }
    Ok(Recording {
        path: path.to_path_buf(),
        format,
        profile,
    })
}

/// Read profile files and merge them into one (a day of the daemon's interval files into one
/// flame graph). Each file must keep what the merged one is said to keep: threads and times are
/// kept only when every file keeps them, and a merge of several formats is named by the weakest
/// (collapsed stacks).
pub fn read_all(paths: &[PathBuf]) -> Result<Recording> {
    let mut recs = paths.iter().map(|p| read(p)).collect::<Result<Vec<_>>>()?;
    if recs.len() == 1 {
        return Ok(recs.remove(0));
    }
    let first = &recs[0];
    let format = if recs.iter().all(|r| r.format == first.format) {
        first.format
    } else {
        Format::Collapsed
    };
    let intervals: Option<Vec<WallInterval>> = recs.iter().map(|r| r.profile.interval).collect();
    let interval = intervals.and_then(|all| {
        let start = all.iter().map(|i| i.start_unix_ns).min()?;
        let end = all.iter().map(|i| i.start_unix_ns + i.duration_ns).max()?;
        Some(WallInterval {
            start_unix_ns: start,
            duration_ns: end - start,
        })
    });
    if let Some(other) = recs.iter().find(|r| r.profile.clock != first.profile.clock) {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{} holds {} time and {} {} time: a wall-clock recording (--wall) and CPU ones \
                 do not add up; give them to separate commands",
                first.path.display(),
                first.profile.clock.name(),
                other.path.display(),
                other.profile.clock.name()
            ),
        ));
    }
    let mut merged = Profile::default();
    merged.clock = first.profile.clock;
    merged.period_ns = first.profile.period_ns;
    merged.start_ns = recs
        .iter()
        .map(|r| r.profile.start_ns)
        .filter(|&t| t != 0)
        .min()
        .unwrap_or(0);
    merged.interval = interval;
    // CPU time adds up across files, where every file knows it.
    merged.cpu_time_ns = recs.iter().map(|r| r.profile.cpu_time_ns).sum();
    for r in &recs {
        if r.profile.period_ns != merged.period_ns {
            // Files sampled at different rates: sample counts add up, CPU time would not.
            merged.period_ns = 0;
        }
        merged.add_samples_of(&r.profile, |_| true);
    }
    let path = PathBuf::from(format!(
        "{} and {} more files",
        first.path.display(),
        recs.len() - 1
    ));
    Ok(Recording::new(path, format, merged))
}

/// Read a profile file.
pub fn read(path: &Path) -> Result<Recording> {
    let unreadable = |e: std::io::Error| {
        Error::new(
            ErrorKind::Usage,
            format!("cannot read {}: {e} (check the path)", path.display()),
        )
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut magic = [0u8; 4];
    use std::os::unix::fs::FileExt;
    if file.read_at(&mut magic, 0).ok() == Some(magic.len()) && &magic == jfr::MAGIC {
        // JFR recordings run to gigabytes: mapped, only the chunk being read is in memory.
        // SAFETY: read-only; a file truncated under us would fault, as for any mmap-based reader
        // (JFR writes a recording's file once, when it ends).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(unreadable)?;
        return parse(path, &map);
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    parse(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_content_then_extension() {
        let p = Path::new("x.data");
        assert_eq!(parse(p, b"a;b 2\n").unwrap().format, Format::Collapsed);
        let iprof = br#" {"version":"1.0.0","types":[{"id":0,"name":"A"}],
            "methods":[{"id":0,"name":"m","signature":[0]}],
            "samplingProfiles":[{"ctx":"0:0","records":[1]}]}"#;
        assert_eq!(parse(p, iprof).unwrap().format, Format::Iprof);
        let empty = br#"{"version":"1.0.0","types":[],"methods":[]}"#;
        let e = parse(Path::new("e.iprof"), empty).unwrap_err();
        assert!(
            e.message.contains("e.iprof (iprof) holds no samples"),
            "{}",
            e.message
        );
        let e = parse(Path::new("f.svg"), b"<?xml version=\"1.0\"?><svg/>").unwrap_err();
        assert!(
            e.message.starts_with("f.svg: an SVG flame graph"),
            "{}",
            e.message
        );
        // A truncated recording is reported as one, not as a bad text file.
        let e = parse(Path::new("r.jvmperf"), b"JVMP").unwrap_err();
        assert!(e.message.contains("corrupt .jvmperf file"), "{}", e.message);
        let e = parse(Path::new("r.pb.gz"), b"\x1f\x8b\x08").unwrap_err();
        assert!(
            e.message.contains("not a valid pprof file"),
            "{}",
            e.message
        );
        // JFR by its magic, whatever the name; one without samples says how to record some.
        let empty = jfr::render(&Profile::default()).unwrap();
        let e = parse(Path::new("x.data"), &empty).unwrap_err();
        assert!(
            e.message
                .contains("(JFR recording) holds no samples: record with method sampling"),
            "{}",
            e.message
        );
        let e = read(Path::new("/nonexistent/x.jvmperf")).err().unwrap();
        assert!(e.message.contains("check the path"), "{}", e.message);
    }

    #[test]
    fn several_files_merge_and_keep_only_what_all_keep() {
        use crate::profile::{Frame, FrameKind};
        let dir = std::env::temp_dir().join(format!("jvmperf-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let interval = |start: u64, frame: &str, weight| {
            let mut p = Profile::default();
            let f = p.intern_frame(Frame::named(frame, FrameKind::Jit));
            p.add_counted(vec![f], 7, weight);
            p.period_ns = 1000;
            p.start_ns = start * 1_000_000_000;
            p.interval = Some(WallInterval {
                start_unix_ns: start * 1_000_000_000,
                duration_ns: 1_000_000_000,
            });
            p
        };
        let a = dir.join("a.pb.gz");
        let b = dir.join("b.pb.gz");
        let c = dir.join("c.collapsed");
        std::fs::write(&a, pprof::render(&interval(10, "x", 2)).unwrap()).unwrap();
        std::fs::write(&b, pprof::render(&interval(20, "y", 3)).unwrap()).unwrap();
        std::fs::write(&c, b"z 1\n").unwrap();
        let both = read_all(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(both.format, Format::Pprof);
        assert!(both.keeps_times() && both.keeps_threads());
        assert_eq!(both.profile.total_weight(), 5);
        assert_eq!(both.profile.start_ns, 10_000_000_000);
        assert_eq!(
            both.profile.interval,
            Some(WallInterval {
                start_unix_ns: 10_000_000_000,
                duration_ns: 11_000_000_000
            })
        );
        let mixed = read_all(&[a, b, c]).unwrap();
        assert_eq!(mixed.format, Format::Collapsed);
        assert!(!mixed.keeps_times());
        assert_eq!(mixed.profile.total_weight(), 6);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn options_that_need_threads_or_times_say_which_file_lacks_them() {
        let r = parse(Path::new("a.collapsed"), b"a 1\n").unwrap();
        let e = r.require_times("--since").unwrap_err();
        assert!(e.message.contains("a.collapsed (collapsed stacks)"));
        assert!(r.require_threads("--threads").is_err());
    }
}
