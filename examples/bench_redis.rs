//! Redis work per uncontended lock and release, per grant and hand-off
//! latency with 1, 16 and 64 waiters queued, for the exclusive lock,
//! `--limit 4` and `--shared`, in one run against a private redis-server.
//!
//!     cargo run --release --example bench_redis [-- CYCLES [--free-running]]
//!
//! Commands are counted as `MONITOR` shows them (module [`monitor`]): every
//! command the server ran for lc-cli, the ones inside the Lua scripts as
//! well as `EVALSHA` and `BLPOP`, the connections' greeting (`HELLO`, `AUTH`,
//! `CLIENT ...`, `SELECT`) and this program's own connection excluded.
//!
//! Uncontended: one backend, connected once, takes and releases a key
//! nobody else uses; its commands per lock+release are counted, and listed
//! in order for one of them. The connection's own commands (made once per
//! lc-cli process) and a renewal's (one every third of the ttl held) are
//! counted apart.
//!
//! Controlled cycles (the method of `bench_zk`): per row, the holders (4
//! with `--limit 4`, else 1) hold and exactly W waiters are queued, each a
//! backend of its own (its own connections, as separate lc-cli processes
//! would have). A cycle releases the oldest holder; exactly one waiter, the
//! head of the line, is granted; the releaser queues again with the same
//! backend, so W are in line at every grant. The lines of W = 1, 16 and 64
//! are open at once, on three keys, and take their cycles in turn, one at
//! a time, so that every row sees the same load. The cycle's window ends once
//! the server shows every waiter blocked on its wake-up list and no
//! connection left over; the commands of the window are counted with
//! `MONITOR`, the time Redis spent in the scripts from `INFO
//! commandstats`. Every window must hold exactly one wake-up push (LPUSH), or the
//! program stops. Hand-off latency: from the start of the release to the
//! moment the next waiter holds the key. The waiters' heartbeats (a CHECK
//! every 10 s each) are work per waiter per second, not per grant: those
//! that fall between windows are reported apart, as a rate (a round is
//! shorter than 10 s, so there are few).
//!
//! Then, for comparison with earlier figures, the free-running loop of the
//! first version of this program, exclusive lock only (all three shapes
//! with `--free-running`): every task loops wait in line, hold 1 ms,
//! release, queue again; counted from `INFO commandstats`, as it was.
//!
//! `MONITOR` makes the server format every command for the monitor: the
//! latencies are those of a server doing that too.

use std::collections::{BTreeMap, VecDeque};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lc_cli::backend::{
    self, Acquired, Backend, BackendConfig, HeldLock, LockMode, LockRequest, ServerUrl,
    WaitProgress,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Free-running loop: acquisitions measured per round, rounds per row.
const MEASURED: usize = 600;
const REPEATS: usize = 5;
const HOLD: Duration = Duration::from_millis(1);

/// Controlled cycles: rounds per row (interleaved across rows), cycles
/// per round left out as a warm-up.
const ROUNDS: usize = 3;
const WARM_UP: usize = 10;
const SIZES: [usize; 3] = [1, 16, 64];

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

/// Per command (`INFO commandstats`, less `INFO` and `CONFIG`): calls and
/// microseconds the server spent in it.
fn command_stats(con: &mut redis::Connection) -> BTreeMap<String, [u64; 2]> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let mut per = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let (name, stats) = rest.split_once(':').unwrap();
        if name == "info" || name == "config" {
            continue;
        }
        let field = |f: &str| -> u64 {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
                .unwrap()
                .parse()
                .unwrap()
        };
        per.insert(name.to_string(), [field("calls"), field("usec")]);
    }
    per
}

fn command_calls(con: &mut redis::Connection) -> (u64, Vec<(String, u64)>) {
    let mut per: Vec<(String, u64)> = command_stats(con)
        .into_iter()
        .map(|(n, [calls, _])| (n, calls))
        .collect();
    per.sort_by_key(|p| std::cmp::Reverse(p.1));
    (per.iter().map(|p| p.1).sum(), per)
}

/// Counting commands with `MONITOR`: a connection of its own streams every
/// command the server runs, in the order it runs them.
mod monitor {
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::sync::{Arc, Condvar, Mutex};

