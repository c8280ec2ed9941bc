//! HotSpot's dynamic attach protocol (the client side of `jcmd`/`jattach`; HotSpot's
//! `attachListener_linux.cpp`):
//! trigger file + SIGQUIT starts the JVM's Attach Listener, which serves `/tmp/.java_pid<nspid>`; a v1
//! request is `"1\0<cmd>\0<arg1>\0<arg2>\0<arg3>\0"` and the reply is a status line plus free text.

use crate::error::{err, Error, ErrorKind, Result};
use crate::hotspot::HotSpot;
use crate::process::TargetProcess;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SIGQUIT: i32 = 3;
/// Longest reply we accept from the JVM (a `load` reply is one or two lines).
const MAX_REPLY: u64 = 1 << 20;
/// HotSpot's v1 limits: command ≤ 16 bytes, each argument ≤ 1024 bytes.
const MAX_CMD: usize = 16;
const MAX_ARG: usize = 1024;

/// How long we wait for the Attach Listener to come up after SIGQUIT: the JDK's own attach waits
/// 10 s (`sun.tools.attach.attachTimeout`), and signals again halfway if the socket is not there
/// yet (`VirtualMachineImpl` on Linux), as we do: a signal that reached a JVM still starting up,
/// or one slowed by a loaded host, gets a second chance.
const LISTENER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long we wait for the reply to one command.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// What attach-relevant flags say, when the flag table was readable.
#[derive(Debug, Default, Clone)]
pub struct AttachFlags {
    pub disable_attach_mechanism: Option<bool>,
    pub enable_dynamic_agent_loading: Option<bool>,
}

/// Read attach-relevant flags through VMStructs, without signalling the target.
pub fn read_attach_flags(jvm: &HotSpot) -> AttachFlags {
    AttachFlags {
        disable_attach_mechanism: jvm.read_bool_flag("DisableAttachMechanism"),
        enable_dynamic_agent_loading: jvm.read_bool_flag("EnableDynamicAgentLoading"),
    }
}

/// Refuse early, with the reason, when the JVM's flags make attach impossible.
pub fn check_flags(process: &TargetProcess, flags: &AttachFlags) -> Result<()> {
    if flags.disable_attach_mechanism == Some(true) {
        return err(
            ErrorKind::Attach,
            format!(
                "JVM {} runs with -XX:+DisableAttachMechanism: attach is impossible until it is restarted without that flag",
                process.pid
            ),
        );
    }
    if flags.enable_dynamic_agent_loading == Some(false) {
        return err(
            ErrorKind::Attach,
            format!(
                "JVM {} runs with -XX:-EnableDynamicAgentLoading: agents cannot be loaded; restart it with -XX:+EnableDynamicAgentLoading",
                process.pid
            ),
        );
    }
    Ok(())
}

/// `/tmp` as the target sees it (HotSpot always uses `/tmp`, not `java.io.tmpdir`).
fn target_tmp(process: &TargetProcess) -> PathBuf {
    let inside = process.path_in_root(Path::new("/tmp"));
    if inside.is_dir() {
        inside
    } else {
        PathBuf::from("/tmp")
    }
}

fn socket_path(process: &TargetProcess) -> PathBuf {
    target_tmp(process).join(format!(".java_pid{}", process.nspid))
}

fn is_socket(path: &Path) -> bool {
    fs::symlink_metadata(path)
        .map(|m| m.file_type().is_socket())
        .unwrap_or(false)
}

/// An attach socket at the JVM's path that the JVM cannot have made: the Attach Listener binds it
/// in the JVM's process, as the JVM's user. One of another user was left by an earlier process
/// that had this pid (killed before it could remove it); in sticky `/tmp` the JVM cannot replace
/// it, so no attach can succeed until it is removed.
pub fn foreign_socket(process: &TargetProcess) -> Option<Error> {
    let sock = socket_path(process);
    let meta = fs::symlink_metadata(&sock).ok()?;
    let owner = meta.uid();
    (meta.file_type().is_socket() && owner != process.euid).then(|| {
        Error::new(
            ErrorKind::Attach,
            format!(
                "{} belongs to uid {owner}, not to JVM {}'s user (uid {}): an earlier process \
                 with this pid left it, and it keeps this JVM's Attach Listener from starting; \
                 remove it (as uid {owner} or root)",
                sock.display(),
                process.pid,
                process.euid
            ),
        )
    })
}

