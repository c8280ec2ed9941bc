//! `jvmperf reachability PROFILE --call-tree FILE`: the Java methods with samples that a
//! native-image points-to call tree does not contain — code a native image of the application
//! would lack, or that needs reachability metadata — hottest first, each with the hottest stack
//! that reached it, and how much of the profile's Java time the call tree reaches.

use crate::calltree::{self, CallTree, MethodKey};
use crate::error::Result;
use crate::input;
use crate::java_names::{class_name, parse_method_descriptor, readable_params};
use crate::profile::{Frame, FrameId, Profile};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::PathBuf;

/// Frames of a hot stack shown above the missing method.
const STACK_SHOWN: usize = 12;

#[derive(clap::Args)]
pub struct ReachabilityOptions {
    /// The profile recorded on the JVM (.jvmperf, .pb.gz, .iprof, .collapsed).
    pub input: PathBuf,
    /// native-image's call tree report (-H:+PrintAnalysisCallTree): reports/call_tree_*.txt, or
    /// reports/call_tree_methods_*.csv with its call_tree_targets_*.csv next to it.
    #[arg(long, value_name = "FILE")]
    pub call_tree: PathBuf,
    /// Methods listed (0 = all).
    #[arg(long, default_value_t = 30)]
    pub top: usize,
}

/// Whether the call tree holds a Java frame's method: by parameter types when the profile kept
/// the frame's descriptor, else by class and name.
fn reached(tree: &CallTree, f: &Frame) -> bool {
    let (class, name) = f.class_and_method();
    let params = f
        .signature
        .as_deref()
        .and_then(parse_method_descriptor)
        .map(|(params, _)| params.iter().map(|p| class_name(p)).collect::<Vec<_>>());
    match params {
        Some(params) => tree.contains(&MethodKey::new(class, name, params)),
        None => tree.contains_name(class, name),
    }
}

fn display(f: &Frame) -> String {
    match &f.signature {
        Some(sig) => format!("{}{}", f.name, readable_params(sig)),
        None => f.name.clone(),
    }
}

struct Missing {
    samples: u64,
    /// The heaviest stack through the method: its weight and Java frames up to the method.
    hot: (u64, Vec<FrameId>),
}

/// The report as text.
pub fn render(profile: &Profile, tree: &CallTree, top: usize) -> String {
    let in_tree: Vec<Option<bool>> = profile
        .frames
        .iter()
        .map(|f| f.kind.is_java().then(|| reached(tree, f)))
        .collect();
    let (mut java, mut all_reached) = (0u64, 0u64);
    let mut missing: HashMap<String, Missing> = HashMap::new();
    for (stack, w) in profile.stack_weights().into_iter().enumerate() {
        if w == 0 {
            continue;
        }
        let frames: Vec<FrameId> = profile
            .stacks
            .frames(stack as u32)
            .into_iter()
            .filter(|&f| in_tree[f as usize].is_some())
            .collect();
        if frames.is_empty() {
            continue;
        }
        java += w;
        let mut counted: Vec<String> = Vec::new();
        for (i, &f) in frames.iter().enumerate() {
            if in_tree[f as usize] == Some(true) {
                continue;
            }
            let name = display(&profile.frames[f as usize]);
            if counted.contains(&name) {
                continue;
            }
            let m = missing.entry(name.clone()).or_insert(Missing {
                samples: 0,
                hot: (0, Vec::new()),
            });
            m.samples += w;
            if w > m.hot.0 {
                m.hot = (w, frames[..=i].to_vec());
            }
            counted.push(name);
        }
        if counted.is_empty() {
            all_reached += w;
        }
    }
    let mut rows: Vec<(String, Missing)> = missing.into_iter().collect();
    rows.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then_with(|| a.0.cmp(&b.0)));
    let pct = |n: u64| 100.0 * n as f64 / java.max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "the call tree reaches {:.1}% of the profile's Java samples ({all_reached} of {java}); {} Java methods with samples are not in it",
        pct(all_reached),
        rows.len()
    );
    let shown = if top == 0 {
        rows.len()
    } else {
        top.min(rows.len())
    };
    for (name, m) in &rows[..shown] {
        let _ = writeln!(out, "\n{:>9} {:>6.2}%  {name}", m.samples, pct(m.samples));
        let stack = &m.hot.1;
        let skipped = stack.len().saturating_sub(STACK_SHOWN);
        if skipped > 0 {
            let _ = writeln!(out, "          … {skipped} frames above");
        }
        for &f in &stack[skipped..] {
            let frame = &profile.frames[f as usize];
            let mark = if in_tree[f as usize] == Some(true) {
                " "
            } else {
                "!"
            };
            let _ = writeln!(out, "        {mark} {}", display(frame));
        }
    }
    if shown < rows.len() {
        let _ = writeln!(
            out,
            "\n({} more methods; --top 0 shows all)",
            rows.len() - shown
        );
    }
    out
}

