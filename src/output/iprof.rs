//! GraalVM iprof (profile-guided optimization input), version 1.0.0: `types`, `methods` and one
//! `samplingProfiles` entry per distinct Java call stack.
//!
//! - `types`: every type a written method's signature mentions — primitives by name (`int`),
//!   classes by fully qualified name (`java.lang.String`), arrays in JVM binary-name form
//!   (`[Ljava.lang.String;`, `[I`).
//! - `methods`: `signature` = [declaring type, return type, parameter types…].
//! - `samplingProfiles`: `ctx` = `method:bci<caller:bci<…`, leaf first; `records` = [samples].
//!   Bcis are the model's: the inline record's bci for compiled and inlined frames, the bcp's for
//!   interpreted frames, the call site's for callers; 0 for method entry and for compiled code
//!   without a debug point (as HotSpot's own stack walkers report them); −1 only for a compiled
//!   frame jvmperf could not resolve.
//!
//! Only Java frames (compiled, inlined, interpreted) are written: native, kernel and HotSpot stub
//! frames are not Java methods and are left out of the contexts, so a stack keeps its Java frames
//! in order, and a sample with no Java frame at all (a GC or compiler thread) is not written.
//! iprof has no threads, times or frame kinds: read back, every frame is a compiled Java frame.

use crate::error::{Error, ErrorKind, Result};
use crate::java_names::{parse_method_descriptor, primitive_name};
use crate::profile::{Frame, FrameId, FrameKind, Profile, StackId, MAX_WEIGHT};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub const VERSION: &str = "1.0.0";
/// The declaring type of Java frames whose method is unknown (no class in the name).
const UNKNOWN_TYPE: &str = "[unknown]";

#[derive(Serialize, Deserialize)]
struct Iprof {
    version: String,
    types: Vec<Type>,
    methods: Vec<Method>,
    #[serde(rename = "samplingProfiles", default)]
    sampling_profiles: Vec<Context>,
}

#[derive(Serialize, Deserialize)]
struct Type {
    id: i64,
    name: String,
}

#[derive(Serialize, Deserialize)]
struct Method {
    id: i64,
    name: String,
    signature: Vec<i64>,
}

#[derive(Serialize, Deserialize)]
struct Context {
    ctx: String,
    records: Vec<i64>,
}

/// A field descriptor (`I`, `[Ljava/lang/String;`, `Ljava/util/Map$Entry;`) as the type name
/// iprof uses (`int`, `[Ljava.lang.String;`, `java.util.Map$Entry`).
pub fn type_name(descriptor: &str) -> String {
    match descriptor.as_bytes() {
        [b'[', ..] => descriptor.replace('/', "."),
        [b'L', .., b';'] => descriptor[1..descriptor.len() - 1].replace('/', "."),
        [c] => primitive_name(*c).unwrap_or(descriptor).to_string(),
        _ => descriptor.replace('/', "."),
    }
}

/// The inverse of [`type_name`].
pub fn descriptor_of(type_name: &str) -> String {
    if type_name.starts_with('[') {
        return type_name.replace('.', "/");
    }
    for code in b"ZBCSIJFDV" {
        if primitive_name(*code) == Some(type_name) {
            return (*code as char).to_string();
        }
    }
    format!("L{};", type_name.replace('.', "/"))
}

#[derive(Default)]
struct Tables {
    types: Vec<Type>,
    type_ids: HashMap<String, i64>,
    methods: Vec<Method>,
    method_ids: HashMap<(String, String, String), i64>,
}

impl Tables {
    fn type_id(&mut self, name: String) -> i64 {
        if let Some(&id) = self.type_ids.get(&name) {
            return id;
        }
        let id = self.types.len() as i64;
        self.types.push(Type {
            id,
            name: name.clone(),
        });
        self.type_ids.insert(name, id);
        id
    }

    fn method_id(&mut self, frame: &Frame) -> i64 {
        let (class, method) = frame.class_and_method();
        let class = if class.is_empty() {
            UNKNOWN_TYPE
        } else {
            class
        };
        let descriptor = frame.signature.as_deref().unwrap_or("");
        let key = (
            class.to_string(),
            method.to_string(),
            descriptor.to_string(),
        );
        if let Some(&id) = self.method_ids.get(&key) {
            return id;
        }
        let mut signature = vec![self.type_id(class.to_string())];
        if let Some((params, ret)) = parse_method_descriptor(descriptor) {
            signature.push(self.type_id(type_name(ret)));
            for p in params {
                signature.push(self.type_id(type_name(p)));
            }
        }
        let id = self.methods.len() as i64;
        self.methods.push(Method {
            id,
            name: method.to_string(),
            signature,
        });
        self.method_ids.insert(key, id);
        id
    }
}

