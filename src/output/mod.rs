//! Writing a profile: format chosen by extension or `--format`, one module per format; files are
//! written by [`file`].

pub mod collapsed;
mod file;
pub mod flamegraph;
pub mod html;
pub mod iprof;
pub mod jfr;
pub mod pprof;
pub mod raw;
pub mod speedscope;
mod spill;

use crate::error::{Error, ErrorKind, Result};
use crate::profile::Profile;
pub use file::{check_writable, save, save_recording, write_error, write_file, write_with};
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
    /// JDK Flight Recorder, for JDK Mission Control and IntelliJ IDEA.
    Jfr,
    /// speedscope's JSON format: one sampled profile per thread, in time order.
    Speedscope,
    /// A self-contained page: flame graph, search, callers, top methods, timeline, threads.
    Html,
}

pub struct OutputOptions {
    pub threads: bool,
}

const EXTENSIONS: &str =
    ".collapsed, .txt, .svg, .html, .iprof, .pb.gz, .speedscope.json, .jfr or .jvmperf";

impl Format {
    pub fn from_path(path: &Path) -> Result<Self> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".pb.gz") {
            return Ok(Format::Pprof);
        }
        if name.ends_with(".speedscope.json") {
            return Ok(Format::Speedscope);
        }
        match path.extension().and_then(|e| e.to_str()) {
            Some("collapsed") | Some("txt") => Ok(Format::Collapsed),
            Some("svg") => Ok(Format::Svg),
            Some("html") | Some("htm") => Ok(Format::Html),
            Some("iprof") => Ok(Format::Iprof),
            Some("jvmperf") => Ok(Format::Raw),
            Some("jfr") => Ok(Format::Jfr),
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
            Format::Jfr => "JFR recording",
            Format::Speedscope => "speedscope profile",
            Format::Html => "HTML page",
        }
    }

    /// Whether files of this format keep each sample's time.
    pub fn keeps_times(self) -> bool {
        matches!(self, Format::Raw | Format::Jfr)
    }

    /// Whether files of this format keep each sample's thread.
    pub fn keeps_threads(self) -> bool {
        matches!(self, Format::Raw | Format::Pprof | Format::Jfr)
    }
}

pub fn render(profile: &Profile, format: Format, opts: &OutputOptions) -> Result<Vec<u8>> {
    match format {
        Format::Collapsed => Ok(collapsed::render(profile, opts).into_bytes()),
        Format::Svg => flamegraph::render(profile, opts),
        Format::Iprof => iprof::render(profile),
        Format::Pprof => pprof::render(profile),
        Format::Raw => raw::render(profile),
        Format::Jfr => jfr::render(profile),
        Format::Speedscope => speedscope::render(profile),
        Format::Html => html::render(profile),
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
            ("a.jfr", Format::Jfr),
            ("a.speedscope.json", Format::Speedscope),
            ("a.html", Format::Html),
        ] {
            assert_eq!(
                Format::from_path(Path::new(file)).unwrap(),
                format,
                "{file}"
            );
        }
        for bad in ["a.gz", "a.pb", "a", "a.png", "a.json"] {
            let e = Format::from_path(Path::new(bad)).unwrap_err();
            assert!(
                e.message.contains(".speedscope.json, .jfr or .jvmperf"),
                "{}",
                e.message
            );
        }
        use clap::ValueEnum;
        assert_eq!(Format::from_str("pprof", false), Ok(Format::Pprof));
        assert_eq!(Format::from_str("txt", false), Ok(Format::Collapsed));
        assert_eq!(Format::from_str("jfr", false), Ok(Format::Jfr));
        assert!(Format::from_str("json", false).is_err());
    }
}