    /// The connection's greeting (`CLIENT` for `CLIENT SETINFO`/`SETNAME`).
    const GREETING: [&str; 4] = ["hello", "auth", "client", "select"];

    #[derive(Default)]
    struct Seen {
        /// Commands by name (lower case), since the start.
        counts: BTreeMap<String, u64>,
        /// The last of our markers seen: everything before it is counted.
        mark: u64,
        /// While on: each command's line as `MONITOR` shows it.
        log: Option<Vec<String>>,
    }

    pub(crate) struct Monitor {
        seen: Arc<(Mutex<Seen>, Condvar)>,
        marks: u64,
    }

    /// The client, the command's name and its arguments in one `MONITOR`
    /// line: `+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "..."`, or
    /// `[0 lua]` for a command a script ran.
    fn parse(line: &str) -> Option<(&str, &str, &str)> {
        let (_, rest) = line.split_once(" [")?;
        let (client, args) = rest.split_once("] ")?;
        let client = client.split_once(' ').map_or(client, |(_, c)| c);
        let name = args.strip_prefix('"')?.split('"').next()?;
        Some((client, name, args))
    }

    impl Monitor {
        /// Starts monitoring the server on `port`; `own` is this program's
        /// connection (its commands, and the markers it sends, are not
        /// counted).
        pub(crate) fn start(port: u16, own: &mut redis::Connection) -> Monitor {
            let info: String = redis::cmd("CLIENT").arg("INFO").query(own).unwrap();
            let own_addr = info
                .split(' ')
                .find_map(|f| f.strip_prefix("addr="))
                .expect("CLIENT INFO has addr=")
                .to_string();
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.write_all(b"MONITOR\r\n").unwrap();
            let mut lines = BufReader::new(stream);
            let mut ok = String::new();
            lines.read_line(&mut ok).unwrap();
            assert_eq!(ok.trim_end(), "+OK", "MONITOR");
            let seen: Arc<(Mutex<Seen>, Condvar)> = Default::default();
            let shared = seen.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                loop {
                    line.clear();
                    if lines.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let Some((client, name, args)) = parse(line.trim_end()) else {
                        continue;
                    };
                    let (lock, wake) = &*shared;
                    let mut seen = lock.lock().unwrap();
                    if client == own_addr {
                        let mark = args
                            .strip_prefix("\"ECHO\" \"lc-bench-mark-")
                            .and_then(|m| m.strip_suffix('"'))
                            .and_then(|m| m.parse().ok());
                        if let Some(mark) = mark {
                            seen.mark = mark;
                            wake.notify_all();
                        }
                        continue;
                    }
                    let name = name.to_ascii_lowercase();
                    if GREETING.contains(&name.as_str()) {
                        continue;
                    }
                    if let Some(log) = seen.log.as_mut() {
                        log.push(format!("[{client}] {args}"));
                    }
                    *seen.counts.entry(name).or_default() += 1;
                }
            });
            Monitor { seen, marks: 0 }
        }

        /// Every command counted so far, by name: all those the server ran
        /// before this call (a marker sent on `own`, and waited for).
        pub(crate) fn counts(&mut self, own: &mut redis::Connection) -> BTreeMap<String, u64> {
            self.marks += 1;
            let marker = format!("lc-bench-mark-{}", self.marks);
            let _: String = redis::cmd("ECHO").arg(&marker).query(own).unwrap();
            let (lock, wake) = &*self.seen;
            let mut seen = lock.lock().unwrap();
            while seen.mark < self.marks {
                seen = wake.wait(seen).unwrap();
            }
            seen.counts.clone()
        }

        /// Starts the log of commands (true), or stops it and returns it.
        pub(crate) fn log(&mut self, on: bool) -> Vec<String> {
            let mut seen = self.seen.0.lock().unwrap();
            let log = seen.log.take().unwrap_or_default();
            if on {
                seen.log = Some(Vec::new());
            }
            log
        }
    }
}

use monitor::Monitor;

