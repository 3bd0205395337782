//! Speed and memory of `lc-cli serve` against a bare loopback floor.
//!
//!     cargo build --release && cargo run --release --example bench_server
//!     LC_REFERENCE_BIN=/path/to/locking-center cargo run --release --example bench_server
//!
//! Starts the release `lc-cli serve` and, for the floor, a one-thread epoll
//! server that answers each byte with one byte (this same program re-run
//! with `--floor-server`), and with `LC_REFERENCE_BIN` the reference
//! Locking-Center server (Go), all on 127.0.0.1, and prints, in one run:
//! lock+unlock pairs/s with 1 and 32 clients on distinct keys against two
//! floor round trips; hand-off latency with 64 queued waiters; server RSS
//! per queued waiter with 10,000 waiters; and with `--data` (on disk and on
//! tmpfs) grants/s and grants per fsync. `--quick` shortens every phase;
//! `--only mem|wal` runs one part, `--only pairs` the pairs and the hand-off.

mod bench_common;

use bench_common::{
    connect, floor, floor_server, frame, lc_cli_bin, median, queue_waiters, raise_fd_limit,
    reference, rss, us, Proc, NO_REFERENCE,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--floor-server") {
        return floor_server();
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
    let bin = lc_cli_bin();
    raise_fd_limit(u64::MAX);

    let floor = floor();
    println!(
        "floor: one-thread epoll server (1 byte in, 1 byte out) on {}",
        floor.addr
    );
    let mem = serve(&bin, &[]);
    println!(
        "lc-cli serve (in memory) on {}, pid {}",
        mem.addr,
        mem.pid()
    );
    let reference = reference();
    match &reference {
        Some(r) => println!(
            "Go reference (LC_REFERENCE_BIN) on {}, pid {}",
            r.addr,
            r.pid()
        ),
        None => println!("{NO_REFERENCE}"),
    }
    // An older build to compare with in the same run (before/after figures).
    let baseline = std::env::var_os("LC_BASELINE_BIN").map(|b| serve(Path::new(&b), &[]));
    if let Some(b) = &baseline {
        println!(
            "baseline lc-cli (LC_BASELINE_BIN) on {}, pid {}",
            b.addr,
            b.pid()
        );
    }

    if only.as_deref() == Some("wal") {
        return wal_bench(&bin, phase);
    }
    let mut others = Vec::new();
    others.extend(baseline.as_ref().map(|p| ("baseline lc-cli", p)));
    others.extend(reference.as_ref().map(|p| ("Go reference", p)));
    pairs(&floor, &mem, &others, phase, 1, 5);
    pairs(&floor, &mem, &others, phase, 32, 3);
    handoffs(&floor, &mem, &others, if quick { 2 } else { 8 });
    if only.as_deref() != Some("pairs") {
        let waiters = 10_000;
        let per = rss_per_waiter(&mem, waiters);
        println!(
            "server RSS per queued waiter ({waiters} waiters): {per:.0} bytes ({:.2} KiB, target <= 2 KiB)",
            per / 1024.0
        );
    }
    if only.is_none() {
        wal_bench(&bin, phase);
    }
}

/// Lock+unlock pairs/s with `clients` clients: the floor, lc-cli and the
/// `others` measured in turn, `rounds` times (the machine is shared), and
/// the medians compared. A pair is two round trips on fresh connections, so
/// its cost ratio is (1/pairs) / (2/floor round trips).
fn pairs(
    floor: &Proc,
    mem: &Proc,
    others: &[(&str, &Proc)],
    phase: Duration,
    clients: usize,
    rounds: usize,
) {
    let mut f = Vec::new();
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); 1 + others.len()];
    let servers: Vec<&Proc> = std::iter::once(mem)
        .chain(others.iter().map(|o| o.1))
        .collect();
    for _ in 0..rounds {
        f.push(rate(clients, phase, |_, _| round_trip(floor.addr, b"x")));
        for (i, s) in servers.iter().enumerate() {
            per[i].push(rate(clients, phase, |c, n| pair(s.addr, c, n)));
        }
    }
    let f = median(&mut f);
    let l = median(&mut per[0]);
    println!(
        "lock+unlock pairs/s, {clients} client(s), medians of {rounds}: floor {f:.0} round trips/s; lc-cli {l:.0} pairs/s = {:.2}x two floor round trips (target <= 1.3)",
        f / (2.0 * l)
    );
    for ((name, _), v) in others.iter().zip(&mut per[1..]) {
        let g = median(v);
        println!(
            "    {name} {g:.0} pairs/s = {:.2}x two floor round trips; lc-cli / {name} = {:.2}x the pairs/s",
            f / (2.0 * g),
            l / g
        );
    }
}

/// Hand-off with 64 queued waiters on lc-cli and the `others`, round by
/// round in turn; against the floor's round trip.
fn handoffs(floor: &Proc, mem: &Proc, others: &[(&str, &Proc)], rounds: usize) {
    let mut per: Vec<Vec<Duration>> = vec![Vec::new(); 1 + others.len()];
    let servers: Vec<&Proc> = std::iter::once(mem)
        .chain(others.iter().map(|o| o.1))
        .collect();
    for round in 0..rounds {
        for (i, s) in servers.iter().enumerate() {
            per[i].extend(handoff(s.addr, 64, round));
        }
    }
    let (rt_med, _) = floor_latency(floor.addr, 500);
    let l = &mut per[0];
    let med = percentile(l, 0.5);
    println!(
        "hand-off, 64 queued waiters ({} samples): median {:.1} us (target <= 100), p99 {:.1} us (Unlock sent -> next waiter's '+'); floor round trip median {:.1} us ({:.2}x)",
        l.len(),
        us(med),
        us(percentile(l, 0.99)),
        us(rt_med),
        med.as_secs_f64() / rt_med.as_secs_f64()
    );
    for ((name, _), v) in others.iter().zip(&mut per[1..]) {
        let m = percentile(v, 0.5);
        println!(
            "    {name}: median {:.1} us, p99 {:.1} us; lc-cli / {name} = {:.2}x the median",
            us(m),
            us(percentile(v, 0.99)),
            med.as_secs_f64() / m.as_secs_f64()
        );
    }
}

/// Grants/s with `--data` on disk and on tmpfs against in memory: the three
/// servers run side by side and are measured in turn, three times; medians.
fn wal_bench(bin: &Path, phase: Duration) {
    // On the disk, beside the build (the target dir may be anywhere).
    let disk_dir = bin.parent().unwrap().join("bench-wal");
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

/// The server under test.
fn serve(bin: &Path, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
    start(cmd)
}

fn start(mut cmd: Command) -> Proc {
    cmd.env_remove("DATA_PATH").stderr(Stdio::piped());
    Proc::start(cmd)
}

/// SIGTERM, wait, return everything it logged.
fn stop_and_read_log(p: &mut Proc) -> String {
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(p.pid() as i32, libc::SIGTERM) };
    let mut log = String::new();
    if let Some(mut e) = p.stderr.take() {
        let _ = e.read_to_string(&mut log);
    }
    let _ = p.child.wait();
    log
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

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn floor_latency(addr: SocketAddr, n: usize) -> (Duration, Duration) {
    let mut v: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            round_trip(addr, b"x");
            t.elapsed()
        })
        .collect();
    (percentile(&mut v, 0.5), percentile(&mut v, 0.99))
}

/// `waiters` queued on one key; the bench unlocks it again and again and
/// times each Unlock until the next waiter reads its '+'.
fn handoff(addr: SocketAddr, waiters: usize, round: usize) -> Vec<Duration> {
    let mut samples = Vec::new();
    {
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
    samples
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
