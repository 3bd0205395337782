//! Session holds on `lc-cli serve` against the classic frames, in one run:
//!
//!     cargo build --release && cargo run --release --example bench_sessions
//!
//! 1. lock+release pairs/s on distinct keys, 1 and 32 clients: a session pair
//!    (SessionLock, SessionRelease on the same connection) against a classic
//!    pair (Lock, then Release on a second connection) and against their
//!    floors, a one-thread epoll server answering two one-byte messages on
//!    one fresh connection (session) or one on each of two (classic), all
//!    in alternation (and an older build too with `LC_BASELINE_BIN`);
//! 2. `lc-cli lock k -- true` against `flock FILE true` (and the classic
//!    `lc-cli` path, against a server in reference mode), in alternation;
//! 3. server RSS per held session with 10,000 session holders;
//! 4. hand-off latency along a queue of 64 waiters, session and classic.
//!
//! `--quick` shortens every phase. `--token` runs one phase instead: the
//! cost of `serve --token-file` per session pair (a Hello with the token in
//! front of the SessionLock, in the same write) against no token, and of
//! `lc-cli lock k -- true` over plain TCP, plain with a token, TLS and TLS
//! with a token, all in alternation in the same run.

mod bench_common;

use bench_common::{
    connect, floor, floor_server, lc_cli_bin, median, queue_waiters, raise_fd_limit, rss, us, Proc,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--floor-server") {
        return floor_server();
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let phase = Duration::from_millis(if quick { 700 } else { 2000 });
    let bin = lc_cli_bin();
    raise_fd_limit(20_000);
    if std::env::args().any(|a| a == "--token") {
        return token_phase(&bin, quick, phase);
    }
    let server = serve(&bin, &["--reclaim-grace", "60s"], false);
    println!("lc-cli serve on {}, pid {}", server.addr, server.child.id());
    let floor = floor();
    println!(
        "floor: one-thread epoll server (1 byte in, 1 byte out) on {}",
        floor.addr
    );
    let baseline = std::env::var_os("LC_BASELINE_BIN")
        .map(|b| serve(Path::new(&b), &["--reclaim-grace", "60s"], false));
    if let Some(b) = &baseline {
        println!(
            "baseline lc-cli (LC_BASELINE_BIN) on {}, pid {}",
            b.addr,
            b.child.id()
        );
    }

    println!("\n## lock+release pairs/s (distinct keys; medians of 3 alternated runs)");
    for clients in [1, 32] {
        pair_rates(&server, baseline.as_ref(), &floor, clients, phase);
    }
    if std::env::args().any(|a| a == "--pairs") {
        return;
    }

    println!("\n## `lc-cli lock k -- true` vs `flock FILE true` (wall time per run)");
    let reference = serve(&bin, &[], true);
    let runs = if quick { 100 } else { 400 };
    let dir = tempfile_dir();
    let lockfile = dir.join("flock");
    std::fs::write(&lockfile, b"").unwrap();
    let server_arg = server.addr.to_string();
    let reference_arg = reference.addr.to_string();
    let mut cmds: Vec<(&str, Command)> = vec![
        ("lc-cli (session)", lc(&bin, &server_arg)),
        ("lc-cli (classic)", lc(&bin, &reference_arg)),
        ("flock", {
            let mut c = Command::new("flock");
            c.arg(&lockfile).arg("true");
            c
        }),
        ("true", Command::new("true")),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); cmds.len()];
    for _ in 0..20 {
        for (_, c) in cmds.iter_mut() {
            run(c);
        }
    }
    for _ in 0..runs {
        for (i, (_, c)) in cmds.iter_mut().enumerate() {
            times[i].push(run(c));
        }
    }
    let means: Vec<f64> = times.iter().map(|t| mean_ms(t)).collect();
    for (i, (name, _)) in cmds.iter().enumerate() {
        let mut t = times[i].clone();
        t.sort();
        println!(
            "{name:<18} mean {:.2} ms, median {:.2} ms, min {:.2} ms",
            means[i],
            t[t.len() / 2].as_secs_f64() * 1e3,
            t[0].as_secs_f64() * 1e3
        );
    }
    println!(
        "lc-cli (session) / flock: {:.2}x on the mean; lc-cli (classic) / flock: {:.2}x",
        means[0] / means[2],
        means[1] / means[2]
    );
    drop(reference);

    println!("\n## 10,000 session holders on one server");
    let holders = if quick { 2_000 } else { 10_000 };
    let fresh = serve(&bin, &["--reclaim-grace", "600s"], false);
    let warm = hold_sessions(fresh.addr, 200, "warm");
    let before = rss(fresh.child.id());
    let started = Instant::now();
    let held = hold_sessions(fresh.addr, holders, "h");
    let took = started.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let after = rss(fresh.child.id());
    println!(
        "{holders} held in {took:.2?}; server RSS {:.1} MiB -> {:.1} MiB: {:.0} bytes per held session",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after.saturating_sub(before)) as f64 / holders as f64
    );
    drop((held, warm));

    println!("\n## hand-off latency along 64 queued waiters (median / p99 / max)");
    for round in 0..3 {
        for kind in [Pair::Session, Pair::Classic] {
            let mut lat = handoffs(server.addr, 64, kind, round);
            lat.sort();
            println!(
                "{kind:?}: {:.0} / {:.0} / {:.0} us",
                us(lat[lat.len() / 2]),
                us(lat[lat.len() * 99 / 100]),
                us(*lat.last().unwrap())
            );
        }
    }
}

