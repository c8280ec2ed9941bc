//! Putting the shim library and the daemon socket where the target JVM can reach them.
//!
//! Both live in `/tmp/.jvmperf-<uid>/` *as the target sees it* (`/proc/<pid>/root/tmp/...`, so a JVM in
//! a container finds them in its own mount namespace), a directory owned by the target's user with
//! mode 0700. Files are created with O_EXCL|O_NOFOLLOW and checked with lstat, so nobody else on the
//! host can swap them for a symlink or their own library.

use crate::error::{err, Error, ErrorKind, Result};
use crate::process::TargetProcess;
use crate::shim_lib::{SHIM_SO, SHIM_VERSION};
use nix::unistd::{fchown, Gid, Uid};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The shim library to place and its file name: the embedded one, or the file `JVMPERF_SHIM_LIBRARY`
/// names — a build of the same sources for tests (instrumented with sanitizers, or with a small
/// queue) — under a name of its own, so no JVM that loaded the embedded one is handed it.
fn shim_library() -> Result<(std::borrow::Cow<'static, [u8]>, String)> {
    let Some(path) = std::env::var_os("JVMPERF_SHIM_LIBRARY") else {
        return Ok((SHIM_SO.into(), format!("libjvmperf-shim-{SHIM_VERSION}.so")));
    };
    let bytes = fs::read(&path).map_err(|e| {
        Error::new(
            ErrorKind::Usage,
            format!(
                "cannot read JVMPERF_SHIM_LIBRARY={}: {e}; unset it to use the built-in agent",
                Path::new(&path).display()
            ),
        )
    })?;
    // FNV-1a: only tells builds apart.
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let name = format!("libjvmperf-shim-{SHIM_VERSION}-{:08x}.so", hash >> 32);
    Ok((bytes.into(), name))
}

/// The per-user working directory in the target's file system.
#[derive(Debug, Clone)]
pub struct ShimDir {
    /// Path as the target sees it.
    pub inner: PathBuf,
    /// The same directory reached from our mount namespace.
    pub outer: PathBuf,
    uid: u32,
    gid: u32,
}

impl ShimDir {
    pub fn prepare(process: &TargetProcess) -> Result<Self> {
        let inner = PathBuf::from(format!("/tmp/.jvmperf-{}", process.euid));
        let outer = process.path_in_root(&inner);
        let dir = ShimDir {
            inner,
            outer,
            uid: process.euid,
            gid: process.egid,
        };
        dir.create()?;
        dir.remove_stale_sockets();
        Ok(dir)
    }

    /// Remove the sockets of jvmperf processes that are gone: a killed recording cannot remove
    /// its own (named `d<pid>-<tag>.sock`, see `socket_paths`).
    fn remove_stale_sockets(&self) {
        let Ok(entries) = fs::read_dir(&self.outer) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let owner = name
                .to_str()
                .and_then(|n| n.strip_prefix('d')?.strip_suffix(".sock")?.split_once('-'))
                .and_then(|(pid, _)| pid.parse::<u32>().ok());
            let is_socket = entry.file_type().is_ok_and(|t| t.is_socket());
            if let (Some(pid), true) = (owner, is_socket) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
    }

    fn create(&self) -> Result<()> {
        let perm = |what: String| Error::new(ErrorKind::Permission, what);
        match fs::DirBuilder::new().mode(0o700).create(&self.outer) {
            Ok(()) => {
                if nix::unistd::geteuid().is_root() {
                    nix::unistd::chown(
                        &self.outer,
                        Some(Uid::from_raw(self.uid)),
                        Some(Gid::from_raw(self.gid)),
                    )
                    .map_err(|e| perm(format!("cannot chown {}: {e}", self.outer.display())))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(perm(format!(
                    "cannot create {}: {e} (is /tmp writable in the target?)",
                    self.outer.display()
                )))
            }
        }
        let meta = fs::symlink_metadata(&self.outer)
            .map_err(|e| perm(format!("{}: {e}", self.outer.display())))?;
        if !meta.file_type().is_dir() || meta.uid() != self.uid || meta.mode() & 0o077 != 0 {
            return err(
                ErrorKind::Permission,
                format!(
                    "{} is not a private directory of uid {} (remove it and retry)",
                    self.outer.display(),
                    self.uid
                ),
            );
        }
        Ok(())
    }

    /// Give a file we created to the target's user, so the JVM can open it.
    fn hand_over(&self, file: &fs::File) -> std::io::Result<()> {
        if nix::unistd::geteuid().is_root() {
            fchown(
                file,
                Some(Uid::from_raw(self.uid)),
                Some(Gid::from_raw(self.gid)),
            )?;
        }
        Ok(())
    }

    /// Write the embedded shim (once per shim version) and return its path inside the target.
    ///
    /// The name carries the shim version: HotSpot never unloads an agent, and `dlopen` of a path that
    /// is already loaded returns the loaded copy, so a re-attach with the same version gets
    /// `Agent_OnAttach` called again on the same library (and no second JEP 451 warning).
    pub fn install_shim(&self) -> Result<String> {
        let (shim, name) = shim_library()?;
        let shim: &[u8] = &shim;
        let outer = self.outer.join(&name);
        if let Ok(meta) = fs::symlink_metadata(&outer) {
            let ours = meta.file_type().is_file()
                && (meta.uid() == self.uid || meta.uid() == 0)
                && meta.mode() & 0o022 == 0
                && fs::read(&outer).is_ok_and(|bytes| bytes == shim);
            if ours {
                return Ok(self.inner.join(&name).to_string_lossy().into_owned());
            }
            fs::remove_file(&outer).map_err(|e| {
                Error::new(
                    ErrorKind::Permission,
                    format!("cannot replace {}: {e}", outer.display()),
                )
            })?;
        }
        let tmp = self.outer.join(format!(".{name}.{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o500)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(shim)?;
            f.set_permissions(fs::Permissions::from_mode(0o500))?;
            self.hand_over(&f)?;
            f.sync_all()?;
            fs::rename(&tmp, &outer)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::new(
                ErrorKind::Permission,
                format!("cannot write the shim library to {}: {e}", outer.display()),
            )
        })?;
        Ok(self.inner.join(&name).to_string_lossy().into_owned())
    }

    /// A fresh socket path: (inside the target, from our side). The name starts with our pid, so
    /// a later attach can tell a killed recording's socket from a running one's.
    pub fn socket_paths(&self, tag: &str) -> (String, PathBuf) {
        let name = format!("d{}-{tag}.sock", std::process::id());
        (
            self.inner.join(&name).to_string_lossy().into_owned(),
            self.outer.join(name),
        )
    }

    /// Hand a bound socket file to the target's user.
    pub fn hand_over_path(&self, path: &Path) -> Result<()> {
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(
                path,
                Some(Uid::from_raw(self.uid)),
                Some(Gid::from_raw(self.gid)),
            )
            .map_err(|e| {
                Error::new(
                    ErrorKind::Permission,
                    format!("cannot chown {}: {e}", path.display()),
                )
            })?;
        }
        Ok(())
    }
}
