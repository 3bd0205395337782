//! Requests per hand-off on the etcd backend, with 1, 16 and 64 waiters
//! queued, against one private etcd in one run.
//!
//!     cargo run --release --example bench_etcd [-- HANDOFFS]
//!
//! The method of `bench_zk`: for each queue length N, a holder and N
//! waiters (a backend each, in this process, as separate lc-cli processes
//! would have) queue on one key. Each measured hand-off first tops the queue
//! up to N waiters, then reads etcd's `/metrics` once it is quiet (two reads
//! 20 ms apart agree, keepalives aside) before the holder's release, and
//! again once it is quiet after the next waiter's acquire returned (so the
//! new holder's own requests are in): the gRPC
//! messages the server received, per method (`grpc_server_msg_received_total`:
//! a unary call is one, a stream counts each message sent on it, a watch
//! its create request). Lease keepalives are work per waiter per second, not
//! per hand-off: they are counted apart (their period is a fifth of the
//! lease, 60 s here). The rows are interleaved (1, 16, 64, 1, ...) so that a
//! change in the machine's load hits every row alike.

// A part of the test suite's helper serves the benchmark: the rest is unused here.
#[allow(dead_code)]
#[path = "../tests/common/etcd.rs"]
mod etcd;
#[path = "../tests/common/tls.rs"]
#[allow(dead_code)]
mod tls;

/// `etcd.rs` can also build lc-cli commands; the benchmark does not.
pub const BIN: &str = "lc-cli";

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lc_cli::backend::{
    self, Acquired, Backend, BackendConfig, HeldLock, LockMode, LockRequest, ServerUrl,
    WaitProgress,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

type Holder = (Box<dyn Backend>, Box<dyn HeldLock>);

const SIZES: [usize; 3] = [1, 16, 64];
const ROUNDS: usize = 3;
const KEEPALIVE: &str = "LeaseKeepAlive";

fn config(etcd: &etcd::Etcd) -> BackendConfig {
    BackendConfig {
        access: Default::default(),
        server: format!("etcd://{}", etcd.endpoint())
            .parse::<ServerUrl>()
            .unwrap()
            .server,
        session_timeout: Duration::from_secs(60),
        // Keepalives every fifth of the lease: few of them in the windows.
        ttl: Duration::from_secs(60),
        queue_timeout: Duration::from_secs(120),
        connect_timeout: Duration::from_secs(10),
        verbose: false,
    }
}

fn request(key: &str) -> LockRequest {
    LockRequest {
        key: key.into(),
        mode: LockMode::Exclusive,
        source: "bench".into(),
        nonblock: false,
        detached: false,
        expire: None,
        extras: Default::default(),
    }
}

/// gRPC messages etcd received so far, per method (`/metrics`).
fn received(port: u16) -> BTreeMap<String, f64> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let mut per = BTreeMap::new();
    for line in body.lines() {
        let Some(labels) = line.strip_prefix("grpc_server_msg_received_total{") else {
            continue;
        };
        let (labels, value) = labels.rsplit_once("} ").unwrap();
        let method = labels
            .split(',')
            .find_map(|l| l.strip_prefix("grpc_method=\""))
            .and_then(|m| m.strip_suffix('"'))
            .unwrap();
        *per.entry(method.to_string()).or_default() += value.trim().parse::<f64>().unwrap();
    }
    per
}

