//! VMStructs and everything read through it, over arbitrary target memory: the tables themselves, the
//! flag table, the code cache (heaps, segment map walk, blob headers) and `Method*`s (symbols, line
//! tables). Input encoding: `jvmperf_fuzz::VmInput`.
#![no_main]

use jvmperf::hotspot::codecache::CodeCache;
use jvmperf::hotspot::flags::FlagTable;
use jvmperf::hotspot::method::{decode_line_table, MethodLayout};
use jvmperf::hotspot::vmstructs::VmStructs;
use jvmperf::process::PageCachedMemory;
use jvmperf_fuzz::VmInput;
use libfuzzer_sys::fuzz_target;

/// A flag every JVM has, and one none has (a full scan of the table).
const FLAGS: [&str; 2] = ["DebugNonSafepoints", "NoSuchFlag"];

fuzz_target!(|data: &[u8]| {
    let input = VmInput::decode(data);
    let mem = &input.mem;
    // `HotSpot::open` reads the tables through a page cache, which needs whole pages: inputs made
    // of smaller regions are read directly.
    let Ok(vs) = VmStructs::read(&PageCachedMemory::new(mem), &input.symbols)
        .or_else(|_| VmStructs::read(mem, &input.symbols))
    else {
        return;
    };
    let _ = vs.size("nmethod");
    let _ = vs.address("StubRoutines", "_call_stub_return_address");

    if let Some(Ok(flags)) = FlagTable::locate(&vs, mem) {
        for name in FLAGS {
            let _ = flags.read_bool(mem, name);
        }
    }

    if let Some(cc) = CodeCache::discover(&vs, mem) {
        for &p in &input.probes {
            let _ = cc.contains(p);
            if let Some(blob) = cc.find_blob(mem, p) {
                if let Some(info) = cc.read_blob(mem, blob) {
                    assert!(info.start <= info.end);
                }
            }
            let _ = cc.read_blob(mem, p);
        }
        let mut cc = cc;
        cc.refresh(&vs, mem);
    }

    if let Some(layout) = MethodLayout::discover(&vs) {
        for &p in &input.probes {
            let _ = layout.code_start(mem, p);
            if let Some(m) = layout.read(mem, p) {
                assert!(m.lines.iter().all(|&(bci, _)| bci < m.code_size.max(1)));
            }
        }
    }

    for bias in [0, 1] {
        let _ = decode_line_table(data, bias);
    }
});
