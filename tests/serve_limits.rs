//! Limits before login on `lc-cli serve` (`--max-connections-per-peer`, on
//! by default; `--max-pending-logins`; `--login-timeout`): idle connections
//! without a token from one address, and a client that sends its TLS
//! handshake a byte at a time, leave room for a token holder on another
//! address; a client refused at a limit says so in one line (69) naming
//! the limit, over plain TCP and TLS; the login bound closes a silent or
//! slow client, and bounds neither the request of a client that logged in
//! (--read-timeout does) nor a queued lock's wait.
//!
//! "Another address" is another loopback address: the flood connects from
//! 127.0.0.2 (bound before the connect), the token holder from 127.0.0.1.

use crate::common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::manager::sample;
use common::serve::raise_fd_limit;
use common::tls::TestCa;
use common::{expect_error_line, expect_status, lc_at, Serve, Server};

const TOKEN: &str = "limits-Tok3n-never-printed-01";

/// The address the flood comes from: another peer for the server.
const FLOOD_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// `lc-cli serve` sends this TLS record (alert, fatal, internal_error) on a
/// TLS connection over a limit (`src/tls.rs`, AT_LIMIT_RECORD).
const AT_LIMIT_RECORD: [u8; 7] = [21, 3, 3, 0, 2, 2, 80];

/// A TCP connection to `to` from the local address `from`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let SocketAddr::V4(to) = to else {
        panic!("{to} is not IPv4")
    };
    let sockaddr = |a: SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: socket() takes no pointers; its descriptor, if any, is owned
    // at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a new descriptor no one else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (local, remote) = (sockaddr(SocketAddrV4::new(from, 0)), sockaddr(to));
    // SAFETY: both addresses are sockaddr_in structs that live across the
    // calls, and len is their size.
    unsafe {
        let at = &local as *const libc::sockaddr_in as *const libc::sockaddr;
        assert_eq!(
            libc::bind(fd.as_raw_fd(), at, len),
            0,
            "bind {from}: {}",
            std::io::Error::last_os_error()
        );
        let at = &remote as *const libc::sockaddr_in as *const libc::sockaddr;
        assert_eq!(
            libc::connect(fd.as_raw_fd(), at, len),
            0,
            "connect {to}: {}",
            std::io::Error::last_os_error()
        );
    }
    TcpStream::from(fd)
}

