//! Code comments cite public sources (HotSpot files, JDK bug ids, man pages), never a document
//! outside this repository that readers cannot open.

use std::path::Path;

/// Names of documents kept outside the repository.
const PRIVATE_REFERENCES: &[&str] = &["hotspot-notes", "shared/docs", "/work/notes", "crates.md"];

fn scan(dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let generated = path.ends_with("target") || path.ends_with("corpus");
            if !generated {
                scan(&path, found);
            }
            continue;
        }
        let is_source = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("rs" | "c" | "h" | "java" | "sh" | "toml" | "md" | "py")
        );
        if !is_source || path.ends_with(file!()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if PRIVATE_REFERENCES.iter().any(|r| line.contains(r)) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
}

#[test]
fn comments_cite_only_public_sources() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in [
        "src",
        "java-agent-shim",
        "tests",
        "xtask",
        "bench-apps",
        "examples",
        "scripts",
        "fuzz",
    ] {
        if root.join(dir).is_dir() {
            scan(&root.join(dir), &mut found);
        }
    }
    assert!(
        found.is_empty(),
        "references to documents outside the repository:\n{}",
        found.join("\n")
    );
}