/// The messages received once nothing but keepalives arrives any more (two
/// reads 20 ms apart agree): the requests in flight have landed. Bounded: 5 s.
async fn settled(port: u16) -> BTreeMap<String, f64> {
    let quiet = |m: &BTreeMap<String, f64>| {
        let mut m = m.clone();
        m.remove(KEEPALIVE);
        m
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = received(port);
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = received(port);
        if quiet(&now) == quiet(&last) || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// Connects, queues, and returns once it is in line; the handle resolves
/// when it holds the key.
async fn queue_one(config: &BackendConfig, key: &str) -> JoinHandle<Holder> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let config = config.clone();
    let request = request(key);
    let handle = tokio::spawn(async move {
        let b = backend::connect(&config).await.expect("connect");
        let tx = Mutex::new(Some(tx));
        let progress = move |_: WaitProgress| {
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
        };
        match b
            .acquire(&request, CancellationToken::new(), &progress)
            .await
        {
            Ok(Acquired::Held(h)) => (b, h),
            Ok(_) => panic!("not held"),
            Err(e) => panic!("acquire: {e}"),
        }
    });
    rx.await.expect("queued, not granted at once");
    handle
}

async fn release(mut holder: Holder) {
    holder.1.release().await.expect("release");
    holder.0.close().await;
}

/// One key's line: its holder and its waiters, in the order they queued.
struct Line {
    key: String,
    holder: Option<Holder>,
    queue: VecDeque<JoinHandle<Holder>>,
}

/// What one row measured.
#[derive(Default)]
struct Tally {
    messages: BTreeMap<String, f64>,
    latencies: Vec<Duration>,
}

impl Tally {
    fn add(&mut self, before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) {
        for (m, v) in after {
            let d = v - before.get(m).copied().unwrap_or(0.0);
            if d > 0.0 {
                *self.messages.entry(m.clone()).or_default() += d;
            }
        }
    }

    fn handoffs(&self) -> f64 {
        self.latencies.len() as f64
    }

    /// Messages per hand-off, keepalives left out.
    fn per_handoff(&self) -> f64 {
        let all: f64 = self
            .messages
            .iter()
            .filter(|(m, _)| *m != KEEPALIVE)
            .map(|(_, v)| v)
            .sum();
        all / self.handoffs()
    }
}

impl Line {
    async fn new(config: &BackendConfig, key: String) -> Line {
        let holder = queue_or_hold(config, &key).await;
        Line {
            key,
            holder: Some(holder),
            queue: VecDeque::new(),
        }
    }

    /// One measured hand-off with `waiters` in line.
    async fn handoff(
        &mut self,
        config: &BackendConfig,
        port: u16,
        waiters: usize,
        tally: Option<&mut Tally>,
    ) {
        while self.queue.len() < waiters {
            self.queue.push_back(queue_one(config, &self.key).await);
        }
        let before = settled(port).await;
        let t = Instant::now();
        release(self.holder.take().unwrap()).await;
        self.holder = Some(self.queue.pop_front().unwrap().await.unwrap());
        let took = t.elapsed();
        let after = settled(port).await;
        if let Some(tally) = tally {
            tally.add(&before, &after);
            tally.latencies.push(took);
        }
    }

    async fn close(mut self) {
        if let Some(h) = self.holder.take() {
            release(h).await;
        }
        for next in self.queue {
            release(next.await.unwrap()).await;
        }
    }
}

/// The first holder of a key nobody uses.
async fn queue_or_hold(config: &BackendConfig, key: &str) -> Holder {
    let b = backend::connect(config).await.expect("connect");
    match b
        .acquire(&request(key), CancellationToken::new(), &|_| {})
        .await
    {
        Ok(Acquired::Held(h)) => (b, h),
        _ => panic!("the first holder not granted"),
    }
}

fn main() {
    let handoffs: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("HANDOFFS is a number"))
        .unwrap_or(30);
    let etcd = etcd::Etcd::start();
    let config = config(&etcd);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows: Vec<Tally> = SIZES.iter().map(|_| Tally::default()).collect();
    rt.block_on(async {
        for round in 0..ROUNDS {
            let mut lines = Vec::new();
            for &w in &SIZES {
                lines.push(Line::new(&config, format!("bench-{w}-{round}")).await);
            }
            // Two warm-up hand-offs per line, then the measured ones in turn.
            for i in 0..2 + handoffs {
                for ((line, &w), tally) in lines.iter_mut().zip(&SIZES).zip(rows.iter_mut()) {
                    line.handoff(&config, etcd.port, w, (i >= 2).then_some(tally))
                        .await;
                }
            }
            for line in lines {
                line.close().await;
            }
        }
    });
    println!(
        "etcd 127.0.0.1:{}: {ROUNDS} x {handoffs} measured hand-offs per row (rows interleaved)",
        etcd.port
    );
    println!(
        "{:>8} {:>14} {:>8} {:>13} {:>12} {:>12}",
        "waiters", "msgs/hand-off", "vs 1", "keepalives", "median", "p90"
    );
    let base = rows[0].per_handoff();
    for (w, t) in SIZES.iter().zip(rows.iter_mut()) {
        t.latencies.sort();
        let n = t.latencies.len();
        println!(
            "{w:>8} {:>14.2} {:>7.3}x {:>13.2} {:>10.2}ms {:>10.2}ms",
            t.per_handoff(),
            t.per_handoff() / base,
            t.messages.get(KEEPALIVE).copied().unwrap_or(0.0) / t.handoffs(),
            t.latencies[n / 2].as_secs_f64() * 1e3,
            t.latencies[n * 9 / 10].as_secs_f64() * 1e3,
        );
    }
    for (w, t) in SIZES.iter().zip(rows.iter()) {
        let parts: Vec<String> = t
            .messages
            .iter()
            .map(|(m, v)| format!("{m} {:.2}", v / t.handoffs()))
            .collect();
        println!("  {w:>2} waiters, per hand-off: {}", parts.join(", "));
    }
}