/// A token file in a temp dir (kept alive by the caller).
fn token_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, format!("{TOKEN} lock\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

/// Scrapes until sample `name` satisfies `ok` (at most 15 s): the text.
fn until_sample(s: &Server, name: &str, ok: impl Fn(f64) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = s.scrape();
        if ok(sample(&text, name)) {
            return text;
        }
        assert!(Instant::now() < deadline, "{name} stayed so:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A TLS ClientHello for 127.0.0.1, as a TLS client's first write.
fn client_hello() -> Vec<u8> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    assert!(hello.len() > 100, "{} bytes", hello.len());
    hello
}

/// Sends `bytes` one at a time, one every 100 ms, until the server closes
/// the connection (at most 30 s): how long after the connect it closed.
fn drip(mut c: TcpStream, bytes: &[u8], started: Instant) -> Duration {
    c.set_nonblocking(true).unwrap();
    let mut sink = [0u8; 64];
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(30) {
        match c.read(&mut sink) {
            Ok(0) => return started.elapsed(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Anything the server sent (an alert) and then the close.
            Ok(_) => continue,
            Err(_) => return started.elapsed(),
        }
        if sent < bytes.len() && c.write(&bytes[sent..=sent]).is_ok() {
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the server kept a client that sent {sent} byte(s) for 30 s");
}

/// Whether the server sent `c` its refusal (the TLS alert) already.
fn was_told(c: &TcpStream) -> bool {
    let mut buf = [0u8; 16];
    c.set_nonblocking(true).unwrap();
    let told = matches!(c.peek(&mut buf), Ok(7) if buf[..7] == AT_LIMIT_RECORD);
    c.set_nonblocking(false).unwrap();
    told
}

/// The first bytes the server sent on `c` before it closed (5 s at most).
fn answer_of(c: &mut TcpStream) -> Vec<u8> {
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn idle_connections_from_one_address_leave_room_for_a_token_holder() {
    // 2,000 connections here and the server's own: more than 1,024 files.
    let fds = raise_fd_limit(8192);
    assert!(fds >= 4400, "soft fd limit only {fds}");
    let ca = TestCa::new();
    let (_dir, tokens) = token_file();
    let (cert, key) = (ca.file("server.pem"), ca.file("server.key"));
    // As in issue 43: --max-connections 2000; the other limits by default
    // (256 per address, 1,000 logging in, a 5 s login).
    let s = Serve::new()
        .args(&["--tls-cert", &cert, "--tls-key", &key])
        .args(&["--token-file", &tokens, "--max-connections", "2000"])
        .args(&["--metrics", "127.0.0.1:0"])
        .start();
    let url = format!("lcs://{}?cacert={}", s.addr, ca.file("ca.pem"));
    let hello = client_hello();
    let mut refused_before = 0.0;
    for trial in 1..=3 {
        until_sample(&s, "lc_connections_open", |n| n == 0.0);
        // The slow one first, so it has a slot of the flood's address.
        let slow = connect_from(FLOOD_FROM, s.addr);
        let slow_since = Instant::now();
        until_sample(&s, "lc_connections_open", |n| n == 1.0);
        let bytes = hello.clone();
        let slow = std::thread::spawn(move || drip(slow, &bytes, slow_since));
        let started = Instant::now();
        let flood: Vec<TcpStream> = (0..2000)
            .map(|_| connect_from(FLOOD_FROM, s.addr))
            .collect();
        let opened = started.elapsed();
        // A token holder from 127.0.0.1, while all of them are open.
        let asked = Instant::now();
        let mut lock = lc_at(&url, &["lock", "team/deploy", "--", "true"]);
        lock.env("LC_TOKEN", TOKEN).env_remove("LC_TOKEN_FILE");
        expect_status(&mut lock, 0);
        let took = asked.elapsed();
        // Every refused one was told so before the close (the TLS alert),
        // as many as the server counts; the others hold at most the
        // address's 256 slots, each for a login bound at most. (On an idle
        // machine the 2,000 open in well under the bound: 255 taken, 1,745
        // refused; on a busy one, slots the bound freed take more.)
        let mut told = 0;
        let mut text = String::new();
        let settled = common::wait_until(Duration::from_secs(15), || {
            told = flood.iter().filter(|c| was_told(c)).count();
            text = s.scrape();
            sample(&text, "lc_refused_connections_total") == refused_before + told as f64
        });
        assert!(settled, "trial {trial}: {told} told:\n{text}");
        refused_before += told as f64;
        assert!(sample(&text, "lc_connections_open") <= 256.0, "{text}");
        let batches = 2 + opened.as_secs() as usize / 5;
        assert!(told >= 2000 - 256 * batches, "trial {trial}: {told} told");
        let slow_closed = slow.join().unwrap();
        eprintln!(
            "trial {trial}: 2000 connections opened in {opened:?}, {told} refused at once; \
             a token holder's lock granted and released in {took:?}; the byte-at-a-time TLS \
             client closed {slow_closed:?} after its connect"
        );
        assert!(took < Duration::from_secs(1), "trial {trial}: {took:?}");
        // Closed by the 5 s login bound (not before it, nor long after).
        assert!(
            slow_closed >= Duration::from_millis(4500) && slow_closed < Duration::from_secs(10),
            "trial {trial}: {slow_closed:?}"
        );
        drop(flood);
    }
    // Each refused address and each slow client is logged, within the
    // rate limit (at most 20 lines a kind and address a minute).
    let log = s.log();
    let refusals = s.count("connection refused: 256 connections from 127.0.0.2 are open");
    assert!((1..=21).contains(&refusals), "{refusals} lines:\n{log}");
    assert!(
        log.contains("no handshake within 5s of the connection (--login-timeout)"),
        "{log}"
    );
    assert!(!log.contains(TOKEN));
}

#[test]
fn a_client_at_a_connection_limit_says_so_in_one_line() {
    // Plain: `&` and the limit, which the line names.
    let s = Serve::new()
        .args(&["--max-connections-per-peer", "2", "--login-timeout", "60s"])
        .start();
    let idle: Vec<TcpStream> = (0..2).map(|_| s.connect()).collect();
    for args in [
        &["trylock", "k", "--", "true"][..],
        &["lock", "k", "--", "true"],
        &["ping"],
        &["unlock", "k"],
        &["keys"],
    ] {
        let line = expect_error_line(&mut s.lc(args), 69);
        assert!(
            line.contains(&format!(
                "the server {} is at its connection limit (2 connections from 127.0.0.1 are \
                 open, --max-connections-per-peer 2)",
                s.addr
            )),
            "{args:?}: {line}"
        );
    }
    s.wait_for(
        "connection refused: 2 connections from 127.0.0.1 are open, --max-connections-per-peer 2",
        1,
        Duration::from_secs(5),
    );
    drop(idle);

    // The connections still logging in, from another address.
    let s = Serve::new()
        .args(&["--max-pending-logins", "1", "--login-timeout", "60s"])
        .start();
    let idle = connect_from(FLOOD_FROM, s.addr);
    let line = expect_error_line(&mut s.lc(&["trylock", "k", "--", "true"]), 69);
    assert!(
        line.contains("is at its connection limit (1 connections are still logging in, --max-pending-logins 1)"),
        "{line}"
    );
    drop(idle);

    // TLS: the alert before the handshake.
    let ca = TestCa::new();
    let (cert, key) = (ca.file("server.pem"), ca.file("server.key"));
    let s = Serve::new()
        .args(&["--tls-cert", &cert, "--tls-key", &key])
        .args(&["--max-connections-per-peer", "1", "--login-timeout", "60s"])
        .start();
    let idle = s.connect();
    let url = format!("lcs://{}?cacert={}", s.addr, ca.file("ca.pem"));
    for args in [&["trylock", "k", "--", "true"][..], &["ping"]] {
        let line = expect_error_line(&mut lc_at(&url, args), 69);
        assert!(
            line.contains(&format!(
                "the server {} is at its connection limit (it sent the TLS alert internal_error",
                s.addr
            )) && !line.contains("plain server"),
            "{args:?}: {line}"
        );
    }
    drop(idle);
}

#[test]
fn a_waiting_lock_whose_check_is_refused_at_the_limit_waits_on() {
    // An idle connection and the waiter's fill 127.0.0.1's two: the check
    // a waiting lock makes on a second connection is refused. Each step
    // waits for the server's count, so none is refused but the check.
    let s = Serve::new()
        .args(&["--max-connections-per-peer", "2", "--login-timeout", "60s"])
        .args(&["--metrics", "127.0.0.1:0"])
        .start();
    expect_status(&mut s.lc(&["lock", "k"]), 0);
    until_sample(&s, "lc_connections_open", |n| n == 0.0);
    let idle = s.connect();
    until_sample(&s, "lc_connections_open", |n| n == 1.0);
    let mut waiter = common::cli::Guard(
        s.lc(&["lock", "-w", "20s", "k", "--", "true"])
            .spawn()
            .unwrap(),
    );
    s.wait_for("queue 'k'", 1, Duration::from_secs(10));
    s.wait_for("connection refused", 1, Duration::from_secs(10));
    // Still waiting; once the key is free, it gets it.
    assert!(waiter.wait_for(Duration::from_millis(300)).is_none());
    drop(idle);
    until_sample(&s, "lc_connections_open", |n| n == 1.0);
    expect_status(&mut s.lc(&["unlock", "k"]), 0);
    assert_eq!(waiter.wait_for(Duration::from_secs(10)), Some(0));
}

#[test]
fn the_login_bound_closes_silent_and_slow_clients_only() {
    let (_dir, tokens) = token_file();
    let s = Serve::new()
        .args(&[
            "--token-file",
            &tokens,
            "--login-timeout",
            "1s",
            "--read-timeout",
            "3s",
        ])
        .args(&["--metrics", "127.0.0.1:0"])
        .start();
    // Silent: closed a login bound after its connect.
    let mut silent = s.connect();
    let since = Instant::now();
    assert!(answer_of(&mut silent).is_empty());
    let took = since.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    // A Hello a byte at a time, one every 100 ms: 30 bytes take 3 s.
    let mut hello = vec![16, 7];
    hello.extend_from_slice(b"0.0.0\r\n");
    hello.push(TOKEN.len() as u8);
    hello.extend_from_slice(TOKEN.as_bytes());
    let since = Instant::now();
    let took = drip(s.connect(), &hello, since);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
    s.wait_for(
        "no whole request within 1s (--login-timeout), closing",
        1,
        Duration::from_secs(5),
    );
    // Logged in (a valid Hello), its request is bounded by --read-timeout.
    let mut c = s.connect();
    c.write_all(&hello).unwrap();
    let since = Instant::now();
    let answer = answer_of(&mut c);
    assert_eq!(answer.first(), Some(&b'*'), "{answer:?}");
    let took = since.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(8),
        "{took:?}"
    );
    s.wait_for(
        "no whole request within 3s (--read-timeout), closing",
        1,
        Duration::from_secs(5),
    );
    // A token holder's wait in line is bounded by neither.
    let lc = |args: &[&str]| {
        let mut cmd = s.lc(args);
        cmd.env("LC_TOKEN", TOKEN).env_remove("LC_TOKEN_FILE");
        cmd
    };
    expect_status(&mut lc(&["lock", "k"]), 0);
    let mut waiter = common::cli::Guard(
        lc(&["lock", "-w", "30s", "k", "--", "true"])
            .spawn()
            .unwrap(),
    );
    s.wait_for("queue 'k'", 1, Duration::from_secs(10));
    assert!(waiter.wait_for(Duration::from_millis(3500)).is_none());
    expect_status(&mut lc(&["unlock", "k"]), 0);
    assert_eq!(waiter.wait_for(Duration::from_secs(10)), Some(0));
    let text = until_sample(&s, "lc_connections_open", |n| n == 0.0);
    assert_eq!(sample(&text, "lc_connections_logging_in"), 0.0, "{text}");
}

/// Issue 43: 1,200 idle connections to the metrics port of a server whose
/// file limit is 1,024 (`ulimit -n 1024`) take the metrics port's own
/// budget only: in each of 3 trials a token holder's lock on the lock port
/// is granted, and the server never runs out of descriptors.
#[test]
fn a_flood_of_the_metrics_port_leaves_the_lock_port_its_descriptors() {
    let fds = raise_fd_limit(8192);
    assert!(fds >= 2600, "soft fd limit only {fds}");
    let (_dir, tokens) = token_file();
    let s = Serve::new()
        .file_limit(1024)
        .args(&["--token-file", &tokens, "--metrics", "127.0.0.1:0"])
        .start();
    let metrics = s.metrics.unwrap();
    for trial in 1..=3 {
        let flood: Vec<TcpStream> = (0..1200)
            .map(|_| connect_from(FLOOD_FROM, metrics))
            .collect();
        let asked = Instant::now();
        let mut lock = lc_at(&s.addr.to_string(), &["lock", "team/deploy", "--", "true"]);
        lock.env("LC_TOKEN", TOKEN).env_remove("LC_TOKEN_FILE");
        expect_status(&mut lock, 0);
        let took = asked.elapsed();
        eprintln!(
            "trial {trial}: 1200 metrics connections open, a lock granted and released in {took:?}"
        );
        assert!(took < Duration::from_secs(1), "trial {trial}: {took:?}");
        drop(flood);
    }
    let log = s.log();
    assert!(!log.contains("Too many open files"), "{log}");
}
