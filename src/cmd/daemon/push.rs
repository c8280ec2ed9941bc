//! `--push URL`: each interval's pprof sent to a Grafana Pyroscope-compatible `/ingest` endpoint
//! (`POST URL/ingest?name=APP{k=v,...}&from=S&until=S&format=pprof&sampleRate=HZ&spyName=jvmperf`,
//! the gzipped profile as the body). Profiles wait in a bounded on-disk queue (`DIR/.push-queue`)
//! until the server takes them, so an outage or a restart of the daemon loses nothing the queue
//! can hold; past its bound the oldest are dropped, and said so.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One profile to send: the query fields and the body.
pub struct Push {
    pub query: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The query of one interval: the application name with its labels, and its span in seconds.
pub fn query(
    app: &str,
    labels: &[(String, String)],
    (from_s, until_s): (u64, u64),
    rate_hz: u64,
) -> Vec<(String, String)> {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace([',', '}', '{', '='], "_")))
        .collect();
    [
        ("name", format!("{app}{{{}}}", labels.join(","))),
        ("from", from_s.to_string()),
        ("until", until_s.max(from_s + 1).to_string()),
        ("format", "pprof".to_string()),
        ("sampleRate", rate_hz.to_string()),
        ("spyName", "jvmperf".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

pub struct Queue {
    dir: PathBuf,
    max_bytes: u64,
    seq: AtomicU64,
}

impl Queue {
    pub fn open(dir: &Path, max_bytes: u64) -> crate::error::Result<Queue> {
        let dir = dir.join(".push-queue");
        std::fs::create_dir_all(&dir).map_err(|e| crate::output::write_error(&dir, &e))?;
        Ok(Queue {
            dir,
            max_bytes,
            seq: AtomicU64::new(0),
        })
    }

    /// Queue `push` (a file: its query as a JSON line, then the body), then drop the oldest
    /// entries past the bound.
    pub fn add(&self, push: &Push) -> crate::error::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{now:024}-{seq:06}.push"));
        let mut bytes = serde_json::to_vec(&push.query).unwrap_or_default();
        bytes.push(b'\n');
        bytes.extend_from_slice(&push.body);
        crate::output::write_file(&path, &bytes)?;
        let mut entries = self.entries();
        let mut total: u64 = entries.iter().map(|(_, len)| len).sum();
        entries.reverse();
        while total > self.max_bytes {
            let Some((oldest, len)) = entries.pop() else {
                break;
            };
            if std::fs::remove_file(&oldest).is_ok() {
                super::log(&format!(
                    "push queue over --push-queue {} MiB: dropped its oldest profile {}",
                    self.max_bytes >> 20,
                    oldest.display()
                ));
            }
            total -= len;
        }
        Ok(())
    }

    /// Queued files, oldest first, with their sizes.
    fn entries(&self) -> Vec<(PathBuf, u64)> {
        let mut entries: Vec<(PathBuf, u64)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name();
                let name = name.to_str()?;
                (name.ends_with(".push") && !name.starts_with('.'))
                    .then(|| Some((e.path(), e.metadata().ok()?.len())))?
            })
            .collect();
        entries.sort();
        entries
    }

    fn read(path: &Path) -> Option<Push> {
        let bytes = std::fs::read(path).ok()?;
        let newline = bytes.iter().position(|&b| b == b'\n')?;
        Some(Push {
            query: serde_json::from_slice(&bytes[..newline]).ok()?,
            body: bytes[newline + 1..].to_vec(),
        })
    }
}

/// Send what is queued, oldest first, until `stop`; then one last pass within `last_pass`.
/// A server that fails is retried with a growing pause (1 s to 1 min), logged once per outage;
/// a request it refuses (4xx other than 408/429) would never succeed and is dropped, logged.
pub fn run(queue: &Queue, url: &str, stop: &AtomicBool, last_pass: Duration) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let endpoint = format!("{}/ingest", url.trim_end_matches('/'));
    let mut pause = Duration::from_secs(1);
    let mut failing = false;
    let mut deadline: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Relaxed) && deadline.is_none() {
            deadline = Some(Instant::now() + last_pass);
        }
        let mut sent_all = true;
        for (path, _) in queue.entries() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            let Some(push) = Queue::read(&path) else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            let sent = agent
                .post(&endpoint)
                .query_pairs(push.query.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .header("Content-Type", "application/octet-stream")
                .send(&push.body[..]);
            match sent.map(|r| r.status().as_u16()) {
                Ok(200..=299) => {
                    let _ = std::fs::remove_file(&path);
                    if failing {
                        failing = false;
                        super::log(&format!("push to {endpoint} works again"));
                    }
                    pause = Duration::from_secs(1);
                }
                Ok(status) if (400..500).contains(&status) && status != 408 && status != 429 => {
                    let _ = std::fs::remove_file(&path);
                    super::log(&format!(
                        "push to {endpoint} refused a profile (HTTP {status}): dropped it"
                    ));
                }
                other => {
                    if !failing {
                        failing = true;
                        let why = match other {
                            Ok(status) => format!("HTTP {status}"),
                            Err(e) => e.to_string(),
                        };
                        super::log(&format!(
                            "push to {endpoint} fails ({why}): profiles wait in {} and are retried",
                            queue.dir.display()
                        ));
                    }
                    sent_all = false;
                    break;
                }
            }
        }
        if deadline.is_some() && sent_all {
            return;
        }
        let wait = if sent_all {
            Duration::from_millis(500)
        } else {
            let p = pause;
            pause = (pause * 2).min(Duration::from_secs(60));
            p
        };
        let until = Instant::now() + wait;
        while Instant::now() < until && (deadline.is_some() || !stop.load(Ordering::Relaxed)) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_carries_the_labels_and_the_span_is_in_seconds() {
        let labels = vec![
            ("host".to_string(), "web-1".to_string()),
            ("jdk".to_string(), "17.0.2+8".to_string()),
            ("odd".to_string(), "a,b}".to_string()),
        ];
        let q = query("shop.jar", &labels, (100, 160), 19);
        let get = |k: &str| q.iter().find(|(key, _)| key == k).unwrap().1.clone();
        assert_eq!(get("name"), "shop.jar{host=web-1,jdk=17.0.2+8,odd=a_b_}");
        assert_eq!((get("from"), get("until")), ("100".into(), "160".into()));
        assert_eq!(get("format"), "pprof");
        assert_eq!(get("sampleRate"), "19");
    }

    #[test]
    fn the_queue_keeps_order_and_drops_the_oldest_past_its_bound() {
        let dir = std::env::temp_dir().join(format!("jvmperf-queue-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let queue = Queue::open(&dir, 250).unwrap();
        for i in 0..4u8 {
            let push = Push {
                query: vec![("n".into(), i.to_string())],
                body: vec![i; 100],
            };
            queue.add(&push).unwrap();
        }
        let left: Vec<String> = queue
            .entries()
            .iter()
            .map(|(p, _)| Queue::read(p).unwrap().query[0].1.clone())
            .collect();
        assert_eq!(left, ["2", "3"]);
        assert_eq!(
            Queue::read(&queue.entries()[0].0).unwrap().body,
            vec![2; 100]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
