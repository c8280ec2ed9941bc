//! One profiled JVM: its own thread runs a recording engine on it and writes a file per interval
//! into its directory; trouble with it (attach refused, exit) ends only this thread.

use super::discovery::{file_safe, FoundJvm};
use super::push::{Push, Queue};
use crate::engine::{Agent, Engine, EngineOptions, Interval};
use crate::output::{self, Format, OutputOptions};
use crate::profile::WallInterval;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What every JVM thread shares with the daemon's main loop.
pub struct Shared {
    pub dir: PathBuf,
    pub interval: Duration,
    pub format: Format,
    pub stack_size: u32,
    pub max_stacks: usize,
    pub sampling: crate::sampler::Sampling,
    /// One set of per-CPU events for every JVM, where allowed.
    pub events: Option<Arc<crate::sampler::HostSampler>>,
    pub host: String,
    /// The rate the CPU budget allows now.
    pub rate_hz: AtomicU64,
    /// JVM threads write their last interval and end.
    pub flushing: AtomicBool,
    /// The pusher ends (after a last pass).
    pub stop: AtomicBool,
    /// Attaches started since the budget last looked (one-off work, not steady cost).
    pub attaches: AtomicU64,
    /// By pid and process start time: a JVM that exited and a new one given its pid may both
    /// be written for a while.
    pub status: Mutex<std::collections::BTreeMap<(u32, u64), JvmStatus>>,
    /// Where profiles wait for `--push`.
    pub push: Option<super::push::Queue>,
}

/// What the status report says of one JVM.
#[derive(Debug, Clone, Default)]
pub struct JvmStatus {
    pub name: String,
    pub samples: u64,
    pub lost: u64,
    pub rate_hz: u64,
    pub files: u64,
    pub stacks: usize,
    pub shim_kib: Option<u64>,
}

impl JvmStatus {
    pub fn line(&self, pid: u32) -> String {
        format!(
            "pid={pid} name={} samples={} lost={} rate_hz={} files={} stacks={} shim_kib={}",
            self.name,
            self.samples,
            self.lost,
            self.rate_hz,
            self.files,
            self.stacks,
            self.shim_kib.map_or("?".to_string(), |k| k.to_string())
        )
    }
}

/// Whether `jvm`'s process still has its pid: not exited, and no other process given its pid.
fn still_there(jvm: &FoundJvm) -> bool {
    crate::process::identity::start_time(jvm.pid) == Some(jvm.start)
}

/// Profile `jvm` until it exits or the daemon stops; log its trouble once.
pub fn run(jvm: FoundJvm, shared: Arc<Shared>) {
    let pid = jvm.pid;
    let key = (pid, jvm.start);
    if !still_there(&jvm) {
        return;
    }
    shared.attaches.fetch_add(1, Ordering::Relaxed);
    let started = Engine::start(EngineOptions {
        pid,
        frequency_hz: shared.rate_hz.load(Ordering::Relaxed),
        stack_size: shared.stack_size,
        max_stacks: shared.max_stacks,
        kernel: false,
        precise_inlining: false,
        spill: None,
        keep_sample_times: shared.format == Format::Raw,
        // A JVM that cannot be attached (attach disabled, stuck before a safepoint) is profiled
        // without the agent, as `record` does.
        agent: Agent::Fallback,
        wall: None,
        sampling: shared.sampling,
        host: shared.events.clone(),
    });
    let mut engine = match started {
        Ok(e) => e,
        Err(e) => {
            super::log(&format!("not profiling JVM {pid} ({}): {e}", jvm.name));
            return;
        }
    };
    // The engine opened whatever process has the pid now: the one found, or a later one.
    if !still_there(&jvm) {
        super::log(&format!(
            "not profiling JVM {pid} ({}): it exited",
            jvm.name
        ));
        return;
    }
    let mut out = JvmOutput {
        dir: shared.dir.join(format!("{}-{pid}", file_safe(&jvm.name))),
        labels: super::discovery::target_labels(&shared.host, pid, &jvm.name, engine.jdk_version()),
        format: shared.format,
        files: 0,
        host: shared.events.clone(),
        host_lost: shared.events.as_ref().map_or(0, |h| h.stats().lost),
    };
    let agentless = engine
        .agentless()
        .map(|why| format!(" without the agent ({why})"))
        .unwrap_or_default();
    super::log(&format!(
        "profiling JVM {pid} ({}, JDK {}) at {} Hz into {}{agentless}",
        jvm.name,
        out.labels[3].1,
        engine.frequency_hz(),
        out.dir.display()
    ));
    let mut next_interval = Instant::now() + shared.interval;
    let mut trouble = None;
    loop {
        if let Err(e) = engine.poll(Duration::from_millis(100)) {
            trouble = Some(e.to_string());
            break;
        }
        if let Some(why) = engine.ended() {
            trouble = Some(why.to_string());
            break;
        }
        if shared.flushing.load(Ordering::Relaxed) {
            break;
        }
        let rate = shared.rate_hz.load(Ordering::Relaxed);
        if rate != engine.frequency_hz() {
            if let Err(e) = engine.set_frequency(rate) {
                trouble = Some(e.to_string());
                break;
            }
        }
        if Instant::now() >= next_interval {
            next_interval += shared.interval;
            if let Some(interval) = engine.take_interval() {
                out.write(&interval, &jvm.name, shared.push.as_ref());
            }
        }
        update_status(&shared, key, &jvm.name, &engine, out.files);
    }
    let last = engine.finish_interval();
    out.write(&last, &jvm.name, shared.push.as_ref());
    shared
        .status
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key);
    if let Some(why) = trouble {
        super::log(&format!(
            "stopped profiling JVM {pid} ({}): {why}; its last interval ({} samples) was written, {} files in all",
            jvm.name, last.samples, out.files
        ));
    }
}

