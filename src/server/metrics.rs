//! Prometheus metrics for `lc-cli serve --metrics ADDR`: counters bumped by
//! the connection tasks, gauges read from the lock table when scraped, and a
//! minimal HTTP/1.1 responder (one GET per connection).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Event counters; cheap enough to bump on every request.
#[derive(Default)]
pub(crate) struct Counters {
    pub grants: AtomicU64,
    pub releases: AtomicU64,
    pub resets: AtomicU64,
    pub withdrawals: AtomicU64,
    pub refused: AtomicU64,
    /// Connections closed at once by `--max-connections[-per-peer]`.
    pub refused_connections: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// fsync latency as a Prometheus histogram.
pub(crate) struct FsyncHistogram {
    buckets: [AtomicU64; FSYNC_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

const FSYNC_BUCKETS: [f64; 10] = [
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

impl Default for FsyncHistogram {
    fn default() -> Self {
        FsyncHistogram {
            buckets: Default::default(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }
}

impl FsyncHistogram {
    pub(crate) fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        for (bound, bucket) in FSYNC_BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }
}

/// What the table says at scrape time.
pub(crate) struct Snapshot {
    pub keys_held: usize,
    pub waiters: usize,
    pub oldest_hold: Option<Duration>,
    /// Size of the write-ahead log, with `--data`.
    pub wal_bytes: Option<u64>,
    /// Connections open (lock and manager ports), and those of them still
    /// in their login.
    pub connections: (usize, usize),
}

pub(crate) fn render(
    counters: &Counters,
    fsync: Option<&FsyncHistogram>,
    snap: &Snapshot,
) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    metric(
        "lc_keys_held",
        "gauge",
        "Keys held now.",
        snap.keys_held.to_string(),
    );
    metric(
        "lc_waiters_queued",
        "gauge",
        "Lock requests waiting in line now.",
        snap.waiters.to_string(),
    );
    metric(
        "lc_oldest_hold_age_seconds",
        "gauge",
        "Age of the oldest hold (0 when nothing is held): a stuck lock shows here.",
        format!("{:.3}", snap.oldest_hold.unwrap_or_default().as_secs_f64()),
    );
    metric(
        "lc_connections_open",
        "gauge",
        "Connections open now on the lock and manager ports (--max-connections).",
        snap.connections.0.to_string(),
    );
    metric(
        "lc_connections_logging_in",
        "gauge",
        "Connections open now whose login (TLS handshake, first frame, token) is not through (--max-pending-logins).",
        snap.connections.1.to_string(),
    );
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed).to_string();
    metric(
        "lc_grants_total",
        "counter",
        "Keys granted.",
        load(&counters.grants),
    );
    metric(
        "lc_releases_total",
        "counter",
        "Keys released by Unlock.",
        load(&counters.releases),
    );
    metric(
        "lc_resets_total",
        "counter",
        "Reset requests (by key or by source).",
        load(&counters.resets),
    );
    metric(
        "lc_withdrawals_total",
        "counter",
        "Queued requests withdrawn (the client hung up, or a reset by source).",
        load(&counters.withdrawals),
    );
    metric(
        "lc_refused_requests_total",
        "counter",
        "Requests answered '-' or closed: bad frames, stalled clients, failed writes to the log.",
        load(&counters.refused),
    );
    metric(
        "lc_refused_connections_total",
        "counter",
        "Connections closed at once: over --max-connections, --max-connections-per-peer or --max-pending-logins.",
        load(&counters.refused_connections),
    );
    if let Some(bytes) = snap.wal_bytes {
        metric(
            "lc_wal_bytes",
            "gauge",
            "Size of the write-ahead log.",
            bytes.to_string(),
        );
    }
    if let Some(h) = fsync {
        let name = "lc_wal_fsync_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time taken by each fsync of the write-ahead log."
        );
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (bound, bucket) in FSYNC_BUCKETS.iter().zip(&h.buckets) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum:.6}\n{name}_count {count}");
    }
    out
}

/// The connections the metrics port serves at once, a budget of its own
/// (a scraper needs one): one beyond it is closed at once, so idle
/// connections to it cannot take the descriptors the lock port needs.
pub(crate) const MAX_CONNECTIONS: usize = 16;

/// How long one metrics connection may take, from accept to the answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Serves `GET /metrics` with whatever `scrape` renders, until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, scrape: Arc<dyn Fn() -> String + Send + Sync>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Over its budget: closed before a byte is read.
            drop(stream);
            continue;
        };
        let scrape = scrape.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(ANSWER_WITHIN, answer(stream, &*scrape)).await;
            drop(slot);
        });
    }
}

async fn answer(
    mut stream: TcpStream,
    scrape: &(dyn Fn() -> String + Send + Sync),
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() > 8192 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let request_line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = request_line.split(|&b| b == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics") => ("200 OK", scrape()),
        (b"GET", _) => ("404 Not Found", "try /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", String::new()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_metric_once() {
        let c = Counters::default();
        Counters::bump(&c.grants);
        let h = FsyncHistogram::default();
        h.observe(Duration::from_micros(300));
        let text = render(
            &c,
            Some(&h),
            &Snapshot {
                keys_held: 2,
                waiters: 5,
                oldest_hold: Some(Duration::from_millis(1500)),
                wal_bytes: Some(4096),
                connections: (7, 3),
            },
        );
        assert!(text.contains("\nlc_connections_open 7\n"));
        assert!(text.contains("\nlc_connections_logging_in 3\n"));
        assert!(text.contains("\nlc_grants_total 1\n"));
        assert!(text.contains("\nlc_waiters_queued 5\n"));
        assert!(text.contains("\nlc_oldest_hold_age_seconds 1.500\n"));
        assert!(text.contains("lc_wal_fsync_seconds_bucket{le=\"0.0001\"} 0\n"));
        assert!(text.contains("lc_wal_fsync_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("lc_wal_fsync_seconds_count 1\n"));
        assert_eq!(text.matches("# TYPE lc_keys_held gauge").count(), 1);
    }
}
