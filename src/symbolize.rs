//! Names for raw frames: compiled Java frames through the time-versioned code map (inlined chain,
//! bci, line), interpreted frames through `Method*` (VMStructs), native frames through the ELF/DWARF
//! symbolizer, kernel frames through kallsyms. Work is cached per distinct address.

use crate::codemap::{CodeKind, CodeMap};
use crate::hotspot::method::{MethodLayout, MethodName};
use crate::java_names::class_name;
use crate::native::{KernelSymbols, NativeSymbolizer, NativeUnwinder};
use crate::profile::{Frame, FrameKind};
use crate::target::ProcessMemory;
use crate::unwind::RawFrame;
use std::collections::HashMap;

/// Names frames; lives for a whole recording so its caches (and loaded debug info) are built once.
pub struct Symbolizer {
    methods: Option<MethodLayout>,
    mem: ProcessMemory,
    native_symbols: NativeSymbolizer,
    pub kernel: Option<KernelSymbols>,
    method_cache: HashMap<u64, Option<MethodName>>,
    native_cache: HashMap<(u64, bool), Vec<Frame>>,
    /// Compiled frames whose code was unknown to the code map (resolved through `Method*`).
    pub unresolved_compiled: u64,
}

fn java_frame(
    qualified: String,
    kind: FrameKind,
    m_sig: &str,
    file: &str,
    line: Option<u32>,
    bci: i32,
    start_line: Option<u32>,
) -> Frame {
    Frame {
        name: qualified,
        kind,
        file: (!file.is_empty()).then(|| file.to_string()),
        line,
        bci: Some(bci),
        signature: Some(m_sig.to_string()),
        module: None,
        start_line,
    }
}

/// Start loading the debug info of the big native modules (libjvm's is ~150 MB of compressed
/// DWARF, seconds to load) on a thread of its own, so sampling never waits for it.
pub fn warm_native_symbols(native: &NativeUnwinder) -> std::thread::JoinHandle<NativeSymbolizer> {
    let libjvm = native
        .modules()
        .all()
        .iter()
        .find(|m| m.name == "libjvm.so")
        .cloned();
    std::thread::spawn(move || {
        let mut symbols = NativeSymbolizer::new();
        if let Some(m) = libjvm {
            symbols.symbolize(&m, m.start, false);
        }
        symbols
    })
}

impl Symbolizer {
    pub fn new(
        methods: Option<MethodLayout>,
        mem: ProcessMemory,
        native_symbols: NativeSymbolizer,
    ) -> Self {
        Symbolizer {
            methods,
            mem,
            native_symbols,
            kernel: None,
            method_cache: HashMap::new(),
            native_cache: HashMap::new(),
            unresolved_compiled: 0,
        }
    }

    fn method_by_ptr(&mut self, method: u64) -> Option<&MethodName> {
        let layout = self.methods.as_ref()?;
        let mem = self.mem;
        self.method_cache
            .entry(method)
            .or_insert_with(|| layout.read(&mem, method))
            .as_ref()
    }

    fn frame_from_method_ptr(&mut self, method: u64, bci: i32, kind: FrameKind) -> Frame {
        match self.method_by_ptr(method) {
            Some(m) => {
                let line = if bci >= 0 {
                    m.lines
                        .iter()
                        .filter(|l| l.0 as i64 <= bci as i64)
                        .max_by_key(|l| l.0)
                        .map(|l| l.1)
                } else {
                    None
                };
                java_frame(
                    format!("{}.{}", class_name(&m.class), m.name),
                    kind,
                    &m.signature.clone(),
                    "",
                    line,
                    bci,
                    m.lines.iter().min_by_key(|l| l.0).map(|l| l.1),
                )
            }
            None => Frame {
                bci: Some(bci),
                ..Frame::named(format!("[unknown Method* {method:#x}]"), kind)
            },
        }
    }

