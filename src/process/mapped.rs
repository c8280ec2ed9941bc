//! The file behind a mapping of the target: opened as the target sees it, and the load bias that
//! an executable mapping of it implies.

use super::{Mapping, TargetProcess};
use memmap2::Mmap;
use object::elf::PF_X;
use object::{Object, ObjectSegment, SegmentFlags};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The mapping's path without the ` (deleted)` the kernel appends to unlinked files.
pub fn target_path(m: &Mapping) -> &str {
    m.path.strip_suffix(" (deleted)").unwrap_or(&m.path)
}

/// Open and map the file of `mapping` through the target's root (containers see other files than
/// we do), or, when that path now names another file (deleted, replaced by an upgrade), through
/// `/proc/<pid>/map_files`, which always reaches the mapped inode. Returns the path it used.
pub fn open_mapped_file(
    process: &TargetProcess,
    mapping: &Mapping,
) -> Option<(File, Mmap, PathBuf)> {
    let by_path = process.path_in_root(Path::new(target_path(mapping)));
    let by_mapping = PathBuf::from(format!(
        "/proc/{}/map_files/{:x}-{:x}",
        process.pid, mapping.start, mapping.end
    ));
    [by_path, by_mapping].into_iter().find_map(|candidate| {
        let file = File::open(&candidate).ok()?;
        if file.metadata().ok()?.ino() != mapping.inode {
            return None;
        }
        // SAFETY: the mapping is read-only. Libraries are replaced by renaming, not rewritten
        // in place; a file truncated under us would fault, as for any mmap-based reader.
        let map = unsafe { Mmap::map(&file) }.ok()?;
        Some((file, map, candidate))
    })
}

/// `start` maps file offset `offset` of an executable mapping; the executable PT_LOAD segment
/// holding that offset gives its stated address, and the difference is the bias. (A read-only
/// segment may share the page, so the segment's flags matter.)
///
/// Only the executable mapping says where the dynamic loader put the file: other tools map ELF
/// files read-only at offset 0 to parse them (async-profiler's `ElfParser::parseFile` maps
/// libjvm.so while it starts), and such a mapping says nothing about the loaded image.
pub fn load_bias(elf: &object::File, start: u64, offset: u64) -> Option<u64> {
    elf.segments().find_map(|seg| {
        let executable =
            matches!(seg.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & PF_X.0 != 0);
        let (file_off, file_size) = seg.file_range();
        let page_start = file_off & !0xfff;
        if !executable || offset < page_start || offset >= file_off + file_size.max(1) {
            return None;
        }
        let svma = seg.address().wrapping_add(offset).wrapping_sub(file_off);
        Some(start.wrapping_sub(svma))
    })
}
