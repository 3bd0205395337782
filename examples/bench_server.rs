//! Speed and memory of `lc-cli serve` against a bare loopback floor.
//!
//!     cargo build --release && cargo run --release --example bench_server
//!
//! Starts the release `lc-cli serve` (and, for the floor, a trivial 1-byte
//! echo server: this same program re-run with `--echo-server`, on the same
//! kind of tokio runtime) on 127.0.0.1:0 and prints, in one run:
//! lock+unlock pairs/s with 1 and 32 clients on distinct keys against two bare
//! round trips; hand-off latency with 64 queued waiters; server RSS per queued
//! waiter with 10,000 waiters; and with `--data` (on disk and on tmpfs)
//! grants/s and grants per fsync. `--quick` shortens every phase;
//! `--only mem|wal` runs one part.

mod bench_common;

use bench_common::{connect, median, queue_waiters, raise_fd_limit, rss, us, Proc};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--echo-server") {
        return echo_server();
    }
    let quick = args.iter().any(|a| a == "--quick");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1).cloned());
    let phase = if quick {
        Duration::from_millis(700)
    } else {
        Duration::from_millis(1500)
    };
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/lc-cli");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --release` first",
        bin.display()
    );
    raise_fd_limit(u64::MAX);

    let echo = echo();
    println!("floor: 1-byte echo server on {}", echo.addr);
    let mem = serve(&bin, &[]);
    println!(
        "lc-cli serve (in memory) on {}, pid {}",
        mem.addr,
        mem.pid()
    );

    if only.as_deref() == Some("wal") {
        return wal_bench(&bin, phase);
    }
    // The machine is shared: floor and server are measured in alternation,
    // three times each, and the medians compared.
    let reps = 3;
    let (floor1, pair1) = alternate(
        reps,
        || rate(1, phase, |_, _| round_trip(echo.addr, b"x")),
        || rate(1, phase, |c, i| pair(mem.addr, c, i)),
    );
    let (floor32, pair32) = alternate(
        reps,
        || rate(32, phase, |_, _| round_trip(echo.addr, b"x")),
        || rate(32, phase, |c, i| pair(mem.addr, c, i)),
    );
    println!(
        "floor: bare connect+1 byte+answer+close: {floor1:.0}/s with 1 client, {floor32:.0}/s with 32"
    );

    {
        // A pair is two round trips: cost ratio = (1/pair) / (2/floor).
        println!(
            "lock+unlock pairs/s, 1 client:   {pair1:.0}  -> a pair costs {:.2}x two bare round trips (target <= 1.3)",
            floor1 / (2.0 * pair1)
        );
        println!(
            "lock+unlock pairs/s, 32 clients: {pair32:.0}  -> a pair costs {:.2}x two bare round trips (target <= 1.3)",
            floor32 / (2.0 * pair32)
        );

        let rounds = if quick { 2 } else { 8 };
        let (med, p99, n) = handoff(mem.addr, 64, rounds);
        let (rt_med, _) = floor_latency(echo.addr, 500);
        println!(
            "hand-off, 64 queued waiters ({n} samples): median {:.1} us, p99 {:.1} us (Unlock sent -> next waiter's '+'); bare round trip median {:.1} us ({:.2}x)",
            us(med),
            us(p99),
            us(rt_med),
            med.as_secs_f64() / rt_med.as_secs_f64()
        );

        let waiters = 10_000;
        let per = rss_per_waiter(&mem, waiters);
        println!(
            "server RSS per queued waiter ({waiters} waiters): {per:.0} bytes ({:.2} KiB, target <= 2 KiB)",
            per / 1024.0
        );
    }

    if only.as_deref() != Some("mem") {
        wal_bench(&bin, phase);
    }
}

