//! Command-line value parsers shared by the commands' options, and the version the CLI prints.

use std::time::Duration;

/// What `jvmperf --version` prints after the program's name: the crate version, the git commit it
/// was built from (`unknown` outside a git checkout, see build.rs) and the JDKs it supports, e.g.
/// `0.1.0 (commit 42a572d1b2c3, HotSpot JDK 11-25)`. Every HotSpot layout fact is read from the
/// target's VMStructs; 11, 17, 21 and 25 are tested.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("JVMPERF_GIT_COMMIT"),
    ", HotSpot JDK 11-25)"
);

/// A number of seconds (`2.5`).
pub fn seconds(s: &str) -> Result<Duration, String> {
    s.parse::<f64>()
        .ok()
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
        .ok_or_else(|| format!("{s} is not a valid number of seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_the_release_the_commit_and_the_jdks() {
        assert!(VERSION.starts_with(concat!(env!("CARGO_PKG_VERSION"), " (commit ")));
        let commit = env!("JVMPERF_GIT_COMMIT");
        assert!(
            commit == "unknown"
                || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_alphanumeric())),
            "{commit:?}"
        );
    }
}
