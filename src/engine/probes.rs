//! Events sampled by uprobes on the target's libjvm (`-e alloc`, `-e lock`): what is shared by
//! every such source — finding libjvm and its functions, the one-line error of a libjvm without
//! symbols — and the interface through which the collector turns a probe's samples into
//! weighted samples ([`ProbeSource`]).

use super::alloc::{AllocProbes, AllocSource, AllocSummary};
use super::lock::{LockProbes, LockSource, LockSummary};
use crate::error::{Error, ErrorKind, Result};
use crate::hotspot::method::MethodLayout;
use crate::hotspot::HotSpot;
use crate::native::functions::{find_function, find_static, FoundFunction};
use crate::native::{ModuleRef, Modules};
use crate::process::{ProcessMemory, TargetProcess};
use crate::profile::Clock;
use crate::sampler::{Sample, Uprobes};
use crate::walker::RawFrame;
use foldhash::HashMap;
use std::ffi::CString;
use std::sync::Arc;

/// What a probe's sample is to its source.
pub(super) enum Hit {
    /// Nothing to count.
    Skip,
    /// A sample: its leaf, and its weight.
    Now { leaf: Option<RawFrame>, weight: u64 },
    /// The start of a wait, walked now and weighed at its end: its leaf, and a tag the source
    /// gets back with the time waited.
    Begin { leaf: Leaf, tag: u8 },
    /// The end of the thread's wait (a return probe).
    End,
}

/// The leaf of a wait begun.
pub(super) enum Leaf {
    Known(Option<RawFrame>),
    /// The leaf last known of a wait begun at the same stack: what the sample points at could
    /// not be read in time, and a wait site waits for the same kind of thing each time. Without
    /// one, the wait is left out ([`ProbeSource::unmatched`]).
    OfStack,
}

/// Turns a probe's samples into weighted samples.
pub(super) trait ProbeSource: Send {
    fn hit(&mut self, s: &Sample<'_>) -> Hit;
    /// The weight of a wait begun with `tag` that took `ns`; `None` to leave it out.
    fn waited(&mut self, tag: u8, ns: u64) -> Option<u64>;
    /// A wait begun with `tag` and [`Leaf::OfStack`] was left out: no leaf was known.
    fn unmatched(&mut self, _tag: u8) {}
    fn summary(&self) -> ProbeSummary;
}

/// What a probe recording sampled, for the summary.
#[derive(Debug, Clone)]
pub enum ProbeSummary {
    Alloc(AllocSummary),
    Lock(LockSummary),
}

/// The probes of the event asked for, found in the target's libjvm.
pub(super) enum Probes {
    Alloc(AllocProbes),
    Lock(LockProbes),
}

impl Probes {
    pub fn uprobes(&self) -> &Uprobes {
        match self {
            Probes::Alloc(p) => &p.uprobes,
            Probes::Lock(p) => &p.uprobes,
        }
    }

    pub fn source(&self, hotspot: &HotSpot, process: &TargetProcess) -> Box<dyn ProbeSource> {
        match self {
            Probes::Alloc(p) => Box::new(AllocSource::new(p, hotspot)),
            Probes::Lock(p) => Box::new(LockSource::new(p, hotspot, process)),
        }
    }

    /// What the profile's weights count.
    pub fn clock(&self) -> Clock {
        match self {
            Probes::Alloc(_) => Clock::Alloc,
            Probes::Lock(_) => Clock::Lock,
        }
    }
}

/// Class names read are forgotten this often (sample time): an unloaded class's `Klass*` may
/// be reused by another.
const FORGET_NAMES_NS: u64 = 2_000_000_000;

/// Names of classes by their `Klass*`, as Java writes them, with a suffix.
pub(super) struct ClassNames {
    layout: Option<MethodLayout>,
    mem: ProcessMemory,
    names: HashMap<(u64, &'static str), Arc<str>>,
    since: u64,
}

impl ClassNames {
    pub fn new(hotspot: &HotSpot) -> ClassNames {
        ClassNames {
            layout: MethodLayout::discover(&hotspot.vmstructs),
            mem: hotspot.mem,
            names: HashMap::default(),
            since: 0,
        }
    }

