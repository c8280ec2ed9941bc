//! `-o profile.html`: one self-contained page (data, script and style inline, no fetch of any
//! kind, a Content-Security-Policy that allows nothing else) with a flame graph / icicle, search,
//! a caller view, the top methods, a timeline of the samples and a thread list.
//!
//! The data is compact JSON: interned strings; the page's frames, one per method and kind (the
//! lines and compile ids of one compiled method are one frame, as in the SVG, with the lines, bcis
//! and tiers seen listed in its details); the stacks as a trie of (parent, frame) nodes; and each
//! thread's samples in time order, a stack and a time delta packed in one value (see [`packed`]).
//! Columns are unsigned LEB128 varints in base64: stacks are numbered hottest first and a thread's
//! time deltas are about one unit (its sampling period), so most samples take one or two bytes.

use super::flamegraph::{self, Shade};
use crate::error::{Error, ErrorKind, Result};
use crate::profile::{Frame, FrameId, Profile, StackId, Stacks};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// The finest unit of sample times in the page (0.1 ms), for sampling periods under 1 ms; 1 ms
/// otherwise.
const FINEST_UNIT_NS: u64 = 100_000;
/// Past this many sample rows, times are rounded to coarser units (and samples of one stack and
/// thread in one unit merged) until they fit, so a long recording still makes a page a browser
/// opens quickly; the page says so.
const MAX_SAMPLE_ROWS: usize = 2_000_000;

/// The page of one profile.
pub fn render(profile: &Profile) -> Result<Vec<u8>> {
    let mut data = PageData::default();
    let stacks = data.add_stacks(profile);
    let title = flamegraph::title(profile);
    let samples = data.sample_columns(profile, &stacks);
    page(
        &title,
        json!({
            "title": title,
            "description": flamegraph::description(profile),
            "clock": profile.clock.name(),
            "unit": profile.clock.unit(),
            "period_ns": profile.period_ns,
            "samples": samples,
        }),
        data,
    )
}

/// `jvmperf diff BEFORE AFTER -o diff.html`: the page of AFTER, each frame coloured by how its
/// share of the samples changed from BEFORE (whole, whatever the selection in AFTER).
pub fn render_diff(before: &Profile, after: &Profile, title: &str) -> Result<Vec<u8>> {
    let mut data = PageData::default();
    let after_stacks = data.add_stacks(after);
    let before_stacks = data.add_stacks(before);
    let samples = data.sample_columns(after, &after_stacks);
    let baseline = data.sample_columns(before, &before_stacks);
    page(
        title,
        json!({
            "title": title,
            "description": flamegraph::description(after),
            "clock": after.clock.name(),
            "unit": after.clock.unit(),
            "period_ns": after.period_ns,
            "samples": samples,
            "baseline": baseline,
        }),
        data,
    )
}

/// What the page shows of one frame: its name and method key (as `report` counts methods), its
/// kind, and what is known of its lines, bcis, signature, file and compiled code.
#[derive(Default)]
struct FrameDetails {
    signature: Option<String>,
    place: Option<String>,
    lines: BTreeSet<u32>,
    bcis: BTreeSet<i32>,
    /// Compile ids (0 when unknown) by tier name.
    tiers: BTreeMap<String, BTreeSet<u32>>,
}

impl FrameDetails {
    fn add(&mut self, f: &Frame) {
        if self.signature.is_none() {
            self.signature = f.signature.clone();
        }
        if self.place.is_none() {
            self.place = f
                .file
                .as_deref()
                .or(f.module.as_deref())
                .map(str::to_string);
        }
        self.lines.extend(f.line);
        self.bcis.extend(f.bci.filter(|&b| b >= 0));
        if let Some(code) = f.code {
            self.tiers
                .entry(code.tier_name())
                .or_default()
                .insert(code.compile_id);
        }
    }

