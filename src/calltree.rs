//! GraalVM native-image points-to call-tree reports (`-H:+PrintAnalysisCallTree`): the set of
//! methods the closed-world analysis reaches, read from the TXT report or the CSV files
//! (`-H:PrintAnalysisCallTreeType=CSV`), as GraalVM's "Points-to Analysis Reports" page and its
//! `CallTreePrinter` describe them.
//!
//! - TXT: a tree under `VM Entry Points`; methods as `<holder>.<name>(<params>):<return>` with
//!   Java type names, params separated by `, `. Reached methods are those on `entry`, `directly
//!   calls`, `is overridden by` and `is implemented by` lines; `virtually calls` and
//!   `interfacially calls` name the declared target, which need not be reached.
//! - CSV: `call_tree_methods_*.csv` (`Id,Name,Type,Parameters,Return,Display,Flags,IsEntryPoint`,
//!   parameters space-separated or `empty`) and, next to it, `call_tree_targets_*.csv`
//!   (`InvokeId,TargetId`): reached methods are the entry points and every call target. Without a
//!   targets file (older GraalVM releases kept declared targets in a separate file) every method
//!   of the methods file counts as reached.
//!
//! Methods are keyed by declaring class, name and parameter types, with lambda and hidden class
//! names normalized: HotSpot names a lambda class `App$$Lambda$14/0x…` (or `+0x…`, `$$Lambda/0x…`),
//! native-image `App$$Lambda$<digest>`; both become `App$$Lambda`.

use crate::error::{Error, ErrorKind, Result};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Declaring class, method name and parameter types (Java names), normalized.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MethodKey {
    pub class: String,
    pub name: String,
    pub params: Vec<String>,
}

/// A class or type name with lambda and hidden-class suffixes removed.
pub fn normalize_type(name: &str) -> String {
    if let Some(at) = name.find("$$Lambda") {
        let arrays = name[at..].matches("[]").count();
        return format!("{}$$Lambda{}", &name[..at], "[]".repeat(arrays));
    }
    // A hidden class: `Name/0x…` (JVM spec form) or `Name+0x…` (HotSpot's signature form).
    for sep in ["/0x", "+0x"] {
        if let Some(at) = name.find(sep) {
            let arrays = name[at..].matches("[]").count();
            return format!("{}{}", &name[..at], "[]".repeat(arrays));
        }
    }
    name.to_string()
}

impl MethodKey {
    pub fn new(class: &str, name: &str, params: impl IntoIterator<Item = String>) -> Self {
        MethodKey {
            class: normalize_type(class),
            name: name.to_string(),
            params: params.into_iter().map(|p| normalize_type(&p)).collect(),
        }
    }

    /// From `<holder>.<name>(<params>):<return>` (TXT report).
    fn parse_formatted(text: &str) -> Option<Self> {
        let open = text.find('(')?;
        let close = open + text[open..].find(')')?;
        let (class, name) = text[..open].rsplit_once('.')?;
        let params = text[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        Some(MethodKey::new(class, name, params))
    }
}

/// The methods a call-tree report says the analysis reached.
#[derive(Debug, Default)]
pub struct CallTree {
    pub methods: HashSet<MethodKey>,
    /// Class and method names, for profiles that keep no parameter types.
    names: HashSet<(String, String)>,
}

impl CallTree {
    fn insert(&mut self, m: MethodKey) {
        self.names.insert((m.class.clone(), m.name.clone()));
        self.methods.insert(m);
    }

    pub fn contains(&self, m: &MethodKey) -> bool {
        self.methods.contains(m)
    }

    /// Whether some method of this class and name is reached (any parameters).
    pub fn contains_name(&self, class: &str, name: &str) -> bool {
        self.names
            .contains(&(normalize_type(class), name.to_string()))
    }
}

fn bad(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Usage,
        format!(
            "{} is not a native-image call-tree report: {what} (pass the call_tree_*.txt or call_tree_methods_*.csv that native-image -H:+PrintAnalysisCallTree writes into reports/)",
            path.display()
        ),
    )
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| bad(path, e))
}

/// Read a TXT report or a methods CSV (told apart by content).
pub fn read(path: &Path) -> Result<CallTree> {
    let text = read_text(path)?;
    let first = text.lines().next().unwrap_or("").trim();
    if first.starts_with("Id,Name,Type,Parameters") {
        let targets = targets_path(path);
        let targets = match targets.filter(|t| t.exists()) {
            Some(t) => Some(read_text(&t)?),
            None => None,
        };
        parse_csv(&text, targets.as_deref()).map_err(|e| bad(path, e))
    } else if first == "VM Entry Points" {
        Ok(parse_txt(&text))
    } else {
        Err(bad(
            path,
            "it starts with neither `VM Entry Points` nor a methods CSV header",
        ))
    }
}

