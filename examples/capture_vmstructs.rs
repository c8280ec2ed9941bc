//! Capture the memory jvmperf reads for VMStructs, the flag table and the code cache layout from a
//! live JVM, as a fixture for unit tests: `cargo run --example capture_vmstructs -- <pid> <out-prefix>`
//! writes `<out-prefix>.mem` (SnapshotMemory format) and `<out-prefix>.symbols` (`name address`).

use jvmperf::hotspot::{
    codecache::CodeCache, flags::FlagTable, libjvm::LibJvm, vmstructs::VmStructs,
};
use jvmperf::process::memory::RecordingMemory;
use jvmperf::process::{PageCachedMemory, ProcessMemory, TargetProcess};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(pid), Some(out)) = (args.get(1).and_then(|p| p.parse().ok()), args.get(2)) else {
        eprintln!("usage: capture_vmstructs <pid> <out-prefix>");
        std::process::exit(2);
    };
    let process = TargetProcess::open(pid).unwrap_or_else(|e| panic!("{e}"));
    let libjvm = LibJvm::locate(&process).unwrap_or_else(|e| panic!("{e}"));
    let recording = RecordingMemory::new(ProcessMemory { pid });
    let mem = PageCachedMemory::new(&recording);
    let vs = VmStructs::read(&mem, &libjvm.symbols).expect("VMStructs");
    let flags = FlagTable::locate(&vs, &mem)
        .expect("flag table")
        .expect("flag memory");
    for name in [
        "DebugNonSafepoints",
        "DisableAttachMechanism",
        "EnableDynamicAgentLoading",
    ] {
        flags.read_bool(&mem, name).expect("flag");
    }
    CodeCache::discover(&vs, &mem).expect("code cache");
    std::fs::write(format!("{out}.mem"), recording.seen.borrow().to_bytes()).unwrap();
    let mut symbols: Vec<_> = libjvm.symbols.iter().collect();
    symbols.sort();
    let text: String = symbols
        .iter()
        .map(|(n, a)| format!("{n} {a:#x}\n"))
        .collect();
    std::fs::write(format!("{out}.symbols"), text).unwrap();
}