/// Grants/s with `--data` on disk and on tmpfs against in memory: the three
/// servers run side by side and are measured in turn, three times; medians.
fn wal_bench(bin: &Path, phase: Duration) {
    let disk_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-wal");
    let shm_dir = PathBuf::from("/dev/shm").join(format!("lc-bench-{}", std::process::id()));
    let mut servers = Vec::new();
    for (name, dir) in [
        ("memory", None),
        ("disk", Some(&disk_dir)),
        ("tmpfs", Some(&shm_dir)),
    ] {
        let mut extra = Vec::new();
        if let Some(dir) = dir {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).unwrap();
            extra.push("--data".to_string());
            extra.push(dir.join("locks.wal").to_str().unwrap().to_string());
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        servers.push((name, serve(bin, &extra), Vec::new(), Vec::new()));
    }
    println!(
        "--data on disk: {} ; on tmpfs: {}",
        disk_dir.display(),
        shm_dir.display()
    );
    for _ in 0..3 {
        for (_, server, r1, r32) in servers.iter_mut() {
            let addr = server.addr;
            r1.push(rate(1, phase, |c, i| pair(addr, c, i)));
            r32.push(rate(32, phase, |c, i| pair(addr, c, i)));
        }
    }
    let mut rows = Vec::new();
    for (name, mut server, mut r1, mut r32) in servers {
        let log = stop_and_read_log(&mut server);
        let stats = log
            .lines()
            .find_map(|l| l.split_once(" wal: ").map(|(_, s)| s.to_string()))
            .unwrap_or_else(|| "no log".into());
        rows.push((name, median(&mut r1), median(&mut r32), stats));
    }
    let _ = std::fs::remove_dir_all(&disk_dir);
    let _ = std::fs::remove_dir_all(&shm_dir);
    let (m1, m32) = (rows[0].1, rows[0].2);
    for (name, r1, r32, stats) in &rows {
        println!(
            "grants/s (lock+unlock pairs), {name:>6}: 1 client {r1:.0} ({:.2}x in-memory), 32 clients {r32:.0} ({:.2}x in-memory)",
            r1 / m1,
            r32 / m32
        );
        if *name != "memory" {
            println!("    {name} log: {stats}");
        }
    }
    println!("target: 32 clients on tmpfs >= 0.5x in-memory");
}

/// Runs `a` and `b` in turn `reps` times; the median of each.
fn alternate(reps: usize, a: impl Fn() -> f64, b: impl Fn() -> f64) -> (f64, f64) {
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for _ in 0..reps {
        xs.push(a());
        ys.push(b());
    }
    (median(&mut xs), median(&mut ys))
}

/// The server under test, or the echo server that stands for the floor.
fn serve(bin: &Path, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
    start(cmd)
}

fn echo() -> Proc {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg("--echo-server");
    start(cmd)
}

fn start(mut cmd: Command) -> Proc {
    cmd.env_remove("DATA_PATH").stderr(Stdio::piped());
    Proc::start(cmd)
}

/// SIGTERM, wait, return everything it logged.
fn stop_and_read_log(p: &mut Proc) -> String {
    unsafe { libc::kill(p.pid() as i32, libc::SIGTERM) };
    let mut log = String::new();
    if let Some(mut e) = p.stderr.take() {
        let _ = e.read_to_string(&mut log);
    }
    let _ = p.child.wait();
    log
}

fn frame(action: u8, key: &[u8], source: Option<&[u8]>) -> Vec<u8> {
    let mut f = vec![action, key.len() as u8];
    f.extend_from_slice(key);
    if let Some(s) = source {
        f.push(s.len() as u8);
        f.extend_from_slice(s);
    }
    f
}

/// Connect, send, read the one-byte answer, close.
fn round_trip(addr: SocketAddr, request: &[u8]) -> u8 {
    let mut s = connect(addr);
    s.write_all(request).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("answer");
    b[0]
}