/// `…/call_tree_methods_app_20240101_120000.csv` → `…/call_tree_targets_app_20240101_120000.csv`.
fn targets_path(methods: &Path) -> Option<PathBuf> {
    let name = methods.file_name()?.to_str()?;
    let rest = name.strip_prefix("call_tree_methods")?;
    Some(methods.with_file_name(format!("call_tree_targets{rest}")))
}

const REACHING: [&str; 4] = [
    "entry ",
    "directly calls ",
    "is overridden by ",
    "is implemented by ",
];

pub fn parse_txt(text: &str) -> CallTree {
    let mut tree = CallTree::default();
    for line in text.lines() {
        // The tree drawing: box characters and spaces before the keyword.
        let body = line.trim_start_matches(|c: char| " │├└─|`-".contains(c));
        let Some(rest) = REACHING.iter().find_map(|k| body.strip_prefix(k)) else {
            continue;
        };
        // Parameters are separated by ", ": the method ends after the closing parenthesis and
        // the return type, at ` id=`, ` @bci=` or `, parsing reason`.
        let Some(close) = rest.find(')') else {
            continue;
        };
        let end = rest[close..]
            .find([' ', ','])
            .map_or(rest.len(), |e| close + e);
        if let Some(m) = MethodKey::parse_formatted(&rest[..end]) {
            tree.insert(m);
        }
    }
    tree
}

/// Parse the methods CSV and, when given, the targets CSV.
pub fn parse_csv(methods: &str, targets: Option<&str>) -> std::result::Result<CallTree, String> {
    let mut lines = methods.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h.trim() == name)
            .ok_or_else(|| format!("no {name} column"))
    };
    let (id, name, class, params, entry) = (
        col("Id")?,
        col("Name")?,
        col("Type")?,
        col("Parameters")?,
        col("IsEntryPoint").ok(),
    );
    let reached: Option<HashSet<&str>> = targets.map(|t| {
        t.lines()
            .skip(1)
            .filter_map(|l| l.split(',').nth(1))
            .map(str::trim)
            .collect()
    });
    let mut tree = CallTree::default();
    for (n, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').collect();
        let cell = |i: usize| {
            cells
                .get(i)
                .map(|c| c.trim())
                .ok_or_else(|| format!("line {} has {} columns", n + 2, cells.len()))
        };
        let is_entry = entry.is_some_and(|e| cell(e) == Ok("true"));
        let method_id = cell(id)?;
        let is_target = reached.as_ref().is_none_or(|r| r.contains(method_id));
        if !(is_entry || is_target) {
            continue;
        }
        let params = match cell(params)? {
            "empty" => Vec::new(),
            p => p.split_whitespace().map(str::to_string).collect(),
        };
        tree.insert(MethodKey::new(cell(class)?, cell(name)?, params));
    }
    Ok(tree)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Hand-written in the TXT format of GraalVM's "Points-to Analysis Reports" page.
    pub(crate) const TXT: &str = "VM Entry Points
├── entry bench.App.main(java.lang.String[]):void id=0 
│   ├── directly calls bench.App.run(int, java.lang.String):long id=1 @bci=3 
│   │   └── interfacially calls java.util.function.LongUnaryOperator.applyAsLong(long):long @bci=12
│   │       └── is implemented by bench.App$$Lambda$a1b2c3d4e5.applyAsLong(long):long id=2 
│   └── virtually calls bench.Shape.area():double @bci=9
│       ├── is overridden by bench.Circle.area():double id=3 
│       └── is overridden by bench.Square.area():double id-ref=4 
└── entry bench.App.helper():void id=4 
    └── directly calls bench.App.run(int, java.lang.String):long id-ref=1 @bci=0->7 
