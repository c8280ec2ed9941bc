//! Well-known workspace paths.

use std::path::PathBuf;

/// The workspace root (the parent of the xtask crate).
pub fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` if set (relative paths are taken relative to
/// the workspace root), else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// Output directory of `cargo xtask bench-apps`: `<target>/bench-apps`.
pub fn bench_apps_out() -> PathBuf {
    target_dir().join("bench-apps")
}
