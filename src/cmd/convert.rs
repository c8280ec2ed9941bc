//! `jvmperf convert IN... -o OUT`: any readable profiles, merged, to any output format, optionally
//! cut to a time window (`--since`, `--until`) and to named threads (`--thread`).
//!
//! A time is either seconds from the start of the recording (`2.5`) or an absolute
//! `System.nanoTime` value (a whole number ≥ 1e9, as an application logs it). The window is
//! half-open: a sample at `--since` is kept, one at `--until` is not.

use crate::error::{Error, ErrorKind, Result};
use crate::input::{self, Recording};
use crate::output::{self, Format, OutputOptions};
use crate::profile::Profile;
use std::path::PathBuf;

/// Whole numbers from here up are absolute `System.nanoTime` values, smaller ones seconds
/// (1e9 s from a recording's start is 31 years; 1e9 ns after boot is the first second).
const ABSOLUTE_FROM: f64 = 1e9;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimeArg {
    /// Seconds from the start of the recording.
    Seconds(f64),
    /// CLOCK_MONOTONIC ns, as `System.nanoTime`.
    Absolute(u64),
}

impl TimeArg {
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::new(
                ErrorKind::Usage,
                format!(
                    "{s:?} is not a time: give seconds from the start (2.5) or a System.nanoTime value"
                ),
            )
        };
        if let Ok(ns) = s.parse::<u64>() {
            if ns as f64 >= ABSOLUTE_FROM {
                return Ok(TimeArg::Absolute(ns));
            }
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() && (0.0..ABSOLUTE_FROM).contains(&v) => Ok(TimeArg::Seconds(v)),
            _ => Err(bad()),
        }
    }

    /// The absolute time, counting seconds from `start`.
    pub fn resolve(self, start: u64) -> u64 {
        match self {
            TimeArg::Absolute(ns) => ns,
            TimeArg::Seconds(s) => start.saturating_add((s * 1e9).round() as u64),
        }
    }
}

#[derive(Debug, Default, Clone, clap::Args)]
pub struct Filter {
    /// Keep samples from this time on: seconds from the start of the recording, or an absolute
    /// System.nanoTime value.
    #[arg(long, value_name = "T", value_parser = TimeArg::parse)]
    pub since: Option<TimeArg>,
    /// Keep samples before this time (same forms as --since).
    #[arg(long, value_name = "T", value_parser = TimeArg::parse)]
    pub until: Option<TimeArg>,
    /// Keep only threads with this name (repeatable).
    #[arg(id = "thread", long = "thread", value_name = "NAME")]
    pub threads: Vec<String>,
}

#[derive(clap::Args)]
pub struct ConvertOptions {
    /// The profiles to read: several are merged into one (e.g. a day of the daemon's files),
    /// and --since/--until apply across them.
    #[arg(required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    /// Output file; the format follows the extension (.collapsed, .txt, .svg, .html, .iprof,
    /// .pb.gz, .speedscope.json, .jfr, .jvmperf) unless --format.
    #[arg(short, long)]
    pub output: PathBuf,
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    #[command(flatten)]
    pub filter: Filter,
    /// Add the thread name as each stack's root frame.
    #[arg(long)]
    pub threads: bool,
}

fn describe_span(p: &Profile) -> String {
    let times = p.samples.iter().map(|s| s.time);
    match (times.clone().min(), times.max()) {
        (Some(a), Some(b)) => {
            let start = if p.start_ns > 0 { p.start_ns } else { a };
            format!(
                "the recording spans System.nanoTime {a} to {b}, {:.3} s to {:.3} s from its start",
                a.saturating_sub(start) as f64 / 1e9,
                b.saturating_sub(start) as f64 / 1e9
            )
        }
        _ => "the recording holds no samples".to_string(),
    }
}

