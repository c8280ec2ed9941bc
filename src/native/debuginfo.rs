//! Finding a module's separate debug info: by build-id, by `.gnu_debuglink`, and the dwz
//! supplementary file a debug file names in `.gnu_debugaltlink`.

use super::modules::{hex, Module};
use object::Object;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const DEBUG_DIR: &str = "usr/lib/debug";

/// Where debug packages may be installed: our file system, then the target's when it differs
/// (a container with its own debug packages).
fn roots(module: &Module) -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("/")];
    if std::fs::read_link(&module.root).map_or(true, |r| r != Path::new("/")) {
        roots.push(module.root.clone());
    }
    roots
}

fn build_id_path(root: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(
        root.join(DEBUG_DIR)
            .join(format!(".build-id/{first:02x}/{}.debug", hex(rest))),
    )
}

/// The separate debug file for `module`, if one is installed and matches it.
pub(crate) fn find_debug_file(module: &Module, elf: &object::File) -> Option<PathBuf> {
    let roots = roots(module);
    if let Some(id) = &module.build_id {
        let by_id = roots.iter().filter_map(|r| build_id_path(r, id));
        if let Some(found) = by_id.into_iter().find(|p| p.is_file()) {
            return Some(found);
        }
    }
    let (name, crc) = elf.gnu_debuglink().ok()??;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    let dir = Path::new(&module.path).parent()?;
    let rel_dir = dir.strip_prefix("/").unwrap_or(dir);
    roots
        .iter()
        .flat_map(|root| {
            [
                root.join(rel_dir).join(name),
                root.join(rel_dir).join(".debug").join(name),
                root.join(DEBUG_DIR).join(rel_dir).join(name),
            ]
        })
        .filter(|p| p.is_file() && !same_file(p, module))
        .find(|p| matches_module(p, module, crc))
}

/// The module's own file can sit where a debuglink points (same directory, same name).
fn same_file(candidate: &Path, module: &Module) -> bool {
    std::fs::metadata(candidate).is_ok_and(|m| m.ino() == module.inode)
}

/// A debuglink candidate is the right file if its build-id matches, or, lacking build-ids, if
/// its CRC-32 is the one the debuglink records.
fn matches_module(candidate: &Path, module: &Module, crc: u32) -> bool {
    if let Some(want) = &module.build_id {
        return build_id_of(candidate).as_deref() == Some(want.as_slice());
    }
    file_crc32(candidate) == Some(crc)
}

/// The dwz supplementary file named by a debug file's `.gnu_debugaltlink`.
pub(crate) fn find_sup_file(module: &Module, debug_file: &Path) -> Option<PathBuf> {
    let map = map_file(debug_file)?;
    let elf = object::File::parse(&*map).ok()?;
    let (name, id) = elf.gnu_debugaltlink().ok()??;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    let mut candidates = Vec::new();
    for root in roots(module) {
        if name.is_absolute() {
            candidates.push(root.join(name.strip_prefix("/").ok()?));
        } else if let Some(dir) = debug_file.parent() {
            candidates.push(dir.join(name));
        }
        candidates.extend(build_id_path(&root, id));
    }
    candidates
        .into_iter()
        .find(|p| build_id_of(p).as_deref() == Some(id))
}

fn map_file(path: &Path) -> Option<memmap2::Mmap> {
    let file = File::open(path).ok()?;
    // SAFETY: a read-only map of an installed debug file, only parsed here.
    unsafe { memmap2::Mmap::map(&file) }.ok()
}

fn build_id_of(path: &Path) -> Option<Vec<u8>> {
    let map = map_file(path)?;
    let elf = object::File::parse(&*map).ok()?;
    Some(elf.build_id().ok()??.to_vec())
}

/// CRC-32 (IEEE, as `.gnu_debuglink` uses) of a whole file.
fn file_crc32(path: &Path) -> Option<u32> {
    let table: Vec<u32> = (0..256u32)
        .map(|n| {
            (0..8).fold(n, |c, _| {
                if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                }
            })
        })
        .collect();
    let mut file = File::open(path).ok()?;
    let mut buf = vec![0u8; 1 << 16];
    let mut crc = !0u32;
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            return Some(!crc);
        }
        for &b in &buf[..n] {
            crc = table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_of_a_known_string() {
        let path = std::env::temp_dir().join(format!("jvmperf-crc-{}", std::process::id()));
        std::fs::write(&path, b"123456789").unwrap();
        let crc = file_crc32(&path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(crc, Some(0xcbf4_3926));
    }

    #[test]
    fn build_id_paths_split_the_first_byte() {
        let p = build_id_path(Path::new("/"), &[0x45, 0x18, 0x39]).unwrap();
        assert_eq!(p, Path::new("/usr/lib/debug/.build-id/45/1839.debug"));
        assert!(build_id_path(Path::new("/"), &[0x45]).is_none());
    }
}