/// Commands counted by `MONITOR`, each with the microseconds `INFO
/// commandstats` says the server spent in it.
fn sample(con: &mut redis::Connection, mon: &mut Monitor) -> Counts {
    let usec = command_stats(con);
    mon.counts(con)
        .into_iter()
        .map(|(n, c)| {
            let u = usec.get(&n).map_or(0, |v| v[1]);
            (n, [c, u])
        })
        .collect()
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
    let config = config(url);
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
                expire: None,
                extras: Default::default(),
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

type Counts = BTreeMap<String, [u64; 2]>;

fn minus(after: &Counts, before: &Counts) -> Counts {
    after
        .iter()
        .map(|(n, [c, u])| {
            let [c0, u0] = before.get(n).copied().unwrap_or_default();
            (n.clone(), [c - c0, u - u0])
        })
        .filter(|(_, [c, _])| *c > 0)
        .collect()
}

fn add(into: &mut Counts, from: &Counts) {
    for (n, [c, u]) in from {
        let e = into.entry(n.clone()).or_default();
        e[0] += c;
        e[1] += u;
    }
}

fn calls(c: &Counts) -> u64 {
    c.values().map(|v| v[0]).sum()
}

/// `connected_clients` and `blocked_clients` of `INFO clients`.
fn clients(con: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("INFO clients has no {name}"))
    };
    (field("connected_clients"), field("blocked_clients"))
}

/// Waits until the server has exactly `connected` clients, `blocked` of
/// them in BLPOP: every waiter listening, the granted waiter's listener
/// gone. Bounded: 5 s.
async fn settle(con: &mut redis::Connection, connected: u64, blocked: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = clients(con);
        if now == (connected, blocked) {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "the line did not settle: (clients, blocked) {now:?}, expected {:?}",
                (connected, blocked)
            );
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

type Member = (Box<dyn Backend>, Box<dyn HeldLock>);

fn config(url: &str) -> BackendConfig {
    BackendConfig {
        access: Default::default(),
        server: url.parse::<ServerUrl>().unwrap().server,
        session_timeout: Duration::from_secs(10),
        ttl: Duration::from_secs(30),
        queue_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        verbose: false,
    }
}

fn request(key: &str, mode: LockMode, i: usize) -> LockRequest {
    LockRequest {
        key: key.to_string(),
        mode,
        source: format!("bench-{i}"),
        nonblock: false,
        detached: false,
        expire: None,
        extras: Default::default(),
    }
}

/// Queues `backend` and returns once the server has put it in line (its
/// first answer said "waiting"; a grant instead panics: the cycle must not
/// run dry); the handle resolves when it holds the key.
async fn queue_in(
    backend: Box<dyn Backend>,
    request: LockRequest,
    cancel: CancellationToken,
) -> JoinHandle<Option<Member>> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        let tx = Mutex::new(Some(tx));
        let progress = move |_: WaitProgress| {
            if let Some(tx) = tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
        };
        match backend.acquire(&request, cancel, &progress).await {
            Ok(Acquired::Held(h)) => Some((backend, h)),
            Ok(_) => None,
            Err(e) => panic!("acquire: {e}"),
        }
    });
    rx.await.expect("queued, not granted at once");
    handle
}

impl Shape {
    /// The mode of the i-th request of a controlled row: with `--shared`, a
    /// reader holds first and the line alternates writer, reader, ... so
    /// that each release grants exactly the next one.
    fn nth(self, i: usize) -> LockMode {
        match self {
            Shape::Shared if i.is_multiple_of(2) => LockMode::Shared,
            Shape::Shared => LockMode::Exclusive,
            _ => self.mode(i),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Shape::Exclusive => "exclusive",
            Shape::Limit4 => "limit4",
            Shape::Shared => "shared",
        }
    }
}

/// What one row measured, over all its rounds.
#[derive(Default)]
struct Figures {
    grants: usize,
    commands: Counts,
    latencies: Vec<Duration>,
    /// Commands and seconds between the windows: the heartbeats.
    between: Counts,
    between_secs: f64,
}

impl Figures {
    fn total(&self) -> u64 {
        calls(&self.commands)
    }

    /// Server time in the scripts (EVALSHA), per grant.
    fn script_usec(&self) -> f64 {
        self.commands.get("evalsha").map_or(0, |v| v[1]) as f64 / self.grants as f64
    }

