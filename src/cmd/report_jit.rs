//! `jvmperf report PROFILE --jit [--log-compilation FILE]`: the hottest compiled code versions
//! (method, tier, compile id, code size, share of the samples), each with its hot call sites by
//! bci — inlined (naming the callee) or called — and, from a LogCompilation file of the same run,
//! the compiler's inlining reasons and the code's deoptimizations.
//!
//! A code version's samples are those whose innermost physical Java frame is its code (with what
//! it inlined); a call site's are those passing through it. Code versions are matched to the log by
//! compile id, and only kept when the log's task compiled the same method (with the same OSR entry
//! and level): a log of another run, or one cut short, leaves the rest unmatched, never misnamed.

use crate::java_names::readable_params;
use crate::jit::logcompilation::{CompilationLog, MethodRef, Outcome, Task};
use crate::profile::{CompiledCode, Frame, FrameKind, Profile};
use std::collections::HashMap;
use std::fmt::Write;

/// Call sites shown under each code version.
const SITES_SHOWN: usize = 8;

/// A method's identity: name and descriptor.
type MethodKey = (String, String);

/// One version of compiled code: the method and its code (`None` when the tier was not recorded).
type VersionKey = (MethodKey, Option<CompiledCode>);

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Site {
    caller: MethodKey,
    bci: i32,
    callee: MethodKey,
    inlined: bool,
}

#[derive(Default)]
struct Version {
    samples: u64,
    sites: HashMap<Site, u64>,
}

fn method_key(f: &Frame) -> MethodKey {
    (f.name.clone(), f.signature.clone().unwrap_or_default())
}

fn method_ref((name, descriptor): &MethodKey) -> MethodRef {
    let (class, method) = name.rsplit_once('.').unwrap_or(("", name));
    MethodRef {
        class: class.to_string(),
        name: method.to_string(),
        descriptor: descriptor.clone(),
    }
}

fn readable((name, descriptor): &MethodKey) -> String {
    if descriptor.is_empty() {
        return name.clone();
    }
    format!("{name}{}", readable_params(descriptor))
}

/// Code versions with their samples and call sites, from every stack of `profile`.
fn versions(profile: &Profile) -> HashMap<VersionKey, Version> {
    let weights = profile.stack_weights();
    let mut out: HashMap<VersionKey, Version> = HashMap::new();
    for (stack, &w) in weights.iter().enumerate().filter(|(_, &w)| w > 0) {
        let frames: Vec<&Frame> = profile
            .stacks
            .frames(stack as u32)
            .into_iter()
            .map(|f| &profile.frames[f as usize])
            .collect();
        let mut seen: Vec<(VersionKey, Option<Site>)> = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            if f.kind != FrameKind::Jit {
                continue;
            }
            let key = (method_key(f), f.code);
            let chain_end = i + frames[i + 1..]
                .iter()
                .take_while(|g| g.kind == FrameKind::Inlined)
                .count();
            for pair in frames[i..=chain_end].windows(2) {
                let site = Site {
                    caller: method_key(pair[0]),
                    bci: pair[0].bci.unwrap_or(-1),
                    callee: method_key(pair[1]),
                    inlined: true,
                };
                seen.push((key.clone(), Some(site)));
            }
            let last = frames[chain_end];
            let next_java = frames[chain_end + 1..]
                .iter()
                .find(|g| g.kind != FrameKind::Stub)
                .filter(|g| matches!(g.kind, FrameKind::Jit | FrameKind::Interpreted));
            match next_java {
                Some(callee) => {
                    let site = Site {
                        caller: method_key(last),
                        bci: last.bci.unwrap_or(-1),
                        callee: method_key(callee),
                        inlined: false,
                    };
                    seen.push((key, Some(site)));
                }
                None => seen.push((key, None)),
            }
        }
        // Recursion passes a site more than once: a sample counts once.
        seen.sort();
        seen.dedup();
        for (key, site) in seen {
            let v = out.entry(key).or_default();
            match site {
                Some(site) => *v.sites.entry(site).or_default() += w,
                None => v.samples += w,
            }
        }
    }
    out
}

/// The log's task for a code version, or why there is none.
fn match_task<'a>(
    log: &'a CompilationLog,
    method: &MethodKey,
    code: Option<CompiledCode>,
) -> std::result::Result<&'a Task, String> {
    let Some(code) = code.filter(|c| c.compile_id != 0) else {
        return Err("no compile id recorded for this code".into());
    };
    let id = code.compile_id;
    if log.ambiguous.contains(&id) {
        return Err(format!(
            "compile id {id} names several tasks in the log (logs of several runs?)"
        ));
    }
    let Some(task) = log.tasks.get(&id) else {
        return Err(format!("compile id {id} is not in the log"));
    };
    let want = method_ref(method);
    if task.method != want {
        return Err(format!(
            "compile id {id} compiled {} in the log (a log of another run?)",
            task.method.qualified_name()
        ));
    }
    if task.osr_bci != code.osr_bci || task.level.is_some_and(|l| l != code.level) {
        return Err(format!(
            "compile id {id} is another kind of compile in the log (a log of another run?)"
        ));
    }
    Ok(task)
}