pub fn run(opts: &ReachabilityOptions) -> Result<()> {
    let tree = calltree::read(&opts.call_tree)?;
    let rec = input::read(&opts.input)?;
    print!(
        "{}: {} against {} ({} methods)\n{}",
        rec.path.display(),
        rec.format.name(),
        opts.call_tree.display(),
        tree.methods.len(),
        render(&rec.profile, &tree, opts.top)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calltree::tests::{METHODS_CSV, TARGETS_CSV, TXT};
    use crate::calltree::{parse_csv, parse_txt};
    use crate::profile::FrameKind;

    fn java(name: &str, sig: &str, kind: FrameKind) -> Frame {
        Frame {
            signature: Some(sig.into()),
            ..Frame::named(name, kind)
        }
    }

    /// main → run → (lambda | Circle.area | Triangle.area); Triangle.area and its callee are
    /// hot but in no tree; GC samples have no Java frame.
    fn profile() -> Profile {
        let mut p = Profile::default();
        let root = p.intern_frame(Frame::named("start_thread", FrameKind::Native));
        let main = p.intern_frame(java(
            "bench.App.main",
            "([Ljava/lang/String;)V",
            FrameKind::Interpreted,
        ));
        let run = p.intern_frame(java(
            "bench.App.run",
            "(ILjava/lang/String;)J",
            FrameKind::Jit,
        ));
        let lambda = p.intern_frame(java(
            "bench.App$$Lambda$14/0x0000000800c03000.applyAsLong",
            "(J)J",
            FrameKind::Inlined,
        ));
        let circle = p.intern_frame(java("bench.Circle.area", "()D", FrameKind::Jit));
        let triangle = p.intern_frame(java("bench.Triangle.area", "()D", FrameKind::Jit));
        let sqrt = p.intern_frame(java("bench.Triangle.side", "(I)D", FrameKind::Inlined));
        let gc = p.intern_frame(Frame::named("G1ParTask", FrameKind::Native));
        p.add_counted(vec![root, main, run, lambda], 1, 40);
        p.add_counted(vec![root, main, run, circle], 1, 30);
        p.add_counted(vec![root, main, run, triangle], 1, 20);
        p.add_counted(vec![root, main, run, triangle, sqrt], 1, 10);
        p.add_counted(vec![gc], 2, 50);
        p
    }

    fn check(tree: &CallTree) {
        let text = render(&profile(), tree, 0);
        assert!(
            text.starts_with("the call tree reaches 70.0% of the profile's Java samples (70 of 100); 2 Java methods with samples are not in it\n"),
            "{text}"
        );
        let rows: Vec<&str> = text.lines().filter(|l| l.contains('%')).skip(1).collect();
        assert_eq!(
            rows,
            [
                "       30  30.00%  bench.Triangle.area()",
                "       10  10.00%  bench.Triangle.side(int)",
            ],
            "{text}"
        );
        let hot_stack = "       30  30.00%  bench.Triangle.area()
          bench.App.main(java.lang.String[])
          bench.App.run(int, java.lang.String)
        ! bench.Triangle.area()
";
        assert!(text.contains(hot_stack), "{text}");
        for reached in ["Circle.area()\n", "App.main(", "applyAsLong(long)\n"] {
            assert!(
                !text.lines().any(|l| l.contains('%') && l.contains(reached)),
                "{reached}: {text}"
            );
        }
    }

    #[test]
    fn hot_methods_missing_from_a_txt_call_tree() {
        check(&parse_txt(TXT));
    }

    #[test]
    fn hot_methods_missing_from_csv_call_tree_files() {
        check(&parse_csv(METHODS_CSV, Some(TARGETS_CSV)).unwrap());
    }
}
