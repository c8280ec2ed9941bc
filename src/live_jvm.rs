//! A live connection to a target JVM: preflight checks, attach, the shim session, and the code map
//! it keeps current. Every command that needs Java names starts here. A JVM that cannot be attached
//! (stuck before a safepoint, attach disabled) is opened without the shim: its code map stays
//! empty, and compiled frames are named from the JVM's own tables instead.

use crate::attach;
use crate::error::{err, ErrorKind, Result};
use crate::hotspot::codecache::CodeCache;
use crate::hotspot::HotSpot;
use crate::jit::state::{JitState, RetransformResult};
use crate::process::TargetProcess;
use crate::profile::CompiledCode;
use crate::shim::protocol;
use crate::shim::session::ShimSession;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long the attach-time replay may take before we give up on a complete map.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(60);
/// Methods the code map may gain over those it needed at the last METHODS_FORGOTTEN before the shim
/// is asked to forget what it sent (a JVM that keeps loading classes sends new methods forever).
const METHOD_SLACK: usize = 10_000;
/// Code is forgotten only this long after its unload passed the oldest sample still to be named:
/// room for samples that reach us late.
const LATE_SAMPLE_MARGIN_NS: u64 = 30_000_000_000;
/// A FORGET_METHODS the shim did not answer (its queue was full) is sent again after this.
const FORGET_RETRY: Duration = Duration::from_secs(10);

pub struct LiveJvm {
    pub process: TargetProcess,
    pub hotspot: HotSpot,
    /// None without the agent ([`LiveJvm::without_agent`]).
    pub session: Option<ShimSession>,
    pub state: JitState,
    /// `DebugNonSafepoints` is on, so code compiled from now on has exact pc → inline mappings.
    pub debug_non_safepoints: bool,
    /// From the start of `attach` to HELLO, and to the end of the replay.
    pub time_to_hello: Duration,
    pub time_to_code_map: Duration,
    /// When FORGET_METHODS was last sent, and `state.methods_forgotten` then.
    forget_requested: Option<(Instant, u64)>,
    /// The code cache's heaps, for reading each loaded nmethod's tier and compile id.
    code_cache: Option<CodeCache>,
}

impl LiveJvm {
    /// Attach and wait until the code map holds everything that existed at attach time.
    pub fn attach(pid: u32) -> Result<Self> {
        let started = Instant::now();
        let process = TargetProcess::open(pid)?;
        let hotspot = HotSpot::open(&process)?;
        attach::check_flags(&process, &attach::read_attach_flags(&hotspot))?;
        let debug_non_safepoints = hotspot.enable_debug_non_safepoints();
        let session = ShimSession::attach(&process)?;
        let time_to_hello = started.elapsed();
        let mut live = LiveJvm {
            process,
            hotspot,
            session: Some(session),
            state: JitState::default(),
            debug_non_safepoints,
            time_to_hello,
            time_to_code_map: Duration::ZERO,
            forget_requested: None,
            code_cache: None,
        };
        let deadline = Instant::now() + REPLAY_TIMEOUT;
        while live.state.replay_done.is_none() {
            if Instant::now() >= deadline {
                return err(
                    ErrorKind::Shim,
                    format!(
                        "the shim did not finish replaying JVM {}'s code within {} s",
                        pid,
                        REPLAY_TIMEOUT.as_secs()
                    ),
                );
            }
            crate::interrupt::check_while_attaching(pid)?;
            live.pump(Duration::from_millis(100))?;
        }
        live.time_to_code_map = started.elapsed();
        Ok(live)
    }

    /// The JVM's memory and VMStructs only, nothing loaded into it: for a JVM that cannot be
    /// attached. Its code map stays empty.
    pub fn without_agent(pid: u32) -> Result<Self> {
        let process = TargetProcess::open(pid)?;
        let hotspot = HotSpot::open(&process)?;
        Ok(LiveJvm {
            process,
            hotspot,
            session: None,
            state: JitState::default(),
            debug_non_safepoints: false,
            time_to_hello: Duration::ZERO,
            time_to_code_map: Duration::ZERO,
            forget_requested: None,
            code_cache: None,
        })
    }

    /// Apply every frame that arrives within `timeout` (returns early once the socket is idle).
    pub fn pump(&mut self, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut n = 0;
        let Some(session) = self.session.as_mut() else {
            return Ok(0);
        };
        while let Some(frame) = session.next(deadline.saturating_duration_since(Instant::now()))? {
            let mut frame = frame;
            if let protocol::Record::NmethodLoad(nm) = &mut frame.record {
                nm.compiled = compiled_code(
                    &self.hotspot,
                    &mut self.code_cache,
                    nm.code_addr,
                    nm.code_size,
                );
            }
            self.state.apply(frame);
            n += 1;
        }
        Ok(n)
    }