fn update_status(shared: &Shared, key: (u32, u64), name: &str, engine: &Engine, files: u64) {
    let stats = engine.stats();
    let status = JvmStatus {
        name: name.to_string(),
        samples: stats.samples,
        lost: stats.lost,
        rate_hz: engine.frequency_hz(),
        files,
        stacks: engine.stacks().0,
        shim_kib: engine.shim_stats().map(|s| s.total_bytes / 1024),
    };
    shared
        .status
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, status);
}

/// Where and how one JVM's intervals are written.
struct JvmOutput {
    dir: PathBuf,
    labels: Vec<(String, String)>,
    format: Format,
    files: u64,
    /// The daemon's per-CPU events, and their losses (every process's) when the last file was
    /// written.
    host: Option<Arc<crate::sampler::HostSampler>>,
    host_lost: u64,
}

impl JvmOutput {
    /// Write one interval (none when it holds no samples) and queue it for `--push`; trouble is
    /// logged, the next interval tries again.
    fn write(&mut self, interval: &Interval, name: &str, push: Option<&Queue>) {
        if interval.samples == 0 {
            return;
        }
        let start = wall_clock(interval.start_ns);
        let start_unix_ns = start
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let duration_ns = interval.end_ns.saturating_sub(interval.start_ns);
        let path = self.dir.join(file_name(start, self.format));
        let mut profile = interval.profile.clone();
        profile.interval = Some(WallInterval {
            start_unix_ns,
            duration_ns,
        });
        profile.labels = self.labels.clone();
        profile.comments.push(format!(
            "jvmperf daemon: rate_hz={} samples={} lost={}{}",
            interval.frequency_hz,
            interval.samples,
            interval.lost,
            self.host_lost_since_last()
        ));
        let opts = OutputOptions { threads: false };
        let written = output::render(&profile, self.format, &opts).and_then(|bytes| {
            std::fs::create_dir_all(&self.dir).map_err(|e| output::write_error(&self.dir, &e))?;
            output::write_file(&path, &bytes)?;
            self.files += 1;
            let Some(queue) = push else {
                return Ok(());
            };
            let body = match self.format {
                Format::Pprof => bytes,
                _ => output::render(&profile, Format::Pprof, &opts)?,
            };
            let span_s = (
                start_unix_ns / 1_000_000_000,
                (start_unix_ns + duration_ns) / 1_000_000_000,
            );
            queue.add(&Push {
                query: super::push::query(name, &self.labels, span_s, interval.frequency_hz),
                body,
            })
        });
        if let Err(e) = written {
            super::log(&format!(
                "JVM {} ({name}): {} samples of an interval lost: {e}",
                self.labels[1].1, interval.samples
            ));
        }
    }
}

impl JvmOutput {
    /// ` host_lost=N`: samples the per-CPU rings lost since the last file, of any process on
    /// the host (the kernel's LOST records do not say whose), beside `lost`, this JVM's own
    /// samples dropped after the rings; empty with events per thread.
    fn host_lost_since_last(&mut self) -> String {
        let Some(host) = &self.host else {
            return String::new();
        };
        let lost = host.stats().lost;
        let since = lost.saturating_sub(self.host_lost);
        self.host_lost = lost;
        format!(" host_lost={since}")
    }
}

/// The wall-clock time of a CLOCK_MONOTONIC instant in the past.
fn wall_clock(monotonic_ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH
        + Duration::from_nanos(crate::profile::unix_ns_of_monotonic(monotonic_ns))
}

/// `2026-11-23T190255.123Z.pb.gz`: the interval's UTC start, sortable, without colons.
pub fn file_name(start: SystemTime, format: Format) -> String {
    let stamp = humantime::format_rfc3339_millis(start)
        .to_string()
        .replace(':', "");
    let ext = match format {
        Format::Pprof => "pb.gz",
        Format::Raw => "jvmperf",
        _ => "collapsed",
    };
    format!("{stamp}.{ext}")
}

/// The directory `dir` exists or can be made, and we may write there.
pub fn check_dir(dir: &Path) -> crate::error::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| output::write_error(dir, &e))?;
    output::check_writable(&dir.join("probe"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_by_their_utc_start() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_000_000_123);
        assert_eq!(file_name(t, Format::Pprof), "2026-11-18T110640.123Z.pb.gz");
        assert_eq!(file_name(t, Format::Raw), "2026-11-18T110640.123Z.jvmperf");
    }
}
