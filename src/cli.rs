//! Command-line value parsers shared by the commands' options.

use std::time::Duration;

/// A number of seconds (`2.5`).
pub fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .ok_or_else(|| format!("{s} is not a valid number of seconds"))
}
