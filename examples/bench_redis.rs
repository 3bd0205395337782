//! Redis work per acquisition and handoff latency with 1, 16 and 64 waiters
//! queued, in one run against a private redis-server.
//!
//!     cargo run --release --example bench_redis
//!
//! Each waiter is a backend of its own (its own connections, as separate
//! lc-cli processes would have). Every task loops: wait in line, take the
//! key, release it, queue again, so the line stays N deep. Handoff latency is
//! the time from the start of a release to the moment the next waiter holds
//! the key (each holder keeps the key 1 ms, so the previous holder is back
//! in line before every handoff). Commands are counted by Redis itself (`INFO commandstats`, which
//! counts the commands run inside scripts as well as EVALSHA and BLPOP).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lc_cli::backend::{self, Acquired, BackendConfig, LockMode, LockRequest, ServerSpec};
use tokio_util::sync::CancellationToken;

const MEASURED: usize = 600;
const REPEATS: usize = 5;
const HOLD: Duration = Duration::from_millis(1);

/// The server and its AOF directory, both gone when dropped.
struct Redis(Child, #[allow(dead_code)] tempfile::TempDir);

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
    // lc-cli trusts a node just started only if it keeps every write (else
    // only after a lease); on tmpfs the fsyncs cost nothing.
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a dir for the AOF");
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let redis = Redis(child, dir);
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

/// The modes of issue 14: the exclusive lock; `--limit 4` (4 hold, the
/// rest wait); `--shared` with every other task exclusive (readers and
/// writers in one line).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Exclusive,
    Limit4,
    Shared,
}

impl Shape {
    fn mode(self, task: usize) -> LockMode {
        match self {
            Shape::Exclusive => LockMode::Exclusive,
            Shape::Limit4 => LockMode::limit(4),
            Shape::Shared if task.is_multiple_of(2) => LockMode::Shared,
            Shape::Shared => LockMode::Exclusive,
        }
    }

    fn holders(self) -> usize {
        if self == Shape::Limit4 {
            4
        } else {
            1
        }
    }
}

async fn run_round(
    url: &str,
    waiters: usize,
    con: &mut redis::Connection,
    shape: Shape,
) -> (Vec<Duration>, u64, usize, Vec<(String, u64)>) {
    let config = BackendConfig {
        access: Default::default(),
        server: url.parse::<ServerSpec>().unwrap(),
        session_timeout: Duration::from_secs(10),
        ttl: Duration::from_secs(30),
        queue_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        verbose: false,
    };
    let round = Arc::new(Round {
        latencies: Mutex::new(Vec::new()),
        release_started: Mutex::new(None),
        acquisitions: AtomicUsize::new(0),
        measuring: Default::default(),
        stop: CancellationToken::new(),
    });
    let key = format!(
        "bench-{}-{waiters}",
        shape.holders() + shape.mode(1).slots().unwrap_or(0) as usize
    );
    let mut tasks = Vec::new();
    // The holders plus `waiters` in line.
    for i in 0..waiters + shape.holders() {
        let config = config.clone();
        let round = round.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let backend = backend::connect(&config).await.unwrap();
            let request = LockRequest {
                key,
                mode: shape.mode(i),
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
                // Hold briefly, so the previous holder is back in line
                // before the key moves on: the line is N deep at every handoff.
                tokio::time::sleep(HOLD).await;
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
    let lat = round.latencies.lock().unwrap().clone();
    (lat, calls, done, per)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (_redis, port) = start_redis();
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(format!("{url}/")).unwrap();
    let mut con = client.get_connection().unwrap();
    // The rows are interleaved (1, 16, 64, 1, 16, 64, ...) so that a change
    // in the machine's load during the run hits every row alike.
    for (shape, title) in [
        (Shape::Exclusive, "exclusive"),
        (Shape::Limit4, "--limit 4 (4 holders)"),
        (Shape::Shared, "--shared (every other task exclusive)"),
    ] {
        println!("{title}");
        measure(&url, &mut con, shape).await;
    }
}

async fn measure(url: &str, con: &mut redis::Connection, shape: Shape) {
    const SIZES: [usize; 3] = [1, 16, 64];
    let port = url.rsplit(':').next().unwrap();
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); SIZES.len()];
    let mut calls = [0u64; 3];
    let mut done = [0usize; 3];
    let mut per: Vec<Vec<(String, u64)>> = vec![Vec::new(); SIZES.len()];
    for _ in 0..REPEATS {
        for (i, &waiters) in SIZES.iter().enumerate() {
            let (l, c, d, p) = run_round(url, waiters, con, shape).await;
            lat[i].extend(l);
            calls[i] += c;
            done[i] += d;
            for (name, n) in p {
                match per[i].iter_mut().find(|(m, _)| *m == name) {
                    Some(e) => e.1 += n,
                    None => per[i].push((name, n)),
                }
            }
        }
    }
    println!(
        "redis-server {port}, {REPEATS} x {MEASURED} measured acquisitions per row (rows interleaved)"
    );
    println!(
        "{:>8} {:>12} {:>12} {:>8} {:>14} {:>8}",
        "waiters", "handoff p50", "handoff p90", "p50 vs 1", "cmds/acquire", "vs 1"
    );
    let pct = |v: &mut Vec<Duration>, q: f64| {
        v.sort();
        v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
    };
    let base_lat = pct(&mut lat[0], 0.5);
    let base_cmd = calls[0] as f64 / done[0] as f64;
    for (i, waiters) in SIZES.iter().enumerate() {
        let p50 = pct(&mut lat[i], 0.5);
        let p90 = pct(&mut lat[i], 0.9);
        let per_acq = calls[i] as f64 / done[i] as f64;
        println!(
            "{waiters:>8} {:>10.3}ms {:>10.3}ms {:>7.2}x {per_acq:>14.2} {:>7.3}x",
            p50.as_secs_f64() * 1000.0,
            p90.as_secs_f64() * 1000.0,
            p50.as_secs_f64() / base_lat.as_secs_f64(),
            per_acq / base_cmd
        );
    }
    for (i, waiters) in SIZES.iter().enumerate() {
        per[i].sort_by_key(|p| std::cmp::Reverse(p.1));
        let top: Vec<String> = per[i]
            .iter()
            .take(8)
            .map(|(n, c)| format!("{n} {:.2}", *c as f64 / done[i] as f64))
            .collect();
        println!(
            "  {waiters:>2} waiters, per acquisition: {}",
            top.join(", ")
        );
    }
}
