use super::*;
use crate::native::testutil::{
    build_c_library, capture_here, capture_thread, Captured, Loaded, SleepingJvm,
};
use crate::native::NativeSymbolizer;
use std::time::Instant;

const DEPTH: u32 = 20;

#[inline(never)]
fn recurse(n: u32) -> Captured {
    let captured = if n == 0 {
        capture_here()
    } else {
        recurse(n - 1)
    };
    // Keeps the recursive call out of tail position.
    std::hint::black_box(captured)
}

/// Every frame's pc (and whether it is a return address), and how the walk ended.
fn unwind(unwinder: &mut NativeUnwinder, c: &Captured) -> (Vec<(u64, bool)>, StepOutcome) {
    let mut regs = c.regs;
    let mut frames = vec![(regs.pc, false)];
    loop {
        let first = !frames.last().unwrap().1;
        match unwinder.step(regs, first, &mut |addr| c.read(addr)) {
            StepOutcome::Caller(caller) => {
                regs = caller;
                frames.push((regs.pc, true));
            }
            StepOutcome::Interrupted(i) => {
                frames.last_mut().unwrap().1 = false;
                regs = NativeRegs {
                    pc: i.pc,
                    sp: i.sp,
                    bp: i.bp,
                };
                frames.push((regs.pc, false));
            }
            end => return (frames, end),
        }
        assert!(frames.len() < 1000, "runaway unwind");
    }
}

fn names(
    unwinder: &mut NativeUnwinder,
    symbolizer: &mut NativeSymbolizer,
    frames: &[(u64, bool)],
) -> Vec<String> {
    frames
        .iter()
        .flat_map(|&(pc, is_return)| {
            let m = unwinder.module_for(pc).expect("every frame is in a module");
            symbolizer.symbolize(&m, pc, is_return)
        })
        .map(|f| f.function)
        .collect()
}

/// A stack of this process unwound: it must end at the thread's root; the unwinder (its caches
/// warm) and the frames' names.
fn unwind_own_stack_to_its_root(captured: &Captured) -> (NativeUnwinder, Vec<String>) {
    let me = TargetProcess::open(std::process::id()).unwrap();
    let mut unwinder = NativeUnwinder::new(&me).unwrap();
    let (frames, end) = unwind(&mut unwinder, captured);
    let names = names(
        &mut unwinder,
        &mut crate::native::testutil::scratch_symbolizer(),
        &frames,
    );
    assert_eq!(end, StepOutcome::Root, "{names:#?}");
    (unwinder, names)
}

#[test]
fn unwinds_own_recursion_to_the_thread_root() {
    let captured = recurse(DEPTH);
    let (mut unwinder, names) = unwind_own_stack_to_its_root(&captured);
    let (frames, _) = unwind(&mut unwinder, &captured);
    assert!(names[0].ends_with("testutil::capture_here"), "{names:#?}");
    let recursion = names
        .iter()
        .filter(|n| n.ends_with("tests::recurse"))
        .count();
    assert_eq!(recursion, DEPTH as usize + 1, "{names:#?}");
    assert!(
        names
            .iter()
            .any(|n| n.ends_with("unwinds_own_recursion_to_the_thread_root")),
        "{names:#?}"
    );
    assert!(
        names.iter().any(|n| n.contains("start_thread")),
        "{names:#?}"
    );

    // Warm steps: the rule cache is filled by the walk above.
    let rounds = 2000;
    let t = Instant::now();
    for _ in 0..rounds {
        let (again, _) = unwind(&mut unwinder, &captured);
        assert_eq!(again.len(), frames.len());
    }
    let per_step = t.elapsed().as_nanos() as f64 / (rounds * frames.len()) as f64;
    eprintln!(
        "warm step: {per_step:.0} ns ({} frames, {} modules)",
        frames.len(),
        unwinder.modules().all().len()
    );
}

thread_local! {
    static IN_HANDLER: std::cell::RefCell<Option<Captured>> = const { std::cell::RefCell::new(None) };
}

extern "C" fn capture_in_handler(_signal: libc::c_int) {
    let captured = capture_here();
    IN_HANDLER.with(|c| *c.borrow_mut() = Some(captured));
}

/// Raises SIGURG at this thread; its handler captures the stack.
#[inline(never)]
fn interrupted_here() -> Captured {
    // SAFETY: installs a handler for SIGURG (ignored by default, used by nothing else in the test
    // binary) and signals the current thread, whose handler runs on this stack (no SA_ONSTACK).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = capture_in_handler as *const () as usize;
        assert_eq!(
            libc::sigaction(libc::SIGURG, &action, std::ptr::null_mut()),
            0
        );
        assert_eq!(libc::pthread_kill(libc::pthread_self(), libc::SIGURG), 0);
    }
    std::hint::black_box(
        IN_HANDLER
            .with(|c| c.borrow_mut().take())
            .expect("handler ran"),
    )
}