    /// The frames (leaf first) for one raw frame of a sample taken at `time`, resolving compiled
    /// code against `code` and native code against `native`'s modules.
    pub fn frames(
        &mut self,
        code: &CodeMap,
        native: &mut NativeUnwinder,
        raw: &RawFrame,
        time: u64,
        out: &mut Vec<Frame>,
    ) {
        match raw {
            RawFrame::Compiled { pc, method } => {
                let chain = code
                    .lookup(*pc, time)
                    .filter(|e| matches!(e.kind, CodeKind::Nmethod { .. }))
                    .and_then(|e| e.frames_at(*pc).map(|c| (e, c)));
                match chain {
                    Some((_, chain)) if !chain.is_empty() => {
                        let last = chain.len() - 1;
                        for (i, &(m, bci)) in chain.iter().enumerate() {
                            // -1 is HotSpot's method-entry bci (InvocationEntryBci); like its
                            // compiledVFrame::bci(), report it as bytecode 0.
                            let bci = if bci == -1 { 0 } else { bci };
                            let kind = if i == last {
                                FrameKind::Jit
                            } else {
                                FrameKind::Inlined
                            };
                            match code.method(m) {
                                Some(info) => out.push(java_frame(
                                    info.qualified_name(),
                                    kind,
                                    &info.signature,
                                    &info.source_file,
                                    info.line_of(bci),
                                    bci,
                                    info.line_of(-1),
                                )),
                                None => out.push(self.frame_from_method_ptr(*method, bci, kind)),
                            }
                        }
                    }
                    _ => {
                        // Known code without a debug point here, or code the shim has not reported.
                        // For known code, bci 0 as HotSpot's own walkers give it (native
                        // wrappers, and fill_from_compiled_native_frame for pcs without a PcDesc).
                        if let Some(e) = code.lookup(*pc, time) {
                            if let Some(info) = e.method().and_then(|m| code.method(m)) {
                                out.push(java_frame(
                                    info.qualified_name(),
                                    FrameKind::Jit,
                                    &info.signature,
                                    &info.source_file,
                                    None,
                                    0,
                                    info.line_of(-1),
                                ));
                                return;
                            }
                        }
                        self.unresolved_compiled += 1;
                        out.push(self.frame_from_method_ptr(*method, -1, FrameKind::Jit));
                    }
                }
            }
            RawFrame::Interpreted { method, bci } => {
                out.push(self.frame_from_method_ptr(*method, *bci, FrameKind::Interpreted))
            }
            RawFrame::Stub { pc, blob } => {
                let name = match code.lookup(*pc, time).map(|e| &e.kind) {
                    Some(CodeKind::Blob { name }) => name.clone(),
                    _ => blob.to_string(),
                };
                out.push(Frame::named(name, FrameKind::Stub));
            }
            RawFrame::Native { pc, return_address } => {
                let key = (*pc, *return_address);
                if let Some(cached) = self.native_cache.get(&key) {
                    out.extend(cached.iter().cloned());
                    return;
                }
                let frames: Vec<Frame> = match native.module_for(*pc) {
                    Some(module) => {
                        let module_name = module.name.clone();
                        self.native_symbols
                            .symbolize(&module, *pc, *return_address)
                            .into_iter()
                            .map(|f| Frame {
                                file: f.file,
                                line: f.line,
                                module: Some(module_name.clone()),
                                ..Frame::named(f.function, FrameKind::Native)
                            })
                            .collect()
                    }
                    None => vec![Frame::named(
                        format!("[unknown {pc:#x}]"),
                        FrameKind::Native,
                    )],
                };
                out.extend(frames.iter().cloned());
                self.native_cache.insert(key, frames);
            }
        }
    }

    pub fn kernel_frame(&mut self, ip: u64) -> Frame {
        let kernel = self.kernel.get_or_insert_with(|| {
            KernelSymbols::load().unwrap_or_else(|_| KernelSymbols::parse(""))
        });
        Frame::named(kernel.symbolize(ip), FrameKind::Kernel)
    }
}
