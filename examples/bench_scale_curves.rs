//! Scaling curves (issue 24): held keys, waiters on one key and concurrent
//! clients, on the built-in server (in memory and `--data` on disk) and on
//! Redis, ZooKeeper, etcd and PostgreSQL, each started here on 127.0.0.1.
//!
//!     cargo run --release --example bench_scale_curves [-- --quick] [--only serve,wal,redis,zk,etcd,pg] [--budget SECS]
//!
//! Every client is lc-cli's own backend code (`lc_cli::backend`), one
//! backend per simulated lc-cli process (its own connection or session),
//! all in this one process on a 2-worker tokio runtime. Per service, in
//! this order (the held keys stay, so they come last):
//!
//! - clients C: C loops of lock+release, each on a key of its own, each
//!   pair as one lc-cli process makes it (connect, acquire, release,
//!   close); pairs/s and connect-to-grant latency of the pairs that end in
//!   a 5 s window after 2 s of warm-up.
//! - waiters W: one holder, W backends queued on its key; the holder
//!   releases and every waiter releases as soon as it is granted: grants/s
//!   along the line and hand-off latency (a release's start to the next
//!   grant); service memory per queued waiter.
//! - held keys N: kept holds (`lock KEY` without a command; on PostgreSQL,
//!   whose advisory locks die with their session, one open session per key)
//!   filled by 64 workers up to N, then service memory and data size, and
//!   lock+release pairs/s with 32 clients on other keys for 3 s.
//!
//! A point's setup and run are bounded by the budget (60 s; `--quick` 20 s):
//! a point not reached in it is marked and the larger ones extrapolated
//! (linear in N from the last two measured points, marked `~`).

mod bench_common;
// A part of the test suite's helper serves the benchmark: the rest is unused here.
#[allow(dead_code)]
#[path = "../tests/common/etcd.rs"]
mod etcd;
#[path = "../tests/common/tls.rs"]
#[allow(dead_code)]
mod tls;

