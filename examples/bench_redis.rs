//! Redis work per acquisition and handoff latency with 1, 16 and 64 waiters
//! queued, in one run against a private redis-server.
//!
//!     cargo run --release --example bench_redis
//!
//! Each waiter is a backend of its own (its own connections, as separate
//! lc-cli processes would have). Every task loops: wait in line, take the
//! key, release it, queue again, so the line stays N deep. Handoff latency is
//! the time from the start of a release to the moment the next waiter holds
//! the key. Commands are counted by Redis itself (`INFO commandstats`, which
//! counts the commands run inside scripts as well as EVALSHA and BLPOP).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lc_cli::backend::{self, Acquired, BackendConfig, LockRequest, ServerSpec};
use tokio_util::sync::CancellationToken;

const MEASURED: usize = 600;

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> (Redis, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let redis = Redis(child);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    for _ in 0..250 {
        if client.get_connection().is_ok() {
            return (redis, port);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not start");
}

fn command_calls(con: &mut redis::Connection) -> (u64, Vec<(String, u64)>) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let mut total = 0;
    let mut per = Vec::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, stats) = rest.split_once(':').unwrap();
        if name == "info" || name == "config" {
            continue;
        }
        let calls: u64 = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .unwrap()
            .parse()
            .unwrap();
        total += calls;
        per.push((name.to_string(), calls));
    }
    per.sort_by_key(|p| std::cmp::Reverse(p.1));
    (total, per)
}

struct Round {
    latencies: Mutex<Vec<Duration>>,
    release_started: Mutex<Option<Instant>>,
    acquisitions: AtomicUsize,
    measuring: std::sync::atomic::AtomicBool,
    stop: CancellationToken,
}

async fn run_round(
    url: &str,
    waiters: usize,
    con: &mut redis::Connection,
) -> (Duration, f64, String) {
    let config = BackendConfig {
        server: url.parse::<ServerSpec>().unwrap(),
        session_timeout: Duration::from_secs(10),
        ttl: Duration::from_secs(30),
        queue_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
    };
    let round = Arc::new(Round {
        latencies: Mutex::new(Vec::new()),
        release_started: Mutex::new(None),
        acquisitions: AtomicUsize::new(0),
        measuring: Default::default(),
        stop: CancellationToken::new(),
    });
    let key = format!("bench-{waiters}");
    let mut tasks = Vec::new();
    // One holder plus `waiters` in line.
    for i in 0..=waiters {
        let config = config.clone();
        let round = round.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let backend = backend::connect(&config).await.unwrap();
            let request = LockRequest {
                key,
                source: format!("bench-{i}"),
                nonblock: false,
                detached: false,
            };
            loop {
                let got = backend
                    .acquire(&request, round.stop.clone(), &|_| {})
                    .await
                    .unwrap();
                let Acquired::Held(mut held) = got else {
                    return;
                };
                if let Some(started) = round.release_started.lock().unwrap().take() {
                    if round.measuring.load(Ordering::SeqCst) {
                        round.latencies.lock().unwrap().push(started.elapsed());
                    }
                }
                round.acquisitions.fetch_add(1, Ordering::SeqCst);
                *round.release_started.lock().unwrap() = Some(Instant::now());
                held.release().await.unwrap();
                if round.stop.is_cancelled() {
                    return;
                }
            }
        }));
        // Start in order, so the line forms before the measurement.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Warm up until the line has gone round twice.
    while round.acquisitions.load(Ordering::SeqCst) < 2 * (waiters + 1) + 50 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
    let base = round.acquisitions.load(Ordering::SeqCst);
    round.measuring.store(true, Ordering::SeqCst);
    while round.acquisitions.load(Ordering::SeqCst) < base + MEASURED {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let done = round.acquisitions.load(Ordering::SeqCst) - base;
    let (calls, per) = command_calls(con);
    round.measuring.store(false, Ordering::SeqCst);
    round.stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    let mut lat = round.latencies.lock().unwrap().clone();
    lat.sort();
    let median = lat[lat.len() / 2];
    let top: Vec<String> = per
        .iter()
        .take(6)
        .map(|(n, c)| format!("{n} {:.2}", *c as f64 / done as f64))
        .collect();
    (median, calls as f64 / done as f64, top.join(", "))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (_redis, port) = start_redis();
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(format!("{url}/")).unwrap();
    let mut con = client.get_connection().unwrap();
    println!("redis-server {port}, {MEASURED} measured acquisitions per row");
    println!(
        "{:>8} {:>12} {:>10} {:>14} {:>10}",
        "waiters", "handoff p50", "vs 1", "cmds/acquire", "vs 1"
    );
    let mut base: Option<(Duration, f64)> = None;
    let mut details = Vec::new();
    for waiters in [1usize, 16, 64] {
        let (median, per_acq, top) = run_round(&url, waiters, &mut con).await;
        let (b_lat, b_cmd) = *base.get_or_insert((median, per_acq));
        println!(
            "{waiters:>8} {:>10.3}ms {:>9.2}x {per_acq:>14.2} {:>9.3}x",
            median.as_secs_f64() * 1000.0,
            median.as_secs_f64() / b_lat.as_secs_f64(),
            per_acq / b_cmd
        );
        details.push(format!("  {waiters:>2} waiters, per acquisition: {top}"));
    }
    for d in details {
        println!("{d}");
    }
}
