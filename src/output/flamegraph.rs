//! SVG flame graphs through inferno, with its Java palette (colours by the `_[j]`/`_[i]`/`_[k]`
//! suffixes of the collapsed format).

use super::{collapsed, OutputOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::profile::Profile;
use inferno::flamegraph::{self, color::MultiPalette, Options, Palette};

pub fn render(profile: &Profile, opts: &OutputOptions) -> Result<Vec<u8>> {
    let folded = collapsed::render(profile, opts);
    from_folded(&folded, "jvmperf")
}

/// An SVG from folded lines; lines with two counts (before, after) make a differential graph.
pub fn from_folded(folded: &str, title: &str) -> Result<Vec<u8>> {
    let mut options = Options::default();
    options.colors = Palette::Multi(MultiPalette::Java);
    options.title = title.to_string();
    options.count_name = "samples".to_string();
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, folded.lines(), &mut svg).map_err(|e| {
        Error::new(
            ErrorKind::Output,
            format!("cannot render the flame graph: {e}"),
        )
    })?;
    Ok(svg)
}