    fn per_grant(&self) -> f64 {
        self.total() as f64 / self.grants as f64
    }
}

/// One key's controlled line: its holders, oldest first, and its W waiters,
/// in the order they queued.
struct Line {
    key: String,
    shape: Shape,
    requests: usize,
    holders: VecDeque<Member>,
    waiting: VecDeque<JoinHandle<Option<Member>>>,
    cancel: CancellationToken,
}

impl Line {
    async fn new(config: &BackendConfig, shape: Shape, waiters: usize, round: usize) -> Line {
        let mut line = Line {
            key: format!("ctl-{}-{waiters}-{round}", shape.name()),
            shape,
            requests: 0,
            holders: VecDeque::new(),
            waiting: VecDeque::new(),
            cancel: CancellationToken::new(),
        };
        for _ in 0..shape.holders() {
            let b = backend::connect(config).await.unwrap();
            let req = line.next_request();
            let got = b.acquire(&req, line.cancel.clone(), &|_| {}).await;
            let Ok(Acquired::Held(h)) = got else {
                panic!("holder not granted");
            };
            line.holders.push_back((b, h));
        }
        for _ in 0..waiters {
            let b = backend::connect(config).await.unwrap();
            let req = line.next_request();
            line.waiting
                .push_back(queue_in(b, req, line.cancel.clone()).await);
        }
        line
    }

    fn next_request(&mut self) -> LockRequest {
        self.requests += 1;
        let i = self.requests - 1;
        request(&self.key, self.shape.nth(i), i)
    }

    /// Server connections: one per holder and waiter, and a BLPOP one per
    /// waiter.
    fn connections(&self) -> u64 {
        (self.holders.len() + 2 * self.waiting.len()) as u64
    }

    /// One cycle: the oldest holder releases, the head waiter is granted,
    /// the releaser queues again. Returns the hand-off latency.
    async fn cycle(&mut self) -> Duration {
        let t = Instant::now();
        let (b, mut h) = self.holders.pop_front().unwrap();
        h.release().await.expect("release");
        drop(h);
        let head = self.waiting.pop_front().unwrap();
        let granted = head.await.unwrap().expect("granted");
        let latency = t.elapsed();
        self.holders.push_back(granted);
        let req = self.next_request();
        self.waiting
            .push_back(queue_in(b, req, self.cancel.clone()).await);
        latency
    }

    async fn close(self) {
        self.cancel.cancel();
        for w in self.waiting {
            let _ = w.await;
        }
        for (_, mut h) in self.holders {
            h.release().await.expect("release");
        }
    }
}

/// One round of one shape: a line of each size on a key of its own, all
/// open at once, their cycles taken in turn (1, 16, 64, 1, 16, 64, ...),
/// so that the machine's load, the number of clients and the server's
/// memory are alike for every size.
async fn controlled_round(
    url: &str,
    con: &mut redis::Connection,
    mon: &mut Monitor,
    shape: Shape,
    round: usize,
    cycles: usize,
    rows: &mut [Figures],
) {
    let config = config(url);
    let mut lines = Vec::new();
    for &waiters in &SIZES {
        lines.push(Line::new(&config, shape, waiters, round).await);
    }
    // This connection, the monitor's, and the lines'.
    let connected = 2 + lines.iter().map(Line::connections).sum::<u64>();
    let blocked: u64 = SIZES.iter().map(|&w| w as u64).sum();
    settle(con, connected, blocked).await;
    // The end of the last window: what happens from there to the next
    // window is not a cycle's work (heartbeats), counted apart.
    let mut last: Option<(Instant, Counts)> = None;
    for cycle in 0..WARM_UP + cycles {
        for (line, into) in lines.iter_mut().zip(rows.iter_mut()) {
            let before = sample(con, mon);
            let t = Instant::now();
            if let Some((end, after)) = last.take() {
                add(&mut into.between, &minus(&before, &after));
                into.between_secs += (t - end).as_secs_f64();
            }
            let latency = line.cycle().await;
            settle(con, connected, blocked).await;
            let after = sample(con, mon);
            let window = minus(&after, &before);
            // No herd, and the cycle is what it claims: one grant, one wake-up.
            assert_eq!(
                window.get("lpush").map(|v| v[0]),
                Some(1),
                "wake-ups in one cycle"
            );
            if cycle >= WARM_UP {
                into.grants += 1;
                into.latencies.push(latency);
                add(&mut into.commands, &window);
                last = Some((Instant::now(), after));
            }
        }
    }
    for line in lines {
        line.close().await;
    }
}

