//! Locating JDK tools.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// JDK 17, the default test JDK.
pub const DEFAULT_JAVA_HOME: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// Finds a JDK tool (`javac`, `java`, `jcmd`, ...): `$JAVA_HOME/bin/<tool>`, else
/// `/usr/lib/jvm/java-17-openjdk-amd64/bin/<tool>`, else `<tool>` on `PATH`.
pub fn tool(name: &str) -> Result<PathBuf> {
    let mut tried = Vec::new();
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|h| !h.is_empty()) {
        let p = Path::new(&home).join("bin").join(name);
        if is_executable(&p) {
            return Ok(p);
        }
        tried.push(p);
    }
    let p = Path::new(DEFAULT_JAVA_HOME).join("bin").join(name);
    if is_executable(&p) {
        return Ok(p);
    }
    tried.push(p);
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if is_executable(&p) {
                return Ok(p);
            }
        }
    }
    bail!(
        "`{name}` not found (tried {}, then PATH); set JAVA_HOME to a JDK",
        tried
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
