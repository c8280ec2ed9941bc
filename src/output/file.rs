//! Writing files: to a temporary name renamed into place, so a failed write never leaves a
//! truncated file that looks complete, and rescuing a recording's samples when the output cannot
//! be written.

use super::{raw, render, Format, OutputOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::profile::Profile;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Render `profile` as `format` and write it to `path`.
pub fn save(profile: &Profile, format: Format, opts: &OutputOptions, path: &Path) -> Result<()> {
    write_file(path, &render(profile, format, opts)?)
}

/// Save a recording: like [`save`], but when `path` cannot be written (disk full, permissions, a
/// render failure) the samples are not lost: they go, as a raw `.jvmperf` recording, to the first
/// of $TMPDIR (or /tmp) and the current directory that takes them, and the error names that file.
pub fn save_recording(
    profile: &Profile,
    format: Format,
    opts: &OutputOptions,
    path: &Path,
) -> Result<()> {
    save_or_rescue(profile, format, opts, path, &rescue_dirs())
}

fn save_or_rescue(
    profile: &Profile,
    format: Format,
    opts: &OutputOptions,
    path: &Path,
    rescue_dirs: &[PathBuf],
) -> Result<()> {
    let Err(failed) = save(profile, format, opts, path) else {
        return Ok(());
    };
    let samples: u64 = profile.samples.iter().map(|s| s.weight).sum();
    let rescued = raw::render(profile)
        .map_err(|e| e.message)
        .and_then(|bytes| rescue(path, rescue_dirs, |f| f.write_all(&bytes)));
    Err(rescue_error(failed, samples, path, rescued))
}

/// Where samples go when the output cannot be written: $TMPDIR (or /tmp), else the current
/// directory.
pub(super) fn rescue_dirs() -> Vec<PathBuf> {
    vec![std::env::temp_dir(), PathBuf::from(".")]
}

/// The error of a failed save, saying where its `samples` were rescued to (a raw recording the
/// user can convert to `path` later), or that they could not be.
pub(super) fn rescue_error(
    failed: Error,
    samples: u64,
    path: &Path,
    rescued: std::result::Result<PathBuf, String>,
) -> Error {
    let outcome = match rescued {
        Ok(saved) => format!(
            "the {samples} samples collected were saved to {0} (write them out later with `jvmperf convert {0} -o {1}`)",
            saved.display(),
            path.display()
        ),
        Err(why) => format!(
            "the {samples} samples collected could not be saved anywhere else either ({why})"
        ),
    };
    Error::new(failed.kind, format!("{}; {outcome}", failed.message))
}

/// Write a raw recording of the samples meant for `path` with `write` as a new private file in
/// the first of `dirs` that takes it whole; returns its path. Never replaces or follows anything
/// (the directories may be shared, like /tmp).
pub(super) fn rescue(
    path: &Path,
    dirs: &[PathBuf],
    write: impl Fn(&mut File) -> std::io::Result<()>,
) -> std::result::Result<PathBuf, String> {
    let stem = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('.').find(|part| !part.is_empty()))
        .unwrap_or("profile");
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = format!("{stem}-rescued-{}-{secs}.jvmperf", std::process::id());
    let mut failures = Vec::new();
    for dir in dirs {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        let file = dir.join(&name);
        match write_new(&file, 0o600, Durability::Synced, &write) {
            Ok(()) => return Ok(file),
            Err(e) => failures.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(failures.join(", "))
}

/// Whether a written file is flushed to the disk before it is renamed into place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// fsync: the file survives a crash once it has its name.
    Synced,
    /// Renamed without an fsync: readers still never see a partial file, but a crash may lose
    /// the newest files. For writers that must not stall: an fsync on a busy disk can take many
    /// seconds (a daemon thread was seen blocked in one for over 45 s while builds ran), during
    /// which nothing else happens on that thread, and a process cannot exit until it returns.
    Unsynced,
}

/// Create `file` (never an existing one, never through a symlink), fill it with `write` and
/// sync it if asked; a partial file is removed.
fn write_new(
    file: &Path,
    mode: u32,
    durability: Durability,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .and_then(|mut f| {
            write(&mut f)?;
            match durability {
                Durability::Synced => f.sync_all(),
                Durability::Unsynced => Ok(()),
            }
        });
    if let Err(e) = result {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            let _ = std::fs::remove_file(file);
        }
        return Err(e);
    }
    Ok(())
}

/// Fail before any work when `path` clearly cannot be written: its directory is missing or not
/// writable by us. (A full disk shows only when writing; [`save_recording`] handles that.)
pub fn check_writable(path: &Path) -> Result<()> {
    let target = if std::fs::metadata(path).is_ok_and(|m| !m.file_type().is_file()) {
        // A device or FIFO is written in place (opening a FIFO here would block).
        path
    } else {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(Error::new(
                ErrorKind::Output,
                format!(
                    "cannot write {}: {} is not a directory (create it or choose another -o)",
                    path.display(),
                    dir.display()
                ),
            ));
        }
        dir
    };
    nix::unistd::access(target, nix::unistd::AccessFlags::W_OK)
        .map_err(|e| write_error(path, &std::io::Error::from(e)))
}

