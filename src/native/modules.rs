//! The target's executable file-backed mappings, one [`Module`] per file, each with the file's bytes.

use crate::error::Result;
use crate::process::mapped::{load_bias, open_mapped_file, target_path};
use crate::process::{Mapping, ProcessMemory, TargetMemory, TargetProcess};
use memmap2::Mmap;
use object::{Object, ObjectSymbol};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::ops::{Deref, Range};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Unknown code addresses trigger a rescan of `/proc/<pid>/maps` at most this often.
const MIN_RESCAN_INTERVAL: Duration = Duration::from_millis(250);

/// A loaded ELF file (or the `[vdso]`) in the target.
pub struct Module {
    /// File name, e.g. `libz.so.1.2.13`, or `[vdso]`.
    pub name: String,
    /// Path as the target sees it (`/proc/<pid>/maps`, without ` (deleted)`).
    pub path: String,
    /// The executable address range in the target.
    pub start: u64,
    pub end: u64,
    /// Load bias: target address minus the address stated in the ELF file.
    pub bias: u64,
    pub build_id: Option<Vec<u8>>,
    pub inode: u64,
    /// Where the file was opened from; `None` for `[vdso]`, which was copied from memory.
    pub opened_from: Option<PathBuf>,
    /// Kept open so the file stays reachable (as `/proc/self/fd/N`) after the target exits.
    file: Option<File>,
    /// The target's root directory, where debug files installed inside a container live.
    pub(crate) root: PathBuf,
    /// Identifies the file across processes: build-id, else path and inode.
    pub(crate) key: Arc<str>,
    pub(crate) bytes: Arc<FileBytes>,
}

pub type ModuleRef = Arc<Module>;

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("path", &self.path)
            .field("start", &format_args!("{:#x}", self.start))
            .field("end", &format_args!("{:#x}", self.end))
            .field("bias", &format_args!("{:#x}", self.bias))
            .field("build_id", &self.build_id_hex())
            .finish()
    }
}

impl Module {
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// The address as stated in the ELF file (what `addr2line -e` and `nm` show).
    pub fn svma(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.bias)
    }

    /// The whole ELF file.
    pub fn data(&self) -> &[u8] {
        &self.bytes
    }

    /// A path to the module's file that works as long as this module lives, even after the
    /// target exits or the file is deleted.
    pub fn file_path(&self) -> Option<PathBuf> {
        let fd = self.file.as_ref()?.as_raw_fd();
        Some(PathBuf::from(format!("/proc/self/fd/{fd}")))
    }

    /// Whether the module's file is at hand: not for a module known only by its address range
    /// (see [`Modules::without_files`]).
    pub fn has_file_bytes(&self) -> bool {
        !self.bytes.is_empty()
    }

    pub fn build_id_hex(&self) -> Option<String> {
        self.build_id.as_deref().map(hex)
    }

    /// The target address of a defined symbol, from `.symtab` or `.dynsym`.
    pub fn symbol_address(&self, name: &str) -> Option<u64> {
        let file = object::File::parse(self.data()).ok()?;
        let found = file
            .symbols()
            .chain(file.dynamic_symbols())
            .find(|s| s.is_definition() && s.name_bytes() == Ok(name.as_bytes()))?;
        Some(found.address().wrapping_add(self.bias))
    }
}

/// The bytes of a module's file: mapped from disk, or copied (the `[vdso]`, decompressed sections).
pub(crate) enum FileBytes {
    Mapped(Mmap),
    Copied(Vec<u8>),
}

impl Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Copied(v) => v,
        }
    }
}

/// What a rescan changed, so the unwinder can update its own module list.
#[derive(Default)]
pub struct ModuleChanges {
    pub added: Vec<ModuleRef>,
    pub removed: Vec<ModuleRef>,
}

