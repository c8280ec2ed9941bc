//! Allocation samples (`record -e alloc`): uprobes on the two functions HotSpot calls for every
//! TLAB refill and every allocation outside a TLAB, whether JFR records or not (JDK 10+,
//! `MemAllocator::Allocation::notify_allocation_jfr_sampler` in gc/shared/memAllocator.cpp):
//!
//! - `AllocTracer::send_allocation_in_new_tlab(Klass*, HeapWord*, size_t tlab_size, size_t
//!   alloc_size, JavaThread*)`
//! - `AllocTracer::send_allocation_outside_tlab(Klass*, HeapWord*, size_t alloc_size,
//!   JavaThread*)`
//!
//! Both are static (gc/shared/allocTracer.hpp): at their first instruction the System V
//! arguments are in rdi, rsi, rdx…: the class allocated is rdi, and rdx the bytes the sample
//! stands for: the new TLAB's size (the thread allocated about that much since its last refill)
//! or the object's. A sample becomes the thread's walked stack with the class as its leaf,
//! weighted by those bytes times the period.

use crate::error::{Error, ErrorKind, Result};
use crate::hotspot::method::MethodLayout;
use crate::hotspot::HotSpot;
use crate::native::functions::find_function;
use crate::native::Modules;
use crate::process::{ProcessMemory, TargetProcess};
use crate::sampler::{Sample, Uprobes};
use crate::walker::RawFrame;
use foldhash::HashMap;
use std::sync::Arc;

const IN_NEW_TLAB: &str = "AllocTracer::send_allocation_in_new_tlab";
const OUTSIDE_TLAB: &str = "AllocTracer::send_allocation_outside_tlab";

/// Class names read are forgotten this often (sample time): an unloaded class's `Klass*` may
/// be reused by another.
const FORGET_NAMES_NS: u64 = 2_000_000_000;

/// How `-e alloc` samples, as asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocOptions {
    /// A sample every this many probe hits (`-c`).
    pub period: u64,
}

/// Where the probes go in the target's libjvm.
pub struct AllocProbes {
    pub uprobes: Uprobes,
    /// Run-time addresses of the two functions (in new TLAB, outside TLAB): a sample's ip.
    addresses: [u64; 2],
    libjvm: String,
}

impl AllocProbes {
    /// Finds the two functions in the target's libjvm (its `.symtab`, else its debug file).
    pub fn find(process: &TargetProcess, opts: AllocOptions) -> Result<AllocProbes> {
        let modules = Modules::scan(process)?;
        let libjvm = modules
            .all()
            .iter()
            .find(|m| m.name == "libjvm.so")
            .cloned()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotJvm,
                    format!("process {} has no libjvm.so mapped", process.pid),
                )
            })?;
        // The kernel resolves the path at each open, from our root: the target's file through
        // its root (a container's own file system).
        let path = libjvm
            .opened_from
            .clone()
            .unwrap_or_else(|| process.path_in_root(std::path::Path::new(&libjvm.path)));
        let mut found = Vec::new();
        for name in [IN_NEW_TLAB, OUTSIDE_TLAB] {
            let f = find_function(&libjvm, name)
                .ok_or_else(|| missing(&libjvm.path, jdk_major(process, &libjvm.path), name))?;
            found.push(f);
        }
        let path = std::ffi::CString::new(path.into_os_string().into_encoded_bytes())
            .map_err(|_| Error::new(ErrorKind::Internal, "libjvm's path holds a NUL byte"))?;
        Ok(AllocProbes {
            uprobes: Uprobes {
                path: Arc::new(path),
                offsets: found.iter().map(|f| f.file_offset).collect(),
                period: opts.period.max(1),
            },
            addresses: [
                found[0].svma.wrapping_add(libjvm.bias),
                found[1].svma.wrapping_add(libjvm.bias),
            ],
            libjvm: libjvm.path.clone(),
        })
    }

    /// The summary's name of the mechanism.
    pub fn describe(&self) -> String {
        let every = match self.uprobes.period {
            1 => "every hit".to_string(),
            n => format!("every {n}th hit"),
        };
        format!(
            "uprobes on {IN_NEW_TLAB} and {OUTSIDE_TLAB} of {}, opened on each thread, a sample at {every}",
            self.libjvm
        )
    }
}

/// A one-line error for a libjvm without the function, naming the package that has it.
fn missing(libjvm: &str, major: Option<u32>, function: &str) -> Error {
    let n = major.map_or_else(|| "<N>".to_string(), |n| n.to_string());
    let package = format!(
        "the JDK's debug-info package (Debian/Ubuntu: openjdk-{n}-dbg; Fedora/RHEL: \
         java-{n}-openjdk-debuginfo)"
    );
    Error::new(
        ErrorKind::Usage,
        format!(
            "-e alloc needs {function} of {libjvm}, which neither its symbol table nor a debug \
             file has (JDK 11 or later): install {package}"
        ),
    )
}