    /// The name of `klass` followed by `suffix` (`long[] (outside TLAB)`), read at sample time
    /// `time`; `None` where it cannot be read.
    pub fn name(&mut self, klass: u64, suffix: &'static str, time: u64) -> Option<Arc<str>> {
        if time > self.since + FORGET_NAMES_NS {
            self.names.clear();
            self.since = time;
        }
        if let Some(name) = self.names.get(&(klass, suffix)) {
            return Some(name.clone());
        }
        let name = self.layout.as_ref()?.klass_name(&self.mem, klass)?;
        let name: Arc<str> = (crate::java_names::class_name(&name) + suffix).into();
        self.names.insert((klass, suffix), name.clone());
        Some(name)
    }

    /// The internal name of `klass` (`java/lang/Object`), uncached.
    pub fn internal_name(&self, klass: u64) -> Option<String> {
        self.layout.as_ref()?.klass_name(&self.mem, klass)
    }

    pub fn mem(&self) -> &ProcessMemory {
        &self.mem
    }
}

/// The target's libjvm: the module, and its path as the kernel opens it for a uprobe.
pub(crate) struct Libjvm {
    pub module: ModuleRef,
    pub path: Arc<CString>,
    /// The JDK's major version, for errors.
    major: Option<u32>,
}

impl Libjvm {
    pub fn of(process: &TargetProcess) -> Result<Libjvm> {
        let modules = Modules::scan(process)?;
        let module = modules
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
        let path = module
            .opened_from
            .clone()
            .unwrap_or_else(|| process.path_in_root(std::path::Path::new(&module.path)));
        let path = CString::new(path.into_os_string().into_encoded_bytes())
            .map_err(|_| Error::new(ErrorKind::Internal, "libjvm's path holds a NUL byte"))?;
        let major = jdk_major(process, &module.path);
        Ok(Libjvm {
            module,
            path: Arc::new(path),
            major,
        })
    }

    /// The first of `names` libjvm has (its `.symtab`, else its debug file), with its name, or
    /// the one-line error naming the package with its symbols.
    pub fn function(
        &self,
        event: &str,
        names: &[&'static str],
    ) -> Result<(&'static str, FoundFunction)> {
        names
            .iter()
            .find_map(|&name| Some((name, find_function(&self.module, name)?)))
            .ok_or_else(|| missing(event, &self.module.path, self.major, names[names.len() - 1]))
    }

    /// The run-time address of static variable `name`, or the error [`Libjvm::function`] gives.
    pub fn static_address(&self, event: &str, name: &str) -> Result<u64> {
        find_static(&self.module, name)
            .map(|svma| svma.wrapping_add(self.module.bias))
            .ok_or_else(|| missing(event, &self.module.path, self.major, name))
    }

    /// The run-time address of a function found in it.
    pub fn address(&self, f: FoundFunction) -> u64 {
        f.svma.wrapping_add(self.module.bias)
    }
}

/// A one-line error for a libjvm without the function, naming the package that has it.
fn missing(event: &str, libjvm: &str, major: Option<u32>, function: &str) -> Error {
    let n = major.map_or_else(|| "<N>".to_string(), |n| n.to_string());
    let package = format!(
        "the JDK's debug-info package (Debian/Ubuntu: openjdk-{n}-dbg; Fedora/RHEL: \
         java-{n}-openjdk-debuginfo)"
    );
    Error::new(
        ErrorKind::Usage,
        format!(
            "-e {event} needs {function} of {libjvm}, which neither its symbol table nor a debug \
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
        let e = missing("alloc", "/opt/x/lib/server/libjvm.so", Some(11), "F::f");
        assert!(e.message.contains("openjdk-11-dbg"), "{}", e.message);
        assert!(e.message.starts_with("-e alloc needs F::f of /opt/x"));
        assert!(!e.message.contains('\n'));
    }
}
