//! HotSpot's LogCompilation XML (`-XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation`): per
//! compile task, the inlining decision at each call site, and per compile id, the deoptimizations.
//!
//! The format (HotSpot's `compiler/compileLog.cpp`, `opto/bytecodeInfo.cpp`, `c1/c1_GraphBuilder.cpp`,
//! and the LogCompilation overview on the OpenJDK wiki): compiler threads write `<task
//! compile_id= method='class name descriptor'>` elements holding `<type>`, `<klass>` and `<method>`
//! id tables, `<parse method=id>` scopes (nested for inlined methods), `<bc bci=>` before each call,
//! `<call method=id>` followed by `<inline_success reason=>`, `<inline_fail reason=>`,
//! `<intrinsic id=>` or `<direct_call>`. Java threads write `<uncommon_trap compile_id= reason=
//! action=>` (with `<jvms bci= method=>`) when compiled code traps, `<make_not_entrant compile_id=>`,
//! and `<nmethod compile_id= level=>` when code is installed. The compiler threads' parts are
//! appended to the file only when the JVM exits.
//!
//! A log cut short (the JVM still running or killed) reads up to where it stops.

use crate::error::{Error, ErrorKind, Result};
use quick_xml::events::{BytesStart, Event};
use quick_xml::XmlVersion;
use std::collections::{HashMap, HashSet};
use std::io::BufRead;

/// A method as the log names it: class with dots, name, JVM descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MethodRef {
    pub class: String,
    pub name: String,
    pub descriptor: String,
}

impl MethodRef {
    /// From a task's `method='java/lang/Thread <init> (Ljava/lang/String;)V'` (JDK 17+ writes the
    /// class with dots).
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split(' ');
        let (class, name, descriptor) = (parts.next()?, parts.next()?, parts.next()?);
        Some(MethodRef {
            class: class.replace('/', "."),
            name: name.to_string(),
            descriptor: descriptor.to_string(),
        })
    }

    /// `package.Class.method`, as profiles name Java frames.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.class, self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Inlined, with the compiler's reason.
    Inlined(String),
    /// Not inlined, with the compiler's reason.
    NotInlined(String),
    /// Replaced by an intrinsic (its id).
    Intrinsic(String),
    /// Called without an inlining decision in the log.
    Called,
}

/// What the compiler did with one call site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallDecision {
    pub caller: MethodRef,
    pub bci: i32,
    pub callee: MethodRef,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub compile_id: u32,
    pub method: MethodRef,
    /// For OSR compiles: the entry bci.
    pub osr_bci: Option<i32>,
    /// From the task or the installed `<nmethod>`; C2 tasks carry none of their own.
    pub level: Option<u8>,
    pub decisions: Vec<CallDecision>,
}

/// A deoptimization event of compiled code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deopt {
    pub compile_id: u32,
    /// E.g. `uncommon trap unstable_if (action reinterpret) at bench.A.run@12`, `made not entrant`.
    pub what: String,
}

#[derive(Debug, Default)]
pub struct CompilationLog {
    /// Tasks by compile id; ids seen for more than one task (logs of several runs joined) are in
    /// `ambiguous` instead.
    pub tasks: HashMap<u32, Task>,
    pub ambiguous: HashSet<u32>,
    pub deopts: Vec<Deopt>,
    /// Where and why reading stopped early, if it did.
    pub cut_short: Option<String>,
}

impl Task {
    /// The decisions at `bci` of `caller` for a callee named `callee_name` with descriptor
    /// `callee_descriptor` (the holder is not compared: a virtual call names the declared method,
    /// a profile the one that ran; one bci holds one call).
    pub fn decisions_at<'a>(
        &'a self,
        caller: &'a MethodRef,
        bci: i32,
        callee_name: &'a str,
        callee_descriptor: &'a str,
    ) -> impl Iterator<Item = &'a CallDecision> + 'a {
        self.decisions.iter().filter(move |d| {
            d.bci == bci
                && &d.caller == caller
                && d.callee.name == callee_name
                && d.callee.descriptor == callee_descriptor
        })
    }
}

