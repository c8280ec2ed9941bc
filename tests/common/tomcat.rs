//! Debian's Tomcat 10 (`tomcat10`, `tomcat10-examples`) serving its JSP and servlet examples on a
//! free loopback port, with its own `CATALINA_BASE` in a scratch directory, and `wrk` driving it.
//! Shared by `tests/tomcat.rs` and `cargo xtask bench tomcat` (std only, so both can include it).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's Tomcat installation (`CATALINA_HOME`), its configuration and the examples webapp.
pub const CATALINA_HOME: &str = "/usr/share/tomcat10";
const DEBIAN_CONF: &str = "/etc/tomcat10";
const EXAMPLES: &str = "/usr/share/tomcat10-examples/examples";

/// The pages wrk requests in turn: JSPs (Jasper-compiled, with EL, tags and sessions) and servlets.
pub const PAGES: &[&str] = &[
    "/examples/jsp/jsp2/el/basic-arithmetic.jsp",
    "/examples/jsp/jsp2/el/functions.jsp?foo=JSP+2.0",
    "/examples/jsp/jsp2/simpletag/repeat.jsp",
    "/examples/jsp/jsp2/tagfiles/products.jsp",
    "/examples/jsp/dates/date.jsp",
    "/examples/jsp/num/numguess.jsp",
    "/examples/jsp/snp/snoop.jsp",
    "/examples/servlets/servlet/HelloWorldExample",
    "/examples/servlets/servlet/RequestHeaderExample",
];

/// A Tomcat JVM; killed, and its base directory removed, on drop.
pub struct Tomcat {
    child: Child,
    pub pid: u32,
    pub port: u16,
    base: PathBuf,
    /// The session every wrk request belongs to. A JSP opens a session for a request without
    /// one, and wrk keeps no cookies: ~15,000 new sessions a second, each kept 30 minutes, filled
    /// the heap within minutes and the request rate fell to nothing.
    session: Option<String>,
}

/// A port on 127.0.0.1 that nothing listens on right now.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn server_xml(port: u16) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Server port="-1" shutdown="SHUTDOWN">
  <Service name="Catalina">
    <Connector port="{port}" address="127.0.0.1" protocol="HTTP/1.1" connectionTimeout="20000"/>
    <Engine name="Catalina" defaultHost="localhost">
      <Host name="localhost" appBase="webapps" unpackWARs="false" autoDeploy="false">
        <Context path="/examples" docBase="{EXAMPLES}">
          <Resources allowLinking="true"/>
        </Context>
      </Host>
    </Engine>
  </Service>
</Server>
"#
    )
}

