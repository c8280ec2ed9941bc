//! One connection to the shim inside a target JVM: attach, accept its connection (and only its),
//! and read its frames.

use super::placement::ShimDir;
use super::protocol::{self, Frame, Hello, Record};
use crate::attach;
use crate::error::{err, Error, ErrorKind, Result};
use crate::process::TargetProcess;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::io::{ErrorKind as IoKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the shim has to connect back after `load` returned.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a JVM whose shim hung up may take to be gone before we say it is still running.
const EXIT_GRACE: Duration = Duration::from_millis(500);

pub struct ShimSession {
    stream: UnixStream,
    buf: Vec<u8>,
    /// Start of unread bytes in `buf`.
    pos: usize,
    /// Subtracted from shim times to get our CLOCK_MONOTONIC (time namespaces).
    clock_offset: i64,
    pub hello: Hello,
    socket_path: PathBuf,
    pub attach_duration: Duration,
    /// The target, to tell a JVM that exited from a shim that hung up.
    process: TargetProcess,
}

impl ShimSession {
    /// Attach to `process`, load the shim, and wait for its HELLO.
    pub fn attach(process: &TargetProcess) -> Result<Self> {
        let started = Instant::now();
        let dir = ShimDir::prepare(process)?;
        let lib = dir.install_shim()?;
        let tag = format!(
            "{:x}",
            started.elapsed().as_nanos() ^ u128::from(process.pid)
        );
        let (inner_sock, outer_sock) = dir.socket_paths(&tag);
        let _ = std::fs::remove_file(&outer_sock);
        let listener = UnixListener::bind(&outer_sock).map_err(|e| {
            Error::new(
                ErrorKind::Permission,
                format!(
                    "cannot create the jvmperf socket {}: {e}",
                    outer_sock.display()
                ),
            )
        })?;
        let cleanup = SocketFile(outer_sock.clone());
        dir.hand_over_path(&outer_sock)?;
        // daemon_pid: the shim names us to a jvmperf it refuses while we record (BUSY).
        let options = format!("{inner_sock},daemon_pid={}", std::process::id());
        attach::load_agent(process, &lib, &options)?;
        let stream = accept_from(&listener, process)?;
        drop(listener);
        std::mem::forget(cleanup);
        let mut session = ShimSession {
            stream,
            buf: Vec::with_capacity(1 << 16),
            pos: 0,
            clock_offset: process.monotonic_offset_ns(),
            hello: Hello {
                protocol_version: 0,
                pid: 0,
                attach_count: 0,
                shim_version: String::new(),
                vm_version: String::new(),
                java_version: String::new(),
                vm_name: String::new(),
            },
            socket_path: outer_sock,
            attach_duration: Duration::ZERO,
            process: process.clone(),
        };
        match session.next(CONNECT_TIMEOUT)? {
            Some(Frame {
                record: Record::Hello(h),
                ..
            }) if h.protocol_version == protocol::PROTOCOL_VERSION => session.hello = h,
            Some(Frame {
                record: Record::Hello(h),
                ..
            }) => {
                return err(
                    ErrorKind::Shim,
                    format!(
                        "the shim in JVM {} speaks protocol {} (this jvmperf speaks {}); restart the JVM to load this version",
                        process.pid, h.protocol_version, protocol::PROTOCOL_VERSION
                    ),
                )
            }
            Some(Frame {
                record: Record::Busy { daemon_pid, .. },
                ..
            }) => {
                return err(
                    ErrorKind::Busy,
                    format!(
                        "another jvmperf (pid {daemon_pid}) is already profiling JVM {}; wait for it to finish or stop it",
                        process.pid
                    ),
                )
            }
            other => {
                return err(
                    ErrorKind::Shim,
                    format!("the shim did not introduce itself (got {other:?})"),
                )
            }
        }
        session.attach_duration = started.elapsed();
        Ok(session)
    }

    /// The next frame, waiting at most `timeout`; `Ok(None)` on timeout. Times are converted to our
    /// CLOCK_MONOTONIC. A closed connection is an error of kind `Shim`.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Frame>> {
        let deadline = Instant::now() + timeout;
        loop {
            let body = protocol::first_frame(&self.buf[self.pos..])
                .map_err(|e| Error::new(ErrorKind::Shim, e.to_string()))?;
            if let Some(body) = body {
                let body_len = body.len();
                let mut frame = protocol::decode_frame(body)
                    .map_err(|e| Error::new(ErrorKind::Shim, e.to_string()))?;
                frame.time = (frame.time as i64).wrapping_sub(self.clock_offset) as u64;
                self.pos += 4 + body_len;
                return Ok(Some(frame));
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))
                .map_err(|e| Error::new(ErrorKind::Shim, e.to_string()))?;
            let mut chunk = [0u8; 1 << 16];
            match self.stream.read(&mut chunk) {
                Ok(0) => return err(ErrorKind::Shim, self.hang_up_reason()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => {
                    return Ok(None)
                }
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e) => return err(ErrorKind::Shim, format!("reading from the shim: {e}")),
            }
        }
    }

    /// Why the connection closed: the JVM exited (its sockets close a moment before it is gone), or
    /// its shim stopped serving us while it keeps running.
    fn hang_up_reason(&self) -> String {
        let pid = self.process.pid;
        let deadline = Instant::now() + EXIT_GRACE;
        while self.process.is_alive() {
            if Instant::now() >= deadline {
                return format!(
                    "the shim in JVM {pid} closed its connection while the JVM is still running (the JVM's output may say why)"
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        format!("JVM {pid} exited")
    }

    pub fn send(&mut self, frame: &[u8]) -> Result<()> {
        self.stream
            .write_all(frame)
            .map_err(|e| Error::new(ErrorKind::Shim, format!("writing to the shim: {e}")))
    }
}

impl Drop for ShimSession {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Accept the shim's connection: only a peer whose SO_PEERCRED pid is the target itself.
fn accept_from(listener: &UnixListener, process: &TargetProcess) -> Result<UnixStream> {
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    while Instant::now() < deadline {
        match listener.accept() {
            Ok((stream, _)) => {
                let peer = getsockopt(&stream.as_fd(), PeerCredentials);
                if peer.is_ok_and(|c| c.pid() as u32 == process.pid) {
                    stream
                        .set_nonblocking(false)
                        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
                    return Ok(stream);
                }
                // Someone else found the socket: drop the connection and keep waiting.
            }
            Err(e) if e.kind() == IoKind::WouldBlock => {
                crate::interrupt::check_while_attaching(process.pid)?;
                std::thread::sleep(Duration::from_millis(2));
                if !process.is_alive() {
                    return err(
                        ErrorKind::NoProcess,
                        format!("process {} exited while jvmperf was attaching", process.pid),
                    );
                }
            }
            Err(e) => return err(ErrorKind::Shim, format!("accepting the shim: {e}")),
        }
    }
    err(
        ErrorKind::Shim,
        format!(
            "the shim in JVM {} did not connect back within {} s",
            process.pid,
            CONNECT_TIMEOUT.as_secs()
        ),
    )
}
