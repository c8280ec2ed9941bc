//! The shim builds against java-agent-shim/src/jvmti_abi.h, its own declarations of the JNI and
//! JVMTI interfaces (no JDK needed to build jvmperf). Their layout (function table slots, struct
//! fields, constants, capability bits) must be the JDK's: tests/fixtures/jvmti_abi.c prints it,
//! built once against the test JDK's include/jvmti.h and once against jvmti_abi.h.

mod common;

use common::{java_home, workspace};
use std::path::Path;
use std::process::Command;

/// Builds tests/fixtures/jvmti_abi.c with `includes` and `defines`, runs it, returns its output.
fn layout(dir: &Path, name: &str, includes: &[&Path], defines: &[&str]) -> String {
    let exe = dir.join(name);
    let mut cc = Command::new("cc");
    cc.args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .args(defines);
    for dir in includes {
        cc.arg("-I").arg(dir);
    }
    let built = cc
        .arg(workspace().join("tests/fixtures/jvmti_abi.c"))
        .status()
        .expect("cc (apt-get install gcc)");
    assert!(built.success(), "cc for {name} failed");
    let out = Command::new(&exe).output().expect("run the layout printer");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_shims_jvmti_declarations_have_the_jdks_layout() {
    let dir = std::env::temp_dir().join(format!("jvmperf-jvmti-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let include = java_home().join("include");
    assert!(
        include.join("jvmti.h").is_file(),
        "{} has no jvmti.h: the test JDK must be a full JDK",
        include.display()
    );
    let jdk = layout(
        &dir,
        "jdk",
        &[&include, &include.join("linux")],
        &["-DJDK_HEADERS"],
    );
    let own = layout(
        &dir,
        "own",
        &[&workspace().join("java-agent-shim/src")],
        &[],
    );
    assert!(
        jdk.lines().count() > 90,
        "the layout printer printed:\n{jdk}"
    );
    assert_eq!(own, jdk, "jvmti_abi.h differs from {}", include.display());
    std::fs::remove_dir_all(&dir).unwrap();
}