    /// Keep a long recording's memory bounded: forget code unloaded before `oldest` (the time of the
    /// oldest sample still to be named) and, once the code map holds many methods beyond those it
    /// needed last time, ask the shim to start over so the others can go (see METHODS_FORGOTTEN).
    pub fn trim(&mut self, oldest: u64) -> Result<()> {
        let code = &mut self.state.code;
        code.prune_unloaded_before(oldest.saturating_sub(LATE_SAMPLE_MARGIN_NS));
        let waiting = self.forget_requested.is_some_and(|(at, forgotten)| {
            forgotten == self.state.methods_forgotten && at.elapsed() < FORGET_RETRY
        });
        let Some(session) = self.session.as_mut() else {
            return Ok(());
        };
        if !waiting && code.method_count() > 2 * self.state.methods_kept + METHOD_SLACK {
            session.send(&protocol::encode_forget_methods(0))?;
            self.forget_requested = Some((Instant::now(), self.state.methods_forgotten));
        }
        Ok(())
    }

    /// Send a command to the shim; nothing to send to without the agent.
    pub fn send(&mut self, frame: &[u8]) -> Result<()> {
        match self.session.as_mut() {
            Some(session) => session.send(frame),
            None => Ok(()),
        }
    }

    /// Retransform the classes declaring `methods` (unchanged bytes), which deoptimizes their compiled
    /// code; the recompiled code carries exact pc → inline mappings. Waits for the shim's answer.
    pub fn retransform(&mut self, methods: &[u64]) -> Result<RetransformResult> {
        self.state.retransform = None;
        self.send(&protocol::encode_retransform(0, methods))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.state.retransform.is_none() {
            if Instant::now() >= deadline {
                return err(
                    ErrorKind::Shim,
                    "the shim did not answer the retransform request",
                );
            }
            self.pump(Duration::from_millis(100))?;
        }
        Ok(self.state.retransform.unwrap_or_default())
    }

    /// Wait until each of `methods` has code loaded after `since` (or `timeout` passes); returns how
    /// many did.
    pub fn wait_for_recompilation(
        &mut self,
        methods: &HashSet<u64>,
        since: u64,
        timeout: Duration,
    ) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            self.pump(Duration::from_millis(100))?;
            let done = self
                .state
                .code
                .entries()
                .iter()
                .filter(|e| e.load_time > since && !e.replayed)
                .filter_map(|e| e.method())
                .filter(|m| methods.contains(m))
                .collect::<HashSet<_>>()
                .len();
            if done == methods.len() || Instant::now() >= deadline {
                return Ok(done);
            }
        }
    }
}

/// Tier and compile id of freshly loaded code, from its nmethod header. The code cache's heaps
/// are re-read when the code lies outside those known (the cache grew).
fn compiled_code(
    hotspot: &HotSpot,
    code_cache: &mut Option<CodeCache>,
    code_addr: u64,
    code_size: u32,
) -> Option<CompiledCode> {
    let (vs, mem) = (&hotspot.vmstructs, &hotspot.mem);
    if code_cache.is_none() {
        *code_cache = CodeCache::discover(vs, mem);
    }
    let cc = code_cache.as_mut()?;
    if !cc.contains(code_addr) {
        cc.refresh(vs, mem);
    }
    cc.compiled_code(mem, code_addr, code_size)
}

/// Methods whose code was compiled before we attached and so may lack exact inline mappings, limited
/// to application classes: retransforming JDK classes costs more and gains the user little.
pub fn imprecise_application_methods(state: &JitState) -> Vec<u64> {
    let mut out: Vec<u64> = state
        .code
        .live_entries()
        .into_iter()
        .filter(|e| e.replayed)
        .filter_map(|e| e.method())
        .filter(|m| {
            state
                .code
                .method(*m)
                .is_some_and(|info| is_application_class(&info.class_signature))
        })
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    out.sort_unstable();
    out
}

fn is_application_class(class_signature: &str) -> bool {
    const JDK_PREFIXES: &[&str] = &["Ljava/", "Ljavax/", "Ljdk/", "Lsun/", "Lcom/sun/"];
    !JDK_PREFIXES.iter().any(|p| class_signature.starts_with(p))
}

/// Current CLOCK_MONOTONIC in ns (the clock of perf samples and shim records).
pub fn monotonic_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}