#[test]
fn unwinds_through_a_signal_frame_to_the_interrupted_code_and_its_root() {
    let (_, names) = unwind_own_stack_to_its_root(&interrupted_here());
    let at = |name: &str| names.iter().position(|n| n.ends_with(name));
    let handler = at("capture_in_handler").expect("handler frame");
    let trampoline = names
        .iter()
        .position(|n| n.contains("restore_rt"))
        .unwrap_or_else(|| panic!("no __restore_rt: {names:#?}"));
    let interrupted = at("tests::interrupted_here").expect("interrupted frame");
    assert!(
        handler < trampoline && trampoline < interrupted,
        "{names:#?}"
    );
    assert!(
        at("unwinds_through_a_signal_frame_to_the_interrupted_code_and_its_root").is_some(),
        "{names:#?}"
    );
}

#[test]
fn jit_addresses_are_not_in_a_module() {
    let me = TargetProcess::open(std::process::id()).unwrap();
    let mut unwinder = NativeUnwinder::new(&me).unwrap();
    let heap = Box::new([0u64; 4]);
    let regs = NativeRegs {
        pc: heap.as_ptr() as u64,
        sp: 0,
        bp: 0,
    };
    assert_eq!(
        unwinder.step(regs, true, &mut |_| Err(())),
        StepOutcome::NoModule
    );
}

#[test]
fn unwinds_a_jvm_thread_through_libjvm_to_its_root() {
    let Some(jvm) = SleepingJvm::start() else {
        return;
    };
    let captured = capture_thread(jvm.pid(), jvm.thread("VM Thread"));
    let target = TargetProcess::open(jvm.pid()).unwrap();
    let t = Instant::now();
    let mut unwinder = NativeUnwinder::new(&target).unwrap();
    eprintln!(
        "NativeUnwinder::new for a JVM: {:?} ({} modules)",
        t.elapsed(),
        unwinder.modules().all().len()
    );
    let (frames, end) = unwind(&mut unwinder, &captured);
    // Symbol tables suffice here; libjvm's debug info is tested (and paid for) in `symbols`.
    let mut symbolizer = NativeSymbolizer::without_debug_files();
    let names = names(&mut unwinder, &mut symbolizer, &frames);
    eprintln!("{} JVM frames: {names:#?}", frames.len());
    assert_eq!(end, StepOutcome::Root, "{names:#?}");
    for expected in ["VMThread::run", "Thread::call_run", "thread_native_entry"] {
        assert!(
            names.iter().any(|n| n.contains(expected)),
            "{expected} missing: {names:#?}"
        );
    }
    let libjvm_frames = frames
        .iter()
        .filter(|&&(pc, _)| unwinder.module_for(pc).unwrap().name == "libjvm.so")
        .count();
    assert!(libjvm_frames >= 3, "{names:#?}");

    let rounds = 5000;
    let t = Instant::now();
    for _ in 0..rounds {
        unwind(&mut unwinder, &captured);
    }
    let per_step = t.elapsed().as_nanos() as f64 / (rounds * frames.len()) as f64;
    eprintln!("warm step in libjvm/libc: {per_step:.0} ns");
}

#[test]
fn library_loaded_later_and_deleted_is_found_and_symbolized() {
    let dir = std::env::temp_dir().join(format!("jvmperf-dlopen-{}", std::process::id()));
    let source = "int jvmperf_probe(int x) {\n  return x * 3 + 1;\n}\n";
    let Some(lib) = build_c_library(&dir, "libprobe.so", &[("probe.c", source)]) else {
        return;
    };
    let me = TargetProcess::open(std::process::id()).unwrap();
    let mut unwinder = NativeUnwinder::new(&me).unwrap();
    let loaded = Loaded::open(&lib);
    let probe = loaded.symbol(c"jvmperf_probe");
    std::fs::remove_dir_all(&dir).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300)); // past the rescan rate limit

    let module = unwinder.module_for(probe).expect("rescanned after dlopen");
    assert_eq!(module.name, "libprobe.so");
    let opened = module.opened_from.as_ref().unwrap().to_str().unwrap();
    assert!(opened.contains("/map_files/"), "deleted file: {opened}");
    let frames = crate::native::testutil::scratch_symbolizer().symbolize(&module, probe, false);
    assert_eq!(frames[0].function, "jvmperf_probe", "{frames:#?}");
    assert!(frames[0].file.as_deref().unwrap().ends_with("probe.c"));
    assert!(matches!(frames[0].line, Some(1 | 2)), "{frames:#?}");
}