/// What `after` counted beyond `before`, by name.
fn since(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(n, c)| (n.clone(), c - before.get(n).copied().unwrap_or(0)))
        .filter(|(_, c)| *c > 0)
        .collect()
}

/// `name count` per command, most first, each divided by `per`.
fn breakdown(counts: &BTreeMap<String, u64>, per: f64) -> String {
    let mut v: Vec<(&String, &u64)> = counts.iter().collect();
    v.sort_by_key(|(_, c)| std::cmp::Reverse(**c));
    let parts: Vec<String> = v
        .iter()
        .map(|(n, c)| format!("{n} {:.2}", **c as f64 / per))
        .collect();
    parts.join(", ")
}

async fn lock_release(backend: &dyn Backend, request: &LockRequest) {
    let got = backend
        .acquire(request, CancellationToken::new(), &|_| {})
        .await
        .unwrap();
    let Acquired::Held(mut held) = got else {
        panic!("an unused key not granted at once");
    };
    held.release().await.unwrap();
}

/// Uncontended: the commands of one lock+release of a key nobody else
/// uses, on a backend connected once; of connecting (once per lc-cli
/// process); and of a renewal (one per third of the ttl held).
async fn uncontended(url: &str, con: &mut redis::Connection, mon: &mut Monitor, pairs: usize) {
    let config = config(url);
    let before = mon.counts(con);
    let backend = backend::connect(&config).await.unwrap();
    let connecting = since(&mon.counts(con), &before);
    let request = request("solo", LockMode::Exclusive, 0);
    for _ in 0..WARM_UP {
        lock_release(&*backend, &request).await;
    }
    let before = mon.counts(con);
    for _ in 0..pairs {
        lock_release(&*backend, &request).await;
    }
    let counted = since(&mon.counts(con), &before);
    let total: u64 = counted.values().sum();
    mon.log(true);
    lock_release(&*backend, &request).await;
    mon.counts(con);
    let one = mon.log(false);
    println!(
        "uncontended lock+release (one node, exclusive, {pairs} pairs on one connected backend): {:.2} commands each",
        total as f64 / pairs as f64
    );
    println!("  per lock+release: {}", breakdown(&counted, pairs as f64));
    println!("  one lock+release, in order ({} commands):", one.len());
    for line in &one {
        let shown: String = line.chars().take(110).collect();
        println!("    {shown}");
    }
    println!(
        "  connecting, once per process: {}",
        breakdown(&connecting, 1.0)
    );
    // Renewals: ttl 300 ms, one every 100 ms, counted over a 1 s hold.
    let short = BackendConfig {
        ttl: Duration::from_millis(300),
        ..config.clone()
    };
    let backend = backend::connect(&short).await.unwrap();
    let got = backend
        .acquire(&request, CancellationToken::new(), &|_| {})
        .await
        .unwrap();
    let Acquired::Held(mut held) = got else {
        panic!("not granted");
    };
    let before = mon.counts(con);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let renewing = since(&mon.counts(con), &before);
    held.release().await.unwrap();
    let renewals = renewing.get("evalsha").copied().unwrap_or(0).max(1);
    println!(
        "  renewal, one per ttl/3 held ({renewals} in 1 s at ttl 300 ms): {:.2} commands each: {}",
        renewing.values().sum::<u64>() as f64 / renewals as f64,
        breakdown(&renewing, renewals as f64)
    );
}

