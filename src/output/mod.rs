//! Writing a profile: format chosen by extension or `--format`, one module per format; files are
//! written by [`file`].

pub mod collapsed;
mod file;
pub mod flamegraph;
pub mod iprof;
pub mod pprof;
pub mod raw;
mod spill;

use crate::error::{Error, ErrorKind, Result};
use crate::profile::Profile;
pub use file::{
    check_writable, save, save_recording, write_error, write_file, write_file_unsynced, write_with,
};
pub use spill::{save_streamed, spill_dir, SampleSpill};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Folded stacks, one `frame;frame;… count` line per stack.
    #[value(alias = "txt")]
    Collapsed,
    /// Flame graph.
    #[value(alias = "flamegraph")]
    Svg,
    /// GraalVM iprof (JSON), for profile-guided native images.
    Iprof,
    /// Gzipped pprof `profile.proto`.
    #[value(alias = "pb.gz")]
    Pprof,
    /// jvmperf's own recording: every sample with its time and thread.
    #[value(name = "jvmperf", alias = "raw")]
    Raw,
}

pub struct OutputOptions {
    pub threads: bool,
}

const EXTENSIONS: &str = ".collapsed, .txt, .svg, .iprof, .pb.gz or .jvmperf";

impl Format {
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

#[cfg(test)]
mod tests {
    use super::Format;
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
        use clap::ValueEnum;
        assert_eq!(Format::from_str("pprof", false), Ok(Format::Pprof));
        assert_eq!(Format::from_str("txt", false), Ok(Format::Collapsed));
        assert!(Format::from_str("json", false).is_err());
    }
}
