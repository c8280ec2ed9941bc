//! The JVM's own performance counters (`/tmp/hsperfdata_<user>/<pid>`, which `jps` reads): the
//! command it was started with, as the JVM itself names it (`sun.rt.javaCommand`: the main class
//! or jar and its arguments), whatever launcher started it (`javac`, `mvn`, a shell script).
//!
//! The file's layout is HotSpot's `PerfDataPrologue` and `PerfDataEntry`
//! (src/hotspot/share/runtime/perfMemory.hpp): a prologue
//! with a big-endian magic, the byte order of the rest, and where the entries start; each entry
//! its length, name offset, vector length, type, and data offset, from the entry's start.

use super::TargetProcess;
use std::fs;
use std::os::unix::fs::MetadataExt;

const MAGIC: u32 = 0xcafe_c0c0;
const PROLOGUE_BYTES: usize = 32;
const ENTRY_HEADER_BYTES: usize = 20;
/// HotSpot's PerfDataMemorySize default is 64 KiB; a larger file is not one the JVM wrote.
const MAX_FILE_BYTES: u64 = 16 << 20;

/// The command line the JVM names itself by (`bench.App --port 8080`, `app.jar`), if its
/// performance counters are readable (not with `-XX:-UsePerfData`).
pub fn java_command(process: &TargetProcess) -> Option<String> {
    let tmp = process.root().join("tmp");
    for dir in fs::read_dir(&tmp).ok()?.flatten() {
        if !dir.file_name().to_string_lossy().starts_with("hsperfdata_") {
            continue;
        }
        let file = dir.path().join(process.nspid.to_string());
        let Ok(meta) = fs::metadata(&file) else {
            continue;
        };
        if meta.uid() != process.euid || meta.len() > MAX_FILE_BYTES {
            continue;
        }
        if let Some(command) = fs::read(&file)
            .ok()
            .and_then(|d| string(&d, "sun.rt.javaCommand"))
        {
            return Some(command);
        }
    }
    None
}

/// The string counter `name` of a performance-data file.
fn string(data: &[u8], name: &str) -> Option<String> {
    let prologue = data.get(..PROLOGUE_BYTES)?;
    if u32::from_be_bytes(prologue[..4].try_into().ok()?) != MAGIC {
        return None;
    }
    let little = prologue[4] == 1;
    let int = |at: usize| -> Option<usize> {
        let bytes: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        let v = if little {
            i32::from_le_bytes(bytes)
        } else {
            i32::from_be_bytes(bytes)
        };
        usize::try_from(v).ok()
    };
    let (mut entry, entries) = (int(24)?, int(28)?);
    for _ in 0..entries {
        let header = data.get(entry..entry.checked_add(ENTRY_HEADER_BYTES)?)?;
        let length = int(entry)?;
        let name_at = entry.checked_add(int(entry + 4)?)?;
        let vector = int(entry + 8)?;
        let data_at = entry.checked_add(int(entry + 16)?)?;
        let entry_name = data.get(name_at..)?.split(|&b| b == 0).next()?;
        if entry_name == name.as_bytes() && header[12] == b'B' && vector > 0 {
            let value = data.get(data_at..data_at.checked_add(vector)?)?;
            let value = value.split(|&b| b == 0).next()?;
            return Some(String::from_utf8_lossy(value).into_owned());
        }
        if length == 0 {
            return None;
        }
        entry = entry.checked_add(length)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters of a JDK 17 JVM started as `java -cp classes bench.Phases` (the part of the
    /// file in use).
    const JDK17: &[u8] = include_bytes!("../../tests/fixtures/hsperfdata-jdk17");

    #[test]
    fn reads_the_java_command_of_a_jdk17_jvm() {
        assert_eq!(
            string(JDK17, "sun.rt.javaCommand").as_deref(),
            Some("bench.Phases")
        );
        assert_eq!(string(JDK17, "no.such.counter"), None);
    }

    #[test]
    fn truncated_or_foreign_files_give_nothing() {
        for len in [0, 8, 31, 32, 100, 4000, JDK17.len() - 1] {
            let _ = string(&JDK17[..len], "sun.rt.javaCommand");
        }
        assert_eq!(string(&JDK17[..100], "sun.rt.javaCommand"), None);
        let mut foreign = JDK17.to_vec();
        foreign[0] = 0;
        assert_eq!(string(&foreign, "sun.rt.javaCommand"), None);
    }

    #[test]
    fn a_process_without_a_jvm_has_no_java_command() {
        let me = TargetProcess::open(std::process::id()).unwrap();
        assert_eq!(java_command(&me), None);
    }
}