/// A one-line output error naming the fix for the common causes.
pub fn write_error(path: &Path, e: &std::io::Error) -> Error {
    let fix = match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => {
            "the file system is full: free space there or choose another -o"
        }
        Some(libc::EACCES | libc::EPERM) => {
            "no permission: choose a directory you can write to with -o"
        }
        Some(libc::EROFS) => "the file system is read-only: choose another -o",
        Some(libc::ENOENT) => "its directory does not exist: create it or choose another -o",
        _ => "check free space and permissions, or choose another -o",
    };
    Error::new(
        ErrorKind::Output,
        format!("cannot write {}: {e} ({fix})", path.display()),
    )
}

/// Write `bytes` to `path`: a regular file atomically; see [`write_with`].
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    write_with(path, |f| f.write_all(bytes))
}

/// Write `path` with `write`: a regular file atomically (a new temporary file, renamed over `path`
/// when complete, removed if anything fails), so a failed write never leaves a truncated file that
/// looks complete; anything else that exists (`/dev/null`, a FIFO, a terminal) directly, since
/// renaming over it would replace it. Not synced ([`Durability::Unsynced`]): `record -d 10` on a
/// JVM beside a build spent up to 53 s in the fsync of a 10 KB file after sampling ended.
pub fn write_with(path: &Path, write: impl FnOnce(&mut File) -> std::io::Result<()>) -> Result<()> {
    let fail = |e: std::io::Error| write_error(path, &e);
    if std::fs::metadata(path).is_ok_and(|m| !m.file_type().is_file()) {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| write(&mut f))
            .map_err(fail);
    }
    // Unique and created exclusively: another writer's temporary or a planted symlink is never
    // truncated or followed.
    let tmp = path.with_file_name(format!(
        ".{}.{}.jvmperf-partial",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("out"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    write_new(&tmp, 0o666, Durability::Unsynced, write).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}

#[cfg(test)]
mod tests {
    use super::write_file;
    use std::path::Path;

    #[test]
    fn special_files_are_written_not_replaced() {
        write_file(std::path::Path::new("/dev/null"), b"x").unwrap();
        let meta = std::fs::metadata("/dev/null").unwrap();
        assert!(!meta.file_type().is_file(), "/dev/null must stay a device");
        let dir = std::env::temp_dir().join(format!("jvmperf-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.collapsed");
        write_file(&f, b"one").unwrap();
        write_file(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary left behind"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_save_keeps_the_samples_in_a_rescue_directory() {
        use super::save_or_rescue;
        use crate::error::ErrorKind;
        use crate::output::{raw, Format, OutputOptions};
        use crate::profile::{Frame, FrameKind, Profile, Sample};
        use std::os::unix::fs::PermissionsExt;
        use std::path::PathBuf;
        let dir = std::env::temp_dir().join(format!("jvmperf-rescue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut profile = Profile::default();
        let frame = profile.intern_frame(Frame::named("a.B.c", FrameKind::Jit));
        let stack = profile.intern_stack(vec![frame]);
        profile.samples.push(Sample {
            time: 5,
            tid: 1,
            stack,
            weight: 3,
        });
        let opts = OutputOptions { threads: false };
        // /dev/full fails every write with ENOSPC, like a full disk.
        let full = Path::new("/dev/full");
        let missing = PathBuf::from("/nonexistent-jvmperf-dir");
        let e = save_or_rescue(
            &profile,
            Format::Svg,
            &opts,
            full,
            &[missing.clone(), dir.clone()],
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Output);
        assert!(!e.message.contains('\n'), "{}", e.message);
        assert!(
            e.message.contains("cannot write /dev/full")
                && e.message.contains("file system is full")
                && e.message.contains("3 samples collected were saved to"),
            "{}",
            e.message
        );
        let saved = e.message.split("saved to ").nth(1).unwrap();
        let saved = Path::new(saved.split(' ').next().unwrap());
        assert_eq!(saved.parent().unwrap(), dir, "{}", e.message);
        let mode = std::fs::metadata(saved).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "rescued recordings are private");
        let back = raw::parse(&std::fs::read(saved).unwrap()).unwrap();
        assert_eq!(back.samples.iter().map(|s| s.weight).sum::<u64>(), 3);
        assert_eq!(back.frames[0].name, "a.B.c");

        let e = save_or_rescue(&profile, Format::Raw, &opts, full, &[missing]).unwrap_err();
        assert!(
            e.message
                .contains("could not be saved anywhere else either")
                && e.message.contains("/nonexistent-jvmperf-dir"),
            "{}",
            e.message
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_outputs_are_refused_before_recording() {
        use super::check_writable;
        check_writable(Path::new("/dev/null")).unwrap();
        check_writable(Path::new("relative.svg")).unwrap();
        let e = check_writable(Path::new("/nonexistent-jvmperf-dir/a.svg")).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Output);
        assert!(e.message.contains("is not a directory"), "{}", e.message);
    }
}