/// The JDK's major version: its `release` file's `JAVA_VERSION` (beside `lib/`), else what
/// libjvm's path says.
fn jdk_major(process: &TargetProcess, libjvm: &str) -> Option<u32> {
    let home = std::path::Path::new(libjvm).ancestors().nth(3)?;
    let release = std::fs::read_to_string(process.path_in_root(&home.join("release"))).ok();
    release
        .as_deref()
        .and_then(major_of_release)
        .or_else(|| major_in_path(libjvm))
}

/// `JAVA_VERSION="17.0.9"` → 17 (`1.8.0_392` → 8).
fn major_of_release(release: &str) -> Option<u32> {
    let version = release
        .lines()
        .find_map(|l| l.strip_prefix("JAVA_VERSION="))?
        .trim_matches('"');
    let mut parts = version.split(['.', '_', '-', '+']);
    match parts.next()?.parse().ok()? {
        1 => parts.next()?.parse().ok(),
        n => Some(n),
    }
}

/// The JDK's major version as its path says it (`/usr/lib/jvm/java-17-openjdk-amd64/…`,
/// `…/jdk-21.0.2/…`, `…/temurin-25-jdk…`).
fn major_in_path(path: &str) -> Option<u32> {
    path.split('/').find_map(|dir| {
        dir.split(['-', '.', '_'])
            .find_map(|part| part.parse::<u32>().ok().filter(|n| (8..100).contains(n)))
    })
}

/// What an allocation recording sampled.
#[derive(Debug, Clone, Default)]
pub struct AllocSummary {
    pub mechanism: String,
    /// Samples at each probe (in new TLAB, outside TLAB), and the bytes they stand for.
    pub samples: [u64; 2],
    pub bytes: u64,
    /// Samples whose class could not be read (left without a class leaf).
    pub unnamed: u64,
}

/// Turns probe hits into weighted samples with their class leaf.
pub(super) struct AllocSource {
    addresses: [u64; 2],
    period: u64,
    layout: Option<MethodLayout>,
    mem: ProcessMemory,
    names: HashMap<(u64, bool), Arc<str>>,
    names_since: u64,
    pub summary: AllocSummary,
}

impl AllocSource {
    pub fn new(probes: &AllocProbes, hotspot: &HotSpot) -> AllocSource {
        AllocSource {
            addresses: probes.addresses,
            period: probes.uprobes.period,
            layout: MethodLayout::discover(&hotspot.vmstructs),
            mem: hotspot.mem,
            names: HashMap::default(),
            names_since: 0,
            summary: AllocSummary {
                mechanism: probes.describe(),
                ..AllocSummary::default()
            },
        }
    }

    /// The leaf (the class allocated) and weight (bytes) of a probe's sample; `None` for a
    /// sample at neither probe.
    pub fn weigh(&mut self, s: &Sample<'_>) -> Option<(Option<RawFrame>, u64)> {
        let probe = self.addresses.iter().position(|&a| a == s.regs.ip)?;
        let bytes = s.regs.dx.saturating_mul(self.period);
        self.summary.samples[probe] += 1;
        self.summary.bytes = self.summary.bytes.saturating_add(bytes);
        if s.time > self.names_since + FORGET_NAMES_NS {
            self.names.clear();
            self.names_since = s.time;
        }
        let outside = probe == 1;
        let klass = s.regs.di;
        let class = match self.names.get(&(klass, outside)) {
            Some(name) => Some(name.clone()),
            None => {
                let name = self
                    .layout
                    .as_ref()
                    .and_then(|l| l.klass_name(&self.mem, klass));
                name.map(|n| {
                    let mut name = crate::java_names::class_name(&n);
                    if outside {
                        name.push_str(" (outside TLAB)");
                    }
                    let name: Arc<str> = name.into();
                    self.names.insert((klass, outside), name.clone());
                    name
                })
            }
        };
        if class.is_none() {
            self.summary.unnamed += 1;
        }
        Some((class.map(|class| RawFrame::Allocated { class }), bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_symbols_error_names_the_debug_package_of_the_jdk() {
        assert_eq!(
            major_in_path("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"),
            Some(17)
        );
        assert_eq!(
            major_in_path("/opt/jdk-21.0.2/lib/server/libjvm.so"),
            Some(21)
        );
        assert_eq!(
            major_of_release("IMPLEMENTOR=\"x\"\nJAVA_VERSION=\"17.0.9\"\n"),
            Some(17)
        );
        assert_eq!(major_of_release("JAVA_VERSION=\"1.8.0_392\"\n"), Some(8));
        let e = missing("/opt/x/lib/server/libjvm.so", Some(11), IN_NEW_TLAB);
        assert!(e.message.contains("openjdk-11-dbg"), "{}", e.message);
        assert!(!e.message.contains('\n'));
    }
}