pub fn render(profile: &Profile) -> Result<Vec<u8>> {
    let mut tables = Tables::default();
    let mut frame_method: Vec<Option<i64>> = vec![None; profile.frames.len()];
    let mut contexts: HashMap<String, i64> = HashMap::new();
    let mut ctx = String::new();
    for (stack, weight) in profile.stack_weights().into_iter().enumerate() {
        if weight == 0 {
            continue;
        }
        ctx.clear();
        for f in profile.stacks.leaf_to_root(stack as StackId) {
            let frame = &profile.frames[f as usize];
            if !frame.kind.is_java() {
                continue;
            }
            let id = *frame_method[f as usize].get_or_insert_with(|| tables.method_id(frame));
            if !ctx.is_empty() {
                ctx.push('<');
            }
            ctx.push_str(&format!("{id}:{}", frame.bci.unwrap_or(-1)));
        }
        if !ctx.is_empty() {
            *contexts.entry(ctx.clone()).or_default() += weight as i64;
        }
    }
    let mut sampling_profiles: Vec<Context> = contexts
        .into_iter()
        .map(|(ctx, n)| Context {
            ctx,
            records: vec![n],
        })
        .collect();
    sampling_profiles.sort_by(|a, b| b.records.cmp(&a.records).then(a.ctx.cmp(&b.ctx)));
    let iprof = Iprof {
        version: VERSION.to_string(),
        types: tables.types,
        methods: tables.methods,
        sampling_profiles,
    };
    serde_json::to_vec_pretty(&iprof).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("cannot encode the iprof file: {e}"),
        )
    })
}

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Usage,
        format!(
            "not a valid iprof file: {what} (pass an .iprof file as jvmperf or GraalVM writes it)"
        ),
    )
}