/// Session and classic pairs/s against their floors (and the baseline
/// build's), 3 rounds in turn; medians.
fn pair_rates(
    server: &Proc,
    baseline: Option<&Proc>,
    floor: &Proc,
    clients: usize,
    phase: Duration,
) {
    let kinds = [
        Pair::Session,
        Pair::Classic,
        Pair::FloorSession,
        Pair::FloorClassic,
    ];
    let mut rates = vec![Vec::new(); kinds.len()];
    let mut before = vec![Vec::new(); 2];
    for _ in 0..3 {
        for (k, kind) in kinds.iter().enumerate() {
            let addr = if kind.is_floor() {
                floor.addr
            } else {
                server.addr
            };
            rates[k].push(pairs_per_sec(addr, clients, phase, *kind));
        }
        if let Some(b) = baseline {
            for (k, kind) in kinds[..2].iter().enumerate() {
                before[k].push(pairs_per_sec(b.addr, clients, phase, *kind));
            }
        }
    }
    let m: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
    println!(
        "{clients:>2} client(s): session {:>7.0}/s, classic {:>7.0}/s: session / classic {:.2}x (target >= 2 at 1 client)",
        m[0], m[1], m[0] / m[1]
    );
    println!(
        "    floors: one connection, two bytes {:>7.0}/s; two connections, a byte each {:>7.0}/s: session / its floor {:.2}x (target >= 0.8), classic / its floor {:.2}x",
        m[2], m[3], m[0] / m[2], m[1] / m[3]
    );
    if baseline.is_some() {
        let b: Vec<f64> = before.iter_mut().map(|r| median(r)).collect();
        println!(
            "    baseline build: session {:>7.0}/s, classic {:>7.0}/s (this build: {:.2}x, {:.2}x)",
            b[0],
            b[1],
            m[0] / b[0],
            m[1] / b[1]
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pair {
    Session,
    Classic,
    /// A session pair whose connection opens with a Hello and the token.
    TokenSession,
    /// The session pair's floor: two one-byte round trips on one fresh
    /// connection to the floor server.
    FloorSession,
    /// The classic pair's floor: one one-byte round trip on each of two
    /// fresh connections.
    FloorClassic,
}

impl Pair {
    fn is_floor(self) -> bool {
        matches!(self, Pair::FloorSession | Pair::FloorClassic)
    }
}

/// The token of the `--token` phase's servers.
const TOKEN: &str = "bench-token-0123456789abcdef-0123";

/// The Hello with [`TOKEN`], as lc-cli sends it.
fn hello() -> Vec<u8> {
    let version = concat!(env!("CARGO_PKG_VERSION"), "\r\n");
    let mut f = vec![16, version.len() as u8];
    f.extend_from_slice(version.as_bytes());
    f.push(TOKEN.len() as u8);
    f.extend_from_slice(TOKEN.as_bytes());
    f
}

/// `--token`: what a token costs per session pair (raw frames) and per
/// `lc-cli lock k -- true` (plain and TLS), in one run.
fn token_phase(bin: &Path, quick: bool, phase: Duration) {
    let dir = tempfile_dir();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, format!("{TOKEN} lock\n")).unwrap();
    let tokens = tokens.to_str().unwrap().to_string();
    let plain = serve(bin, &[], false);
    let token = serve(bin, &["--token-file", &tokens], false);
    println!(
        "## session pairs/s, no token vs a token (distinct keys; medians of 3 alternated runs)"
    );
    for clients in [1, 32] {
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            without.push(pairs_per_sec(plain.addr, clients, phase, Pair::Session));
            with.push(pairs_per_sec(
                token.addr,
                clients,
                phase,
                Pair::TokenSession,
            ));
        }
        let (a, b) = (median(&mut without), median(&mut with));
        println!(
            "{clients:>2} client(s): no token {a:>8.0}/s, token {b:>8.0}/s, ratio {:.2}x",
            b / a
        );
    }
    // A CA and a certificate for 127.0.0.1, made with openssl.
    let sh = |script: &str| {
        let ok = Command::new("sh")
            .args(["-c", script])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "openssl: {script}");
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bench-ca -keyout ca.key -out ca.pem");
    sh("openssl req -newkey rsa:2048 -nodes -subj /CN=bench -keyout server.key -out server.csr");
    sh("printf 'subjectAltName=IP:127.0.0.1\\n' > ext && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile ext -out server.pem");
    let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (cert, key, ca) = (file("server.pem"), file("server.key"), file("ca.pem"));
    let tls_args = ["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
    let tls = serve(bin, &tls_args, false);
    let mut both = tls_args.to_vec();
    both.extend(["--token-file", tokens.as_str()]);
    let tls_token = serve(bin, &both, false);
    let lcs = |addr: SocketAddr| format!("lcs://{addr}?cacert={ca}");
    let with_token = |mut c: Command| {
        c.env("LC_TOKEN", TOKEN);
        c
    };
    let mut cmds: Vec<(&str, Command)> = vec![
        ("plain", lc(bin, &plain.addr.to_string())),
        (
            "plain + token",
            with_token(lc(bin, &token.addr.to_string())),
        ),
        ("TLS", lc(bin, &lcs(tls.addr))),
        ("TLS + token", with_token(lc(bin, &lcs(tls_token.addr)))),
    ];
    let runs = if quick { 100 } else { 400 };
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); cmds.len()];
    for _ in 0..runs {
        for (i, (_, c)) in cmds.iter_mut().enumerate() {
            times[i].push(run(c));
        }
    }
    println!("\n## `lc-cli lock k -- true`, {runs} alternated runs each (wall time per run)");
    let ms = |t: &[Duration]| -> Vec<f64> { t.iter().map(|d| d.as_secs_f64() * 1e3).collect() };
    let base = median(&mut ms(&times[0]));
    for (i, (name, _)) in cmds.iter().enumerate() {
        let m = median(&mut ms(&times[i]));
        println!(
            "{name:<14} median {m:>6.2} ms, mean {:>6.2} ms, {:.2}x plain",
            mean_ms(&times[i]),
            m / base
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn mean_ms(t: &[Duration]) -> f64 {
    t.iter().map(Duration::as_secs_f64).sum::<f64>() / t.len() as f64 * 1e3
}

fn lc(bin: &Path, server: &str) -> Command {
    let mut c = Command::new(bin);
    c.args(["--server", server, "lock", "k", "--", "true"]);
    c.env_remove("LC_SERVER");
    c
}

fn run(c: &mut Command) -> Duration {
    let t = Instant::now();
    let status = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{c:?}: {status}");
    t.elapsed()
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bench_sessions.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `lc-cli serve` with a manager port and `extra`; `reference`: as the
/// reference Locking-Center server behaves.
fn serve(bin: &Path, extra: &[&str], reference: bool) -> Proc {
    let mut cmd = Command::new(bin);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--manager",
        "127.0.0.1:0",
    ])
    .args(extra)
    .stderr(Stdio::null());
    if reference {
        cmd.env("LC_CLI_SERVE_AS_REFERENCE", "1");
    }
    Proc::start(cmd)
}

fn frame(action: u8, key: &[u8], tail: &[u8]) -> Vec<u8> {
    let mut f = vec![action, key.len() as u8];
    f.extend_from_slice(key);
    f.push(tail.len() as u8);
    f.extend_from_slice(tail);
    f
}

/// A session lock on a fresh connection: the connection and the token.
fn session_lock(addr: SocketAddr, key: &[u8]) -> (TcpStream, u64) {
    let mut s = connect(addr);
    s.write_all(&frame(8, key, b"b")).unwrap();
    let token = read_session_grant(&mut s);
    (s, token)
}

fn read_session_grant(s: &mut TcpStream) -> u64 {
    let mut g = [0u8; 13];
    s.read_exact(&mut g).unwrap();
    assert_eq!(g[0], b'=');
    u64::from_be_bytes(g[1..9].try_into().unwrap())
}

fn session_release(s: &mut TcpStream, key: &[u8], token: u64) {
    s.write_all(&frame(11, key, &token.to_be_bytes())).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    assert_eq!(b[0], b'+');
}

fn classic(addr: SocketAddr, bytes: &[u8]) -> u8 {
    let mut s = connect(addr);
    s.write_all(bytes).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    b[0]
}

fn one_pair(addr: SocketAddr, key: &[u8], kind: Pair) {
    match kind {
        Pair::TokenSession => {
            let mut s = connect(addr);
            let mut f = hello();
            f.extend(frame(8, key, b"b"));
            s.write_all(&f).unwrap();
            // `*`, the version, `lock`.
            let mut welcome = vec![0u8; 3 + env!("CARGO_PKG_VERSION").len() + 4];
            s.read_exact(&mut welcome).unwrap();
            assert_eq!(welcome[0], b'*');
            let token = read_session_grant(&mut s);
            session_release(&mut s, key, token);
        }
        Pair::Session => {
            let (mut s, token) = session_lock(addr, key);
            session_release(&mut s, key, token);
        }
        Pair::Classic => {
            assert_eq!(classic(addr, &frame(1, key, b"b")), b'+');
            let mut release = vec![6, key.len() as u8];
            release.extend_from_slice(key);
            assert_eq!(classic(addr, &release), b'+');
        }
        Pair::FloorSession => {
            let mut s = connect(addr);
            let mut b = [0u8; 1];
            for _ in 0..2 {
                s.write_all(b"x").unwrap();
                s.read_exact(&mut b).unwrap();
            }
        }
        Pair::FloorClassic => {
            classic(addr, b"x");
            classic(addr, b"x");
        }
    }
}

fn pairs_per_sec(addr: SocketAddr, clients: usize, phase: Duration, kind: Pair) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(clients + 1));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (stop, done, start) = (stop.clone(), done.clone(), start.clone());
            std::thread::spawn(move || {
                let key = format!("pair-{i}").into_bytes();
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    one_pair(addr, &key, kind);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    start.wait();
    let t = Instant::now();
    std::thread::sleep(phase);
    let n = done.load(Ordering::Relaxed);
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    n as f64 / took.as_secs_f64()
}

fn hold_sessions(addr: SocketAddr, n: usize, prefix: &str) -> Vec<TcpStream> {
    (0..n)
        .map(|i| session_lock(addr, format!("{prefix}-{i}").as_bytes()).0)
        .collect()
}

/// One holder and `waiters` queued behind it; each releases as soon as it
/// is granted. Latency of a hand-off: from the release's send to the next
/// grant's arrival.
fn handoffs(addr: SocketAddr, waiters: usize, kind: Pair, round: usize) -> Vec<Duration> {
    assert!(!kind.is_floor(), "a floor has no queue");
    let key = format!("handoff-{kind:?}-{round}").into_bytes();
    let lock_frame = match kind {
        Pair::Session | Pair::TokenSession => frame(8, &key, b"w"),
        _ => frame(1, &key, b"w"),
    };
    let read_grant = move |s: &mut TcpStream| -> u64 {
        match kind {
            Pair::Session | Pair::TokenSession => read_session_grant(s),
            _ => {
                let mut b = [0u8; 1];
                s.read_exact(&mut b).unwrap();
                assert_eq!(b[0], b'+');
                0
            }
        }
    };
    let release = move |s: &mut TcpStream, key: &[u8], token: u64| match kind {
        Pair::Session | Pair::TokenSession => session_release(s, key, token),
        _ => {
            let mut r = vec![6, key.len() as u8];
            r.extend_from_slice(key);
            assert_eq!(classic(addr, &r), b'+');
        }
    };
    let mut first = connect(addr);
    first.write_all(&lock_frame).unwrap();
    let first_token = read_grant(&mut first);
    // Every request in the queue, in order.
    let queued = queue_waiters(addr, waiters, &lock_frame, Duration::from_millis(300));
    let handles: Vec<_> = queued
        .into_iter()
        .map(|mut s| {
            let key = key.clone();
            std::thread::spawn(move || {
                let token = read_grant(&mut s);
                let granted = Instant::now();
                let sent = Instant::now();
                release(&mut s, &key, token);
                (granted, sent)
            })
        })
        .collect();
    let sent0 = Instant::now();
    release(&mut first, &key, first_token);
    let mut events: Vec<(Instant, Instant)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    events.sort();
    let mut lat = Vec::new();
    let mut prev_sent = sent0;
    for (granted, sent) in events {
        lat.push(granted.saturating_duration_since(prev_sent));
        prev_sent = sent;
    }
    lat
}
