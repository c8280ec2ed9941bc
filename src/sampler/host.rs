//! One set of per-CPU events for the whole host, shared by the engines of every JVM the daemon
//! profiles: its cost does not grow with the number of JVMs or threads (each per-CPU event samples
//! whatever runs on its CPU, so one event per JVM per CPU would sample every CPU once per JVM).
//! Whichever engine polls drains every CPU's ring and routes each sample by pid into its JVM's
//! queue, copied out of the ring; samples of processes no engine profiles are dropped.

use super::per_cpu::{CpuSampler, ProcessFilter};
use super::record::{HeldSample, Sample, SampleKind};
use super::{ParsedRecord, RingPlan, SamplerConfig, SamplerStats};
use crate::error::{Error, ErrorKind, Result};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollTimeout};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Stack bytes a JVM's queue may hold: beyond them (its engine stalled), samples are dropped and
/// counted lost. 1 s of 2 CPUs at 999 Hz with 16 KiB of stack in use each.
const QUEUE_MAX_BYTES: usize = 32 << 20;

pub struct HostSampler {
    inner: Mutex<Inner>,
    plan: RingPlan,
}

struct Inner {
    cpus: CpuSampler,
    queues: HashMap<u32, Queue>,
    events: Vec<EpollEvent>,
}

struct Queue {
    filter: ProcessFilter,
    samples: VecDeque<HeldSample>,
    bytes: usize,
    /// Samples dropped for a full queue.
    dropped: u64,
}

impl HostSampler {
    /// Opens an event on every online CPU. Fails with [`ErrorKind::Permission`] where per-CPU
    /// events are not allowed.
    pub fn open(config: &SamplerConfig) -> Result<Arc<HostSampler>> {
        config.validate()?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("epoll_create1: {e}")))?;
        let cpus = CpuSampler::open(config, epoll)?;
        Ok(Arc::new(HostSampler {
            plan: cpus.plan.clone(),
            inner: Mutex::new(Inner {
                cpus,
                queues: HashMap::new(),
                events: vec![EpollEvent::empty(); 64],
            }),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Samples and losses of the whole host's rings.
    pub fn stats(&self) -> SamplerStats {
        self.lock().cpus.stats()
    }
}

/// One JVM's view of a [`HostSampler`]: its samples from the moment it was registered.
pub(super) struct SharedSource {
    host: Arc<HostSampler>,
    pid: u32,
    delivered: u64,
}

impl SharedSource {
    pub fn new(host: Arc<HostSampler>, pid: u32) -> SharedSource {
        host.lock().queues.insert(
            pid,
            Queue {
                filter: ProcessFilter::new(pid),
                samples: VecDeque::new(),
                bytes: 0,
                dropped: 0,
            },
        );
        SharedSource {
            host,
            pid,
            delivered: 0,
        }
    }

    pub fn plan(&self) -> &RingPlan {
        &self.host.plan
    }

    pub fn samples_kernel_time(&self) -> bool {
        self.host.lock().cpus.samples_kernel_time()
    }

    pub fn ring_note(&self) -> Option<String> {
        self.host.lock().cpus.ring_note()
    }

    pub fn thread_names(&self) -> HashMap<u32, String> {
        let inner = self.host.lock();
        inner
            .queues
            .get(&self.pid)
            .map(|q| q.filter.names.clone())
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for a ring to fill a quarter (unless samples wait already), drains
    /// every ring into the queues, then hands this JVM's queued samples to `sink`.
    pub fn poll(&mut self, timeout: Duration, sink: &mut dyn FnMut(&Sample<'_>)) -> Result<()> {
        let taken = {
            let mut inner = self.host.lock();
            let Inner {
                cpus,
                queues,
                events,
            } = &mut *inner;
            let waiting = queues.get(&self.pid).is_some_and(|q| !q.samples.is_empty());
            if !waiting {
                let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
                let timeout = EpollTimeout::try_from(millis).unwrap_or(EpollTimeout::MAX);
                match cpus.epoll().wait(events, timeout) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => {
                        return Err(Error::new(ErrorKind::Internal, format!("epoll_wait: {e}")))
                    }
                }
            }
            cpus.drain_all(&mut |record| route(queues, record));
            let queue = queues.get_mut(&self.pid);
            queue.map(|q| {
                q.bytes = 0;
                std::mem::take(&mut q.samples)
            })
        };
        for held in taken.iter().flatten() {
            let s = held.sample();
            self.delivered += u64::from(s.kind != SampleKind::SwitchIn);
            sink(&s);
        }
        Ok(())
    }

    pub fn stats(&self) -> SamplerStats {
        let inner = self.host.lock();
        let queue = inner.queues.get(&self.pid);
        SamplerStats {
            samples: self.delivered,
            lost: queue.map_or(0, |q| q.dropped),
            threads_open: queue.map_or(0, |q| q.filter.threads_sampled()),
            ..SamplerStats::default()
        }
    }

    /// The period of every CPU's event from now on: for every JVM the host samples.
    pub fn set_period(&mut self, config: SamplerConfig) {
        self.host.lock().cpus.set_period(config);
    }
}

impl Drop for SharedSource {
    fn drop(&mut self) {
        self.host.lock().queues.remove(&self.pid);
    }
}

/// Copies `record` into the queue of its process, if one is profiled; whether a sample was taken.
fn route(queues: &mut HashMap<u32, Queue>, record: &ParsedRecord<'_>) -> bool {
    let pid = match record {
        ParsedRecord::Sample(s) => s.pid,
        ParsedRecord::Comm { pid, .. }
        | ParsedRecord::SwitchIn { pid, .. }
        | ParsedRecord::Task { pid, .. } => *pid,
        _ => return false,
    };
    let Some(queue) = queues.get_mut(&pid) else {
        return false;
    };
    let Queue {
        filter,
        samples,
        bytes,
        dropped,
    } = queue;
    filter.take(record, &mut |s| {
        if *bytes + s.stack.len() > QUEUE_MAX_BYTES {
            *dropped += 1;
            return;
        }
        *bytes += s.stack.len();
        samples.push_back(s.hold());
    })
}