fn print_controlled(title: &str, rows: &mut [Figures]) {
    println!("{title}");
    println!(
        "{:>8} {:>11} {:>8} {:>9} {:>9} {:>12} {:>12} {:>9} {:>11}",
        "waiters",
        "cmds/grant",
        "vs 1",
        "evalsha",
        "script us",
        "handoff p50",
        "handoff p90",
        "p50 vs 1",
        "between/s"
    );
    let quantile = |f: &Figures, x: f64| {
        let l = &f.latencies;
        l[((l.len() as f64 * x) as usize).min(l.len() - 1)]
    };
    for f in rows.iter_mut() {
        f.latencies.sort();
    }
    let base = rows[0].per_grant();
    let base_p50 = quantile(&rows[0], 0.5).as_secs_f64();
    for (w, f) in SIZES.iter().zip(rows.iter()) {
        let p50 = quantile(f, 0.5).as_secs_f64();
        println!(
            "{w:>8} {:>11.2} {:>7.3}x {:>9.2} {:>9.1} {:>10.3}ms {:>10.3}ms {:>8.2}x {:>11.1}",
            f.per_grant(),
            f.per_grant() / base,
            f.commands.get("evalsha").map_or(0, |v| v[0]) as f64 / f.grants as f64,
            f.script_usec(),
            p50 * 1e3,
            quantile(f, 0.9).as_secs_f64() * 1e3,
            p50 / base_p50,
            calls(&f.between) as f64 / f.between_secs,
        );
    }
    let (one, sixteen, many) = (
        rows[0].per_grant(),
        rows[1].per_grant(),
        rows[2].per_grant(),
    );
    println!(
        "  64 vs 1: {:.3}x, 64 vs 16: {:.3}x ({} grants per row)",
        many / one,
        many / sixteen,
        rows[2].grants
    );
    for (w, f) in SIZES.iter().zip(rows.iter()) {
        let mut per: Vec<(&String, u64)> = f.commands.iter().map(|(n, v)| (n, v[0])).collect();
        per.sort_by_key(|p| std::cmp::Reverse(p.1));
        let top: Vec<String> = per
            .iter()
            .take(10)
            .map(|(n, c)| format!("{n} {:.2}", *c as f64 / f.grants as f64))
            .collect();
        println!("  {w:>2} waiters, per grant: {}", top.join(", "));
        if !f.between.is_empty() {
            let between: Vec<String> = f
                .between
                .iter()
                .map(|(n, v)| format!("{n} {}", v[0]))
                .collect();
            println!(
                "  {w:>2} waiters, between windows ({:.2} s): {}",
                f.between_secs,
                between.join(", ")
            );
        }
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cycles: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("CYCLES is a number"))
        .unwrap_or(200);
    let (_redis, port) = start_redis();
    let url = format!("redis://127.0.0.1:{port}");
    let client = redis::Client::open(format!("{url}/")).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut mon = Monitor::start(port, &mut con);
    uncontended(&url, &mut con, &mut mon, cycles).await;
    let shapes = [
        (Shape::Exclusive, "exclusive"),
        (
            Shape::Limit4,
            "--limit 4 (4 holders, each release grants the next waiter)",
        ),
        (
            Shape::Shared,
            "--shared (a reader holds; the line alternates writer, reader, ...)",
        ),
    ];
    let mut rows: Vec<Vec<Figures>> = shapes
        .iter()
        .map(|_| SIZES.iter().map(|_| Figures::default()).collect())
        .collect();
    // Rounds interleaved (every shape, then again), and within a round the
    // sizes cycle in turn, so that a change in the machine's load hits every
    // row alike.
    for round in 0..ROUNDS {
        for (s, (shape, _)) in shapes.iter().enumerate() {
            controlled_round(
                &url,
                &mut con,
                &mut mon,
                *shape,
                round,
                cycles,
                &mut rows[s],
            )
            .await;
        }
    }
    println!(
        "redis-server {port}: controlled cycles, {ROUNDS} x {cycles} measured grants per row (rounds interleaved)"
    );
    for ((_, title), rows) in shapes.iter().zip(rows.iter_mut()) {
        print_controlled(title, rows);
    }
    let all = std::env::args().any(|a| a == "--free-running");
    let free = [
        (Shape::Exclusive, "exclusive"),
        (Shape::Limit4, "--limit 4 (4 holders)"),
        (Shape::Shared, "--shared (every other task exclusive)"),
    ];
    for (shape, title) in free.iter().take(if all { 3 } else { 1 }) {
        println!("free-running loops (the first method): {title}");
        measure(&url, &mut con, *shape).await;
    }
}
