//! `jvmperf report FILE...`: the hottest methods (of several files merged, optionally cut to a
//! time window and threads as `convert` does) by self and total samples, overall or per thread.
//!
//! A method's *self* samples are those whose leaf frame is the method; its *total* samples are
//! those with the method anywhere on the stack, counted once per sample (recursion included).
//! Methods are keyed by name (`package.Class.method`, a native symbol, or `symbol [kernel]`), so
//! compiled, inlined and interpreted frames of one method add up, and the numbers are the same
//! whichever format the profile was read from.

use crate::error::Result;
use crate::input::{self, Recording};
use crate::profile::{Profile, Sample};
use std::collections::HashMap;
use std::fmt::Write;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    /// Samples where the method is the leaf.
    #[value(name = "self")]
    SelfSamples,
    /// Samples with the method anywhere on the stack.
    Total,
}

#[derive(clap::Args)]
pub struct ReportOptions {
    /// The profiles to read (.jvmperf, .jfr, .iprof, .pb.gz, .collapsed): several are merged into one.
    #[arg(required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    #[command(flatten)]
    pub filter: crate::cmd::convert::Filter,
    /// One table per thread.
    #[arg(long)]
    pub threads: bool,
    /// Rows per table (0 = all).
    #[arg(long, default_value_t = 30)]
    pub top: usize,
    /// Order by self or total samples.
    #[arg(long, value_enum, default_value = "self")]
    pub sort: SortBy,
    /// The compiled code instead: the hottest code versions (method, tier, compile id, size) with
    /// their hot call sites, inlined or called.
    #[arg(long, conflicts_with = "threads")]
    pub jit: bool,
    /// With --jit: the HotSpot LogCompilation file of the same run
    /// (-XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=FILE), for why calls were
    /// or were not inlined and how the hot code was deoptimized.
    #[arg(long, value_name = "FILE", requires = "jit")]
    pub log_compilation: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub method: String,
    pub self_samples: u64,
    pub total: u64,
}

/// Per stack: the method key of its leaf, and the distinct method keys on it.
struct StackKeys {
    keys: Vec<String>,
    leaf: Vec<Option<u32>>,
    on_stack: Vec<Vec<u32>>,
}

fn stack_keys(profile: &Profile) -> StackKeys {
    let mut keys: Vec<String> = Vec::new();
    let mut key_ids: HashMap<String, u32> = HashMap::new();
    let frame_key: Vec<Option<u32>> = profile
        .frames
        .iter()
        .map(|f| {
            let key = f.method_key()?;
            Some(*key_ids.entry(key.clone()).or_insert_with(|| {
                keys.push(key);
                keys.len() as u32 - 1
            }))
        })
        .collect();
    let mut leaf = Vec::with_capacity(profile.stacks.len());
    let mut on_stack = Vec::with_capacity(profile.stacks.len());
    for stack in profile.stacks.iter() {
        let mut ids: Vec<u32> = stack
            .iter()
            .filter_map(|&f| frame_key[f as usize])
            .collect();
        leaf.push(ids.last().copied());
        ids.sort_unstable();
        ids.dedup();
        on_stack.push(ids);
    }
    StackKeys {
        keys,
        leaf,
        on_stack,
    }
}

/// Rows for the samples `keep` accepts, hottest first, and their summed weight.
pub fn rows(profile: &Profile, sort: SortBy, keep: impl Fn(&Sample) -> bool) -> (Vec<Row>, u64) {
    let sk = stack_keys(profile);
    let mut weights = vec![0u64; profile.stacks.len()];
    let mut total = 0;
    for s in profile.samples.iter().filter(|s| keep(s)) {
        weights[s.stack as usize] += s.weight;
        total += s.weight;
    }
    let mut self_w = vec![0u64; sk.keys.len()];
    let mut total_w = vec![0u64; sk.keys.len()];
    for (stack, &w) in weights.iter().enumerate().filter(|(_, &w)| w > 0) {
        if let Some(k) = sk.leaf[stack] {
            self_w[k as usize] += w;
        }
        for &k in &sk.on_stack[stack] {
            total_w[k as usize] += w;
        }
    }
    let mut rows: Vec<Row> = sk
        .keys
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| total_w[i] > 0)
        .map(|(i, method)| Row {
            method,
            self_samples: self_w[i],
            total: total_w[i],
        })
        .collect();
    rows.sort_by(|a, b| {
        let (ka, kb) = match sort {
            SortBy::SelfSamples => ((a.self_samples, a.total), (b.self_samples, b.total)),
            SortBy::Total => ((a.total, a.self_samples), (b.total, b.self_samples)),
        };
        kb.cmp(&ka).then_with(|| a.method.cmp(&b.method))
    });
    (rows, total)
}

fn table(out: &mut String, rows: &[Row], total: u64, top: usize) {
    let pct = |n: u64| 100.0 * n as f64 / total.max(1) as f64;
    let _ = writeln!(
        out,
        "{:>9} {:>7} {:>9} {:>7}  method",
        "self", "self%", "total", "total%"
    );
    let shown = if top == 0 {
        rows.len()
    } else {
        top.min(rows.len())
    };
    for r in &rows[..shown] {
        let _ = writeln!(
            out,
            "{:>9} {:>6.2}% {:>9} {:>6.2}%  {}",
            r.self_samples,
            pct(r.self_samples),
            r.total,
            pct(r.total),
            r.method
        );
    }
    if shown < rows.len() {
        let _ = writeln!(
            out,
            "({} more methods; --top 0 shows all)",
            rows.len() - shown
        );
    }
}

