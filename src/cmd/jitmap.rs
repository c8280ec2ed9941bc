//! `jvmperf jitmap`: print the target's JIT code — stubs and nmethods with their inline trees and
//! line numbers — and optionally write a Linux perf map.

use crate::error::{Error, ErrorKind, Result};
use crate::java_names::readable_params;
use crate::jit::codemap::{CodeEntry, CodeKind, CodeMap};
use crate::live_jvm::{imprecise_application_methods, monotonic_now, LiveJvm};
use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct JitmapOptions {
    /// Process id of the JVM.
    #[arg(short, long)]
    pub pid: u32,
    /// Write the map here instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Also write /tmp/perf-<pid>.map for Linux perf.
    #[arg(long)]
    pub perf_map: bool,
    /// Recompile application code compiled before the attach, so every pc maps to its exact
    /// inlined chain (retransforms the classes with unchanged bytes).
    #[arg(long)]
    pub precise_inlining: bool,
    /// Seconds to wait for that recompilation.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = crate::cli::seconds)]
    pub settle: Duration,
}

pub fn run(opts: &JitmapOptions) -> Result<()> {
    let _priority = crate::priority::raise(&[opts.pid]);
    let mut live = LiveJvm::attach(opts.pid)?;
    let (nmethods, blobs, _) = live.state.replay_done.unwrap_or_default();
    let replay = live.time_to_code_map.saturating_sub(live.time_to_hello);
    let mut notes = vec![
        format!(
            "code map complete {:.3} s after start (shim connected after {:.3} s)",
            live.time_to_code_map.as_secs_f64(),
            live.time_to_hello.as_secs_f64()
        ),
        format!(
            "replayed {nmethods} nmethods and {blobs} code blobs in {:.3} s ({:.0} nmethods/s)",
            replay.as_secs_f64(),
            nmethods as f64 / replay.as_secs_f64().max(1e-6)
        ),
    ];
    if opts.precise_inlining {
        notes.push(force_precise_inlining(&mut live, opts.settle)?);
    } else {
        // Collect whatever compiled while we were replaying.
        live.pump(Duration::from_millis(50))?;
    }
    if live.state.dropped_records > 0 {
        notes.push(format!(
            "the shim dropped {} records (queue full)",
            live.state.dropped_records
        ));
    }
    let (vm_name, vm_version) = live.session.as_ref().map_or(("", ""), |s| {
        (&s.hello.vm_name[..], &s.hello.vm_version[..])
    });
    let header = format!(
        "# jitmap of JVM {} ({vm_name} {vm_version}), DebugNonSafepoints {}\n",
        live.process.pid,
        if live.debug_non_safepoints {
            "on"
        } else {
            "off"
        },
    );
    let mut text = header;
    for n in &notes {
        text.push_str(&format!("# {n}\n"));
    }
    text.push_str(&render(&live.state.code));
    write_output(opts.output.as_ref(), text.as_bytes())?;
    if opts.perf_map {
        let path = PathBuf::from(format!("/tmp/perf-{}.map", live.process.pid));
        write_output(Some(&path), render_perf_map(&live.state.code).as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    for n in notes {
        eprintln!("jvmperf: {n}");
    }
    Ok(())
}

/// Retransform application classes whose code predates the attach and wait for their recompilation.
fn force_precise_inlining(live: &mut LiveJvm, settle: Duration) -> Result<String> {
    let methods = imprecise_application_methods(&live.state);
    if methods.is_empty() {
        return Ok("precise inlining: no application code compiled before attach".to_string());
    }
    let since = monotonic_now();
    let result = live.retransform(&methods)?;
    let wanted: HashSet<u64> = methods.iter().copied().collect();
    let recompiled = live.wait_for_recompilation(&wanted, since, settle)?;
    Ok(format!(
        "precise inlining: retransformed {}/{} classes (JVMTI error {}), {}/{} methods recompiled within {:.1} s",
        result.retransformed,
        result.requested,
        result.jvmti_error,
        recompiled,
        methods.len(),
        settle.as_secs_f64()
    ))
}

fn write_output(path: Option<&PathBuf>, bytes: &[u8]) -> Result<()> {
    match path {
        Some(p) => crate::output::write_file(p, bytes),
        None => std::io::stdout()
            .lock()
            .write_all(bytes)
            .map_err(|e| Error::new(ErrorKind::Output, format!("cannot write to stdout: {e}"))),
    }
}

/// A frame of an inline chain: `bench.A.helper:31@4` (name, line, bci).
fn frame_text(map: &CodeMap, method: u64, bci: i32) -> String {
    match map.method(method) {
        Some(m) => match m.line_of(bci) {
            Some(line) => format!("{}:{line}@{bci}", m.qualified_name()),
            None => format!("{}@{bci}", m.qualified_name()),
        },
        None => format!("<unknown method {method:#x}>@{bci}"),
    }
}

fn entry_name(map: &CodeMap, e: &CodeEntry) -> String {
    match &e.kind {
        CodeKind::Blob { name } => name.clone(),
        CodeKind::Nmethod { method, .. } => match map.method(*method) {
            Some(m) => format!("{}{}", m.qualified_name(), readable_params(&m.signature)),
            None => format!("<unknown method {method:#x}>"),
        },
    }
}

/// The human-readable map: every live code blob and nmethod in address order; for nmethods, every
/// debug point as `pc +offset: inner:line@bci < caller:line@bci …`.
pub fn render(map: &CodeMap) -> String {
    let mut out = String::new();
    for e in map.live_entries() {
        let origin = if e.replayed { "replayed" } else { "live" };
        match &e.kind {
            CodeKind::Blob { .. } => out.push_str(&format!(
                "blob {:#x}-{:#x} {} [{origin}]\n",
                e.start,
                e.end,
                entry_name(map, e)
            )),
            CodeKind::Nmethod { method, pcs, .. } => {
                let source = map
                    .method(*method)
                    .map(|m| m.source_file.as_str())
                    .unwrap_or("");
                let tier = e
                    .compiled()
                    .map(|c| format!("{} compile {}, ", c.tier_name(), c.compile_id))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "nmethod {:#x}-{:#x} {} ({source}) [{origin}, {tier}{} debug points]\n",
                    e.start,
                    e.end,
                    entry_name(map, e),
                    pcs.len()
                ));
                for pc in pcs {
                    let chain: Vec<String> = pc
                        .frames
                        .iter()
                        .map(|&(m, bci)| frame_text(map, m, bci))
                        .collect();
                    out.push_str(&format!(
                        "  pc +{:#x}: {}\n",
                        pc.pc.wrapping_sub(e.start),
                        chain.join(" < ")
                    ));
                }
            }
        }
    }
    out
}

/// `/tmp/perf-<pid>.map` lines: `<start hex> <size hex> <name>`.
pub fn render_perf_map(map: &CodeMap) -> String {
    let mut out = String::new();
    for e in map.live_entries() {
        out.push_str(&format!(
            "{:x} {:x} {}\n",
            e.start,
            e.end - e.start,
            entry_name(map, e)
        ));
    }
    out
}