fn pct(n: u64, total: u64) -> f64 {
    100.0 * n as f64 / total.max(1) as f64
}

/// What the log says about a site, as text after the site.
fn decision_text(task: &Task, site: &Site) -> String {
    let caller = method_ref(&site.caller);
    let callee = method_ref(&site.callee);
    let mut texts: Vec<String> = task
        .decisions_at(&caller, site.bci, &callee.name, &callee.descriptor)
        .map(|d| match &d.outcome {
            Outcome::Inlined(r) => format!("inlined: {r}"),
            Outcome::NotInlined(r) => format!("not inlined: {r}"),
            Outcome::Intrinsic(id) => format!("intrinsic {id}"),
            Outcome::Called => "called (no inlining decision logged)".into(),
        })
        .collect();
    texts.dedup();
    if texts.is_empty() {
        return "  [no decision for this site in the log]".into();
    }
    format!("  [{}]", texts.join("; "))
}

/// The report as text: the `top` hottest code versions (0 = all).
pub fn render(profile: &Profile, log: Option<&CompilationLog>, top: usize) -> String {
    let total = profile.total_weight();
    let all = versions(profile);
    let mut hot: Vec<(&VersionKey, &Version)> = all.iter().filter(|(_, v)| v.samples > 0).collect();
    hot.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then_with(|| a.0.cmp(b.0)));
    let in_code: u64 = hot.iter().map(|(_, v)| v.samples).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{total} samples, {in_code} ({:.1}%) in compiled Java code, {} code versions",
        pct(in_code, total),
        hot.len()
    );
    if let Some(why) = log.and_then(|l| l.cut_short.as_deref()) {
        let _ = writeln!(out, "LogCompilation read up to an error: {why}");
    }
    if log.is_some_and(|l| l.tasks.is_empty()) {
        let _ = writeln!(
            out,
            "LogCompilation holds no compile tasks: the JVM appends its compiler threads' part when it exits"
        );
    }
    let shown = if top == 0 {
        hot.len()
    } else {
        top.min(hot.len())
    };
    let mut unmatched: Vec<String> = Vec::new();
    for (key, v) in &hot[..shown] {
        let (method, code) = key;
        let tier = match code {
            Some(c) => format!(
                "{}  compile {}  {} B",
                c.tier_name(),
                c.compile_id,
                c.code_size
            ),
            None => "tier unknown".to_string(),
        };
        let _ = writeln!(
            out,
            "\n{}  {tier}  {:.1}% ({} samples)",
            readable(method),
            pct(v.samples, total),
            v.samples
        );
        let task = log.map(|l| match_task(l, method, *code));
        if let Some(Err(why)) = &task {
            let _ = writeln!(out, "    [not matched in the log: {why}]");
            unmatched.push(format!("{} ({tier}): {why}", readable(method)));
        }
        let mut sites: Vec<(&Site, &u64)> = v.sites.iter().collect();
        sites.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        for (site, &n) in sites.iter().take(SITES_SHOWN) {
            let at = if site.caller == *method {
                format!("@{}", site.bci)
            } else {
                format!("{}@{}", site.caller.0, site.bci)
            };
            let how = if site.inlined { "inlined" } else { "calls" };
            let why = match &task {
                Some(Ok(task)) => decision_text(task, site),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "    {at} {how} {}  {:.1}% ({n} samples){why}",
                readable(&site.callee),
                pct(n, total)
            );
        }
        if let (Some(Ok(task)), Some(log)) = (&task, log) {
            let mut deopts: Vec<&str> = log
                .deopts_of(task.compile_id)
                .map(|d| d.what.as_str())
                .collect();
            deopts.sort_unstable();
            let mut counted: Vec<(&str, usize)> = Vec::new();
            for d in deopts {
                match counted.last_mut() {
                    Some((last, n)) if *last == d => *n += 1,
                    _ => counted.push((d, 1)),
                }
            }
            for (what, n) in counted {
                let times = if n > 1 {
                    format!(" ({n} times)")
                } else {
                    String::new()
                };
                let _ = writeln!(out, "    deoptimized: {what}{times}");
            }
        }
    }
    if hot.len() > shown {
        let _ = writeln!(
            out,
            "\n({} more code versions; --top 0 shows all)",
            hot.len() - shown
        );
    }
    if log.is_some() {
        let _ = writeln!(
            out,
            "\nLogCompilation: {} of {shown} code versions matched",
            shown - unmatched.len()
        );
        if !unmatched.is_empty() {
            let _ = writeln!(out, "unmatched:");
            for u in unmatched {
                let _ = writeln!(out, "  {u}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::logcompilation::{parse, tests::LOG};

    fn code(level: u8, compile_id: u32, osr_bci: Option<i32>) -> Option<CompiledCode> {
        Some(CompiledCode {
            level,
            compile_id,
            osr_bci,
            code_size: 752,
        })
    }

    fn java(name: &str, kind: FrameKind, bci: i32, code: Option<CompiledCode>) -> Frame {
        Frame {
            bci: Some(bci),
            signature: Some("(JI)J".into()),
            code,
            ..Frame::named(name, kind)
        }
    }

    /// bench.A.hot (compile 15) inlines inl at bci 14 and calls notInl at bci 21, as the
    /// hand-written log says; `compile` ids other than 15 are not in it.
    fn profile(compile: u32) -> Profile {
        let mut p = Profile::default();
        let main = p.intern_frame(java("bench.A.main", FrameKind::Interpreted, 3, None));
        let at = |bci| java("bench.A.hot", FrameKind::Jit, bci, code(4, compile, None));
        let hot14 = p.intern_frame(at(14));
        let hot21 = p.intern_frame(at(21));
        let hot8 = p.intern_frame(at(8));
        let inl = p.intern_frame(java("bench.A.inl", FrameKind::Inlined, 2, None));
        let not_inl = p.intern_frame(java("bench.A.notInl", FrameKind::Jit, 4, code(4, 11, None)));
        p.add_counted(vec![main, hot14, inl], 1, 6);
        p.add_counted(vec![main, hot21, not_inl], 1, 3);
        p.add_counted(vec![main, hot8], 1, 1);
        p
    }

    #[test]
    fn hot_code_with_its_sites_and_the_logs_reasons() {
        let log = parse(LOG.as_bytes());
        let text = render(&profile(15), Some(&log), 0);
        let lines: Vec<&str> = text.lines().collect();
        let head = lines
            .iter()
            .position(|l| l.starts_with("bench.A.hot(long, int)"))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(
            lines[head],
            "bench.A.hot(long, int)  C2  compile 15  752 B  70.0% (7 samples)"
        );
        assert_eq!(
            lines[head + 1],
            "    @14 inlined bench.A.inl(long, int)  60.0% (6 samples)  [inlined: force inline by CompileCommand]"
        );
        assert_eq!(
            lines[head + 2],
            "    @21 calls bench.A.notInl(long, int)  30.0% (3 samples)  [not inlined: disallowed by CompileCommand]"
        );
        assert!(text.contains(
            "    deoptimized: uncommon trap unstable_if (action reinterpret) at bench.A.hot@8\n"
        ));
        let callee = lines
            .iter()
            .position(|l| l.starts_with("bench.A.notInl(long, int)  C2  compile 11"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            lines[callee + 1].contains("not matched in the log: compile id 11 is not in the log")
        );
        assert!(
            text.contains("LogCompilation: 1 of 2 code versions matched"),
            "{text}"
        );
    }

    /// Compile id 12 is a C1 OSR compile of bench.A.hot in the log: a C2 normal compile with that
    /// id (a log of another run) is not matched; nor is one whose id the log lacks.
    #[test]
    fn a_log_of_another_run_never_lends_its_reasons() {
        let log = parse(LOG.as_bytes());
        for (id, why) in [
            (12, "is another kind of compile"),
            (99, "compile id 99 is not in the log"),
        ] {
            let text = render(&profile(id), Some(&log), 0);
            assert!(!text.contains("CompileCommand"), "{text}");
            assert!(!text.contains("deoptimized"), "{text}");
            assert!(text.contains(why), "{text}");
            assert!(
                text.contains("LogCompilation: 0 of 2 code versions matched"),
                "{text}"
            );
        }
        // A running JVM's log: its main part only, no tasks yet.
        let main_part = parse(&LOG.as_bytes()[..LOG.find("<compilation_log").unwrap()]);
        let text = render(&profile(15), Some(&main_part), 0);
        assert!(text.contains("holds no compile tasks"), "{text}");
        assert!(!text.contains("deoptimized"), "{text}");
        let text = render(&profile(15), None, 1);
        assert!(
            text.contains("@14 inlined bench.A.inl(long, int)"),
            "{text}"
        );
        assert!(!text.contains("LogCompilation"), "{text}");
        assert!(text.contains("(1 more code versions"), "{text}");
    }
}