/// The report as text.
pub fn render(rec: &Recording, opts: &ReportOptions) -> String {
    let p = &rec.profile;
    let mut out = String::new();
    let (all, total) = rows(p, opts.sort, |_| true);
    let unit = p.clock.unit();
    let _ = write!(
        out,
        "{}: {} ({}), {total} {unit}",
        rec.path.display(),
        rec.format.name(),
        if opts.sort == SortBy::Total {
            "by total"
        } else {
            "by self"
        }
    );
    if let Some(hz) = 1_000_000_000u64.checked_div(p.period_ns) {
        let _ = write!(out, ", {hz} Hz");
    }
    let mut per_thread: Vec<(u32, u64)> = Vec::new();
    if rec.keeps_threads() {
        let mut m: HashMap<u32, u64> = HashMap::new();
        for s in &p.samples {
            *m.entry(s.tid).or_default() += s.weight;
        }
        per_thread = m.into_iter().collect();
        per_thread.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let _ = write!(out, ", {} threads", per_thread.len());
    }
    if rec.keeps_times() {
        let times = p.samples.iter().map(|s| s.time);
        if let (Some(a), Some(b)) = (times.clone().min(), times.max()) {
            let _ = write!(
                out,
                ", {:.1} s (System.nanoTime {a} to {b})",
                (b - a) as f64 / 1e9
            );
        }
    }
    out.push('\n');
    if opts.threads {
        for (tid, n) in per_thread {
            let _ = writeln!(
                out,
                "\nthread {} (tid {tid}): {n} {unit}",
                p.thread_name(tid)
            );
            let (thread_rows, thread_total) = rows(p, opts.sort, |s| s.tid == tid);
            table(&mut out, &thread_rows, thread_total, opts.top);
        }
    } else {
        table(&mut out, &all, total, opts.top);
    }
    out
}

pub fn run(opts: &ReportOptions) -> Result<()> {
    let rec = input::read_all(&opts.inputs)?;
    if opts.jit {
        let log = match &opts.log_compilation {
            Some(path) => Some(crate::jit::logcompilation::read(path)?),
            None => None,
        };
        print!("{}: {}, ", rec.path.display(), rec.format.name());
        print!(
            "{}",
            super::report_jit::render(&rec.profile, log.as_ref(), opts.top)
        );
        return Ok(());
    }
    if opts.threads {
        rec.require_threads("--threads")?;
    }
    let rec = Recording {
        profile: crate::cmd::convert::apply(&rec, &opts.filter)?,
        ..rec
    };
    print!("{}", render(&rec, opts));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Format;
    use crate::profile::{Frame, FrameKind};

    #[test]
    fn self_and_total_count_each_sample_once() {
        // Recursion (r;r) counts once in total; kinds of one method add up.
        let text = "main_[0];r_[j];r_[i] 3\nmain_[0];r_[0];leaf 2\nmain_[0] 1\nsys_[k] 4\n";
        let p = crate::output::collapsed::parse(text.as_bytes()).unwrap();
        let (rows, total) = rows(&p, SortBy::Total, |_| true);
        assert_eq!(total, 10);
        let get = |m: &str| rows.iter().find(|r| r.method == m).unwrap().clone();
        assert_eq!((get("r").self_samples, get("r").total), (3, 5));
        assert_eq!((get("main").self_samples, get("main").total), (1, 6));
        assert_eq!((get("leaf").self_samples, get("leaf").total), (2, 2));
        assert_eq!(get("sys [kernel]").self_samples, 4);
        assert_eq!(rows[0].method, "main");
    }

    #[test]
    fn per_thread_tables() {
        let mut p = Profile::default();
        let a = p.intern_frame(Frame::named("a", FrameKind::Native));
        let b = p.intern_frame(Frame::named("b", FrameKind::Native));
        let sa = p.intern_stack(vec![a]);
        let sb = p.intern_stack(vec![a, b]);
        p.thread_names.insert(1, "one".into());
        for (tid, stack) in [(1, sa), (2, sb), (2, sb)] {
            p.samples.push(Sample {
                time: 1,
                tid,
                stack,
                weight: 1,
            });
        }
        let rec = Recording::new("x.jvmperf".into(), Format::Raw, p);
        let text = render(
            &rec,
            &ReportOptions {
                inputs: vec!["x.jvmperf".into()],
                filter: Default::default(),
                threads: true,
                top: 1,
                sort: SortBy::SelfSamples,
                jit: false,
                log_compilation: None,
            },
        );
        assert!(text.contains("3 samples"), "{text}");
        let t2 = text.find("thread tid-2 (tid 2): 2 samples").unwrap();
        let t1 = text.find("thread one (tid 1): 1 samples").unwrap();
        assert!(t2 < t1, "busiest thread first: {text}");
        assert!(text.contains("(1 more methods"), "{text}");
    }
}
