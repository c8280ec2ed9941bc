//! Collapsed stacks (Brendan Gregg's folded format): `root;…;leaf count`, Java frames suffixed with
//! `_[j]` compiled by C2 (or of unknown tier), `_[1]` compiled by C1 (async-profiler's marks),
//! `_[i]` inlined, `_[0]` interpreted, `_[k]` kernel, `_[a]` the class an allocation sample
//! allocated, `_[l]` the class of a lock waited for. Counts are samples, or bytes in an
//! allocation profile, or nanoseconds in a lock profile.

use super::OutputOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::profile::{CompiledCode, Frame, FrameKind, Profile, MAX_WEIGHT};
use std::collections::BTreeMap;

const SUFFIXES: [(&str, FrameKind); 6] = [
    ("_[j]", FrameKind::Jit),
    ("_[i]", FrameKind::Inlined),
    ("_[0]", FrameKind::Interpreted),
    ("_[k]", FrameKind::Kernel),
    ("_[a]", FrameKind::Allocated),
    ("_[l]", FrameKind::Lock),
];

/// The suffix of C1-compiled frames; their tier within C1 is not kept.
const C1_SUFFIX: &str = "_[1]";

pub fn frame_label(frame: &Frame) -> String {
    let suffix = match frame.code {
        Some(code) if frame.kind == FrameKind::Jit && code.is_c1() => C1_SUFFIX,
        _ => SUFFIXES
            .iter()
            .find(|(_, k)| *k == frame.kind)
            .map_or("", |(s, _)| s),
    };
    // `;` separates frames and a trailing space-number is the count: keep names free of both.
    let name: String = frame
        .name
        .chars()
        .map(|c| if c == ';' || c == '\n' { ':' } else { c })
        .collect();
    format!("{name}{suffix}")
}

/// Folded lines with counts, sorted.
pub fn folded(profile: &Profile, opts: &OutputOptions) -> BTreeMap<String, u64> {
    let labels: Vec<String> = profile.frames.iter().map(frame_label).collect();
    folded_with(profile, opts, &labels, |name| name.to_string())
}

/// Folded lines with counts, each frame written as `labels[frame]`, and each thread root (with
/// `--threads`) as `thread_label` of the thread's name.
pub fn folded_with(
    profile: &Profile,
    opts: &OutputOptions,
    labels: &[String],
    thread_label: impl Fn(&str) -> String,
) -> BTreeMap<String, u64> {
    let mut stacks: Vec<Option<String>> = vec![None; profile.stacks.len()];
    let mut counts = BTreeMap::new();
    // Aggregate first: stack strings can be long (deep recursion), samples many.
    for ((stack, tid), tally) in profile.weights_by_stack_and_thread() {
        let weight = tally.weight;
        let text = stacks[stack as usize].get_or_insert_with(|| {
            let s = profile
                .stacks
                .frames(stack)
                .into_iter()
                .map(|f| labels[f as usize].as_str())
                .collect::<Vec<_>>()
                .join(";");
            if s.is_empty() {
                "[unknown]".to_string()
            } else {
                s
            }
        });
        let key = if opts.threads {
            format!(
                "{};{text}",
                thread_label(&profile.thread_name(tid).replace([';', '\n'], ":"))
            )
        } else {
            text.clone()
        };
        *counts.entry(key).or_insert(0) += weight;
    }
    counts
}

pub fn render(profile: &Profile, opts: &OutputOptions) -> String {
    let mut out = String::new();
    for (stack, count) in folded(profile, opts) {
        out.push_str(&stack);
        out.push(' ');
        out.push_str(&count.to_string());
        out.push('\n');
    }
    out
}

/// A frame from its label: the kind from the suffix; unsuffixed frames read as native.
pub fn parse_label(label: &str) -> Frame {
    if let Some(name) = label.strip_suffix(C1_SUFFIX) {
        return Frame {
            code: Some(CompiledCode {
                level: 1,
                compile_id: 0,
                osr_bci: None,
                code_size: 0,
            }),
            ..Frame::named(name, FrameKind::Jit)
        };
    }
    for (suffix, kind) in SUFFIXES {
        if let Some(name) = label.strip_suffix(suffix) {
            return Frame::named(name, kind);
        }
    }
    Frame::named(label, FrameKind::Native)
}

/// Read folded lines back: one weighted sample per line (no times or threads).
pub fn parse(bytes: &[u8]) -> Result<Profile> {
    let bad = |what: String| {
        Error::new(
            ErrorKind::Usage,
            format!("not a collapsed-stacks file: {what} (expected `frame;frame;… count` lines)"),
        )
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        bad(format!(
            "not UTF-8 text at byte {} (is it a binary file?)",
            e.valid_up_to()
        ))
    })?;
    let mut profile = Profile::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let shown: String = line.chars().take(60).collect();
        let (stack, count) = line
            .rsplit_once(' ')
            .ok_or_else(|| bad(format!("line {} {shown:?} has no count", i + 1)))?;
        let weight: u64 = count
            .parse()
            .ok()
            .filter(|&w| w <= MAX_WEIGHT)
            .ok_or_else(|| bad(format!("line {} {shown:?} has no count", i + 1)))?;
        let ids = stack
            .split(';')
            .map(|label| profile.intern_frame(parse_label(label)))
            .collect();
        profile.add_counted(ids, 0, weight);
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_what_render_writes() {
        let text = "a;b.C.m_[j];b.C.h_[i] 3\na;b.C.i_[0];sys_[k] 2\na;b.C.m_[1];b.C.h_[i] 4\nx 1\n";
        let p = parse(text.as_bytes()).unwrap();
        assert_eq!(p.total_weight(), 10);
        assert_eq!(p.frames[2], Frame::named("b.C.h", FrameKind::Inlined));
        assert_eq!(p.frames[3].kind, FrameKind::Interpreted);
        assert_eq!(p.frames[4].kind, FrameKind::Kernel);
        assert_eq!(p.frames[0].kind, FrameKind::Native);
        let c1 = p.frames.iter().find(|f| f.code.is_some()).unwrap();
        assert_eq!((c1.name.as_str(), c1.kind), ("b.C.m", FrameKind::Jit));
        let opts = OutputOptions { threads: false };
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort();
        assert_eq!(render(&p, &opts), lines.join("\n") + "\n");
    }

    #[test]
    fn bad_lines_name_their_number() {
        for (text, needle) in [
            (&b"a;b 1\nc;d\n"[..], "line 2"),
            (b"a;b x\n", "line 1"),
            (b"a;b 99999999999999\n", "line 1"),
            (b"a 1\n\xff\xfe", "not UTF-8 text at byte 4"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Usage);
            assert!(e.message.contains(needle), "{needle}: {}", e.message);
        }
    }
}
