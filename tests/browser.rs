//! The HTML page and the speedscope export in a real browser: Debian's chromium driven over
//! WebDriver (chromedriver), on one recording of `bench.Phases` whose phases are separated in
//! time (`--aligned-slice-ms`), made once for the whole file. Screenshots are left in
//! target/browser-test/.

mod common;

use common::*;
use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const SLICE_MS: u64 = 800;
const PHASES: [&str; 4] = [
    "bench.Phases.hotLoop",
    "bench.Phases.interpretedPhase",
    "bench.Phases.jniPhase",
    "bench.Phases.recursivePhase",
];
/// Where speedscope's npm package is (scripts/setup-debian.sh --tests installs it there).
const SPEEDSCOPE: &str = "/opt/jvmperf-npm/node_modules/speedscope/dist/release";

/// The recording and what the test knows of it.
struct Recorded {
    dir: PathBuf,
    raw: PathBuf,
    html: PathBuf,
    /// `System.nanoTime` when phase 0 began (the app's EPOCH line).
    epoch_ns: u64,
}

fn recorded() -> &'static Recorded {
    static REC: OnceLock<Recorded> = OnceLock::new();
    REC.get_or_init(|| {
        let dir = workspace().join("target/browser-test");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let jvm = Jvm::start(
            &[
                "-XX:CompileCommand=quiet",
                "-XX:CompileCommand=inline,bench.Phases::inlinedHelper",
                "-XX:CompileCommand=exclude,bench.Phases::interpretedPhase",
            ],
            "bench.Phases",
            &[
                "--threads",
                "2",
                "--aligned-slice-ms",
                &SLICE_MS.to_string(),
            ],
        );
        let epoch_ns = jvm
            .stdout_lines()
            .iter()
            .find_map(|l| l.strip_prefix("EPOCH ")?.trim().parse().ok())
            .expect("EPOCH line");
        let raw = dir.join("phases.jvmperf");
        let pid = jvm.pid.to_string();
        let out = run_jvmperf(&[
            "record",
            "-p",
            &pid,
            "-d",
            "4",
            "-F",
            "499",
            "-o",
            raw.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "record: {}", stderr_of(&out));
        drop(jvm);
        let html = dir.join("phases.html");
        convert(&raw, &html);
        Recorded {
            dir,
            raw,
            html,
            epoch_ns,
        }
    })
}

fn convert(from: &Path, to: &Path) {
    let out = run_jvmperf(&[
        "convert",
        from.to_str().unwrap(),
        "-o",
        to.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "convert: {}", stderr_of(&out));
}

/// Debian's chromedriver on a free loopback port, for the whole file. It is started by a thread
/// that lives as long as the test process, with `PR_SET_PDEATHSIG`, so it ends with the process
/// (a static `Child` is never dropped, and the driver outlived every test run).
fn chromedriver() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (started, spawned) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::os::unix::process::CommandExt;
            let mut cmd = Command::new("chromedriver");
            cmd.arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: prctl with integer arguments only, async-signal-safe, between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(mut child) => {
                    started.send(Ok(())).unwrap();
                    // Until the process ends (and the driver with it).
                    let _ = child.wait();
                }
                Err(e) => started.send(Err(e)).unwrap(),
            }
        });
        spawned.recv().unwrap().expect(
            "chromedriver (apt-get install chromium-driver, see scripts/setup-debian.sh --tests)",
        );
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        format!("http://127.0.0.1:{port}")
    })
}

/// A headless chromium session that keeps the browser's console.
async fn browser() -> Client {
    let caps = json!({
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"],
        },
        "goog:loggingPrefs": {"browser": "ALL"},
    });
    let Value::Object(caps) = caps else {
        unreachable!()
    };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(chromedriver())
        .await
        .expect("WebDriver session")
}

/// chromedriver's console log of the page (its `/se/log` endpoint, entries since the last read).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

/// The console's errors and warnings (a CSP violation is an error).
async fn console_errors(c: &Client) -> Vec<String> {
    console(c, &["SEVERE", "WARNING"]).await
}

async fn console(c: &Client, levels: &[&str]) -> Vec<String> {
    let log = c.issue_cmd(BrowserLog).await.expect("browser log");
    log.as_array()
        .into_iter()
        .flatten()
        .filter(|e| levels.iter().any(|l| e["level"] == *l))
        .map(|e| e["message"].to_string())
        .collect()
}

async fn open_page(c: &Client, path: &Path) {
    c.goto(&format!("file://{}", path.display())).await.unwrap();
    wait_for(c, "return document.body.dataset.ready === 'true'").await;
}

