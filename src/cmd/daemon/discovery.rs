//! Finding the HotSpot JVMs on the host: processes with `libjvm.so` mapped, old enough to have
//! their signal handlers in place (an attach signals the JVM), and named for people by their main
//! class or jar.

use crate::process::identity::proc_process;
use procfs::process::{MMapPath, Process};
use procfs::Current;
use regex::Regex;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// A JVM is attached to only once it has run this long: a JVM still starting up may not yet
/// handle the SIGQUIT that starts its Attach Listener.
const MIN_AGE: Duration = Duration::from_secs(2);

/// A process found to be a JVM to profile.
#[derive(Debug, Clone)]
pub struct FoundJvm {
    pub pid: u32,
    /// When its process started (clock ticks after boot): with the pid, it names the process.
    pub start: u64,
    /// Main class, or jar file name, or the command name.
    pub name: String,
}

/// Which processes to look at: the pids given, or every one; and a pattern their command line
/// must match.
pub struct Selection {
    pub pids: Vec<u32>,
    pub pattern: Option<Regex>,
}

/// Processes seen before, by pid, with their start time and command name: a pid reused, or a
/// process that exec'd (a shell script's `exec java`), is looked at again.
#[derive(Default)]
pub struct Seen {
    seen: HashMap<u32, (u64, String)>,
}

impl Seen {
    /// JVMs not seen before that are old enough to attach to. Processes we may not read are
    /// passed over (they cannot be profiled by us anyway).
    pub fn scan(&mut self, selection: &Selection) -> Vec<FoundJvm> {
        let me = std::process::id();
        let pids: Vec<u32> = if selection.pids.is_empty() {
            procfs::process::all_processes()
                .map(|all| {
                    all.filter_map(|p| u32::try_from(p.ok()?.pid).ok())
                        .collect()
                })
                .unwrap_or_default()
        } else {
            selection.pids.clone()
        };
        self.seen.retain(|&pid, _| proc_process(pid).is_ok());
        let mut found = Vec::new();
        for pid in pids.into_iter().filter(|&p| p != me) {
            let Ok(process) = proc_process(pid) else {
                continue;
            };
            let Some((start, age, comm)) = start_and_age(&process) else {
                continue;
            };
            let key = (start, comm.trim().to_string());
            if self.seen.get(&pid) == Some(&key) || age < MIN_AGE {
                continue;
            }
            self.seen.insert(pid, key);
            if !maps_libjvm(&process) {
                continue;
            }
            let args = command_line(&process);
            if selection
                .pattern
                .as_ref()
                .is_some_and(|re| !re.is_match(&args.join(" ")))
            {
                continue;
            }
            let name = own_name(pid)
                .or_else(|| main_name(&args))
                .unwrap_or_else(|| comm.trim().to_string());
            found.push(FoundJvm { pid, start, name });
        }
        found
    }
}

fn maps_libjvm(process: &Process) -> bool {
    process.maps().is_ok_and(|maps| {
        maps.iter().any(|m| match &m.pathname {
            MMapPath::Path(p) => p.as_os_str().as_bytes().ends_with(b"/libjvm.so"),
            _ => false,
        })
    })
}