    /// `(IJ)V · Phases.java · lines 12, 14 · bci 5 · C2 compile 812, C1 level 3 (4 compiles)`.
    fn text(&self) -> String {
        fn list<T: ToString>(what: &str, set: &BTreeSet<T>) -> Option<String> {
            const SHOWN: usize = 6;
            if set.is_empty() {
                return None;
            }
            let mut items: Vec<String> = set.iter().take(SHOWN).map(T::to_string).collect();
            if set.len() > SHOWN {
                items.push(format!("… ({} in all)", set.len()));
            }
            Some(format!("{what} {}", items.join(", ")))
        }
        let parts: Vec<String> = [
            self.signature.clone(),
            self.place.clone(),
            list(
                if self.lines.len() == 1 {
                    "line"
                } else {
                    "lines"
                },
                &self.lines,
            ),
            list("bci", &self.bcis),
            (!self.tiers.is_empty()).then(|| {
                let tiers: Vec<String> = self
                    .tiers
                    .iter()
                    .map(|(tier, ids)| match ids.iter().collect::<Vec<_>>()[..] {
                        [0] => tier.clone(),
                        [id] => format!("{tier} compile {id}"),
                        _ => format!("{tier} ({} compiles)", ids.len()),
                    })
                    .collect();
                tiers.join(", ")
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        parts.join(" · ")
    }
}

/// The page's frames, stacks and strings, filled from one or two profiles.
#[derive(Default)]
struct PageData {
    strings: Vec<String>,
    string_ids: HashMap<String, u32>,
    frame_ids: HashMap<(String, usize), FrameId>,
    frame_name: Vec<u32>,
    frame_method: Vec<u32>,
    frame_kind: Vec<usize>,
    frame_details: Vec<FrameDetails>,
    trie: Stacks,
    /// Weight per page stack of the profile shown (not the diff's baseline), to number stacks
    /// hottest first.
    stack_weight: Vec<u64>,
    notes: Vec<String>,
}

fn kind_index(shade: Shade) -> usize {
    Shade::ALL.iter().position(|&s| s == shade).unwrap_or(0)
}

impl PageData {
    fn string(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn frame(&mut self, f: &Frame) -> FrameId {
        let kind = kind_index(Shade::of(f));
        let key = (f.name.clone(), kind);
        let id = match self.frame_ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.frame_name.len() as FrameId;
                let name = self.string(&f.name);
                let method = match f.method_key() {
                    Some(m) => self.string(&m),
                    None => name,
                };
                self.frame_name.push(name);
                self.frame_method.push(method);
                self.frame_kind.push(kind);
                self.frame_details.push(FrameDetails::default());
                self.frame_ids.insert(key, id);
                id
            }
        };
        self.frame_details[id as usize].add(f);
        id
    }

    /// The page stack of each of `profile`'s stacks.
    fn add_stacks(&mut self, profile: &Profile) -> Vec<StackId> {
        let frames: Vec<FrameId> = profile.frames.iter().map(|f| self.frame(f)).collect();
        profile
            .stacks
            .iter()
            .map(|stack| {
                let ids: Vec<FrameId> = stack.iter().map(|&f| frames[f as usize]).collect();
                self.trie.intern(&ids)
            })
            .collect()
    }

    /// The samples of `profile` (its stacks mapped by `stacks`), per thread; the first profile
    /// given sets the numbering of the stacks.
    fn sample_columns(&mut self, profile: &Profile, stacks: &[StackId]) -> Value {
        if self.stack_weight.is_empty() {
            self.stack_weight = vec![0; self.trie.len()];
            for s in &profile.samples {
                self.stack_weight[stacks[s.stack as usize] as usize] += s.weight;
            }
        }
        let rank = self.stack_ranks();
        let timed = profile.samples.iter().any(|s| s.time != 0);
        let t0 = profile.samples.iter().map(|s| s.time).min().unwrap_or(0);
        let mut by_thread: BTreeMap<u32, Vec<Row>> = BTreeMap::new();
        for s in &profile.samples {
            by_thread.entry(s.tid).or_default().push(Row {
                time: s.time - t0,
                stack: rank[stacks[s.stack as usize] as usize],
                weight: s.weight,
            });
        }
        for rows in by_thread.values_mut() {
            rows.sort_by_key(|r| r.time);
        }
        let (merged, unit) = in_units(&by_thread, profile.period_ns, MAX_SAMPLE_ROWS);
        self.notes.extend(coarsening_note(
            profile.samples.len(),
            unit,
            profile.period_ns,
        ));
        let threads: Vec<Value> = merged
            .iter()
            .map(|(&tid, rows)| {
                json!({
                    "tid": tid,
                    "name": profile.thread_name(tid),
                    "samples": rows.iter().map(|r| r.weight).sum::<u64>(),
                    "n": rows.len(),
                    "rows": column(packed(rows, unit)),
                    "weight": rows.iter().any(|r| r.weight != 1).then(|| column(rows.iter().map(|r| r.weight))),
                })
            })
            .collect();
        json!({
            "timed": timed,
            "t0_ns": t0,
            "unit_ns": unit,
            "threads": threads,
        })
    }

    /// Each page stack's number: the hottest is 0.
    fn stack_ranks(&self) -> Vec<u32> {
        let mut order: Vec<usize> = (0..self.trie.len()).collect();
        let weight = |s: usize| self.stack_weight.get(s).copied().unwrap_or(0);
        order.sort_by_key(|&s| (std::cmp::Reverse(weight(s)), s));
        let mut rank = vec![0u32; order.len()];
        for (r, &s) in order.iter().enumerate() {
            rank[s] = r as u32;
        }
        rank
    }

    fn into_json(mut self, mut root: Value) -> Value {
        let rank = self.stack_ranks();
        let mut leaf = vec![0u64; rank.len()];
        for (s, &r) in rank.iter().enumerate() {
            leaf[r as usize] = self
                .trie
                .leaf_node(s as StackId)
                .map_or(0, |n| n as u64 + 1);
        }
        let nodes: Vec<(Option<u32>, FrameId)> = self.trie.nodes().collect();
        let details: Vec<String> = self.frame_details.iter().map(FrameDetails::text).collect();
        let detail_ids: Vec<u64> = details.iter().map(|d| self.string(d) as u64).collect();
        let kinds: Vec<Value> = Shade::ALL
            .iter()
            .map(|s| {
                let c = s.color();
                json!({"name": s.name(), "color": format!("rgb({},{},{})", c.r, c.g, c.b)})
            })
            .collect();
        let extra = json!({
            "kinds": kinds,
            "strings": self.strings,
            "frames": {
                "n": self.frame_name.len(),
                "name": column(self.frame_name.iter().map(|&x| x as u64)),
                "method": column(self.frame_method.iter().map(|&x| x as u64)),
                "kind": column(self.frame_kind.iter().map(|&x| x as u64)),
                "detail": column(detail_ids.into_iter()),
            },
            "nodes": {
                "n": nodes.len(),
                // id − parent (0 for top-level nodes): mostly 1, a child following its parent.
                "up": column(nodes.iter().enumerate().map(|(i, (p, _))| p.map_or(0, |p| (i as u32 - p) as u64))),
                "frame": column(nodes.iter().map(|&(_, f)| f as u64)),
            },
            "stacks": {"n": leaf.len(), "leaf": column(leaf.into_iter())},
            "notes": self.notes,
        });
        if let (Some(root), Value::Object(extra)) = (root.as_object_mut(), extra) {
            root.extend(extra);
        }
        root
    }
}

#[derive(Clone, Copy)]
struct Row {
    time: u64,
    stack: u32,
    weight: u64,
}

/// Each thread's rows in a unit of about a sampling period (so that a thread's time deltas are
/// mostly 1), coarser (×10 at a time) while there are more than `max_rows`; and the unit.
fn in_units(
    threads: &BTreeMap<u32, Vec<Row>>,
    period_ns: u64,
    max_rows: usize,
) -> (BTreeMap<u32, Vec<Row>>, u64) {
    let mut unit = first_unit(period_ns);
    let timed = threads.values().flatten().any(|r| r.time != 0);
    loop {
        let merged = merge_all(threads, unit);
        if !timed || merged.values().map(Vec::len).sum::<usize>() <= max_rows {
            return (merged, unit);
        }
        unit *= 10;
    }
}

/// What the page says when its sample times were made coarser than [`first_unit`].
fn coarsening_note(samples: usize, unit: u64, period_ns: u64) -> Option<String> {
    (unit > first_unit(period_ns)).then(|| {
        format!(
            "{samples} samples: their times are rounded to {} ms (and samples of one stack and thread within that merged) to keep this page small",
            unit as f64 / 1e6
        )
    })
}

/// The unit of a page's sample times before any coarsening: 1 ms, or 0.1 ms above 1 kHz.
fn first_unit(period_ns: u64) -> u64 {
    if period_ns >= 1_000_000 {
        1_000_000
    } else {
        FINEST_UNIT_NS
    }
}

/// Each thread's rows (sorted by time) with times rounded down to `unit`, rows of one stack in
/// one unit merged.
fn merge_all(threads: &BTreeMap<u32, Vec<Row>>, unit: u64) -> BTreeMap<u32, Vec<Row>> {
    threads
        .iter()
        .map(|(&tid, rows)| (tid, merge(rows, unit)))
        .collect()
}

fn merge(rows: &[Row], unit: u64) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::with_capacity(rows.len());
    let mut group_start = 0;
    let mut index: HashMap<u32, usize> = HashMap::new();
    for r in rows {
        let time = r.time / unit * unit;
        if out.get(group_start).is_some_and(|g| g.time != time) {
            group_start = out.len();
            index.clear();
        }
        match index.get(&r.stack) {
            Some(&i) => out[i].weight += r.weight,
            None => {
                index.insert(r.stack, out.len());
                out.push(Row { time, ..*r });
            }
        }
    }
    out
}

/// A thread's rows as varint values: `stack × 4 + d` where d (0–2) is the time since the thread's
/// previous row in `unit`s, or d = 3 and the time follows as a value of its own.
fn packed(rows: &[Row], unit: u64) -> impl Iterator<Item = u64> + '_ {
    let mut last = 0;
    rows.iter().flat_map(move |r| {
        let q = r.time / unit;
        let d = q - last;
        last = q;
        let stack = u64::from(r.stack) * 4;
        if d < 3 {
            [Some(stack + d), None]
        } else {
            [Some(stack + 3), Some(d)]
        }
        .into_iter()
        .flatten()
    })
}