/// Make sure the Attach Listener serves its socket; start it with a trigger file and SIGQUIT if not.
pub fn ensure_listener(process: &TargetProcess) -> Result<PathBuf> {
    if let Some(e) = foreign_socket(process) {
        return Err(e);
    }
    let sock = socket_path(process);
    if is_socket(&sock) {
        return Ok(sock);
    }
    if !process.catches_signal(SIGQUIT) {
        return err(
            ErrorKind::Attach,
            format!(
                "JVM {} does not handle SIGQUIT (started with -Xrs?) and has no attach socket at {}: signalling it would kill it; restart it without -Xrs or with -XX:+StartAttachListener",
                process.pid,
                sock.display()
            ),
        );
    }
    let trigger = TriggerFile::create(process)?;
    // Another attacher (jcmd, an agent's launcher) may have started the listener meanwhile: a
    // SIGQUIT to a running listener would print a thread dump on the JVM's stdout.
    if is_socket(&sock) {
        return Ok(sock);
    }
    signal_quit(process.pid)?;
    let start = Instant::now();
    let mut step = Duration::from_millis(5);
    let mut signalled_again = false;
    while start.elapsed() < LISTENER_TIMEOUT {
        crate::interrupt::check_while_attaching(process.pid)?;
        std::thread::sleep(step);
        if is_socket(&sock) {
            drop(trigger);
            return Ok(sock);
        }
        if !signalled_again && start.elapsed() >= LISTENER_TIMEOUT / 2 {
            signalled_again = true;
            signal_quit(process.pid)?;
        }
        if !process.is_alive() {
            return err(
                ErrorKind::NoProcess,
                format!("process {} exited while jvmperf was attaching", process.pid),
            );
        }
        step = (step * 2).min(Duration::from_millis(200));
    }
    drop(trigger);
    err(
        ErrorKind::Attach,
        format!(
            "JVM {} did not start its Attach Listener within {} s (is it hung, or started with -XX:+DisableAttachMechanism?)",
            process.pid,
            LISTENER_TIMEOUT.as_secs()
        ),
    )
}

fn signal_quit(pid: u32) -> Result<()> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGQUIT,
    )
    .map_err(|e| {
        Error::new(
            ErrorKind::Permission,
            format!("cannot signal process {pid}: {e} (run as the JVM's user or root)"),
        )
    })
}

/// The `.attach_pid<nspid>` file that tells HotSpot's signal handler to start the Attach Listener.
/// Removed again on drop.
struct TriggerFile {
    path: PathBuf,
}

