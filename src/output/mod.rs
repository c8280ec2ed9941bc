//! Writing a profile: format chosen by extension or `--format`; files are written to a temporary
//! name and renamed, so a failed write never leaves a truncated file that looks complete.

pub mod collapsed;
pub mod flamegraph;
pub mod iprof;
pub mod pprof;
pub mod raw;

use crate::error::{Error, ErrorKind, Result};
use crate::profile::Profile;
use std::io::Write;
use std::path::Path;

#[cfg(test)]
mod tests {
    use super::{write_file, Format};
    use std::path::Path;

    #[test]
    fn formats_by_extension_and_name() {
        for (file, format) in [
            ("a.collapsed", Format::Collapsed),
            ("a.txt", Format::Collapsed),
            ("a.svg", Format::Svg),
            ("a.iprof", Format::Iprof),
            ("dir.v2/a.pb.gz", Format::Pprof),
            ("a.jvmperf", Format::Raw),
        ] {
            assert_eq!(
                Format::from_path(Path::new(file)).unwrap(),
                format,
                "{file}"
            );
        }
        for bad in ["a.gz", "a.pb", "a", "a.png"] {
            let e = Format::from_path(Path::new(bad)).unwrap_err();
            assert!(e.message.contains(".pb.gz or .jvmperf"), "{}", e.message);
        }
        assert_eq!(Format::parse("pprof").unwrap(), Format::Pprof);
        assert!(Format::parse("json").is_err());
    }

    #[test]
    fn special_files_are_written_not_replaced() {
        write_file(std::path::Path::new("/dev/null"), b"x").unwrap();
        let meta = std::fs::metadata("/dev/null").unwrap();
        assert!(!meta.file_type().is_file(), "/dev/null must stay a device");
        let dir = std::env::temp_dir().join(format!("jvmperf-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.collapsed");
        write_file(&f, b"one").unwrap();
        write_file(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary left behind"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Collapsed,
    Svg,
    /// GraalVM iprof (JSON), for profile-guided native images.
    Iprof,
    /// Gzipped pprof `profile.proto`.
    Pprof,
    /// jvmperf's own recording: every sample with its time and thread.
    Raw,
}

pub struct OutputOptions {
    pub threads: bool,
}

const EXTENSIONS: &str = ".collapsed, .txt, .svg, .iprof, .pb.gz or .jvmperf";

impl Format {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "collapsed" | "txt" => Ok(Format::Collapsed),
            "svg" | "flamegraph" => Ok(Format::Svg),
            "iprof" => Ok(Format::Iprof),
            "pprof" | "pb.gz" => Ok(Format::Pprof),
            "jvmperf" | "raw" => Ok(Format::Raw),
            other => Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "unknown output format {other:?} (use collapsed, svg, iprof, pprof or jvmperf)"
                ),
            )),
        }
    }

    pub fn from_path(path: &Path) -> Result<Self> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".pb.gz") {
            return Ok(Format::Pprof);
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("collapsed") | Some("txt") => Ok(Format::Collapsed),
            Some("svg") => Ok(Format::Svg),
            Some("iprof") => Ok(Format::Iprof),
            Some("jvmperf") => Ok(Format::Raw),
            _ => Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "cannot tell the format of {} from its extension: use {EXTENSIONS}, or --format",
                    path.display()
                ),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Collapsed => "collapsed stacks",
            Format::Svg => "SVG flame graph",
            Format::Iprof => "iprof",
            Format::Pprof => "pprof",
            Format::Raw => "jvmperf recording",
        }
    }

    /// Whether files of this format keep each sample's time.
    pub fn keeps_times(self) -> bool {
        self == Format::Raw
    }

    /// Whether files of this format keep each sample's thread.
    pub fn keeps_threads(self) -> bool {
        matches!(self, Format::Raw | Format::Pprof)
    }
}

pub fn render(profile: &Profile, format: Format, opts: &OutputOptions) -> Result<Vec<u8>> {
    match format {
        Format::Collapsed => Ok(collapsed::render(profile, opts).into_bytes()),
        Format::Svg => flamegraph::render(profile, opts),
        Format::Iprof => iprof::render(profile),
        Format::Pprof => pprof::render(profile),
        Format::Raw => raw::render(profile),
    }
}

/// Render `profile` as `format` and write it to `path`.
pub fn save(profile: &Profile, format: Format, opts: &OutputOptions, path: &Path) -> Result<()> {
    write_file(path, &render(profile, format, opts)?)
}

/// Write `bytes` to `path`: a regular file atomically (temporary file + rename); anything else that
/// exists (`/dev/null`, a FIFO, a terminal) directly, since renaming over it would replace it.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let fail = |e: std::io::Error| {
        Error::new(
            ErrorKind::Output,
            format!(
                "cannot write {}: {e} (check free space and permissions)",
                path.display()
            ),
        )
    };
    if std::fs::metadata(path).is_ok_and(|m| !m.file_type().is_file()) {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .map_err(fail);
    }
    let tmp = path.with_file_name(format!(
        ".{}.jvmperf-partial",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("out")
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}