/// The modules of one process, sorted by address.
pub struct Modules {
    /// `None` for modules known only by their address ranges (a snapshot): never rescanned.
    process: Option<TargetProcess>,
    modules: Vec<ModuleRef>,
    /// Every mapping seen at the last scan: a pc inside one of them that is in no module (JIT code,
    /// anonymous memory) does not justify a rescan.
    mapped: Vec<Range<u64>>,
    last_scan: Instant,
}

impl Modules {
    pub fn scan(process: &TargetProcess) -> Result<Self> {
        let mut modules = Modules {
            process: Some(process.clone()),
            modules: Vec::new(),
            mapped: Vec::new(),
            last_scan: Instant::now(),
        };
        modules.rescan()?;
        Ok(modules)
    }

    /// Modules known only by their name, executable address range and load bias, as a snapshot
    /// of a process records them: pcs in them are found (and are plausible return addresses), but
    /// without their files nothing is unwound or symbolized there.
    pub fn without_files(ranges: impl IntoIterator<Item = (String, Range<u64>, u64)>) -> Self {
        let mut modules: Vec<ModuleRef> = ranges
            .into_iter()
            .filter(|(_, range, _)| range.start < range.end)
            .map(|(name, range, bias)| {
                Arc::new(Module {
                    key: format!("{name}@{:#x}", range.start).into(),
                    path: name.clone(),
                    name,
                    start: range.start,
                    end: range.end,
                    bias,
                    build_id: None,
                    inode: 0,
                    opened_from: None,
                    file: None,
                    root: PathBuf::new(),
                    bytes: Arc::new(FileBytes::Copied(Vec::new())),
                })
            })
            .collect();
        modules.sort_by_key(|m| m.start);
        modules.dedup_by(|later, earlier| later.start < earlier.end);
        Modules {
            process: None,
            mapped: modules.iter().map(|m| m.start..m.end).collect(),
            modules,
            last_scan: Instant::now(),
        }
    }

    pub fn all(&self) -> &[ModuleRef] {
        &self.modules
    }

    pub fn find(&self, addr: u64) -> Option<&ModuleRef> {
        let i = self.modules.partition_point(|m| m.start <= addr);
        let m = self.modules.get(i.checked_sub(1)?)?;
        m.contains(addr).then_some(m)
    }

    /// Rescan when `addr` was not mapped at all at the last scan (a library loaded since), unless
    /// the last scan was too recent. Returns the changes if a rescan happened.
    pub fn refresh_for(&mut self, addr: u64) -> Option<ModuleChanges> {
        let i = self.mapped.partition_point(|r| r.start <= addr);
        let known = i > 0 && self.mapped[i - 1].contains(&addr);
        if known || self.process.is_none() || self.last_scan.elapsed() < MIN_RESCAN_INTERVAL {
            return None;
        }
        self.rescan().ok()
    }

    /// Re-read `/proc/<pid>/maps`, keeping the modules that did not change.
    pub fn rescan(&mut self) -> Result<ModuleChanges> {
        self.last_scan = Instant::now();
        let Some(process) = &self.process else {
            return Ok(ModuleChanges::default());
        };
        let maps = process.maps()?;
        self.mapped = maps.iter().map(|m| m.start..m.end).collect();
        self.mapped.sort_by_key(|r| r.start);

        let identity = |path: &str, inode: u64, start: u64| (path.to_string(), inode, start);
        let old: HashMap<_, ModuleRef> = self
            .modules
            .drain(..)
            .map(|m| (identity(&m.path, m.inode, m.start), m))
            .collect();
        let mut next: Vec<ModuleRef> = executable_files(&maps)
            .iter()
            .filter_map(|group| {
                let first = group[0];
                match old.get(&identity(target_path(first), first.inode, first.start)) {
                    Some(kept) => Some(kept.clone()),
                    None => self.load(group).map(Arc::new),
                }
            })
            .collect();
        next.sort_by_key(|m| m.start);
        // framehop and `find` need a disjoint list.
        next.dedup_by(|later, earlier| later.start < earlier.end);

        let in_next: HashSet<*const Module> = next.iter().map(Arc::as_ptr).collect();
        let in_old: HashSet<*const Module> = old.values().map(Arc::as_ptr).collect();
        let changes = ModuleChanges {
            added: next
                .iter()
                .filter(|m| !in_old.contains(&Arc::as_ptr(m)))
                .cloned()
                .collect(),
            removed: old
                .into_values()
                .filter(|m| !in_next.contains(&Arc::as_ptr(m)))
                .collect(),
        };
        self.modules = next;
        Ok(changes)
    }