impl CompilationLog {
    pub fn deopts_of(&self, compile_id: u32) -> impl Iterator<Item = &Deopt> + '_ {
        self.deopts
            .iter()
            .filter(move |d| d.compile_id == compile_id)
    }
}

/// `int` → `I`, `java.lang.String` → `Ljava/lang/String;`, `[Ljava.lang.Object;` → itself with
/// slashes.
fn descriptor_of(type_name: &str) -> String {
    let code = match type_name {
        "boolean" => "Z",
        "byte" => "B",
        "char" => "C",
        "short" => "S",
        "int" => "I",
        "long" => "J",
        "float" => "F",
        "double" => "D",
        "void" => "V",
        n if n.starts_with('[') => return n.replace('.', "/"),
        n => return format!("L{};", n.replace('.', "/")),
    };
    code.to_string()
}

fn attr(e: &BytesStart, key: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key.as_bytes())
        .and_then(|a| a.normalized_value(XmlVersion::Implicit1_0).ok())
        .map(|v| v.into_owned())
}

fn num<T: std::str::FromStr>(e: &BytesStart, key: &str) -> Option<T> {
    attr(e, key)?.parse().ok()
}

/// Per-task parsing state: the id tables and the inlining scopes.
#[derive(Default)]
struct TaskState {
    task: Option<Task>,
    /// Type and klass names by id.
    names: HashMap<String, String>,
    methods: HashMap<String, MethodRef>,
    /// Open `<parse>` scopes: the method and the bci of its latest `<bc>`.
    scopes: Vec<(MethodRef, i32)>,
    /// The latest `<call>` still waiting for its decision.
    pending: Option<(MethodRef, i32, MethodRef)>,
}

impl TaskState {
    fn method(&mut self, e: &BytesStart) {
        let (Some(id), Some(holder), Some(name)) =
            (attr(e, "id"), attr(e, "holder"), attr(e, "name"))
        else {
            return;
        };
        let Some(class) = self.names.get(&holder) else {
            return;
        };
        let desc = |id: &str| self.names.get(id).map(|n| descriptor_of(n));
        let params: Option<String> = attr(e, "arguments")
            .unwrap_or_default()
            .split_whitespace()
            .map(desc)
            .collect();
        let ret = attr(e, "return").and_then(|r| desc(&r));
        if let (Some(params), Some(ret)) = (params, ret) {
            let m = MethodRef {
                class: class.replace('/', "."),
                name,
                descriptor: format!("({params}){ret}"),
            };
            self.methods.insert(id, m);
        }
    }

    fn decide(&mut self, outcome: Outcome) {
        if let (Some((caller, bci, callee)), Some(task)) = (self.pending.take(), &mut self.task) {
            task.decisions.push(CallDecision {
                caller,
                bci,
                callee,
                outcome,
            });
        }
    }
}

/// Read a LogCompilation file.
pub fn read(path: &std::path::Path) -> Result<CompilationLog> {
    let file = std::fs::File::open(path).map_err(|e| {
        Error::new(
            ErrorKind::Usage,
            format!(
                "cannot read {}: {e} (pass the file the JVM wrote with -XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=FILE)",
                path.display()
            ),
        )
    })?;
    let log = parse(std::io::BufReader::new(file));
    if log.tasks.is_empty() && log.deopts.is_empty() {
        let why = log
            .cut_short
            .as_deref()
            .map(|w| format!(": {w}"))
            .unwrap_or_default();
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{} holds no compile tasks{why} (is it a LogCompilation file? the compiler threads' part is written when the JVM exits)",
                path.display()
            ),
        ));
    }
    Ok(log)
}