/// Unsigned LEB128 varints, base64.
fn column(values: impl Iterator<Item = u64>) -> String {
    let mut bytes = Vec::new();
    for mut v in values {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                bytes.push(b);
                break;
            }
            bytes.push(b | 0x80);
        }
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn page(title: &str, root: Value, data: PageData) -> Result<Vec<u8>> {
    let json = serde_json::to_string(&data.into_json(root)).map_err(|e| {
        Error::new(
            ErrorKind::Output,
            format!("cannot write the HTML page: {e}"),
        )
    })?;
    // `<` appears only inside JSON strings, where \u003c means the same: no `</script>` can end
    // the data block early.
    let json = json.replace('<', "\\u003c");
    let csp = format!(
        "default-src 'none'; script-src '{}'; style-src '{}'",
        sha256(SCRIPT),
        sha256(STYLE)
    );
    Ok(fill(
        PAGE,
        &[
            ("CSP", &csp),
            ("TITLE", &escape_html(title)),
            ("STYLE", STYLE),
            ("DATA", &json),
            ("SCRIPT", SCRIPT),
        ],
    )
    .into_bytes())
}

/// A CSP source of an inline script or style (`sha256-<base64>`).
fn sha256(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    format!(
        "sha256-{}",
        base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
    )
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `template` with each `{{KEY}}` replaced, in one pass (a value is never scanned for keys).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}").and_then(|end| {
            let key = &after[..end];
            values
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (end, v))
        }) {
            Some((end, value)) => {
                out.push_str(value);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;