    fn load(&self, group: &[&Mapping]) -> Option<Module> {
        let process = self.process.as_ref()?;
        let first = group[0];
        let start = first.start;
        let end = group.iter().map(|m| m.end).max()?;
        let path = target_path(first).to_string();
        let (bytes, opened_from, file) = if first.path == "[vdso]" {
            let mut buf = vec![0u8; (end - start) as usize];
            ProcessMemory { pid: process.pid }
                .read(start, &mut buf)
                .ok()?;
            (FileBytes::Copied(buf), None, None)
        } else {
            let (file, map, from) = open_mapped_file(process, first)?;
            (FileBytes::Mapped(map), Some(from), Some(file))
        };
        let elf = object::File::parse(&*bytes).ok()?;
        let bias = load_bias(&elf, start, first.offset)?;
        let build_id = elf.build_id().ok().flatten().map(<[u8]>::to_vec);
        let key: Arc<str> = match &build_id {
            Some(id) => hex(id).into(),
            None => format!("{path}@{}", first.inode).into(),
        };
        let name = Path::new(&path)
            .file_name()
            .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned());
        Some(Module {
            name,
            path,
            start,
            end,
            bias,
            build_id,
            inode: first.inode,
            opened_from,
            file,
            root: process.root(),
            key,
            bytes: Arc::new(bytes),
        })
    }
}

/// The executable mappings, grouped per file (path and inode), in address order.
fn executable_files(maps: &[Mapping]) -> Vec<Vec<&Mapping>> {
    let mut groups: Vec<Vec<&Mapping>> = Vec::new();
    let mut index: HashMap<(&str, u64), usize> = HashMap::new();
    for m in maps {
        let is_file = m.path.starts_with('/') || m.path == "[vdso]";
        if !is_file || !m.perms.contains('x') {
            continue;
        }
        let key = (target_path(m), m.inode);
        let i = *index.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[i].push(m);
    }
    groups
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_modules_include_libc_and_the_test_binary() {
        let me = TargetProcess::open(std::process::id()).unwrap();
        let modules = Modules::scan(&me).unwrap();
        let getpid = libc::getpid as *const () as u64;
        let libc_mod = modules.find(getpid).expect("getpid is in a module");
        assert!(libc_mod.name.starts_with("libc.so"), "{libc_mod:?}");
        assert!(libc_mod.build_id.is_some());
        assert_eq!(libc_mod.symbol_address("getpid"), Some(getpid));

        let here = own_modules_include_libc_and_the_test_binary as *const () as u64;
        let exe = modules.find(here).expect("test code is in a module");
        let exe_path = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(Path::new(&exe.path), exe_path);
        assert_ne!(exe.bias, 0, "the test binary is position-independent");

        assert!(modules.all().iter().any(|m| m.name == "[vdso]"));
        assert!(modules.all().windows(2).all(|w| w[0].end <= w[1].start));
    }

    #[test]
    fn rescans_only_for_unmapped_addresses() {
        let me = TargetProcess::open(std::process::id()).unwrap();
        let mut modules = Modules::scan(&me).unwrap();
        let heap = Box::new(0u64);
        modules.last_scan -= MIN_RESCAN_INTERVAL * 2;
        assert!(modules.refresh_for(&*heap as *const u64 as u64).is_none());
        let changes = modules.refresh_for(8).expect("address 8 was never mapped");
        assert!(changes.added.is_empty() && changes.removed.is_empty());
        assert!(modules.refresh_for(8).is_none(), "rate-limited");
    }
}
