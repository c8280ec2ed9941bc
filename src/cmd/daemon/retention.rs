//! Retention of the daemon's files: those older than a maximum age are deleted, then the oldest
//! until the rest fit a maximum total size.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
}

/// Apply `limits` to the interval files in the per-JVM directories of `dir`; returns the files
/// deleted. Only files the daemon writes are considered (its extensions, no dot files).
pub fn enforce(dir: &Path, limits: Limits, now: SystemTime) -> Vec<PathBuf> {
    if limits.max_age.is_none() && limits.max_bytes.is_none() {
        return Vec::new();
    }
    let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for jvm_dir in read_dir(dir).filter(|p| p.is_dir()) {
        for file in read_dir(&jvm_dir).filter(|p| is_interval_file(p)) {
            if let Ok(meta) = std::fs::metadata(&file) {
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                files.push((modified, meta.len(), file));
            }
        }
    }
    // Oldest first; names (UTC start times) break ties.
    files.sort();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    let mut deleted = Vec::new();
    for (modified, len, path) in files {
        let too_old = limits
            .max_age
            .is_some_and(|age| now.duration_since(modified).unwrap_or_default() > age);
        let too_big = limits.max_bytes.is_some_and(|max| total > max);
        if !too_old && !too_big {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
            deleted.push(path);
        }
    }
    deleted
}

fn read_dir(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path()))
}

fn is_interval_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.')
        && [".pb.gz", ".jvmperf", ".collapsed"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_files_go_first_by_age_then_by_size() {
        let dir = std::env::temp_dir().join(format!("jvmperf-retention-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let jvm = dir.join("app-1");
        std::fs::create_dir_all(&jvm).unwrap();
        let now = SystemTime::now();
        let names = ["a.pb.gz", "b.pb.gz", "c.jvmperf", "d.collapsed"];
        for (i, name) in names.iter().enumerate() {
            let f = jvm.join(name);
            std::fs::write(&f, vec![0u8; 100]).unwrap();
            let age = Duration::from_secs(100 * (4 - i as u64));
            std::fs::File::options()
                .write(true)
                .open(&f)
                .unwrap()
                .set_modified(now - age)
                .unwrap();
        }
        std::fs::write(jvm.join("notes.txt"), b"kept").unwrap();
        std::fs::write(jvm.join(".x.pb.gz.1.jvmperf-partial"), b"kept").unwrap();
        let none = enforce(&dir, Limits::default(), now);
        assert!(none.is_empty());
        let by_age = Limits {
            max_age: Some(Duration::from_secs(350)),
            max_bytes: None,
        };
        assert_eq!(enforce(&dir, by_age, now), vec![jvm.join("a.pb.gz")]);
        let by_size = Limits {
            max_age: None,
            max_bytes: Some(150),
        };
        let gone = enforce(&dir, by_size, now);
        assert_eq!(gone, vec![jvm.join("b.pb.gz"), jvm.join("c.jvmperf")]);
        assert!(jvm.join("d.collapsed").exists() && jvm.join("notes.txt").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
