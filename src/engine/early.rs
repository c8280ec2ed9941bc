//! Sampling from the first moment: per CPU nothing is opened per thread, so the events open
//! before the attach and sample while it runs (an attach to a busy JVM takes a second or more,
//! which `record -d` would otherwise add to its run). What they sample meanwhile is copied out of
//! the rings and held; it is walked once the agent's code map has arrived and the agent's own
//! library is among the modules the native unwinder knows.

use crate::error::{err, ErrorKind, Result};
use crate::live_jvm::LiveJvm;
use crate::process::TargetProcess;
use crate::sampler::{HeldSample, Sampler, SamplerConfig, Strategy};
use std::time::{Duration, Instant};

/// Held samples are no longer drained past this; the rings (a second of samples) keep the rest,
/// and what they cannot keep is counted lost as usual.
const HELD_CAP_BYTES: usize = 256 << 20;

/// How long one drain waits while the attach runs.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// Events opened before the attach, and what they sampled while it ran.
pub(super) struct Early {
    pub sampler: Sampler,
    pub started: Instant,
    pub start_ns: u64,
    pub cpu_at_start: Option<u64>,
    pub held: Vec<HeldSample>,
}

impl Early {
    /// Opens `strategy`'s events now: sampling starts.
    pub fn open(pid: u32, config: &SamplerConfig, strategy: Strategy) -> Result<Self> {
        let sampler = Sampler::open_as(pid, config, strategy)?;
        Ok(Early {
            sampler,
            started: Instant::now(),
            start_ns: crate::profile::monotonic_now_ns(),
            cpu_at_start: TargetProcess::open(pid)?.cpu_time_ns(),
            held: Vec::new(),
        })
    }

    /// Attaches on a thread of its own while this one holds what the events sample.
    pub fn attach(&mut self, pid: u32) -> Result<LiveJvm> {
        let attach = std::thread::Builder::new()
            .name("jvmperf-attach".into())
            .spawn(move || {
                crate::priority::take_own_nice();
                LiveJvm::attach(pid)
            })
            .map_err(|e| {
                crate::error::Error::new(ErrorKind::Attach, format!("cannot start the attach: {e}"))
            })?;
        let mut bytes = 0;
        while !attach.is_finished() {
            if bytes >= HELD_CAP_BYTES {
                std::thread::sleep(DRAIN_EVERY);
                continue;
            }
            let (held, start_ns) = (&mut self.held, self.start_ns);
            self.sampler.poll(DRAIN_EVERY, &mut |s| {
                if s.time >= start_ns {
                    let h = s.hold();
                    bytes += h.size();
                    held.push(h);
                }
            })?;
        }
        match attach.join() {
            Ok(attached) => attached,
            Err(_) => err(ErrorKind::Attach, "the attach thread panicked".to_string()),
        }
    }
}
