//! Collapsed stacks (Brendan Gregg's folded format): `root;…;leaf count`, Java frames suffixed with
//! `_[j]` compiled, `_[i]` inlined, `_[0]` interpreted, `_[k]` kernel.

use super::OutputOptions;
use crate::profile::{Frame, FrameKind, Profile};
use std::collections::BTreeMap;

pub fn frame_label(frame: &Frame) -> String {
    let suffix = match frame.kind {
        FrameKind::Jit => "_[j]",
        FrameKind::Inlined => "_[i]",
        FrameKind::Interpreted => "_[0]",
        FrameKind::Kernel => "_[k]",
        FrameKind::Native | FrameKind::Stub | FrameKind::Thread => "",
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
    let mut stacks: Vec<String> = profile
        .stacks
        .iter()
        .map(|s| {
            s.iter()
                .map(|&f| labels[f as usize].as_str())
                .collect::<Vec<_>>()
                .join(";")
        })
        .collect();
    stacks.iter_mut().for_each(|s| {
        if s.is_empty() {
            s.push_str("[unknown]");
        }
    });
    let mut counts = BTreeMap::new();
    for sample in &profile.samples {
        let stack = &stacks[sample.stack as usize];
        let key = if opts.threads {
            format!(
                "{};{stack}",
                profile.thread_name(sample.tid).replace(';', ":")
            )
        } else {
            stack.clone()
        };
        *counts.entry(key).or_insert(0) += 1;
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
