//! The time-versioned map of JIT code: which nmethod or stub owned an address at a given instant.
//!
//! The code cache reuses addresses, so each entry carries a validity interval. JVMTI stamps a load
//! when the Service Thread posts it, i.e. *after* the code was installed, so an entry is taken to own
//! its range from the end of the previous owner until its own unload: the owner of `addr` at `t` is
//! the entry covering `addr` with the earliest end that is still after `t`. Resolution runs after
//! recording (or after a short delay), so load records delivered late still resolve earlier samples.

use crate::profile::CompiledCode;
use crate::shim::protocol::{MethodInfo, NmethodLoad, PcInfo};
use std::collections::{HashMap, HashSet};

pub type MethodId = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeKind {
    /// A compiled Java method and its debug points, sorted by pc, with its tier and compile id
    /// when the nmethod's header could be read.
    Nmethod {
        method: MethodId,
        pcs: Vec<PcInfo>,
        compiled: Option<CompiledCode>,
    },
    /// A stub, adapter or the interpreter, named by DynamicCodeGenerated.
    Blob { name: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeEntry {
    pub start: u64,
    pub end: u64,
    pub load_time: u64,
    pub unload_time: Option<u64>,
    /// Reported by the attach-time replay rather than as it was compiled.
    pub replayed: bool,
    pub kind: CodeKind,
}

impl CodeEntry {
    fn valid_until(&self) -> u64 {
        self.unload_time.unwrap_or(u64::MAX)
    }

    /// Tier and compile id of an nmethod's code, when known.
    pub fn compiled(&self) -> Option<CompiledCode> {
        match &self.kind {
            CodeKind::Nmethod { compiled, .. } => *compiled,
            CodeKind::Blob { .. } => None,
        }
    }

    pub fn method(&self) -> Option<MethodId> {
        match &self.kind {
            CodeKind::Nmethod { method, .. } => Some(*method),
            CodeKind::Blob { .. } => None,
        }
    }

    /// The inlined chain (innermost first, with bcis) for `pc` in this nmethod.
    ///
    /// HotSpot's `pc_desc_near` rule: the first debug point at or after `pc`. A return address (every
    /// caller frame) is itself a debug point and matches exactly; a top-frame pc maps to the next one.
    pub fn frames_at(&self, pc: u64) -> Option<&[(MethodId, i32)]> {
        let CodeKind::Nmethod { pcs, .. } = &self.kind else {
            return None;
        };
        let idx = pcs.partition_point(|p| p.pc < pc);
        pcs.get(idx).map(|p| p.frames.as_slice())
    }
}

/// Entries are indexed by the 4 KiB buckets their range touches, so finding what covers an address
/// costs a hash lookup plus the few entries (old and new) that ever lived in that bucket.
const BUCKET_SHIFT: u32 = 12;
/// An entry spanning more fine buckets than this (1 MiB; the interpreter, the largest real blob, is
/// a few hundred KiB) is indexed by 16 MiB buckets instead. The shim's sizes are untrusted u32s: a
/// 4 GiB range would otherwise touch a million fine buckets per record.
const MAX_FINE_BUCKETS: u64 = 256;
const WIDE_BUCKET_SHIFT: u32 = 24;

/// The inclusive bucket range of `[start, end)` (`end > start`) at `shift`.
fn bucket_range(start: u64, end: u64, shift: u32) -> std::ops::RangeInclusive<u64> {
    (start >> shift)..=((end - 1) >> shift)
}

fn is_wide(start: u64, end: u64) -> bool {
    let r = bucket_range(start, end, BUCKET_SHIFT);
    r.end() - r.start() >= MAX_FINE_BUCKETS
}

#[derive(Debug, Default)]
pub struct CodeMap {
    methods: HashMap<MethodId, MethodInfo>,
    entries: Vec<CodeEntry>,
    /// Entry indices by the buckets they touch, in arrival order: fine buckets for ordinary
    /// entries, wide ones for entries larger than `MAX_FINE_BUCKETS` fine buckets.
    buckets: HashMap<u64, Vec<usize>>,
    wide_buckets: HashMap<u64, Vec<usize>>,
    /// Entry indices by start address, for unload records.
    by_start: HashMap<u64, Vec<usize>>,
}

impl CodeMap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add_method(&mut self, info: MethodInfo) {
        self.methods.insert(info.id, info);
    }

    pub fn method(&self, id: MethodId) -> Option<&MethodInfo> {
        self.methods.get(&id)
    }

    pub fn methods(&self) -> impl Iterator<Item = &MethodInfo> {
        self.methods.values()
    }

    pub fn entries(&self) -> &[CodeEntry] {
        &self.entries
    }

    pub fn add_nmethod(&mut self, time: u64, load: NmethodLoad) {
        let mut pcs = load.pcs;
        pcs.sort_by_key(|p| p.pc);
        self.insert(CodeEntry {
            start: load.code_addr,
            end: load.code_addr.saturating_add(load.code_size as u64),
            load_time: time,
            unload_time: None,
            replayed: load.replayed,
            kind: CodeKind::Nmethod {
                method: load.method,
                pcs,
                compiled: load.compiled,
            },
        });
    }

    pub fn add_blob(&mut self, time: u64, addr: u64, size: u32, replayed: bool, name: String) {
        self.insert(CodeEntry {
            start: addr,
            end: addr.saturating_add(size as u64),
            load_time: time,
            unload_time: None,
            replayed,
            kind: CodeKind::Blob { name },
        });
    }

    fn insert(&mut self, entry: CodeEntry) {
        if entry.end <= entry.start {
            return;
        }
        // The same code reported twice (replay racing a live event): keep the first report.
        let overlapping = self.overlapping(entry.start, entry.end);
        if overlapping.iter().any(|&i| {
            let e = &self.entries[i];
            e.start == entry.start
                && e.end == entry.end
                && e.unload_time.is_none()
                && e.kind == entry.kind
        }) {
            return;
        }
        // Anything still open over this range without an unload was freed before this load: close it.
        // An entry that loaded later than this one (out-of-order delivery) closes this one instead.
        let mut own_end: Option<u64> = None;
        for i in overlapping {
            let other = &mut self.entries[i];
            if other.load_time <= entry.load_time {
                if other.unload_time.is_none_or(|u| u > entry.load_time) {
                    other.unload_time = Some(entry.load_time);
                }
            } else {
                own_end = Some(own_end.map_or(other.load_time, |e| e.min(other.load_time)));
            }
        }
        self.push(CodeEntry {
            unload_time: entry.unload_time.or(own_end),
            ..entry
        });
    }

    /// Append `entry` and index it.
    fn push(&mut self, entry: CodeEntry) {
        let idx = self.entries.len();
        let (index, shift) = if is_wide(entry.start, entry.end) {
            (&mut self.wide_buckets, WIDE_BUCKET_SHIFT)
        } else {
            (&mut self.buckets, BUCKET_SHIFT)
        };
        for bucket in bucket_range(entry.start, entry.end, shift) {
            index.entry(bucket).or_default().push(idx);
        }
        self.by_start.entry(entry.start).or_default().push(idx);
        self.entries.push(entry);
    }

    /// Forget code unloaded before `time`: no lookup at or after `time` can return it, so callers
    /// pass the time of the oldest sample they may still resolve. Rebuilds the indices only once a
    /// quarter of the entries can go; returns how many went.
    pub fn prune_unloaded_before(&mut self, time: u64) -> usize {
        let gone = self
            .entries
            .iter()
            .filter(|e| e.valid_until() <= time)
            .count();
        if gone == 0 || gone * 4 < self.entries.len() {
            return 0;
        }
        let entries = std::mem::take(&mut self.entries);
        self.buckets.clear();
        self.wide_buckets.clear();
        self.by_start.clear();
        for e in entries.into_iter().filter(|e| e.valid_until() > time) {
            self.push(e);
        }
        gone
    }

    /// Drop the methods no entry refers to, as its own method or inlined.
    pub fn retain_referenced_methods(&mut self) {
        let mut used = HashSet::new();
        for e in &self.entries {
            if let CodeKind::Nmethod { method, pcs, .. } = &e.kind {
                used.insert(*method);
                used.extend(pcs.iter().flat_map(|p| p.frames.iter().map(|f| f.0)));
            }
        }
        self.methods.retain(|id, _| used.contains(id));
    }

    pub fn method_count(&self) -> usize {
        self.methods.len()
    }

    pub fn unload_nmethod(&mut self, time: u64, method: MethodId, code_addr: u64) {
        let Some(list) = self.by_start.get(&code_addr) else {
            return;
        };
        // The newest load of this method at this address that is still open (or closed later than
        // `time` by an implicit close) is the one being unloaded.
        if let Some(&i) = list.iter().rev().find(|&&i| {
            let e = &self.entries[i];
            e.method() == Some(method) && e.load_time <= time && e.valid_until() > time
        }) {
            self.entries[i].unload_time = Some(time);
        }
    }

    /// Indices of entries whose range intersects `[start, end)`, each once.
    fn overlapping(&self, start: u64, end: u64) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for (index, shift) in [
            (&self.buckets, BUCKET_SHIFT),
            (&self.wide_buckets, WIDE_BUCKET_SHIFT),
        ] {
            let range = bucket_range(start, end, shift);
            // An entry is listed in every bucket it touches: take it only from the first of those
            // the query touches too, so a wide entry costs one visit rather than hundreds.
            let mut take = |b: u64, list: &Vec<usize>| {
                out.extend(list.iter().copied().filter(|&i| {
                    let e = &self.entries[i];
                    (e.start >> shift).max(*range.start()) == b && e.start < end && e.end > start
                }));
            };
            // A range wider than the index has buckets: walk the index, not the range.
            if range.end() - range.start() < index.len() as u64 {
                for b in range.clone() {
                    if let Some(list) = index.get(&b) {
                        take(b, list);
                    }
                }
            } else {
                for (&b, list) in index {
                    if range.contains(&b) {
                        take(b, list);
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Entries covering `addr`.
    fn covering(&self, addr: u64) -> impl Iterator<Item = &CodeEntry> + '_ {
        let fine = self.buckets.get(&(addr >> BUCKET_SHIFT));
        let wide = self.wide_buckets.get(&(addr >> WIDE_BUCKET_SHIFT));
        fine.into_iter()
            .chain(wide)
            .flatten()
            .map(|&i| &self.entries[i])
            .filter(move |e| e.start <= addr && addr < e.end)
    }

    /// The code that owned `addr` at `time`.
    pub fn lookup(&self, addr: u64, time: u64) -> Option<&CodeEntry> {
        self.covering(addr)
            .filter(|e| e.valid_until() > time)
            .min_by_key(|e| (e.valid_until(), std::cmp::Reverse(e.load_time)))
    }

    /// The times around `time` over which [`CodeMap::lookup`] of `addr` gives the same answer (as
    /// long as the map itself does not change): from the end of the previous owner to the end of
    /// this one.
    pub fn same_owner(&self, addr: u64, time: u64) -> std::ops::Range<u64> {
        let (mut from, mut until) = (0, u64::MAX);
        for end in self.covering(addr).map(CodeEntry::valid_until) {
            if end > time {
                until = until.min(end);
            } else {
                from = from.max(end);
            }
        }
        from..until
    }

    /// The code at `addr` right now (the newest entry still open).
    pub fn lookup_latest(&self, addr: u64) -> Option<&CodeEntry> {
        self.covering(addr)
            .filter(|e| e.unload_time.is_none())
            .max_by_key(|e| e.load_time)
    }

    /// Entries currently open, in address order.
    pub fn live_entries(&self) -> Vec<&CodeEntry> {
        let mut v: Vec<&CodeEntry> = self
            .entries
            .iter()
            .filter(|e| e.unload_time.is_none())
            .collect();
        v.sort_by_key(|e| e.start);
        v
    }

    pub fn nmethod_count(&self) -> usize {
        self.entries.iter().filter(|e| e.method().is_some()).count()
    }
}

impl MethodInfo {
    /// The source line of `bci`, from the line table (last entry starting at or before it).
    pub fn line_of(&self, bci: i32) -> Option<u32> {
        if bci < 0 {
            return self.lines.iter().min_by_key(|l| l.0).map(|l| l.1);
        }
        self.lines
            .iter()
            .filter(|(start, _)| *start as i64 <= bci as i64)
            .max_by_key(|(start, _)| *start)
            .map(|&(_, line)| line)
    }

    /// `package.Class.method`.
    pub fn qualified_name(&self) -> String {
        format!(
            "{}.{}",
            crate::java_names::class_name(&self.class_signature),
            self.name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nm(
        method: MethodId,
        addr: u64,
        size: u32,
        pcs: &[(u64, &[(MethodId, i32)])],
    ) -> NmethodLoad {
        NmethodLoad {
            method,
            code_addr: addr,
            code_size: size,
            replayed: false,
            compiled: None,
            pcs: pcs
                .iter()
                .map(|(pc, f)| PcInfo {
                    pc: *pc,
                    frames: f.to_vec(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_same_owner_holds_between_the_ends_of_its_predecessor_and_itself() {
        let mut map = CodeMap::new();
        map.add_nmethod(100, nm(1, 0x1000, 0x100, &[]));
        map.unload_nmethod(200, 1, 0x1000);
        map.add_nmethod(300, nm(2, 0x1080, 0x100, &[]));
        assert_eq!(map.same_owner(0x10a0, 150), 0..200);
        assert_eq!(map.same_owner(0x10a0, 200), 200..u64::MAX);
        assert_eq!(map.same_owner(0x10a0, 999), 200..u64::MAX);
        assert_eq!(
            map.same_owner(0x1010, 999),
            200..u64::MAX,
            "no owner after the unload"
        );
        assert_eq!(map.same_owner(0x9000, 5), 0..u64::MAX, "never code");
        for t in [0, 150, 199, 200, 250, 5000] {
            let owner = map.same_owner(0x10a0, t);
            let at = |t| map.lookup(0x10a0, t).map(|e| e.load_time);
            assert_eq!(at(owner.start), at(t));
            assert_eq!(at(owner.end - 1), at(t));
        }
    }

    #[test]
    fn reused_address_resolves_by_time() {
        let mut map = CodeMap::new();
        map.add_nmethod(100, nm(1, 0x1000, 0x100, &[]));
        map.unload_nmethod(200, 1, 0x1000);
        map.add_nmethod(300, nm(2, 0x1080, 0x100, &[]));
        assert_eq!(
            map.lookup(0x10a0, 50).unwrap().method(),
            Some(1),
            "before load: earliest owner"
        );
        assert_eq!(map.lookup(0x10a0, 150).unwrap().method(), Some(1));
        assert_eq!(
            map.lookup(0x10a0, 250).unwrap().method(),
            Some(2),
            "after unload, before the next load record"
        );
        assert_eq!(map.lookup(0x10a0, 350).unwrap().method(), Some(2));
        assert_eq!(map.lookup(0x1010, 350), None, "freed and not reused");
        assert_eq!(map.lookup_latest(0x10a0).unwrap().method(), Some(2));
    }

    #[test]
    fn pruning_keeps_what_later_lookups_need() {
        let mut map = CodeMap::new();
        let info = |id| MethodInfo {
            id,
            class_signature: format!("LC{id};"),
            name: "m".into(),
            signature: "()V".into(),
            source_file: String::new(),
            access_flags: 0,
            bytecode_len: 1,
            lines: vec![],
        };
        for id in 1..=4 {
            map.add_method(info(id));
        }
        map.add_nmethod(100, nm(1, 0x1000, 0x100, &[(0x1010, &[(2, 3), (1, 0)])]));
        map.unload_nmethod(200, 1, 0x1000);
        map.add_nmethod(300, nm(3, 0x1000, 0x100, &[]));
        map.add_nmethod(300, nm(4, 0x9000, 0x100, &[]));
        map.unload_nmethod(400, 4, 0x9000);
        assert_eq!(
            map.prune_unloaded_before(150),
            0,
            "nothing unloaded by then"
        );
        map.retain_referenced_methods();
        assert_eq!(map.method_count(), 4, "every method is still referenced");
        assert_eq!(map.prune_unloaded_before(250), 1);
        assert_eq!(map.entries().len(), 2);
        assert_eq!(map.lookup(0x1010, 250).unwrap().method(), Some(3));
        assert_eq!(map.lookup(0x9010, 350).unwrap().method(), Some(4));
        map.unload_nmethod(500, 3, 0x1000);
        assert_eq!(map.lookup(0x1010, 450).unwrap().method(), Some(3));
        map.retain_referenced_methods();
        let mut kept: Vec<u64> = map.methods().map(|m| m.id).collect();
        kept.sort_unstable();
        assert_eq!(kept, [3, 4], "1 and its inlined 2 went with their code");
    }

    #[test]
    fn missing_unload_is_implied_by_a_later_load() {
        let mut map = CodeMap::new();
        map.add_nmethod(100, nm(1, 0x1000, 0x100, &[]));
        map.add_nmethod(300, nm(2, 0x1000, 0x40, &[]));
        assert_eq!(map.lookup(0x1010, 200).unwrap().method(), Some(1));
        assert_eq!(map.lookup(0x1010, 400).unwrap().method(), Some(2));
        // A late unload record for the old code must not close the new one.
        map.unload_nmethod(250, 1, 0x1000);
        assert_eq!(map.lookup(0x1010, 400).unwrap().method(), Some(2));
        assert_eq!(map.lookup(0x1010, 260).unwrap().method(), Some(2));
    }

    #[test]
    fn out_of_order_load_is_closed_by_the_newer_one() {
        let mut map = CodeMap::new();
        map.add_nmethod(300, nm(2, 0x1000, 0x100, &[]));
        map.add_nmethod(100, nm(1, 0x1000, 0x100, &[]));
        assert_eq!(map.lookup(0x1010, 150).unwrap().method(), Some(1));
        assert_eq!(map.lookup(0x1010, 350).unwrap().method(), Some(2));
    }

    #[test]
    fn duplicate_reports_collapse() {
        let mut map = CodeMap::new();
        map.add_nmethod(100, nm(1, 0x1000, 0x100, &[]));
        map.add_nmethod(120, nm(1, 0x1000, 0x100, &[]));
        assert_eq!(map.entries().len(), 1);
        assert_eq!(map.lookup(0x1010, 500).unwrap().load_time, 100);
    }

    /// Sizes are untrusted: a 4 GiB range must cost a bounded number of index buckets, and still
    /// resolve and close like any other entry.
    #[test]
    fn huge_ranges_are_indexed_coarsely() {
        let mut map = CodeMap::new();
        for i in 0..64u64 {
            map.add_blob(i, 0x7f00_0000_0000 + i, u32::MAX, false, format!("b{i}"));
        }
        let indexed: usize = map
            .buckets
            .values()
            .chain(map.wide_buckets.values())
            .map(Vec::len)
            .sum();
        assert!(indexed <= 64 * 257, "{indexed} bucket entries");
        let far = 0x7f00_0000_0000 + (3 << 30);
        assert_eq!(map.lookup(far, 100).unwrap().load_time, 63);
        assert_eq!(map.lookup(far, 10).unwrap().load_time, 10);
        map.add_nmethod(200, nm(1, far, 0x100, &[]));
        assert_eq!(map.lookup(far, 300).unwrap().method(), Some(1));
        assert_eq!(
            map.lookup(far + 0x200, 300),
            None,
            "closed by the load over it"
        );
        assert_eq!(map.lookup_latest(far).unwrap().method(), Some(1));
        // A small entry, then a wide one over it: the wide one closes it.
        map.add_blob(400, 0x1000, 0x40, false, "small".into());
        map.add_blob(500, 0, 1 << 31, false, "wide".into());
        assert_eq!(map.lookup(0x1010, 450).unwrap().load_time, 400);
        assert_eq!(map.lookup(0x1010, 600).unwrap().load_time, 500);
    }

    #[test]
    fn inline_chain_rules() {
        let mut map = CodeMap::new();
        map.add_nmethod(
            1,
            nm(
                1,
                0x1000,
                0x100,
                &[(0x1020, &[(2, 5), (1, 10)]), (0x1040, &[(1, 12)])],
            ),
        );
        let e = map.lookup(0x1030, 5).unwrap();
        assert_eq!(e.frames_at(0x1020).unwrap(), &[(2, 5), (1, 10)]);
        assert_eq!(e.frames_at(0x1021).unwrap(), &[(1, 12)], "next debug point");
        assert_eq!(e.frames_at(0x1010).unwrap(), &[(2, 5), (1, 10)]);
        assert_eq!(e.frames_at(0x1050), None);
    }

    #[test]
    fn lines_by_bci() {
        let m = MethodInfo {
            id: 1,
            class_signature: "Lbench/A;".into(),
            name: "run".into(),
            signature: "()V".into(),
            source_file: "A.java".into(),
            access_flags: 0,
            bytecode_len: 30,
            lines: vec![(0, 10), (8, 11), (20, 13)],
        };
        assert_eq!(m.line_of(0), Some(10));
        assert_eq!(m.line_of(9), Some(11));
        assert_eq!(m.line_of(29), Some(13));
        assert_eq!(m.line_of(-1), Some(10));
        assert_eq!(m.qualified_name(), "bench.A.run");
    }
}