/// Parse LogCompilation XML from `input`; what precedes an error or the end of a cut file is kept.
pub fn parse(input: impl BufRead) -> CompilationLog {
    let mut reader = quick_xml::Reader::from_reader(input);
    let mut log = CompilationLog::default();
    let mut st = TaskState::default();
    let mut levels: HashMap<u32, u8> = HashMap::new();
    // The `<uncommon_trap>` of a running trap, waiting for its `<jvms>`.
    let mut trap: Option<(u32, String)> = None;
    let mut buf = Vec::new();
    loop {
        let event = match reader.read_event_into(&mut buf) {
            Ok(ev) => ev,
            Err(e) => {
                log.cut_short = Some(format!(
                    "unreadable XML at byte {}: {e}",
                    reader.error_position()
                ));
                break;
            }
        };
        let (e, empty) = match &event {
            Event::Start(e) => (e, false),
            Event::Empty(e) => (e, true),
            Event::End(e) => {
                match e.name().as_ref() {
                    b"parse" => {
                        st.scopes.pop();
                        st.pending = None;
                    }
                    b"task" => finish_task(&mut log, &mut st),
                    b"uncommon_trap" => {
                        if let Some((id, what)) = trap.take() {
                            log.deopts.push(Deopt {
                                compile_id: id,
                                what,
                            });
                        }
                    }
                    _ => {}
                }
                buf.clear();
                continue;
            }
            Event::Eof => break,
            _ => {
                buf.clear();
                continue;
            }
        };
        match e.name().as_ref() {
            b"task" => {
                finish_task(&mut log, &mut st);
                if let (Some(id), Some(method)) = (
                    num::<u32>(e, "compile_id"),
                    attr(e, "method").and_then(|m| MethodRef::parse(&m)),
                ) {
                    let osr = attr(e, "compile_kind").as_deref() == Some("osr");
                    st.task = Some(Task {
                        compile_id: id,
                        method,
                        osr_bci: if osr { num(e, "osr_bci") } else { None },
                        level: num(e, "level"),
                        decisions: Vec::new(),
                    });
                }
                if empty {
                    finish_task(&mut log, &mut st);
                }
            }
            b"type" | b"klass" => {
                if let (Some(id), Some(name)) = (attr(e, "id"), attr(e, "name")) {
                    st.names.insert(id, name);
                }
            }
            b"method" => st.method(e),
            b"parse" if !empty => {
                st.pending = None;
                let m = attr(e, "method").and_then(|id| st.methods.get(&id).cloned());
                // An unknown method still opens a scope, so the `</parse>` pairs up.
                let m = m.unwrap_or_else(|| MethodRef {
                    class: String::new(),
                    name: String::new(),
                    descriptor: String::new(),
                });
                st.scopes.push((m, -1));
            }
            b"bc" => {
                // A call without a decision (an uncommon trap instead) must not take the next one's.
                st.pending = None;
                if let (Some(scope), Some(bci)) = (st.scopes.last_mut(), num(e, "bci")) {
                    scope.1 = bci;
                }
            }
            b"call" if st.task.is_some() => {
                let callee = attr(e, "method").and_then(|id| st.methods.get(&id).cloned());
                st.pending = match (st.scopes.last(), callee) {
                    (Some((caller, bci)), Some(callee)) if !caller.name.is_empty() => {
                        Some((caller.clone(), *bci, callee))
                    }
                    _ => None,
                };
            }
            b"inline_success" => st.decide(Outcome::Inlined(attr(e, "reason").unwrap_or_default())),
            b"inline_fail" => st.decide(Outcome::NotInlined(attr(e, "reason").unwrap_or_default())),
            b"intrinsic" => st.decide(Outcome::Intrinsic(attr(e, "id").unwrap_or_default())),
            b"direct_call" | b"dynamic_call" | b"virtual_call" => st.decide(Outcome::Called),
            // Outside a task: a trap that ran (inside one, a trap the compiler emitted).
            b"uncommon_trap" if st.task.is_none() => {
                if let Some(id) = num::<u32>(e, "compile_id") {
                    let what = format!(
                        "uncommon trap {} (action {})",
                        attr(e, "reason").unwrap_or_else(|| "?".into()),
                        attr(e, "action").unwrap_or_else(|| "?".into())
                    );
                    if empty {
                        log.deopts.push(Deopt {
                            compile_id: id,
                            what,
                        });
                    } else {
                        trap = Some((id, what));
                    }
                }
            }
            b"jvms" => {
                if let Some((_, what)) = &mut trap {
                    if !what.contains(" at ") {
                        if let (Some(m), Some(bci)) = (
                            attr(e, "method").and_then(|m| MethodRef::parse(&m)),
                            attr(e, "bci"),
                        ) {
                            what.push_str(&format!(" at {}@{bci}", m.qualified_name()));
                        }
                    }
                }
            }
            b"make_not_entrant" => {
                if let Some(id) = num::<u32>(e, "compile_id") {
                    log.deopts.push(Deopt {
                        compile_id: id,
                        what: "made not entrant".into(),
                    });
                }
            }
            b"nmethod" => {
                if let (Some(id), Some(level)) = (num::<u32>(e, "compile_id"), num(e, "level")) {
                    levels.insert(id, level);
                }
            }
            _ => {}
        }
        buf.clear();
    }
    finish_task(&mut log, &mut st);
    for task in log.tasks.values_mut() {
        if task.level.is_none() {
            task.level = levels.get(&task.compile_id).copied();
        }
    }
    log
}