pub fn parse(bytes: &[u8]) -> Result<Profile> {
    let iprof: Iprof = serde_json::from_slice(bytes).map_err(corrupt)?;
    if !iprof.version.starts_with("1.") {
        return Err(corrupt(format!(
            "version {:?}, this jvmperf reads 1.x",
            iprof.version
        )));
    }
    let mut types: HashMap<i64, &str> = HashMap::new();
    for t in &iprof.types {
        if types.insert(t.id, &t.name).is_some() {
            return Err(corrupt(format!("type id {} appears twice", t.id)));
        }
    }
    let mut methods: HashMap<i64, Frame> = HashMap::new();
    for m in &iprof.methods {
        let names = m
            .signature
            .iter()
            .map(|id| {
                types.get(id).copied().ok_or_else(|| {
                    corrupt(format!(
                        "method {} names type {id}, which is not in types",
                        m.id
                    ))
                })
            })
            .collect::<Result<Vec<&str>>>()?;
        let Some((class, rest)) = names.split_first() else {
            return Err(corrupt(format!("method {} has an empty signature", m.id)));
        };
        let signature = rest.split_first().map(|(ret, params)| {
            let params: String = params.iter().map(|p| descriptor_of(p)).collect();
            format!("({params}){}", descriptor_of(ret))
        });
        let frame = Frame {
            signature,
            ..Frame::named(format!("{class}.{}", m.name), FrameKind::Jit)
        };
        if methods.insert(m.id, frame).is_some() {
            return Err(corrupt(format!("method id {} appears twice", m.id)));
        }
    }
    let mut profile = Profile::default();
    let mut stack: Vec<FrameId> = Vec::new();
    for c in &iprof.sampling_profiles {
        let weight = match c.records.as_slice() {
            [n] if (0..=MAX_WEIGHT as i64).contains(n) => *n as u64,
            _ => {
                return Err(corrupt(format!(
                    "context {:?} has records {:?}, expected one count",
                    c.ctx, c.records
                )))
            }
        };
        stack.clear();
        for part in c.ctx.split('<') {
            let bad = || corrupt(format!("context {:?}: {part:?} is not method:bci", c.ctx));
            let (m, bci) = part.split_once(':').ok_or_else(bad)?;
            let m: i64 = m.parse().map_err(|_| bad())?;
            let bci: i32 = bci.parse().map_err(|_| bad())?;
            let method = methods.get(&m).ok_or_else(|| {
                corrupt(format!(
                    "context {:?} names method {m}, which is not in methods",
                    c.ctx
                ))
            })?;
            stack.push(profile.intern_frame(Frame {
                bci: Some(bci),
                ..method.clone()
            }));
        }
        stack.reverse();
        profile.add_counted(stack.clone(), 0, weight);
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Sample;

    fn java(name: &str, sig: &str, kind: FrameKind, bci: i32) -> Frame {
        Frame {
            signature: Some(sig.into()),
            bci: Some(bci),
            ..Frame::named(name, kind)
        }
    }

    #[test]
    fn type_names() {
        for (d, n) in [
            ("I", "int"),
            ("V", "void"),
            ("[Ljava/lang/String;", "[Ljava.lang.String;"),
            ("[[J", "[[J"),
            ("Ljava/util/Map$Entry;", "java.util.Map$Entry"),
        ] {
            assert_eq!(type_name(d), n);
            assert_eq!(descriptor_of(n), d);
        }
    }

    #[test]
    fn java_frames_only_leaf_first_and_read_back() {
        let mut p = Profile::default();
        let thread_start = p.intern_frame(Frame::named("start_thread", FrameKind::Native));
        let main = p.intern_frame(java(
            "bench.App.main",
            "([Ljava/lang/String;)V",
            FrameKind::Interpreted,
            7,
        ));
        let hot = p.intern_frame(java("bench.App.hot", "(JI)J", FrameKind::Jit, 12));
        let helper = p.intern_frame(java("bench.App.helper", "(JI)J", FrameKind::Inlined, 3));
        let stub = p.intern_frame(Frame::named("StubRoutines", FrameKind::Stub));
        let kernel = p.intern_frame(Frame::named("do_syscall_64", FrameKind::Kernel));
        let s1 = p.intern_stack(vec![thread_start, main, hot, helper]);
        let s2 = p.intern_stack(vec![thread_start, main, hot, helper, stub, kernel]);
        let s3 = p.intern_stack(vec![thread_start]);
        for (stack, weight) in [(s1, 3), (s2, 2), (s3, 5)] {
            p.samples.push(Sample {
                time: 0,
                tid: 1,
                stack,
                weight,
            });
        }
        let bytes = render(&p).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["version"], "1.0.0");
        let profiles = v["samplingProfiles"].as_array().unwrap();
        assert_eq!(
            profiles.len(),
            1,
            "native-only stack dropped, s1 and s2 merged"
        );
        assert_eq!(profiles[0]["ctx"], "0:3<1:12<2:7");
        assert_eq!(profiles[0]["records"], serde_json::json!([5]));
        let types: Vec<&str> = v["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            ["bench.App", "long", "int", "void", "[Ljava.lang.String;"]
        );
        assert_eq!(v["methods"][2]["signature"], serde_json::json!([0, 3, 4]));
        assert_eq!(
            v["methods"][0]["signature"],
            serde_json::json!([0, 1, 1, 2])
        );

        let back = parse(&bytes).unwrap();
        assert_eq!(back.total_weight(), 5);
        let names: Vec<(&str, Option<&str>, Option<i32>)> = back
            .stacks
            .frames(0)
            .into_iter()
            .map(|f| {
                let f = &back.frames[f as usize];
                (f.name.as_str(), f.signature.as_deref(), f.bci)
            })
            .collect();
        assert_eq!(
            names,
            [
                ("bench.App.main", Some("([Ljava/lang/String;)V"), Some(7)),
                ("bench.App.hot", Some("(JI)J"), Some(12)),
                ("bench.App.helper", Some("(JI)J"), Some(3)),
            ]
        );
    }

    #[test]
    fn bad_files_are_errors() {
        for (text, needle) in [
            ("", "EOF"),
            (
                "{\"version\":\"1.0.0\",\"types\":[]}",
                "missing field `methods`",
            ),
            (
                "{\"version\":\"2.0.0\",\"types\":[],\"methods\":[]}",
                "version",
            ),
            (
                r#"{"version":"1.0.0","types":[],"methods":[{"id":0,"name":"m","signature":[3]}]}"#,
                "names type 3",
            ),
            (
                r#"{"version":"1.0.0","types":[{"id":0,"name":"A"}],"methods":[{"id":0,"name":"m","signature":[0]}],"samplingProfiles":[{"ctx":"1:0","records":[1]}]}"#,
                "names method 1",
            ),
            (
                r#"{"version":"1.0.0","types":[{"id":0,"name":"A"}],"methods":[{"id":0,"name":"m","signature":[0]}],"samplingProfiles":[{"ctx":"0:x","records":[1]}]}"#,
                "not method:bci",
            ),
            (
                r#"{"version":"1.0.0","types":[{"id":0,"name":"A"}],"methods":[{"id":0,"name":"m","signature":[0]}],"samplingProfiles":[{"ctx":"0:1","records":[1,2]}]}"#,
                "expected one count",
            ),
        ] {
            let e = parse(text.as_bytes()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Usage);
            assert!(e.message.contains(needle), "{needle}: {}", e.message);
        }
        let empty = parse(br#"{"version":"1.0.0","types":[],"methods":[]}"#).unwrap();
        assert!(empty.samples.is_empty());
    }
}