";

    fn key(class: &str, name: &str, params: &[&str]) -> MethodKey {
        MethodKey::new(class, name, params.iter().map(|p| p.to_string()))
    }

    #[test]
    fn txt_reached_methods() {
        let tree = parse_txt(TXT);
        for m in [
            key("bench.App", "main", &["java.lang.String[]"]),
            key("bench.App", "run", &["int", "java.lang.String"]),
            key("bench.App$$Lambda", "applyAsLong", &["long"]),
            key("bench.Circle", "area", &[]),
            key("bench.Square", "area", &[]),
            key("bench.App", "helper", &[]),
        ] {
            assert!(tree.contains(&m), "{m:?} in {:?}", tree.methods);
        }
        assert_eq!(tree.methods.len(), 6, "{:?}", tree.methods);
        assert!(
            !tree.contains(&key("bench.Shape", "area", &[])),
            "a declared virtual target is not reached"
        );
        assert!(!tree.contains(&key("bench.App", "run", &["int"])));
        assert!(tree.contains_name("bench.App", "run"));
    }

    /// Hand-written in the CSV layout of GraalVM's CallTreePrinter.
    pub(crate) const METHODS_CSV: &str = "Id,Name,Type,Parameters,Return,Display,Flags,IsEntryPoint
0,main,bench.App,java.lang.String[],void,App.main,ps,true
1,run,bench.App,int java.lang.String,long,App.run,Ps,false
2,applyAsLong,bench.App$$Lambda$a1b2c3d4e5,long,long,AL.applyAsLong,p,false
3,area,bench.Shape,empty,double,S.area,pa,false
4,area,bench.Circle,empty,double,C.area,p,false
";
    pub(crate) const TARGETS_CSV: &str = "InvokeId,TargetId
0,1
1,2
2,4
";

    #[test]
    fn csv_reached_methods() {
        let tree = parse_csv(METHODS_CSV, Some(TARGETS_CSV)).unwrap();
        let mut got: Vec<&MethodKey> = tree.methods.iter().collect();
        got.sort();
        assert_eq!(
            got,
            [
                &key("bench.App", "main", &["java.lang.String[]"]),
                &key("bench.App", "run", &["int", "java.lang.String"]),
                &key("bench.App$$Lambda", "applyAsLong", &["long"]),
                &key("bench.Circle", "area", &[]),
            ]
        );
        let all = parse_csv(METHODS_CSV, None).unwrap();
        assert_eq!(all.methods.len(), 5, "without targets, every method");
        assert!(parse_csv("Id,Name\n", None)
            .unwrap_err()
            .contains("no Type column"));
        let short = parse_csv("Id,Name,Type,Parameters\n0,main\n", None).unwrap_err();
        assert!(short.contains("line 2 has 2 columns"), "{short}");
    }

    /// Files as native-image names them; the targets CSV is found next to the methods CSV.
    #[test]
    fn reports_read_from_files() {
        let dir = std::env::temp_dir().join(format!("jvmperf-calltree-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let methods = dir.join("call_tree_methods_app_20240101_120000.csv");
        std::fs::write(&methods, METHODS_CSV).unwrap();
        assert_eq!(read(&methods).unwrap().methods.len(), 5, "no targets file");
        std::fs::write(
            dir.join("call_tree_targets_app_20240101_120000.csv"),
            TARGETS_CSV,
        )
        .unwrap();
        assert_eq!(read(&methods).unwrap().methods.len(), 4);
        let txt = dir.join("call_tree_app_20240101_120000.txt");
        std::fs::write(&txt, TXT).unwrap();
        assert_eq!(read(&txt).unwrap().methods.len(), 6);
        let other = dir.join("object_tree.txt");
        std::fs::write(&other, "Heap roots\n").unwrap();
        let e = read(&other).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(
            e.message.contains("not a native-image call-tree report"),
            "{}",
            e.message
        );
        assert!(read(&dir.join("missing.txt")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lambda_and_hidden_class_names() {
        for (hotspot, image) in [
            (
                "bench.App$$Lambda$14/0x0000000800c03000",
                "bench.App$$Lambda$a1b2c3",
            ),
            (
                "bench.App$$Lambda/0x00007f3c1c00a000",
                "bench.App$$Lambda$a1b2c3",
            ),
            (
                "bench.App$$Lambda$14+0x0000000800c03000",
                "bench.App$$Lambda",
            ),
        ] {
            assert_eq!(normalize_type(hotspot), normalize_type(image), "{hotspot}");
        }
        assert_eq!(normalize_type("bench.Gen/0x0000000800c04000"), "bench.Gen");
        assert_eq!(normalize_type("bench.App$Inner[]"), "bench.App$Inner[]");
        assert_eq!(
            targets_path(Path::new("r/call_tree_methods_app_20240101_1200.csv")),
            Some(PathBuf::from("r/call_tree_targets_app_20240101_1200.csv"))
        );
    }
}