fn finish_task(log: &mut CompilationLog, st: &mut TaskState) {
    if let Some(task) = st.task.take() {
        let id = task.compile_id;
        if log.ambiguous.contains(&id) || log.tasks.insert(id, task).is_some() {
            log.tasks.remove(&id);
            log.ambiguous.insert(id);
        }
    }
    *st = TaskState::default();
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Hand-written in the format of the LogCompilation overview (and of a JDK 17 log): a C2 task
    /// with a forced inline, a refused one and a nested inline, a C1 OSR task, a trap that ran.
    pub(crate) const LOG: &str = r#"<?xml version='1.0' encoding='UTF-8'?>
<hotspot_log version='160 1' process='100' time_ms='1'>
<tty>
<nmethod compile_id='15' compiler='c2' level='4' method='bench.A hot (JI)J' stamp='0.04'/>
<uncommon_trap thread='7' reason='unstable_if' action='reinterpret' debug_id='0' compile_id='15' compiler='c2' level='4' stamp='1.5'>
<jvms bci='8' method='bench.A hot (JI)J' bytes='33'/>
</uncommon_trap>
<make_not_entrant thread='7' compile_id='15' compiler='c2' level='4' stamp='1.5'/>
</tty>
<compilation_log thread='9'>
<task compile_id='15' method='bench.A hot (JI)J' bytes='33' stamp='0.041'>
<type id='1138' name='long'/>
<type id='1137' name='int'/>
<klass id='1274' name='bench.A' flags='17'/>
<klass id='1252' name='java/lang/Long' flags='17'/>
<method id='1275' holder='1274' name='hot' return='1138' arguments='1138 1137' flags='8' bytes='33'/>
<parse method='1275' uses='2.0' stamp='0.041'>
<bc code='162' bci='8'/>
<uncommon_trap bci='8' reason='predicate' action='maybe_recompile' debug_id='0'/>
<bc code='184' bci='14'/>
<method id='1277' holder='1274' name='inl' return='1138' arguments='1138 1137' flags='8' bytes='33'/>
<call method='1277' count='40960' prof_factor='1.0' inline='1'/>
<inline_success reason='force inline by CompileCommand'/>
<parse method='1277' uses='40960.0'>
<bc code='184' bci='29'/>
<method id='1279' holder='1252' name='rotateLeft' return='1138' arguments='1138 1137' flags='9' bytes='9'/>
<call method='1279' count='46080' prof_factor='0.88' inline='1'/>
<inline_success reason='inline (hot)'/>
<parse method='1279' uses='40960.0'>
<parse_done stamp='0.041'/>
</parse>
<parse_done stamp='0.041'/>
</parse>
<bc code='182' bci='18'/>
<call method='1279' count='0' prof_factor='1.0' inline='1'/>
<uncommon_trap bci='18' reason='unloaded' action='reinterpret' index='46'/>
<bc code='184' bci='21'/>
<method id='1278' holder='1274' name='notInl' return='1138' arguments='1138 1137' flags='8' bytes='32'/>
<call method='1278' count='40960' prof_factor='1.0' inline='1'/>
<inline_fail reason='disallowed by CompileCommand'/>
<direct_call bci='21'/>
<parse_done stamp='0.041'/>
</parse>
<task_done success='1' nmsize='232' stamp='0.042'/>
</task>
</compilation_log>
<compilation_log thread='8'>
<task compile_id='12' compile_kind='osr' method='bench/A hot (JI)J' bytes='33' osr_bci='5' level='3' stamp='0.040'>
<type id='1' name='long'/>
<type id='2' name='int'/>
<klass id='3' name='bench/A' flags='17'/>
<klass id='4' name='[Ljava/lang/String;' flags='17'/>
<method id='5' holder='3' name='hot' return='1' arguments='1 2' flags='8' bytes='33'/>
<method id='6' holder='3' name='main' return='1' arguments='4' flags='8' bytes='33'/>
<parse method='5' stamp='0.040'>
<bc code='184' bci='21'/>
<call method='6' instr='invokestatic'/>
<inline_fail reason='callee is too large'/>
</parse>
<task_done success='1' nmsize='688' stamp='0.040'/>
</task>
</compilation_log>
<hotspot_log_done stamp='3.0'/>
</hotspot_log>
"#;

    fn m(class: &str, name: &str, descriptor: &str) -> MethodRef {
        MethodRef {
            class: class.into(),
            name: name.into(),
            descriptor: descriptor.into(),
        }
    }

    #[test]
    fn tasks_decisions_and_deopts() {
        let log = parse(LOG.as_bytes());
        assert_eq!(log.cut_short, None);
        let hot = m("bench.A", "hot", "(JI)J");
        let c2 = &log.tasks[&15];
        assert_eq!(
            (c2.level, c2.osr_bci),
            (Some(4), None),
            "level from <nmethod>"
        );
        assert_eq!(c2.method, hot);
        let inl = m("bench.A", "inl", "(JI)J");
        assert_eq!(
            c2.decisions,
            vec![
                CallDecision {
                    caller: hot.clone(),
                    bci: 14,
                    callee: inl.clone(),
                    outcome: Outcome::Inlined("force inline by CompileCommand".into()),
                },
                CallDecision {
                    caller: inl,
                    bci: 29,
                    callee: m("java.lang.Long", "rotateLeft", "(JI)J"),
                    outcome: Outcome::Inlined("inline (hot)".into()),
                },
                CallDecision {
                    caller: hot.clone(),
                    bci: 21,
                    callee: m("bench.A", "notInl", "(JI)J"),
                    outcome: Outcome::NotInlined("disallowed by CompileCommand".into()),
                },
            ]
        );
        let c1 = &log.tasks[&12];
        assert_eq!((c1.level, c1.osr_bci), (Some(3), Some(5)));
        assert_eq!(c1.method, hot, "slashes read as dots");
        assert_eq!(
            c1.decisions[0].callee.descriptor, "([Ljava/lang/String;)J",
            "array klass in a descriptor"
        );
        let deopts: Vec<&str> = log.deopts_of(15).map(|d| d.what.as_str()).collect();
        assert_eq!(
            deopts,
            [
                "uncommon trap unstable_if (action reinterpret) at bench.A.hot@8",
                "made not entrant"
            ],
            "the trap the compiler emitted is not a deoptimization"
        );
    }

    #[test]
    fn a_log_cut_short_keeps_what_it_has() {
        let cut = &LOG[..LOG.find("<compilation_log thread='8'>").unwrap() + 200];
        let log = parse(cut.as_bytes());
        assert!(log.tasks.contains_key(&15));
        let partial = log.tasks.get(&12);
        assert!(partial.is_none_or(|t| t.decisions.is_empty()));
        // Garbage in the middle: reading stops there, with a reason.
        let broken = LOG.replace("<compilation_log thread='8'>", "<compilation_log <<");
        let log = parse(broken.as_bytes());
        assert!(log.tasks.contains_key(&15) && !log.tasks.contains_key(&12));
        assert!(log.cut_short.unwrap().contains("unreadable XML"));
    }

    #[test]
    fn compile_ids_of_two_runs_are_ambiguous() {
        let twice = format!("<logs>{}{}</logs>", &LOG[39..], &LOG[39..]);
        let log = parse(twice.as_bytes());
        assert!(log.tasks.is_empty(), "{:?}", log.tasks.keys());
        assert!(log.ambiguous.contains(&15) && log.ambiguous.contains(&12));
    }
}