impl TriggerFile {
    fn create(process: &TargetProcess) -> Result<Self> {
        let name = format!(".attach_pid{}", process.nspid);
        let candidates = [process.cwd().join(&name), target_tmp(process).join(&name)];
        let mut last_err = None;
        for path in candidates {
            // O_EXCL|O_NOFOLLOW: never follow a planted symlink in a world-writable directory.
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
            {
                Ok(file) => {
                    // HotSpot accepts the file only if it is owned by the JVM's euid or by root.
                    if nix::unistd::geteuid().is_root() {
                        let _ = nix::unistd::fchown(
                            &file,
                            Some(nix::unistd::Uid::from_raw(process.euid)),
                            Some(nix::unistd::Gid::from_raw(process.egid)),
                        );
                    }
                    return Ok(TriggerFile { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let meta = fs::symlink_metadata(&path).ok();
                    let usable = meta.is_some_and(|m| {
                        m.file_type().is_file() && (m.uid() == process.euid || m.uid() == 0)
                    });
                    if usable {
                        // Another attacher's trigger; it serves us too and is theirs to remove.
                        return Ok(TriggerFile {
                            path: PathBuf::new(),
                        });
                    }
                    last_err = Some(format!(
                        "{} exists and is not a trigger file",
                        path.display()
                    ));
                }
                Err(e) => last_err = Some(format!("{}: {e}", path.display())),
            }
        }
        err(
            ErrorKind::Permission,
            format!(
                "cannot create the attach trigger file ({}); run as the JVM's user or root",
                last_err.unwrap_or_default()
            ),
        )
    }
}

impl Drop for TriggerFile {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Send one v1 command and return `(status, body)`.
pub fn execute(sock: &Path, cmd: &str, args: &[&str]) -> Result<(i32, String)> {
    if cmd.len() > MAX_CMD || args.len() > 3 || args.iter().any(|a| a.len() > MAX_ARG) {
        return err(
            ErrorKind::Internal,
            format!("attach command {cmd:?} exceeds the protocol's limits"),
        );
    }
    let mut request = Vec::new();
    for part in ["1", cmd]
        .iter()
        .chain(args.iter())
        .chain(std::iter::repeat_n(&"", 3 - args.len()))
    {
        request.extend_from_slice(part.as_bytes());
        request.push(0);
    }
    let io_err = |what: &str, e: std::io::Error| {
        let kind = if e.kind() == std::io::ErrorKind::PermissionDenied {
            ErrorKind::Permission
        } else {
            ErrorKind::Attach
        };
        Error::new(
            kind,
            format!("attach socket {}: {what}: {e}", sock.display()),
        )
    };
    let mut stream = UnixStream::connect(sock).map_err(|e| io_err("connect", e))?;
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| io_err("timeout", e))?;
    stream.write_all(&request).map_err(|e| io_err("send", e))?;
    let mut reply = Vec::new();
    stream
        .take(MAX_REPLY)
        .read_to_end(&mut reply)
        .map_err(|e| io_err("read reply", e))?;
    let text = String::from_utf8_lossy(&reply);
    let (status, body) = text.split_once('\n').unwrap_or((&text, ""));
    let status = status.trim().parse::<i32>().map_err(|_| {
        Error::new(
            ErrorKind::Attach,
            format!(
                "the JVM closed the attach connection without a reply (peer credentials rejected? run as the JVM's user or root): {:?}",
                text.trim()
            ),
        )
    })?;
    Ok((status, body.to_string()))
}

/// Interpret the reply of `load` for JDK 8 (bare result), 9–20 (`return code: n`, non-zero status on
/// error) and 21+ (status always 0, error text in the body).
pub fn parse_load_reply(status: i32, body: &str) -> std::result::Result<(), String> {
    let body = body.trim();
    let first_line = body.lines().next().unwrap_or("").trim();
    let code = first_line
        .strip_prefix("return code:")
        .map(str::trim)
        .or((status == 0 && first_line.parse::<i32>().is_ok()).then_some(first_line));
    match (status, code) {
        (0, Some("0")) => Ok(()),
        (101, _) => Err("the JVM does not speak attach protocol version 1".to_string()),
        (_, Some(code)) => Err(format!("Agent_OnAttach returned {code}")),
        (_, None) if body.is_empty() => Err(format!("status {status} without a message")),
        (_, None) => Err(body.lines().map(str::trim).collect::<Vec<_>>().join(" ")),
    }
}

/// Load a native agent into the JVM: `load <absolute path> true <options>`.
pub fn load_agent(process: &TargetProcess, lib_in_target: &str, options: &str) -> Result<()> {
    let sock = ensure_listener(process)?;
    let (status, body) = execute(&sock, "load", &[lib_in_target, "true", options])?;
    parse_load_reply(status, &body).map_err(|why| {
        let hint = if why.contains("not enabled") {
            " (restart the JVM with -XX:+EnableDynamicAgentLoading)"
        } else {
            ""
        };
        Error::new(
            ErrorKind::Attach,
            format!(
                "JVM {} refused to load the jvmperf agent: {why}{hint}",
                process.pid
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::parse_load_reply;

    #[test]
    fn load_replies_across_jdks() {
        assert!(parse_load_reply(0, "0\n").is_ok(), "JDK 8");
        assert!(parse_load_reply(0, "return code: 0\n").is_ok(), "JDK 9+");
        assert_eq!(
            parse_load_reply(0, "return code: 1\n").unwrap_err(),
            "Agent_OnAttach returned 1"
        );
        let jdk21 = parse_load_reply(
            0,
            "/x/lib.so was not loaded.\n/x/lib.so: cannot open shared object file\n",
        )
        .unwrap_err();
        assert!(jdk21.contains("was not loaded"), "{jdk21}");
        let jdk11 = parse_load_reply(100, "Could not load agent\n").unwrap_err();
        assert_eq!(jdk11, "Could not load agent");
        assert!(parse_load_reply(101, "").unwrap_err().contains("version 1"));
        assert!(parse_load_reply(
            0,
            "Dynamic agent loading is not enabled. Use -XX:+EnableDynamicAgentLoading"
        )
        .is_err());
    }
}