/// The samples of `rec` that pass `filter` (the whole profile when the filter is empty).
pub fn apply(rec: &Recording, filter: &Filter) -> Result<Profile> {
    let p = &rec.profile;
    if filter.since.is_none() && filter.until.is_none() && filter.threads.is_empty() {
        return Ok(p.clone());
    }
    if filter.since.is_some() || filter.until.is_some() {
        rec.require_times("--since/--until")?;
    }
    if !filter.threads.is_empty() {
        rec.require_threads("--thread")?;
    }
    let start = if p.start_ns > 0 {
        p.start_ns
    } else {
        p.samples.iter().map(|s| s.time).min().unwrap_or(0)
    };
    let since = filter.since.map_or(0, |t| t.resolve(start));
    let until = filter.until.map_or(u64::MAX, |t| t.resolve(start));
    if since >= until {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("--since ({since}) must come before --until ({until})"),
        ));
    }
    let wanted: Vec<u32> = p
        .thread_names
        .iter()
        .filter(|(_, name)| filter.threads.iter().any(|t| t == *name))
        .map(|(&tid, _)| tid)
        .collect();
    if !filter.threads.is_empty() && wanted.is_empty() {
        let mut names: Vec<&str> = p.thread_names.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "no thread named {} in {}; its threads are: {}",
                filter.threads.join(" or "),
                rec.path.display(),
                names.join(", ")
            ),
        ));
    }
    let out = p.retain_samples(|s| {
        (since..until).contains(&s.time) && (filter.threads.is_empty() || wanted.contains(&s.tid))
    });
    if out.samples.is_empty() {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "no samples in {} match the window and threads given; {}",
                rec.path.display(),
                describe_span(p)
            ),
        ));
    }
    Ok(out)
}

pub fn run(opts: &ConvertOptions) -> Result<()> {
    let format = match opts.format {
        Some(f) => f,
        None => Format::from_path(&opts.output)?,
    };
    let rec = input::read_all(&opts.inputs)?;
    if opts.threads {
        rec.require_threads("--threads")?;
    }
    let profile = apply(&rec, &opts.filter)?;
    output::save(
        &profile,
        format,
        &OutputOptions {
            threads: opts.threads,
        },
        &opts.output,
    )?;
    eprintln!(
        "jvmperf: {} {} of {} written to {} ({})",
        profile.total_weight(),
        profile.clock.unit(),
        rec.path.display(),
        opts.output.display(),
        format.name()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, FrameKind, Sample};

    #[test]
    fn times_are_seconds_or_nanotime() {
        assert_eq!(TimeArg::parse("2.5").unwrap(), TimeArg::Seconds(2.5));
        assert_eq!(TimeArg::parse("0").unwrap(), TimeArg::Seconds(0.0));
        assert_eq!(
            TimeArg::parse("1234567890123").unwrap(),
            TimeArg::Absolute(1234567890123)
        );
        for bad in ["", "-1", "x", "inf", "1e12"] {
            assert!(TimeArg::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(TimeArg::Seconds(1.5).resolve(10), 1_500_000_010);
    }

    fn recording() -> Recording {
        let mut p = Profile::default();
        p.start_ns = 10_000_000_000;
        let f = p.intern_frame(Frame::named("f", FrameKind::Native));
        let s = p.intern_stack(vec![f]);
        p.thread_names.insert(1, "main".into());
        p.thread_names.insert(2, "worker".into());
        for i in 0..100u64 {
            p.samples.push(Sample {
                time: 10_000_000_000 + i * 100_000_000,
                tid: 1 + (i % 2) as u32,
                stack: s,
                weight: 1,
            });
        }
        Recording::new("r.jvmperf".into(), Format::Raw, p)
    }

    #[test]
    fn windows_are_half_open_and_threads_by_name() {
        let rec = recording();
        let window = |since, until, threads: &[&str]| {
            apply(
                &rec,
                &Filter {
                    since,
                    until,
                    threads: threads.iter().map(|s| s.to_string()).collect(),
                },
            )
        };
        let w = window(
            Some(TimeArg::Seconds(1.0)),
            Some(TimeArg::Seconds(2.0)),
            &[],
        )
        .unwrap();
        assert_eq!(w.samples.len(), 10);
        assert_eq!(w.samples[0].time, 11_000_000_000);
        let abs = window(
            Some(TimeArg::Absolute(11_000_000_000)),
            Some(TimeArg::Absolute(12_000_000_001)),
            &["worker"],
        )
        .unwrap();
        assert_eq!(abs.samples.len(), 5);
        assert!(abs.samples.iter().all(|s| s.tid == 2));
        let e = window(None, None, &["nope"]).unwrap_err();
        assert!(
            e.message.contains("its threads are: main, worker"),
            "{}",
            e.message
        );
        let e = window(Some(TimeArg::Seconds(50.0)), None, &[]).unwrap_err();
        assert!(
            e.message.contains("0.000 s to 9.900 s from its start"),
            "{}",
            e.message
        );
        let e = window(
            Some(TimeArg::Seconds(2.0)),
            Some(TimeArg::Seconds(1.0)),
            &[],
        )
        .unwrap_err();
        assert!(e.message.contains("must come before"), "{}", e.message);
    }
}