impl Tomcat {
    /// Start `catalina.sh run` on `java_home` and wait until every page in [`PAGES`] answers
    /// 200 (the first request of a JSP compiles it).
    pub fn start(java_home: &Path, dir: &Path) -> Result<Tomcat, String> {
        if !Path::new(CATALINA_HOME).join("bin/catalina.sh").exists()
            || !Path::new(EXAMPLES).exists()
        {
            return Err(format!(
                "Tomcat 10 is not installed at {CATALINA_HOME} with its examples at {EXAMPLES}: run scripts/setup-debian.sh --tests (apt-get install tomcat10 tomcat10-examples wrk)"
            ));
        }
        let base = dir.join("catalina-base");
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        for sub in ["conf", "logs", "temp", "webapps", "work"] {
            std::fs::create_dir_all(base.join(sub)).map_err(|e| io("create base", e))?;
        }
        for file in ["web.xml", "catalina.properties", "context.xml"] {
            std::fs::copy(
                Path::new(DEBIAN_CONF).join(file),
                base.join("conf").join(file),
            )
            .map_err(|e| io(file, e))?;
        }
        let port = free_port().map_err(|e| io("free port", e))?;
        std::fs::write(base.join("conf/server.xml"), server_xml(port))
            .map_err(|e| io("server.xml", e))?;
        let log = std::fs::File::create(base.join("logs/console.log"))
            .map_err(|e| io("console log", e))?;
        let child = Command::new(Path::new(CATALINA_HOME).join("bin/catalina.sh"))
            .arg("run")
            .env("CATALINA_HOME", CATALINA_HOME)
            .env("CATALINA_BASE", &base)
            .env("CATALINA_TMPDIR", base.join("temp"))
            .env("JAVA_HOME", java_home)
            .env("CATALINA_OPTS", "-Xmx512m")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| io("console log", e))?)
            .stderr(log)
            .spawn()
            .map_err(|e| io("catalina.sh run", e))?;
        // `catalina.sh run` execs java, so the child is the JVM.
        let pid = child.id();
        let mut tomcat = Tomcat {
            child,
            pid,
            port,
            base,
            session: None,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        for page in PAGES {
            loop {
                match tomcat.get(page) {
                    Ok(200) => break,
                    _ if Instant::now() < deadline && tomcat.alive() => {
                        std::thread::sleep(Duration::from_millis(200))
                    }
                    other => {
                        let console = std::fs::read_to_string(tomcat.base.join("logs/console.log"))
                            .unwrap_or_default();
                        return Err(format!(
                            "Tomcat did not serve {page} (last answer {other:?}); its console:\n{console}"
                        ));
                    }
                }
            }
        }
        tomcat.session = Some(
            tomcat
                .session_id(PAGES[0])
                .map_err(|e| format!("Tomcat's session cookie: {e}"))?,
        );
        Ok(tomcat)
    }

    /// The `JSESSIONID` that a `GET` of `path` (a JSP) opens.
    fn session_id(&self, path: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let text = String::from_utf8_lossy(&response);
        let head = text.split("\r\n\r\n").next().unwrap_or_default();
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(name, _)| name.eq_ignore_ascii_case("set-cookie"))
            .find_map(|(_, v)| v.trim().strip_prefix("JSESSIONID="))
            .and_then(|v| v.split(';').next())
            .map(str::to_string)
            .ok_or_else(|| std::io::Error::other(format!("no JSESSIONID cookie in: {head}")))
    }

    /// Pins every thread of the JVM (and those it starts later) to CPU `cpu`.
    pub fn pin(&self, cpu: &str) -> Result<(), String> {
        let status = Command::new("taskset")
            .args(["-a", "-p", "-c", cpu, &self.pid.to_string()])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("taskset: {e}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("taskset -a -p -c {cpu} {} failed", self.pid))
    }

    fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, r)| !r.starts_with('Z'))
        })
    }

    /// The status code of one `GET` (a plain HTTP/1.0 request).
    pub fn get(&self, path: &str) -> std::io::Result<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("not an HTTP response"))
    }

    /// `wrk` requesting [`PAGES`] in turn for `seconds` over `connections` connections (one wrk
    /// thread, on CPU `cpu` if given), all in one session; its report on stdout.
    pub fn wrk(&self, seconds: u64, connections: u32, cpu: Option<&str>) -> Result<Child, String> {
        let script = self.base.join("pages.lua");
        let paths: Vec<String> = PAGES.iter().map(|p| format!("{p:?}")).collect();
        let cookie = match &self.session {
            Some(id) => format!("wrk.headers[\"Cookie\"] = \"JSESSIONID={id}\"\n"),
            None => String::new(),
        };
        std::fs::write(
            &script,
            format!(
                "{cookie}local paths = {{{}}}\nlocal i = 0\nrequest = function()\n  i = i % #paths + 1\n  return wrk.format(\"GET\", paths[i])\nend\n",
                paths.join(", ")
            ),
        )
        .map_err(|e| format!("wrk script: {e}"))?;
        let mut cmd = match cpu {
            Some(cpu) => {
                let mut cmd = Command::new("taskset");
                cmd.args(["-c", cpu, "wrk"]);
                cmd
            }
            None => Command::new("wrk"),
        };
        cmd.args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "-s",
        ])
        .arg(&script)
        .arg(format!("http://127.0.0.1:{}/", self.port))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("wrk (apt-get install wrk): {e}"))
    }
}

/// Requests per second from wrk's report.
pub fn wrk_rate(report: &str) -> Option<f64> {
    report
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
}

impl Drop for Tomcat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
