use super::*;
use crate::native::testutil::{build_c_library, rss_kib, scratch_symbolizer, Loaded, SleepingJvm};
use crate::native::NativeUnwinder;
use crate::process::TargetProcess;
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
    let mut symbolizer = scratch_symbolizer();
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
    let frames = scratch_symbolizer().symbolize(vdso, vdso.bias + 0x10, false);
    assert_eq!(frames, vec![NativeFrame::named("[vdso]+0x10".to_string())]);
}

/// dwz moves DWARF shared by several files into a supplementary file named by
/// `.gnu_debugaltlink`; here the inlined `bump` is described only there.
#[test]
fn inlined_frame_described_in_a_dwz_supplementary_file() {
    let dir = std::env::temp_dir().join(format!("jvmperf-dwz-{}", std::process::id()));
    let header = "struct state { long counter; double weights[4]; const char *label; };\n\
                  static inline long bump(struct state *s) { return ++s->counter; }\n";
    let lib = |name: &str, entry: &str| {
        let source = format!(
            "#include \"common.h\"\nlong {entry}(struct state *s) {{ return bump(s) * 3; }}\n"
        );
        build_c_library(
            &dir,
            name,
            &[("common.h", header), (&format!("{entry}.c"), &source)],
        )
    };
    let (Some(a), Some(b)) = (lib("liba.so", "alpha_entry"), lib("libb.so", "beta_entry")) else {
        return;
    };
    let sup = dir.join("common.debug");
    let dwz = std::process::Command::new("dwz")
        .arg("-m")
        .arg(&sup)
        .arg("-M")
        .arg(&sup)
        .args([&a, &b])
        .status();
    if !dwz.is_ok_and(|s| s.success()) {
        eprintln!("skipping: dwz is not installed (apt-get install dwz)");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let loaded = Loaded::open(&a);
    let entry = loaded.symbol(c"alpha_entry");
    let mut unwinder = own_unwinder();
    let module = unwinder.module_for(entry).unwrap();
    let mut symbolizer = scratch_symbolizer();
    let inlined = (entry..entry + 32)
        .map(|pc| symbolizer.symbolize(&module, pc, false))
        .find(|frames| frames.len() == 2);
    std::fs::remove_dir_all(&dir).unwrap();
    let frames = inlined.expect("a pc inside the inlined bump()");
    assert_eq!(frames[0].function, "bump", "{frames:#?}");
    assert!(frames[0].file.as_deref().unwrap().ends_with("common.h"));
    assert_eq!(frames[1].function, "alpha_entry");
}

#[test]
fn separate_debug_file_through_gnu_debuglink() {
    let dir = std::env::temp_dir().join(format!("jvmperf-debuglink-{}", std::process::id()));
    let source = "int linked_probe(int x) {\n  return x * 5 + 2;\n}\n";
    let Some(lib) = build_c_library(&dir, "liblinked.so", &[("linked.c", source)]) else {
        return;
    };
    std::fs::create_dir_all(dir.join(".debug")).unwrap();
    let debug = dir.join(".debug/liblinked.so.debug");
    let objcopy = |args: &[&std::ffi::OsStr]| {
        let ok = std::process::Command::new("objcopy").args(args).status();
        assert!(ok.unwrap().success(), "objcopy {args:?}");
    };
    objcopy(&["--only-keep-debug".as_ref(), lib.as_ref(), debug.as_ref()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    objcopy(&["--strip-debug".as_ref(), link.as_ref(), lib.as_ref()]);

    let loaded = Loaded::open(&lib);
    let probe = loaded.symbol(c"linked_probe");
    let module = own_unwinder().module_for(probe).unwrap();
    let mut symbolizer = scratch_symbolizer();
    let frames = symbolizer.symbolize(&module, probe, false);
    assert_eq!(symbolizer.debug_file(&module), Some(&debug));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(frames[0].function, "linked_probe");
    assert!(
        frames[0].file.as_deref().unwrap().ends_with("linked.c"),
        "{frames:#?}"
    );
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

    let access = libjvm.symbol_address("JVM_CurrentTimeMillis").unwrap();
    let t = Instant::now();
    let second = symbolizer.symbolize(&libjvm, access + 4, false);
    let next = t.elapsed();
    assert_eq!(second.last().unwrap().function, "JVM_CurrentTimeMillis");
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