/// One lock+unlock pair on this client's own key.
fn pair(addr: SocketAddr, client: usize, _i: u64) -> u8 {
    let key = format!("bench/{client}");
    let lock = round_trip(addr, &frame(1, key.as_bytes(), Some(b"bench")));
    assert_eq!(lock, b'+', "lock {key}");
    let unlock = round_trip(addr, &frame(2, key.as_bytes(), None));
    assert_eq!(unlock, b'+', "unlock {key}");
    unlock
}

/// Operations per second over `clients` threads for `phase` (after a short
/// warm-up).
fn rate(clients: usize, phase: Duration, op: impl Fn(usize, u64) -> u8 + Sync) -> f64 {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        for c in 0..clients {
            let (op, done, stop, measuring) = (&op, &done, &stop, &measuring);
            s.spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    op(c, i);
                    i += 1;
                    if measuring.load(Ordering::Relaxed) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(phase);
        measuring.store(false, Ordering::Relaxed);
        elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn floor_latency(addr: SocketAddr, n: usize) -> (Duration, Duration) {
    let mut v: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            round_trip(addr, b"x");
            t.elapsed()
        })
        .collect();
    v.sort();
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// `waiters` queued on one key; the bench unlocks it again and again and
/// times each Unlock until the next waiter reads its '+'.
fn handoff(addr: SocketAddr, waiters: usize, rounds: usize) -> (Duration, Duration, usize) {
    let mut samples = Vec::new();
    for round in 0..rounds {
        let key = format!("handoff/{round}");
        assert_eq!(
            round_trip(addr, &frame(1, key.as_bytes(), Some(b"h"))),
            b'+'
        );
        let (tx, rx) = mpsc::channel::<Instant>();
        let wait = frame(1, key.as_bytes(), Some(b"w"));
        let conns = queue_waiters(addr, waiters, &wait, Duration::from_millis(100));
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut s| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut b = [0u8; 1];
                    s.read_exact(&mut b).unwrap();
                    let _ = tx.send(Instant::now());
                })
            })
            .collect();
        let unlock = frame(2, key.as_bytes(), None);
        for _ in 0..waiters {
            let t = Instant::now();
            assert_eq!(round_trip(addr, &unlock), b'+');
            let got = rx.recv_timeout(Duration::from_secs(10)).expect("hand-off");
            samples.push(got.saturating_duration_since(t));
        }
        assert_eq!(round_trip(addr, &unlock), b'+');
        for h in handles {
            h.join().unwrap();
        }
    }
    samples.sort();
    (
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples.len(),
    )
}

/// RSS growth of the server per queued waiter.
fn rss_per_waiter(server: &Proc, waiters: usize) -> f64 {
    let addr = server.addr;
    assert_eq!(round_trip(addr, &frame(1, b"rss", Some(b"h"))), b'+');
    // Warm up allocator and runtime with a few queued waiters first.
    let warm: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = connect(addr);
            s.write_all(&frame(1, b"rss-warm", Some(b"w"))).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let before = rss(server.pid());
    let conns: Vec<TcpStream> = (0..waiters)
        .map(|i| {
            let mut s = connect(addr);
            s.write_all(&frame(1, b"rss", Some(format!("w{i}").as_bytes())))
                .unwrap();
            s
        })
        .collect();
    // Wait until the RSS stops growing.
    let mut last = 0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = rss(server.pid());
        if now == last {
            break;
        }
        last = now;
    }
    let after = rss(server.pid());
    drop(conns);
    drop(warm);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(round_trip(addr, &frame(2, b"rss", None)), b'+');
    (after.saturating_sub(before)) as f64 / waiters as f64
}

/// The floor: accept, read one byte, write one byte, close. The same runtime
/// shape as `lc-cli serve`.
fn echo_server() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("listening on {}", listener.local_addr().unwrap());
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                s.set_nodelay(true).ok();
                let mut b = [0u8; 1];
                if s.read_exact(&mut b).await.is_ok() {
                    let _ = s.write_all(&b).await;
                }
            });
        }
    });
}