async fn wait_for(c: &Client, script: &str) {
    let start = Instant::now();
    loop {
        if c.execute(script, vec![]).await.unwrap() == Value::Bool(true) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {script}; console: {:?}",
            console_errors(c).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap()
}

async fn text(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(recorded().dir.join(name), png).unwrap();
}

/// A real mouse click at viewport point (x, y).
async fn click_at(c: &Client, x: f64, y: f64) {
    let mouse = MouseActions::new("mouse".into())
        .then(PointerAction::MoveTo {
            duration: None,
            x,
            y,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(mouse).await.unwrap();
}

/// The viewport centre of the flame graph's widest box named `name`, scrolled into view, and its
/// width as a share of the graph's.
async fn box_centre(c: &Client, name: &str) -> (f64, f64, f64) {
    let script = format!(
        r#"const b = window.jvmperf.boxes().filter(b => b.name === {name:?}).sort((a, b) => b.w - a.w)[0];
           if (!b) return null;
           const canvas = document.getElementById('flame');
           const r0 = canvas.getBoundingClientRect();
           window.scrollTo(0, window.scrollY + r0.top + b.y - 300);
           const box = document.getElementById('canvas-box');
           box.scrollTop = Math.max(0, b.y - 200);
           const r = canvas.getBoundingClientRect();
           return [r.left + b.x + b.w / 2, r.top + b.y + b.h / 2, b.w / r.width];"#
    );
    let v = js(c, &script).await;
    let v: Vec<f64> = serde_json::from_value(v).unwrap_or_else(|_| panic!("no box {name}"));
    (v[0], v[1], v[2])
}

/// `jvmperf report`'s total% of `method` in `file`.
fn report_total(file: &Path, method: &str) -> f64 {
    let out = run_jvmperf(&["report", file.to_str().unwrap(), "--top", "0"]);
    assert!(out.status.success(), "report: {}", stderr_of(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.split_whitespace().last() == Some(method))
        .and_then(|l| {
            l.split_whitespace()
                .nth(3)?
                .trim_end_matches('%')
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{method} not in report: {text}"))
}

/// The search box set to `regex`: the matched share of the samples (%).
async fn search_share(c: &Client, regex: &str) -> f64 {
    let search = c.find(Locator::Id("search")).await.unwrap();
    search.clear().await.unwrap();
    search.send_keys(regex).await.unwrap();
    if regex.is_empty() {
        return 0.0;
    }
    js(
        c,
        "return document.getElementById('search-share').dataset.share",
    )
    .await
    .as_str()
    .and_then(|s| s.parse().ok())
    .expect("a matched share")
}

#[tokio::test(flavor = "current_thread")]
async fn page_loads_zooms_and_searches_like_report() {
    let rec = recorded();
    let c = browser().await;
    open_page(&c, &rec.html).await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    assert!(text(&c, "#title").await.starts_with("bench.Phases (pid"));
    assert!(text(&c, "#subtitle").await.contains("a CPU profile"));
    screenshot(&c, "page.png").await;

    // Search: the hot method's matched share is report's total share.
    let share = search_share(&c, "bench\\.Phases\\.hotLoop").await;
    let report = report_total(&rec.raw, "bench.Phases.hotLoop");
    assert!(
        (share - report).abs() <= 1.0,
        "page {share}% vs report {report}%"
    );
    assert!(share > 5.0, "hotLoop is hot: {share}%");
    screenshot(&c, "search.png").await;

    // Click a frame: it fills the width and the breadcrumb leads back.
    let (x, y, w) = box_centre(&c, "bench.Phases.jniPhase").await;
    click_at(&c, x, y).await;
    let crumbs = text(&c, "#crumbs").await;
    assert!(crumbs.ends_with("bench.Phases.jniPhase"), "{crumbs}");
    assert!(crumbs.starts_with("all"), "{crumbs}");
    let (_, _, zoomed) = box_centre(&c, "bench.Phases.jniPhase").await;
    assert!(
        zoomed > 0.99 && w < 0.8,
        "zoomed box {zoomed} of the width, was {w}"
    );
    screenshot(&c, "zoom.png").await;
    c.find(Locator::Css("#crumbs span"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let (_, _, back) = box_centre(&c, "bench.Phases.jniPhase").await;
    assert!(
        (back - w).abs() < 0.01,
        "back to the whole graph: {back} vs {w}"
    );
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_time_range_shows_its_phase_and_a_thread_filter_one_thread() {
    let rec = recorded();
    let c = browser().await;
    open_page(&c, &rec.html).await;
    // The page's time 0 is its first sample; pick a slice in the middle of the recording.
    let t0_ns = js(
        &c,
        "return JSON.parse(document.getElementById('profile-data').textContent).samples.t0_ns",
    )
    .await
    .as_u64()
    .unwrap();
    let geometry: Vec<f64> = serde_json::from_value(
        js(
            &c,
            "const t = document.getElementById('timeline'); const r = t.getBoundingClientRect();
             return [r.left, r.top, r.height, +t.dataset.plotLeft, +t.dataset.plotWidth, +t.dataset.seconds];",
        )
        .await,
    )
    .unwrap();
    let [left, top, height, plot_left, plot_width, seconds] = geometry[..] else {
        unreachable!()
    };
    let slice_ns = SLICE_MS * 1_000_000;
    // The first whole slice after the first 0.3 s, then 0.1 s inside each end of it.
    let k = (t0_ns + 300_000_000).saturating_sub(rec.epoch_ns) / slice_ns + 1;
    let phase = PHASES[(k % 4) as usize];
    let from = (rec.epoch_ns + k * slice_ns - t0_ns) as f64 / 1e9 + 0.1;
    let to = from + SLICE_MS as f64 / 1e3 - 0.2;
    assert!(
        to < seconds,
        "the recording holds a whole slice ({to} s of {seconds} s)"
    );
    let x = |s: f64| left + plot_left + s / seconds * plot_width;
    let y = top + height / 2.0;
    let drag = MouseActions::new("mouse".into())
        .then(PointerAction::MoveTo {
            duration: None,
            x: x(from),
            y,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveTo {
            duration: Some(Duration::from_millis(100)),
            x: x(to),
            y,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(drag).await.unwrap();
    let range = text(&c, "#range").await;
    assert!(range.contains(" s – "), "{range}");
    screenshot(&c, "range.png").await;
    // The phase's method is on (nearly) every stack of its slice, the others on (nearly) none.
    for method in PHASES {
        let share = search_share(&c, &method.replace('.', "\\.")).await;
        if method == phase {
            assert!(share > 80.0, "{method} in its own slice: {share}%");
        } else {
            assert!(share < 10.0, "{method} in the slice of {phase}: {share}%");
        }
    }
    search_share(&c, "").await;

    // Back to the whole recording; then one thread alone.
    c.find(Locator::Id("clear-range"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let row = c
        .find(Locator::Css("#threads tr:first-child td:nth-child(2)"))
        .await
        .unwrap();
    let thread = row.text().await.unwrap();
    let count = text(&c, "#threads tr:first-child td:nth-child(3)").await;
    let threads = js(&c, "return document.querySelectorAll('#threads tr').length")
        .await
        .as_u64()
        .unwrap();
    assert!(threads >= 2, "{threads} threads");
    row.click().await.unwrap();
    let selection = text(&c, "#selection").await;
    assert!(
        selection.starts_with(&format!("{count} samples"))
            && selection.contains(&format!("1 of {threads} threads")),
        "{thread}: {selection}"
    );
    let picked = js(
        &c,
        "return [...document.querySelectorAll('#threads input')].filter(b => b.checked).length",
    )
    .await;
    assert_eq!(picked, 1);
    screenshot(&c, "thread.png").await;

    // The subsecond heatmap: a click on a cell selects its 20 ms.
    c.find(Locator::Css("#timeline-mode option[value='heatmap']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let cell: Vec<f64> = serde_json::from_value(
        js(
            &c,
            "const r = document.getElementById('timeline').getBoundingClientRect();
             return [r.left + r.width / 2, r.top + 14 + 25 * 3 + 1];",
        )
        .await,
    )
    .unwrap();
    click_at(&c, cell[0], cell[1]).await;
    let range = text(&c, "#range").await;
    assert!(range.ends_with("(20.0 ms)"), "{range}");
    screenshot(&c, "heatmap.png").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn callers_view_and_diff_page() {
    let rec = recorded();
    let c = browser().await;
    open_page(&c, &rec.html).await;
    // The callers of hotLoop: hotLoop at the root, the worker's run (its only caller) on it. The
    // table sorted by total has hotLoop (its self samples may all be in its inlined helper).
    c.find(Locator::Css("#methods th[data-sort='total']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let row = c
        .find(Locator::Css(
            "#methods tr[data-method='bench.Phases.hotLoop'] button",
        ))
        .await
        .unwrap();
    row.click().await.unwrap();
    let boxes = js(&c, "return window.jvmperf.boxes()").await;
    let boxes = boxes.as_array().unwrap();
    assert_eq!(boxes[0]["name"], "bench.Phases.hotLoop");
    let callers: Vec<&str> = boxes
        .iter()
        .filter(|b| b["y"] != boxes[0]["y"])
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(
        callers.first(),
        Some(&"bench.Phases$Worker.run"),
        "{callers:?}"
    );
    assert!(text(&c, "#crumbs")
        .await
        .starts_with("bench.Phases.hotLoop"));
    screenshot(&c, "callers.png").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());

    // AFTER: one slice of hotLoop's phase (a 4 s recording holds 4 whole slices of 0.8 s, one
    // of each phase), BEFORE: the whole recording. hotLoop grew (red); the others are gone.
    let t0_ns = js(
        &c,
        "return JSON.parse(document.getElementById('profile-data').textContent).samples.t0_ns",
    )
    .await
    .as_u64()
    .unwrap();
    let slice_ns = SLICE_MS * 1_000_000;
    let k = (t0_ns.saturating_sub(rec.epoch_ns))
        .div_ceil(slice_ns)
        .next_multiple_of(4);
    let since = rec.epoch_ns + k * slice_ns;
    let after = rec.dir.join("hotloop.jvmperf");
    let out = run_jvmperf(&[
        "convert",
        rec.raw.to_str().unwrap(),
        "-o",
        after.to_str().unwrap(),
        "--since",
        &since.to_string(),
        "--until",
        &(since + slice_ns).to_string(),
    ]);
    assert!(out.status.success(), "convert: {}", stderr_of(&out));
    let diff = rec.dir.join("diff.html");
    let out = run_jvmperf(&[
        "diff",
        rec.raw.to_str().unwrap(),
        after.to_str().unwrap(),
        "-o",
        diff.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "diff: {}", stderr_of(&out));
    open_page(&c, &diff).await;
    assert!(text(&c, "#selection").await.contains("red grew"));
    let (x, y, _) = box_centre(&c, "bench.Phases.hotLoop").await;
    let rgb: Vec<u8> = serde_json::from_value(
        js(
            &c,
            &format!(
                "const c = document.getElementById('flame'), r = c.getBoundingClientRect(), d = devicePixelRatio;
                 return [...c.getContext('2d').getImageData(({x} - r.left) * d, ({y} - r.top) * d, 1, 1).data].slice(0, 3);"
            ),
        )
        .await,
    )
    .unwrap();
    screenshot(&c, "diff.png").await;
    assert!(rgb[0] == 255 && rgb[2] < 200, "hotLoop grew: rgb{rgb:?}");
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// Serve `root` on a loopback port (GET only, files under `root`), for speedscope: it reads
/// `#profileURL=` with fetch, which file:// pages may not use.
fn serve(root: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            std::thread::spawn(move || serve_one(stream, &root));
        }
    });
    port
}

fn serve_one(mut stream: TcpStream, root: &Path) {
    let mut line = String::new();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) <= 2 {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or("/")
        .trim_start_matches('/');
    let file = root.join(if path.is_empty() { "index.html" } else { path });
    let (status, body) = match (path.contains(".."), std::fs::File::open(&file)) {
        (false, Ok(mut f)) => {
            let mut body = Vec::new();
            f.read_to_end(&mut body).unwrap();
            ("200 OK", body)
        }
        _ => ("404 Not Found", Vec::new()),
    };
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html",
        Some("js") => "text/javascript",
        Some("css") => "text/css",
        Some("json") => "application/json",
        Some("wasm") => "application/wasm",
        _ => "application/octet-stream",
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(&body);
}

#[tokio::test(flavor = "current_thread")]
async fn speedscope_opens_the_export() {
    let rec = recorded();
    assert!(
        Path::new(SPEEDSCOPE).join("index.html").exists(),
        "speedscope's npm package is missing at {SPEEDSCOPE}: run scripts/setup-debian.sh --tests"
    );
    // speedscope and the profile, served from one directory.
    let site = rec.dir.join("speedscope");
    std::fs::create_dir_all(&site).unwrap();
    for entry in std::fs::read_dir(SPEEDSCOPE).unwrap().flatten() {
        std::fs::copy(entry.path(), site.join(entry.file_name())).unwrap();
    }
    convert(&rec.raw, &site.join("phases.speedscope.json"));
    let port = serve(site);
    let c = browser().await;
    c.goto(&format!(
        "http://127.0.0.1:{port}/index.html#profileURL=/phases.speedscope.json"
    ))
    .await
    .unwrap();
    // speedscope titles the page with the profile's name once it has loaded it.
    wait_for(&c, "return document.title.includes('bench.Phases')").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let body = text(&c, "body").await;
    assert!(
        body.contains("phases-worker"),
        "thread profile shown: {body}"
    );
    screenshot(&c, "speedscope.png").await;
    // Errors only: speedscope's WebGL on a software renderer warns about its speed.
    assert_eq!(console(&c, &["SEVERE"]).await, Vec::<String>::new());
    c.close().await.unwrap();
}