/// The arguments, read as bytes and made UTF-8 lossily: `procfs`'s `cmdline` fails on an
/// argument that is not UTF-8.
pub fn command_line(process: &Process) -> Vec<String> {
    let mut bytes = Vec::new();
    process
        .open_relative("cmdline")
        .and_then(|mut f| Ok(f.read_to_end(&mut bytes)?))
        .map(|_| {
            bytes
                .split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The process's start time (clock ticks after boot, field 22 of `/proc/PID/stat`), its age and
/// its command name (the same as `/proc/PID/comm`).
fn start_and_age(process: &Process) -> Option<(u64, Duration, String)> {
    let stat = process.stat().ok()?;
    let ticks = Some(procfs::ticks_per_second()).filter(|&t| t > 0)?;
    let uptime = procfs::Uptime::current().ok()?.uptime;
    let age = (uptime - stat.starttime as f64 / ticks as f64).max(0.0);
    Some((stat.starttime, Duration::from_secs_f64(age), stat.comm))
}

/// Options of the `java` launcher that take the next argument as their value.
const OPTIONS_WITH_VALUE: &[&str] = &[
    "-cp",
    "-classpath",
    "--class-path",
    "-p",
    "--module-path",
    "--upgrade-module-path",
    "--add-modules",
    "--limit-modules",
    "--add-reads",
    "--add-exports",
    "--add-opens",
    "--patch-module",
    "--enable-native-access",
];

/// The labels a profile of JVM `pid` carries (pprof labels, the flame graph's title): host, pid,
/// main class or jar, JDK version.
pub fn target_labels(
    host: &str,
    pid: u32,
    main: &str,
    jdk: Option<String>,
) -> Vec<(String, String)> {
    vec![
        ("host".to_string(), host.to_string()),
        ("pid".to_string(), pid.to_string()),
        ("main".to_string(), main.to_string()),
        ("jdk".to_string(), jdk.unwrap_or_else(|| "unknown".into())),
    ]
}

/// The main class or jar the JVM names itself by in its performance counters (as `jps` shows
/// it): right whatever launcher started it (`javac --release 11 …` runs
/// `com.sun.tools.javac.Main`).
fn own_name(pid: u32) -> Option<String> {
    let process = crate::process::TargetProcess::open(pid).ok()?;
    command_name(&crate::process::hsperf::java_command(&process)?)
}

/// The main class, jar file name or module's main class of `sun.rt.javaCommand` (`bench.App
/// --port 1`, `/opt/app.jar`, `jdk.compiler/com.sun.tools.javac.Main`).
fn command_name(command: &str) -> Option<String> {
    let first = command.split_whitespace().next()?;
    let name = match first.strip_suffix(".jar") {
        Some(_) => Path::new(first).file_name()?.to_str()?,
        None => first.rsplit('/').next()?,
    };
    (!name.is_empty()).then(|| name.to_string())
}

/// The main class (`bench.App`), the jar's file name (`app.jar`) or the module's main class
/// from a `java` command line.
pub fn main_name(args: &[String]) -> Option<String> {
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-jar" => {
                let jar = it.next()?;
                return Path::new(jar)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned());
            }
            "-m" | "--module" => {
                let module = it.next()?;
                return Some(module.rsplit('/').next()?.to_string());
            }
            a if OPTIONS_WITH_VALUE.contains(&a) => {
                it.next();
            }
            a if a.starts_with('-') => {}
            class => return Some(class.to_string()),
        }
    }
    None
}

/// `name` as one file-name component: letters, digits, `.`, `_` and `-` kept, the rest `_`.
pub fn file_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .take(100)
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect();
    match safe.trim_start_matches('.') {
        "" => "jvm".to_string(),
        s => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn main_class_jar_or_module() {
        let cases = [
            ("java -Xmx1g -cp a.jar:b bench.App 5", Some("bench.App")),
            (
                "java -XX:+UseG1GC -jar /srv/app/shop-1.2.jar --port 8080",
                Some("shop-1.2.jar"),
            ),
            (
                "java --add-opens java.base/java.lang=ALL-UNNAMED -m app/com.x.Main",
                Some("com.x.Main"),
            ),
            ("java --class-path lib Main", Some("Main")),
            ("java -version", None),
        ];
        for (line, want) in cases {
            assert_eq!(main_name(&args(line)).as_deref(), want, "{line}");
        }
    }

    #[test]
    fn the_jvms_own_command_names_its_main_class_or_jar() {
        for (command, want) in [
            ("bench.App --port 1", Some("bench.App")),
            ("/opt/svc/app.jar -v", Some("app.jar")),
            (
                "jdk.compiler/com.sun.tools.javac.Main --release 11",
                Some("com.sun.tools.javac.Main"),
            ),
            ("", None),
        ] {
            assert_eq!(command_name(command).as_deref(), want, "{command}");
        }
    }

    #[test]
    fn a_jvm_started_from_an_argument_file_is_named_by_its_main_class() {
        let Some(jvm) = crate::native::testutil::SleepingJvm::start() else {
            return;
        };
        let args = command_line(&proc_process(jvm.pid()).unwrap());
        assert!(args.iter().any(|a| a.starts_with('@')), "{args:?}");
        assert_ne!(main_name(&args).as_deref(), Some("Sleep"), "{args:?}");
        assert_eq!(own_name(jvm.pid()).as_deref(), Some("Sleep"));
    }

    #[test]
    fn names_become_one_safe_file_name() {
        assert_eq!(file_safe("shop-1.2.jar"), "shop-1.2.jar");
        assert_eq!(file_safe("../../etc/x y"), "_.._etc_x_y");
        assert_eq!(file_safe(".."), "jvm");
        assert_eq!(file_safe(""), "jvm");
    }

    #[test]
    fn this_test_process_is_not_a_jvm() {
        let mut seen = Seen::default();
        let me = std::process::id();
        let selection = Selection {
            pids: vec![me, 1],
            pattern: None,
        };
        assert!(seen.scan(&selection).iter().all(|j| j.pid != me));
    }

    #[test]
    fn start_age_name_and_arguments_of_this_process() {
        let me = proc_process(std::process::id()).unwrap();
        let (start, age, comm) = start_and_age(&me).unwrap();
        assert!(start > 0 && age < Duration::from_secs(24 * 3600 * 365));
        let expected = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(comm, expected.trim_end());
        let args: Vec<String> = std::env::args().collect();
        assert_eq!(command_line(&me), args);
        assert!(!maps_libjvm(&me));
    }
}
