//! Reading profiles back: every format jvmperf writes except SVG, told apart by content (then by
//! extension), into the one profile model.

use crate::error::{Error, ErrorKind, Result};
use crate::output::{collapsed, iprof, pprof, raw, Format};
use crate::profile::Profile;
use std::path::{Path, PathBuf};

/// A profile read from a file, with the format it was in.
#[derive(Debug)]
pub struct Recording {
    pub path: PathBuf,
    pub format: Format,
    pub profile: Profile,
}

impl Recording {
    /// An error unless the file keeps each sample's thread (for `--threads`, `--thread`).
    pub fn require_threads(&self, option: &str) -> Result<()> {
        self.require(
            self.format.keeps_threads(),
            option,
            "thread",
            ".jvmperf or .pb.gz",
        )
    }

    /// An error unless the file keeps each sample's time (for `--since`, `--until`).
    pub fn require_times(&self, option: &str) -> Result<()> {
        self.require(self.format.keeps_times(), option, "time", ".jvmperf")
    }

    fn require(&self, kept: bool, option: &str, what: &str, use_instead: &str) -> Result<()> {
        if kept {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{option} needs each sample's {what}, which {} ({}) does not keep: use the {use_instead} recording",
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
    } else if bytes.starts_with(&[0x1f, 0x8b]) {
        Some(Format::Pprof)
    } else if text_start.starts_with(b"{") {
        Some(Format::Iprof)
    } else if text_start.starts_with(b"<?xml") || text_start.starts_with(b"<svg") {
        Some(Format::Svg)
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
        Format::Svg => Err(Error::new(
            ErrorKind::Usage,
            "an SVG flame graph cannot be read back: use the recording it was made from (.jvmperf, .iprof, .pb.gz or .collapsed)",
        )),
    }
    .map_err(|e| Error::new(e.kind, format!("{}: {}", path.display(), e.message)))?;
    if profile.samples.is_empty() {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{} ({}) holds no samples: record again (is the JVM idle?)",
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

/// Read a profile file.
pub fn read(path: &Path) -> Result<Recording> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::new(
            ErrorKind::Usage,
            format!("cannot read {}: {e} (check the path)", path.display()),
        )
    })?;
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
        let e = read(Path::new("/nonexistent/x.jvmperf")).err().unwrap();
        assert!(e.message.contains("check the path"), "{}", e.message);
    }

    #[test]
    fn options_that_need_threads_or_times_say_which_file_lacks_them() {
        let r = parse(Path::new("a.collapsed"), b"a 1\n").unwrap();
        let e = r.require_times("--since").unwrap_err();
        assert!(e.message.contains("a.collapsed (collapsed stacks)"));
        assert!(r.require_threads("--threads").is_err());
    }
}
