use super::*;
use crate::native::testutil::{rss_kib, SleepingJvm};
use crate::native::NativeUnwinder;
use crate::target::TargetProcess;
use std::time::Instant;

fn own_unwinder() -> NativeUnwinder {
    NativeUnwinder::new(&TargetProcess::open(std::process::id()).unwrap()).unwrap()
}

#[inline(never)]
fn outer_with_inlined_call() -> u64 {
    inlined_pc()
}

#[inline(always)]
fn inlined_pc() -> u64 {
    let pc: u64;
    // SAFETY: only reads rip.
    unsafe { std::arch::asm!("lea {}, [rip]", out(reg) pc, options(nomem, nostack)) };
    pc
}

#[test]
fn own_function_with_inlined_frame_file_and_line() {
    let mut unwinder = own_unwinder();
    let pc = outer_with_inlined_call();
    let module = unwinder.module_for(pc).unwrap();
    let mut symbolizer = NativeSymbolizer::new();
    let frames = symbolizer.symbolize(&module, pc, false);
    let outer = frames.last().unwrap();
    assert!(
        outer.function.ends_with("tests::outer_with_inlined_call"),
        "{frames:#?}"
    );
    // The release profile's `debug = 1` keeps line tables only, without inlined-call records.
    if cfg!(debug_assertions) {
        assert_eq!(frames.len(), 2, "{frames:#?}");
        assert!(
            frames[0].function.ends_with("tests::inlined_pc"),
            "{frames:#?}"
        );
    }
    for f in &frames {
        assert!(f
            .file
            .as_deref()
            .unwrap()
            .ends_with("native/symbols/tests.rs"));
        assert!(f.line.unwrap() > 0);
    }
    assert_eq!(symbolizer.symbolize(&module, pc, false), frames, "cached");
}

#[test]
fn libc_function_from_its_debug_file_or_symbol_table() {
    let mut unwinder = own_unwinder();
    let getpid = libc::getpid as *const () as u64;
    let module = unwinder.module_for(getpid).unwrap();
    assert!(module.name.starts_with("libc.so"));
    let mut symbolizer = NativeSymbolizer::new();
    let frames = symbolizer.symbolize(&module, getpid, false);
    assert!(
        frames.last().unwrap().function.contains("getpid"),
        "{frames:#?}"
    );
    if symbolizer.debug_file(&module).is_some() {
        assert!(symbolizer.has_dwarf(&module));
        assert!(
            frames[0].file.is_some(),
            "libc6-dbg gives file:line: {frames:#?}"
        );
    } else {
        eprintln!("no libc debug file (apt-get install libc6-dbg): names only");
    }

    let t = Instant::now();
    let n = 100_000;
    for _ in 0..n {
        std::hint::black_box(symbolizer.symbolize(&module, getpid, false));
    }
    eprintln!(
        "cached symbolize: {:.0} ns",
        t.elapsed().as_nanos() as f64 / n as f64
    );

    let text = module.start..module.end;
    let t = Instant::now();
    let distinct = 2000u64;
    let step = (text.end - text.start) / distinct;
    for i in 0..distinct {
        symbolizer.symbolize(&module, text.start + i * step, true);
    }
    eprintln!(
        "uncached libc symbolize: {:.1} µs per pc",
        t.elapsed().as_secs_f64() * 1e6 / distinct as f64
    );
}

#[test]
fn unresolved_pcs_are_named_by_module_and_offset() {
    let unwinder = own_unwinder();
    let vdso = unwinder
        .modules()
        .all()
        .iter()
        .find(|m| m.name == "[vdso]")
        .unwrap();
    // The ELF header is in no function.
    let frames = NativeSymbolizer::new().symbolize(vdso, vdso.bias + 0x10, false);
    assert_eq!(frames, vec![NativeFrame::named("[vdso]+0x10".to_string())]);
}

#[test]
fn libjvm_function_with_debug_info_loaded_once() {
    let Some(jvm) = SleepingJvm::start() else {
        return;
    };
    let target = TargetProcess::open(jvm.pid()).unwrap();
    let mut unwinder = NativeUnwinder::new(&target).unwrap();
    let libjvm = unwinder
        .modules()
        .all()
        .iter()
        .find(|m| m.name == "libjvm.so")
        .expect("libjvm is loaded")
        .clone();
    let create = libjvm.symbol_address("JNI_CreateJavaVM").unwrap();
    assert!(Arc::ptr_eq(&unwinder.module_for(create).unwrap(), &libjvm));

    let mut symbolizer = NativeSymbolizer::new();
    let (rss, t) = (rss_kib(), Instant::now());
    let frames = symbolizer.symbolize(&libjvm, create, false);
    let load = t.elapsed();
    let after = rss_kib();
    let (anon, file) = (after.0.saturating_sub(rss.0), after.1.saturating_sub(rss.1));
    assert_eq!(
        frames.last().unwrap().function,
        "JNI_CreateJavaVM",
        "{frames:#?}"
    );

    let access = libjvm
        .symbol_address("JVM_GetStackAccessControlContext")
        .unwrap();
    let t = Instant::now();
    let second = symbolizer.symbolize(&libjvm, access + 4, false);
    let next = t.elapsed();
    assert_eq!(
        second.last().unwrap().function,
        "JVM_GetStackAccessControlContext"
    );
    eprintln!(
        "libjvm first symbolize (loads debug info): {load:?}, RSS +{} MiB anonymous, +{} MiB \
         file-backed; next pc: {next:?}; debug file {:?}",
        anon / 1024,
        file / 1024,
        symbolizer.debug_file(&libjvm)
    );
    match symbolizer.debug_file(&libjvm) {
        Some(_) => {
            assert!(symbolizer.has_dwarf(&libjvm));
            let f = frames.last().unwrap();
            assert!(
                f.file.as_deref().unwrap().ends_with("jni.cpp"),
                "{frames:#?}"
            );
            assert!(f.line.is_some());
            assert!(second
                .last()
                .unwrap()
                .file
                .as_deref()
                .unwrap()
                .ends_with("jvm.cpp"));
        }
        None => eprintln!(
            "no libjvm debug file {:?}: names come from .symtab (apt-get install openjdk-17-dbg \
             matching the JDK version)",
            libjvm.build_id_hex()
        ),
    }
    assert_eq!(symbolizer.modules.len(), 1, "one libjvm load for both pcs");
}