/// `etcd.rs` can also build lc-cli commands; this program does not.
pub const BIN: &str = "lc-cli";

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bench_common::{rss, Proc};
use lc_cli::backend::{self, Acquired, Backend, BackendConfig, HeldLock, LockMode, LockRequest};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Connections opened at once while a point is set up (a fleet of jobs
/// starting together would storm; this keeps the listen queues short).
const SETUP_PARALLEL: usize = 200;
const FILL_WORKERS: usize = 64;
const PROBE_CLIENTS: usize = 32;
/// PostgreSQL runs with this many connections allowed; larger points skip.
const PG_MAX_CONNECTIONS: usize = 1100;
const PG_POINT_CAP: usize = 1000;

struct Sizes {
    clients: Vec<usize>,
    waiters: Vec<usize>,
    keys: Vec<usize>,
}

/// A started service: its address for lc-cli, the processes whose memory
/// counts, where its data lives; stopped when dropped.
struct Service {
    name: &'static str,
    url: String,
    pid: u32,
    data: DataSize,
    /// The most sessions a point may open (PostgreSQL's max_connections).
    session_cap: Option<usize>,
    kept_holds: bool,
    /// Whether lc-cli's backend says when a plain lock waits in line (its
    /// progress callback); PostgreSQL's waits inside pg_advisory_lock.
    says_queued: bool,
    _guard: Guard,
}

enum DataSize {
    None,
    /// The size of the files under this path.
    Dir(PathBuf),
    /// ZooKeeper's `mntr` zk_approximate_data_size on this port.
    ZkMntr(u16),
}

enum Guard {
    Serve(
        #[allow(dead_code)] Proc,
        #[allow(dead_code)] Option<tempfile::TempDir>,
    ),
    Child(Child, #[allow(dead_code)] tempfile::TempDir),
    /// A process group (PostgreSQL: the postmaster and its backends).
    Group(Child, #[allow(dead_code)] tempfile::TempDir),
    /// Stopped by its own drop.
    Etcd(#[allow(dead_code)] etcd::Etcd),
}

impl Drop for Guard {
    fn drop(&mut self) {
        match self {
            Guard::Serve(..) | Guard::Etcd(..) => {}
            Guard::Child(c, _) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Guard::Group(c, _) => {
                // SAFETY: kill(2) takes only integers: no memory of ours is involved.
                unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
                let _ = c.wait();
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let only: Vec<String> = value("--only")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_else(|| {
            ["serve", "wal", "redis", "zk", "etcd", "pg"]
                .map(String::from)
                .to_vec()
        });
    let budget = Duration::from_secs(
        value("--budget")
            .map(|v| v.parse().expect("--budget SECS"))
            .unwrap_or(if quick { 20 } else { 60 }),
    );
    let sizes = if quick {
        Sizes {
            clients: vec![10, 100, 1000],
            waiters: vec![10, 100, 1000],
            keys: vec![1000, 10_000],
        }
    } else {
        Sizes {
            clients: vec![10, 100, 1000, 10_000],
            waiters: vec![10, 100, 1000, 10_000],
            keys: vec![1000, 10_000, 100_000, 1_000_000],
        }
    };
    let fds = raise_fd_limit(1 << 20);
    println!("open-file limit raised to {fds} (soft and hard; servers started here inherit it)");
    println!("uptime at start: {}", uptime());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bin = lc_cli_bin();
    for name in &only {
        let svc = match name.as_str() {
            "serve" => start_serve(&bin, false),
            "wal" => start_serve(&bin, true),
            "redis" => start_redis(),
            "zk" => start_zk(),
            "etcd" => start_etcd(),
            "pg" => start_pg(),
            other => panic!("unknown service {other}"),
        };
        println!();
        println!(
            "## {} ({}), pid {}, memory at start {}",
            svc.name,
            svc.url,
            svc.pid,
            mib(service_memory(svc.pid))
        );
        println!("uptime: {}", uptime());
        rt.block_on(run_service(&svc, &sizes, budget));
        if name == "pg" {
            rt.block_on(pg_lock_table(&svc));
        }
    }
    println!();
    println!("uptime at end: {}", uptime());
}

async fn run_service(svc: &Service, sizes: &Sizes, budget: Duration) {
    header("clients C (each its own key)", "pairs/s", "acquire");
    let mut curve = Curve::default();
    for &c in &sizes.clients {
        if !curve.go_on(svc, c) {
            continue;
        }
        let row = clients_point(svc, c).await;
        curve.push(c, row);
    }
    header("waiters W on one key", "grants/s", "hand-off");
    let mut curve = Curve::default();
    for &w in &sizes.waiters {
        if !curve.go_on(svc, w) {
            continue;
        }
        let row = waiters_point(svc, w, budget).await;
        curve.push(w, row);
    }
    header(
        "held keys N (then 32 clients on other keys)",
        "pairs/s",
        "acquire",
    );
    let mut curve = Curve::default();
    let mut filler = Filler::new(svc);
    for &n in &sizes.keys {
        if !curve.go_on(svc, n) {
            continue;
        }
        let row = held_point(svc, &mut filler, n, budget).await;
        curve.push(n, row);
    }
    filler.release().await;
}

/// One measured point of a curve.
#[derive(Clone, Default)]
struct Row {
    /// The size reached when it was less than asked.
    reached: Option<usize>,
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Service memory (bytes) during the point; per item where the curve
    /// says so.
    mem: u64,
    data: Option<u64>,
    /// This process's RSS growth over the point (the clients' side).
    client: i64,
    setup_s: f64,
    note: String,
}

/// The points of one curve, for the extrapolation of those not reached.
#[derive(Default)]
struct Curve {
    measured: Vec<(usize, Row)>,
    stopped: bool,
}

impl Curve {
    /// False (and the point is printed as skipped or extrapolated) once a
    /// point fell short, or beyond the service's sessions.
    fn go_on(&mut self, svc: &Service, n: usize) -> bool {
        if let Some(cap) = svc.session_cap {
            if n > cap && !svc.kept_holds {
                self.extrapolate(
                    n,
                    &format!("skipped: over max_connections={PG_MAX_CONNECTIONS} here"),
                );
                return false;
            }
        }
        if self.stopped {
            self.extrapolate(n, "skipped: the previous point overran the budget");
            return false;
        }
        true
    }

    fn push(&mut self, n: usize, mut row: Row) {
        // The baseline of the same run: the curve's first point.
        if let Some((n0, first)) = self.measured.first() {
            if first.rate > 0.0 {
                row.note = format!(
                    "{:.2}x the rate at {n0}; {}",
                    row.rate / first.rate,
                    row.note
                );
            }
        }
        print_row(&n.to_string(), &row);
        self.stopped = row.reached.is_some();
        self.measured.push((n, row));
    }

    /// A row linear in N from the last two points (memory, data); rate and
    /// latency carried from the last one.
    fn extrapolate(&self, n: usize, why: &str) {
        let len = self.measured.len();
        if len < 2 {
            println!("| {n} | {why} | | | | | | |");
            return;
        }
        let (n1, r1) = &self.measured[len - 2];
        let (n2, r2) = &self.measured[len - 1];
        let n1 = r1.reached.unwrap_or(*n1) as f64;
        let n2 = r2.reached.unwrap_or(*n2) as f64;
        // A falling or flat line (memory the earlier curves left behind was
        // returned) says nothing of the growth: NaN, printed as "-".
        let line = |a: f64, b: f64| {
            if b > a {
                a + (b - a) / (n2 - n1) * (n as f64 - n1)
            } else {
                f64::NAN
            }
        };
        let row = Row {
            rate: r2.rate,
            p50_ms: r2.p50_ms,
            p99_ms: r2.p99_ms,
            mem: line(r1.mem as f64, r2.mem as f64) as u64,
            data: match (r1.data, r2.data) {
                (Some(a), Some(b)) => Some(line(a as f64, b as f64) as u64).filter(|d| *d > 0),
                _ => None,
            },
            client: line(r1.client as f64, r2.client as f64) as i64,
            note: format!("~ extrapolated ({why})"),
            ..Row::default()
        };
        print_row(&format!("~{n}"), &row);
    }
}

fn header(curve: &str, rate: &str, latency: &str) {
    println!();
    println!("### {curve}");
    println!(
        "| N | {rate} | {latency} p50 ms | p99 ms | service memory | data | client RSS growth | setup s | note |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
}

fn print_row(n: &str, r: &Row) {
    let reached = r
        .reached
        .map(|x| format!("reached {x} within the budget; "))
        .unwrap_or_default();
    println!(
        "| {n} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {:.1} | {reached}{} |",
        r.rate,
        r.p50_ms,
        r.p99_ms,
        if r.mem == 0 { "-".into() } else { mib(r.mem) },
        r.data.map(mib).unwrap_or_else(|| "-".into()),
        mib_signed(r.client),
        r.setup_s,
        r.note
    );
}

fn config(svc: &Service) -> BackendConfig {
    BackendConfig {
        access: Default::default(),
        server: svc.url.parse::<backend::ServerUrl>().unwrap().server,
        session_timeout: Duration::from_secs(30),
        ttl: Duration::from_secs(30),
        queue_timeout: Duration::from_secs(120),
        connect_timeout: Duration::from_secs(30),
        verbose: false,
    }
}

fn request(key: String, detached: bool) -> LockRequest {
    LockRequest {
        key,
        mode: LockMode::Exclusive,
        source: "bench-scale".into(),
        nonblock: false,
        detached,
        expire: None,
        extras: Default::default(),
    }
}

async fn held(b: &dyn Backend, req: &LockRequest) -> Box<dyn HeldLock> {
    match b.acquire(req, CancellationToken::new(), &|_| {}).await {
        Ok(Acquired::Held(h)) => h,
        Ok(_) => panic!("{}: not granted", req.key),
        Err(e) => panic!("{}: {e}", req.key),
    }
}

/// One lock+release as one lc-cli process makes it: connect, acquire,
/// release, close (lc-cli's ZooKeeper backend ends its session with the
/// release, so a backend serves one acquisition). Returns the time from
/// the connect to the grant.
async fn one_pair(config: &BackendConfig, req: &LockRequest) -> Result<Duration, String> {
    let t0 = Instant::now();
    let b = backend::connect(config).await.map_err(|e| e.to_string())?;
    let got = b.acquire(req, CancellationToken::new(), &|_| {}).await;
    let acquired = t0.elapsed();
    let released = match got {
        Ok(Acquired::Held(mut h)) => h.release().await.map_err(|e| e.to_string()),
        Ok(_) => Err("not granted".to_string()),
        Err(e) => Err(e.to_string()),
    };
    b.close().await;
    released.map(|()| acquired)
}

/// Latencies of a window, and the pairs that ended in it.
#[derive(Default)]
struct Window {
    acquire: Vec<f64>,
    pairs: usize,
}

/// `clients` loops of lock+release, each on `key_prefix/i`: what the
/// window from `warm_up` to `warm_up + window` saw, and the service's
/// memory in its middle.
async fn pair_loops(
    svc: &Service,
    clients: usize,
    key_prefix: &str,
    warm_up: Duration,
    window: Duration,
) -> (Window, u64, Option<String>) {
    let start = Instant::now();
    let (from, until) = (start + warm_up, start + warm_up + window);
    let seen = Arc::new(Mutex::new(Window::default()));
    let error: Arc<Mutex<Option<String>>> = Arc::default();
    let config = config(svc);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (config, seen, error) = (config.clone(), seen.clone(), error.clone());
        let req = request(format!("{key_prefix}/{i}"), false);
        tasks.push(tokio::spawn(async move {
            let mut mine = Window::default();
            while Instant::now() < until {
                match one_pair(&config, &req).await {
                    Ok(acquired) => {
                        // Counted by when it ended: at 10^4 clients a pair
                        // may take longer than the window.
                        let now = Instant::now();
                        if now >= from && now <= until {
                            mine.acquire.push(acquired.as_secs_f64() * 1e3);
                            mine.pairs += 1;
                        }
                    }
                    Err(e) => {
                        *error.lock().unwrap() = Some(e);
                        break;
                    }
                }
            }
            let mut s = seen.lock().unwrap();
            s.acquire.extend(mine.acquire);
            s.pairs += mine.pairs;
        }));
    }
    tokio::time::sleep_until((from + window / 2).into()).await;
    let mem = service_memory(svc.pid);
    for t in tasks {
        let _ = t.await;
    }
    let w = std::mem::take(&mut *seen.lock().unwrap());
    let e = error.lock().unwrap().take();
    (w, mem, e)
}

async fn clients_point(svc: &Service, c: usize) -> Row {
    let client0 = rss(std::process::id()) as i64;
    let window = Duration::from_secs(5);
    let (mut w, mem, err) =
        pair_loops(svc, c, &format!("c{c}"), Duration::from_secs(2), window).await;
    let client = rss(std::process::id()) as i64 - client0;
    let (p50, p99) = percentiles(&mut w.acquire);
    Row {
        rate: w.pairs as f64 / window.as_secs_f64(),
        p50_ms: p50,
        p99_ms: p99,
        mem,
        client,
        note: err.map(|e| format!("an error: {e}")).unwrap_or_default(),
        ..Row::default()
    }
}

/// Hand-off bookkeeping along a draining line.
struct Line {
    release_started: Mutex<Option<Instant>>,
    handoffs: Mutex<Vec<f64>>,
    granted: AtomicUsize,
    last_grant: Mutex<Option<Instant>>,
    queued: AtomicUsize,
}

async fn waiters_point(svc: &Service, w: usize, budget: Duration) -> Row {
    let key = format!("line{w}");
    // Two thirds of the budget to queue, the rest (a third at least) to drain.
    let point_end = Instant::now() + budget;
    let deadline = Instant::now() + budget * 2 / 3;
    let holder_backend = backend::connect(&config(svc)).await.unwrap();
    let mut holder = held(holder_backend.as_ref(), &request(key.clone(), false)).await;
    let mem0 = service_memory(svc.pid);
    let client0 = rss(std::process::id()) as i64;
    let t0 = Instant::now();
    let line = Arc::new(Line {
        release_started: Mutex::new(None),
        handoffs: Mutex::new(Vec::with_capacity(w)),
        granted: AtomicUsize::new(0),
        last_grant: Mutex::new(None),
        queued: AtomicUsize::new(0),
    });
    let config = config(svc);
    let sem = Arc::new(Semaphore::new(SETUP_PARALLEL));
    let cancel = CancellationToken::new();
    let mut tasks = Vec::with_capacity(w);
    for _ in 0..w {
        let (config, sem, line, cancel) =
            (config.clone(), sem.clone(), line.clone(), cancel.clone());
        let says_queued = svc.says_queued;
        let req = request(key.clone(), false);
        tasks.push(tokio::spawn(async move {
            let permit = Mutex::new(Some(sem.acquire_owned().await.unwrap()));
            let b = tokio::select! {
                b = backend::connect(&config) => b.map_err(|e| e.to_string())?,
                _ = cancel.cancelled() => return Ok(()),
            };
            // In line once the backend says it waits: let the next one in.
            let progress = |_| {
                if permit.lock().unwrap().take().is_some() {
                    line.queued.fetch_add(1, Ordering::SeqCst);
                }
            };
            if !says_queued {
                progress(Default::default());
            }
            let got = b.acquire(&req, cancel.clone(), &progress).await;
            if permit.lock().unwrap().take().is_some() {
                line.queued.fetch_add(1, Ordering::SeqCst);
            }
            if let Ok(Acquired::Held(mut h)) = got {
                let now = Instant::now();
                if let Some(s) = line.release_started.lock().unwrap().take() {
                    line.handoffs
                        .lock()
                        .unwrap()
                        .push((now - s).as_secs_f64() * 1e3);
                }
                line.granted.fetch_add(1, Ordering::SeqCst);
                *line.last_grant.lock().unwrap() = Some(now);
                *line.release_started.lock().unwrap() = Some(Instant::now());
                h.release().await.map_err(|e| e.to_string())?;
            } else if let Err(e) = got {
                b.close().await;
                return Err(e.to_string());
            }
            b.close().await;
            Ok::<(), String>(())
        }));
    }
    while line.queued.load(Ordering::SeqCst) < w && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queued = line.queued.load(Ordering::SeqCst);
    // Let the last requests reach the service's queue (longer where the
    // count is of requests sent, not of requests in line).
    let settle = if svc.says_queued { 50 } else { 1000 };
    tokio::time::sleep(Duration::from_millis(500) + Duration::from_micros(settle * w as u64)).await;
    let setup_s = t0.elapsed().as_secs_f64();
    let mem = service_memory(svc.pid);
    let client = rss(std::process::id()) as i64 - client0;
    let mut note = String::new();
    if queued < w {
        note = format!("only {queued} in line within the budget; ");
    }
    let release = Instant::now();
    *line.release_started.lock().unwrap() = Some(release);
    holder.release().await.unwrap();
    let drain_deadline = point_end.max(Instant::now() + budget / 3);
    while line.granted.load(Ordering::SeqCst) < queued && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let granted = line.granted.load(Ordering::SeqCst);
    cancel.cancel();
    let mut errors = 0;
    for t in tasks {
        if !matches!(t.await, Ok(Ok(()))) {
            errors += 1;
        }
    }
    holder_backend.close().await;
    if errors > 0 {
        note.push_str(&format!("{errors} waiters failed; "));
    }
    let last = line.last_grant.lock().unwrap().unwrap_or(release);
    let mut handoffs = std::mem::take(&mut *line.handoffs.lock().unwrap());
    let (p50, p99) = percentiles(&mut handoffs);
    let per_waiter = mem.saturating_sub(mem0) / w as u64;
    note.push_str(&format!(
        "{} per waiter (service), {} per waiter (client)",
        bytes(per_waiter),
        bytes((client.max(0) as u64) / w as u64)
    ));
    Row {
        reached: (granted < w).then_some(granted),
        rate: granted as f64 / (last - release).as_secs_f64().max(1e-9),
        p50_ms: p50,
        p99_ms: p99,
        mem,
        client,
        setup_s,
        note,
        ..Row::default()
    }
}

/// A PostgreSQL hold: the backend and the session that holds the key.
type Session = (Box<dyn Backend>, Box<dyn HeldLock>);

/// The kept holds of the held-keys curve, filled cumulatively.
struct Filler {
    /// The next key's number (only grows: a failed key's name is not reused).
    next: Arc<AtomicUsize>,
    held: Arc<AtomicUsize>,
    /// PostgreSQL: the sessions that hold the keys, with their backends.
    sessions: Arc<Mutex<Vec<Session>>>,
    kept: bool,
    /// The first error a worker met (it stops there).
    error: Arc<Mutex<Option<String>>>,
}

impl Filler {
    fn new(svc: &Service) -> Filler {
        Filler {
            next: Arc::default(),
            held: Arc::default(),
            sessions: Arc::default(),
            kept: svc.kept_holds,
            error: Arc::default(),
        }
    }

    /// Holds keys until `n` are held or the deadline, each as one `lc-cli
    /// lock KEY` (its own connect); returns how many are held.
    async fn fill_to(&mut self, svc: &Service, n: usize, deadline: Instant) -> usize {
        let config = config(svc);
        let mut tasks = Vec::new();
        for _ in 0..FILL_WORKERS {
            let (config, next, held, sessions, kept, error) = (
                config.clone(),
                self.next.clone(),
                self.held.clone(),
                self.sessions.clone(),
                self.kept,
                self.error.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        next.fetch_sub(1, Ordering::SeqCst);
                        break;
                    }
                    let req = request(format!("held/{i}"), kept);
                    let got = match backend::connect(&config).await {
                        Ok(b) => match b.acquire(&req, CancellationToken::new(), &|_| {}).await {
                            Ok(Acquired::Held(h)) => Ok((b, h)),
                            Ok(_) => Err("not granted".to_string()),
                            Err(e) => Err(e.to_string()),
                        },
                        Err(e) => Err(e.to_string()),
                    };
                    let kept_ok = match got {
                        Ok((b, h)) if kept => {
                            let detached = h.detach(None).await.map_err(|e| e.to_string());
                            b.close().await;
                            detached
                        }
                        Ok(session) => {
                            sessions.lock().unwrap().push(session);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    };
                    if let Err(e) = kept_ok {
                        error
                            .lock()
                            .unwrap()
                            .get_or_insert(format!("held/{i}: {e}"));
                        break;
                    }
                    held.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        self.held.load(Ordering::SeqCst)
    }

    async fn release(self) {
        let sessions = std::mem::take(&mut *self.sessions.lock().unwrap());
        for (b, mut h) in sessions {
            let _ = h.release().await;
            b.close().await;
        }
    }
}

async fn held_point(svc: &Service, filler: &mut Filler, n: usize, budget: Duration) -> Row {
    let t0 = Instant::now();
    let before = filler.held.load(Ordering::SeqCst);
    let client0 = rss(std::process::id()) as i64;
    let reached = filler.fill_to(svc, n, t0 + budget).await;
    let setup_s = t0.elapsed().as_secs_f64();
    let fill_rate = (reached - before) as f64 / setup_s;
    let mem = service_memory(svc.pid);
    let data = data_size(&svc.data);
    let mut note = format!("fill {fill_rate:.0} holds/s");
    if let Some(e) = filler.error.lock().unwrap().take() {
        note.push_str(&format!("; a fill error: {e}"));
    }
    if reached < n {
        note.push_str(&format!(
            "; all {n} would take ~{:.0} s more at that rate",
            (n - reached) as f64 / fill_rate.max(1e-9)
        ));
    }
    let client = rss(std::process::id()) as i64 - client0;
    let window = Duration::from_secs(3);
    let (mut w, _, err) = pair_loops(
        svc,
        PROBE_CLIENTS,
        &format!("probe{n}"),
        Duration::from_millis(500),
        window,
    )
    .await;
    if let Some(e) = err {
        note.push_str(&format!("; probe error: {e}"));
    }
    let (p50, p99) = percentiles(&mut w.acquire);
    Row {
        reached: (reached < n).then_some(reached),
        rate: w.pairs as f64 / window.as_secs_f64(),
        p50_ms: p50,
        p99_ms: p99,
        mem,
        data,
        client,
        setup_s,
        note,
    }
}

/// PostgreSQL's shared lock table: how many advisory locks one session
/// takes before "out of shared memory", with this server's settings.
async fn pg_lock_table(svc: &Service) {
    let (client, conn) = tokio_postgres::connect(&pg_conninfo(svc), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let show = |name: &'static str| {
        let client = &client;
        async move {
            let row = client
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .unwrap();
            row.get::<_, String>(0)
        }
    };
    let locks = show("max_locks_per_transaction").await;
    let conns = show("max_connections").await;
    let prepared = show("max_prepared_transactions").await;
    let mut held = 0i64;
    let step = 1000i64;
    let error = loop {
        let sql = format!(
            "SELECT count(pg_advisory_lock(g)) FROM generate_series({}, {}) g",
            held + 1,
            held + step
        );
        match client.query_one(&sql, &[]).await {
            Ok(_) => held += step,
            Err(e) => {
                break e
                    .as_db_error()
                    .map_or(e.to_string(), |d| d.message().to_string())
            }
        }
        if held >= 10_000_000 {
            break "stopped at 10^7".into();
        }
    };
    println!();
    println!(
        "PostgreSQL lock table: one session held {held} advisory locks (in steps of {step}) before: {error}"
    );
    println!(
        "  with max_locks_per_transaction={locks}, max_connections={conns}, max_prepared_transactions={prepared}"
    );
}

fn percentiles(v: &mut [f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

// ---- the services ----

fn lc_cli_bin() -> PathBuf {
    // target/release/examples/THIS -> target/release/lc-cli
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("lc-cli");
    assert!(
        bin.exists(),
        "{} is missing: cargo build --release first",
        bin.display()
    );
    bin
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_serve(bin: &Path, on_disk: bool) -> Service {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("DATA_PATH")
        .stderr(Stdio::null());
    let mut dir = None;
    if on_disk {
        // On the disk (not tmpfs): every grant waits for its fsync.
        let d = tempfile::tempdir_in("/var/tmp").unwrap();
        cmd.arg("--data").arg(d.path().join("locks.wal"));
        dir = Some(d);
    }
    let proc = Proc::start(cmd);
    Service {
        name: if on_disk {
            "lc-cli serve --data (disk)"
        } else {
            "lc-cli serve (memory)"
        },
        url: format!("lc://{}", proc.addr),
        pid: proc.pid(),
        data: dir
            .as_ref()
            .map_or(DataSize::None, |d| DataSize::Dir(d.path().to_path_buf())),
        session_cap: None,
        kept_holds: true,
        says_queued: true,
        _guard: Guard::Serve(proc, dir),
    }
}

fn start_redis() -> Service {
    let port = free_port();
    // As tests/common/redis.rs: lc-cli trusts a fresh node that keeps every
    // write (appendfsync always); the AOF on tmpfs, as bench_redis.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--daemonize", "no"])
        .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
        .arg(dir.path())
        .args(["--maxclients", "100000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    wait_port(port, "redis-server");
    Service {
        name: "Redis (one node, appendfsync always on tmpfs)",
        url: format!("redis://127.0.0.1:{port}/0"),
        pid: child.id(),
        data: DataSize::Dir(dir.path().to_path_buf()),
        session_cap: None,
        kept_holds: true,
        says_queued: true,
        _guard: Guard::Child(child, dir),
    }
}

fn start_zk() -> Service {
    let port = free_port();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // tests/common/zk.rs's config with the default tickTime (sessions up
    // to 40 s) and a larger heap for 10^6 nodes.
    let cfg = format!(
        "tickTime=2000\ndataDir={}\nclientPortAddress=127.0.0.1\nclientPort={port}\n\
         maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,mntr\n",
        dir.path().join("data").display()
    );
    std::fs::write(dir.path().join("zoo.cfg"), cfg).unwrap();
    let log = std::fs::File::create(dir.path().join("zookeeper.log")).unwrap();
    let child = Command::new("java")
        .args([
            "-Xmx2g",
            "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
        ])
        .arg(dir.path().join("zoo.cfg"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("java for ZooKeeper");
    let start = Instant::now();
    while four(port, "ruok").as_deref() != Some("imok") {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "ZooKeeper did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Service {
        name: "ZooKeeper (standalone, txn log on disk)",
        url: format!("zk://127.0.0.1:{port}/bench"),
        pid: child.id(),
        data: DataSize::ZkMntr(port),
        session_cap: None,
        kept_holds: true,
        says_queued: true,
        _guard: Guard::Child(child, dir),
    }
}

fn four(port: u16, word: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn start_etcd() -> Service {
    let etcd = etcd::Etcd::start();
    Service {
        name: "etcd (one member, WAL on disk)",
        url: format!("etcd://127.0.0.1:{}/bench", etcd.port),
        pid: etcd.pid(),
        data: DataSize::Dir(etcd.data_dir().join("member/snap")),
        session_cap: None,
        kept_holds: true,
        says_queued: true,
        _guard: Guard::Etcd(etcd),
    }
}

fn start_pg() -> Service {
    use std::os::unix::process::CommandExt;
    let bin_dir = {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL installed")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| d.join("initdb").exists())
            .collect();
        dirs.sort();
        dirs.pop().unwrap()
    };
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let (uid, gid) = (id("-u"), id("-g"));
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    let out = Command::new(bin_dir.join("initdb"))
        .arg("-D")
        .arg(dir.path().join("data"))
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = Command::new(bin_dir.join("postgres"))
        .arg("-D")
        .arg(dir.path().join("data"))
        .arg("-k")
        .arg(dir.path())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        // tests/common/pg.rs's settings, with room for 1,000 sessions.
        .args(["-c", "fsync=off"])
        .args(["-c", &format!("max_connections={PG_MAX_CONNECTIONS}")])
        .uid(uid)
        .gid(gid)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_port(port, "postgres");
    std::thread::sleep(Duration::from_secs(1));
    Service {
        name: "PostgreSQL (advisory locks, one session per holder)",
        url: format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"),
        pid: child.id(),
        data: DataSize::None,
        session_cap: Some(PG_POINT_CAP),
        kept_holds: false,
        says_queued: false,
        _guard: Guard::Group(child, dir),
    }
}

fn pg_conninfo(svc: &Service) -> String {
    svc.url.replace("?sslmode=disable", "")
}

fn wait_port(port: u16, what: &str) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what} did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---- memory, files, the machine ----

/// The service's memory: its process's RSS, and for a process tree
/// (PostgreSQL's backends) the sum of the tree's PSS, so shared pages count once.
fn service_memory(pid: u32) -> u64 {
    let tree = process_tree(pid);
    if tree.len() == 1 {
        return rss(pid);
    }
    tree.iter().map(|p| pss(*p)).sum()
}

fn process_tree(root: u32) -> Vec<u32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, then ppid.
        let Some(rest) = stat.rsplit_once(')').map(|r| r.1) else {
            continue;
        };
        if let Some(ppid) = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
        {
            parent.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

fn pss(pid: u32) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) else {
        return 0;
    };
    s.lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn data_size(d: &DataSize) -> Option<u64> {
    match d {
        DataSize::None => None,
        DataSize::Dir(p) => Some(dir_size(p)),
        DataSize::ZkMntr(port) => four(*port, "mntr")?
            .lines()
            .find_map(|l| l.strip_prefix("zk_approximate_data_size"))
            .and_then(|v| v.trim().parse().ok()),
    }
}

fn dir_size(p: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(p) else {
        return 0;
    };
    if meta.is_file() {
        return meta.len();
    }
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| dir_size(&e.path())).sum())
        .unwrap_or(0)
}

/// Raises the soft and hard open-file limits (root may raise the hard one
/// up to fs.nr_open); returns the soft limit in force.
fn raise_fd_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` and `raised` are valid rlimits, written by getrlimit and read by setrlimit during the calls only.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: want.max(lim.rlim_max),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().take(3).collect();
            format!("load average {}", f.join(", "))
        })
        .unwrap_or_default()
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn mib_signed(b: i64) -> String {
    format!("{:+.1} MiB", b as f64 / (1 << 20) as f64)
}

fn bytes(b: u64) -> String {
    if b >= 10_000 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}
