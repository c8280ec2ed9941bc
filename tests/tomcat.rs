//! Debian's Tomcat 10 serving its JSP examples under wrk load, recorded for 15 s at 999 Hz: the
//! stacks of a real application server reach their thread roots, name their frames, and show
//! Jasper-compiled JSPs under the servlet container.

mod common;

use common::tomcat::Tomcat;
use common::*;

const WARM_UP_SECS: u64 = 10;

#[test]
fn tomcat_under_load_records_rooted_named_stacks() {
    let dir = std::env::temp_dir().join(format!("jvmperf-tomcat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tomcat = Tomcat::start(&java_home(), &dir).unwrap_or_else(|e| panic!("{e}"));
    // Load for the warm-up and the whole recording. The recording starts once the JIT has
    // compiled the hot paths: while code is still being compiled and replaced (deoptimization,
    // on-stack replacement) a few more stacks stop early, and this test is about steady state.
    let wrk = tomcat
        .wrk(WARM_UP_SECS + 17, 4, None)
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(std::time::Duration::from_secs(WARM_UP_SECS));
    let out = dir.join("tomcat.collapsed");
    // A 32 KiB stack copy: Tomcat's request threads run deeper than the default 8 KiB, and past
    // the copy the live stack is read only while it still ends the copy with the same bytes,
    // which a busy server's threads seldom do by the time a sample is walked (93.8% of stacks
    // rooted at the default in one run here, 100% with 32 KiB).
    let res = run_jvmperf(&[
        "record",
        "-p",
        &tomcat.pid.to_string(),
        "-d",
        "15",
        "-F",
        "999",
        "--stack-size",
        "32768",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = stderr_of(&res);
    let report = String::from_utf8_lossy(&wrk.wait_with_output().unwrap().stdout).into_owned();
    assert!(res.status.success(), "record failed: {err}");
    let rate = common::tomcat::wrk_rate(&report)
        .unwrap_or_else(|| panic!("no request rate from wrk: {report}"));
    assert!(rate > 0.0, "{report}");

    let summary = err
        .lines()
        .find(|l| l.contains("% unwound to a thread root"))
        .unwrap_or_else(|| panic!("no summary in {err}"));
    let number_before = |marker: &str| -> f64 {
        summary
            .split(marker)
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no {marker:?} in {summary}"))
    };
    let rooted = number_before("% unwound to a thread root");
    let unresolved_compiled = number_before(" compiled frames unresolved");

    let text = std::fs::read_to_string(&out).unwrap();
    let (mut samples, mut frames, mut unknown, mut jasper, mut jsp) = (0u64, 0u64, 0u64, 0, 0);
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        let stack_frames: Vec<&str> = stack.split(';').collect();
        samples += n;
        frames += n * stack_frames.len() as u64;
        unknown += n * stack_frames
            .iter()
            .filter(|f| f.starts_with("[unknown"))
            .count() as u64;
        if stack.contains("org.apache.jasper.servlet.JspServlet.service")
            && stack.contains("jakarta.servlet.http.HttpServlet.service")
        {
            jasper += n;
        }
        if stack.contains("org.apache.jsp.jsp.") {
            jsp += n;
        }
    }
    let unresolved = (unknown as f64 + unresolved_compiled) / frames as f64 * 100.0;
    eprintln!(
        "tomcat: {rate:.0} requests/s, {samples} samples, {rooted}% rooted, {unresolved:.4}% of {frames} frames unresolved, {jasper} samples under JspServlet, {jsp} in compiled JSPs"
    );
    assert!(samples >= 2000, "too few samples: {samples}");
    assert!(rooted >= 99.8, "only {rooted}% of stacks rooted: {summary}");
    assert!(
        unresolved <= 0.01,
        "{unknown} [unknown] and {unresolved_compiled} unresolved compiled frames of {frames}"
    );
    assert!(
        jasper * 20 >= samples && jsp * 50 >= samples,
        "{jasper} samples under JspServlet and HttpServlet, {jsp} in compiled JSPs, of {samples}"
    );
    drop(tomcat);
    let _ = std::fs::remove_dir_all(&dir);
}
