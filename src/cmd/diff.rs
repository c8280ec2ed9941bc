//! `jvmperf diff BEFORE AFTER -o diff.svg`: a differential flame graph (inferno's `difffolded`
//! then its flame graph): the frames of AFTER, coloured red where they grew and blue where they
//! shrank relative to BEFORE. `-o x.collapsed` writes the differential folded lines instead
//! (`stack before after`); `-o diff.html` the HTML page of AFTER coloured by how each frame's
//! share of the samples changed.

use crate::error::{Error, ErrorKind, Result};
use crate::input;
use crate::output::{self, collapsed, flamegraph, html, Format, OutputOptions};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct DiffOptions {
    /// The profile before the change.
    pub before: PathBuf,
    /// The profile after the change.
    pub after: PathBuf,
    /// Output file: .svg, .html, or .collapsed for differential folded lines.
    #[arg(short, long)]
    pub output: PathBuf,
    /// svg, html or collapsed.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Scale BEFORE to the sample count of AFTER.
    #[arg(long)]
    pub normalize: bool,
    /// Add the thread name as each stack's root frame.
    #[arg(long)]
    pub threads: bool,
}

/// Differential folded lines (`stack before after`) of two folded texts.
pub fn folded(before: &str, after: &str, normalize: bool) -> Result<String> {
    let mut out = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options {
            normalize,
            strip_hex: false,
        },
        before.as_bytes(),
        after.as_bytes(),
        &mut out,
    )
    .map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("cannot diff the profiles: {e}"),
        )
    })?;
    String::from_utf8(out).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("cannot diff the profiles: {e}"),
        )
    })
}

pub fn run(opts: &DiffOptions) -> Result<()> {
    let format = match opts.format {
        Some(f) => f,
        None => Format::from_path(&opts.output)?,
    };
    if !matches!(format, Format::Svg | Format::Html | Format::Collapsed) {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "diff writes an SVG flame graph, an HTML page or differential collapsed stacks, not {}: use -o diff.svg, -o diff.html or -o diff.collapsed",
                format.name()
            ),
        ));
    }
    let title = format!(
        "jvmperf diff: {} → {}",
        opts.before.display(),
        opts.after.display()
    );
    if format == Format::Html {
        let before = input::read(&opts.before)?;
        let after = input::read(&opts.after)?;
        let page = html::render_diff(&before.profile, &after.profile, &title)?;
        output::write_file(&opts.output, &page)?;
        eprintln!(
            "jvmperf: differential page written to {}",
            opts.output.display()
        );
        return Ok(());
    }
    let out_opts = OutputOptions {
        threads: opts.threads,
    };
    let mut texts = Vec::new();
    for path in [&opts.before, &opts.after] {
        let rec = input::read(path)?;
        if opts.threads {
            rec.require_threads("--threads")?;
        }
        texts.push(collapsed::render(&rec.profile, &out_opts));
    }
    let diff = folded(&texts[0], &texts[1], opts.normalize)?;
    let bytes = match format {
        Format::Svg => flamegraph::from_folded(&diff, &title)?,
        _ => diff.into_bytes(),
    };
    output::write_file(&opts.output, &bytes)?;
    eprintln!(
        "jvmperf: differential profile written to {}",
        opts.output.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differential_lines_and_svg() {
        let diff = folded("a;b 10\na;c 10\n", "a;b 30\na;d 5\n", false).unwrap();
        let mut lines: Vec<&str> = diff.lines().collect();
        lines.sort();
        assert_eq!(lines, ["a;b 10 30", "a;c 10 0", "a;d 0 5"]);
        let norm = folded("a;b 10\n", "a;b 30\na;c 10\n", true).unwrap();
        assert!(norm.contains("a;b 40 30"), "{norm}");
        let svg = String::from_utf8(flamegraph::from_folded(&diff, "t").unwrap()).unwrap();
        assert!(svg.contains("a;b") || svg.contains(">b "), "frames named");
        // Grown frames are red-ish, shrunk ones blue-ish.
        assert!(svg.contains("rgb(255,"), "growth coloured");
    }
}
