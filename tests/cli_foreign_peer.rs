//! A `--server` that does not speak the Locking-Center protocol (issue 11,
//! item 4): Redis's port, an HTTP server, a silent peer, a peer that speaks
//! first. Each ends in one line and 69 or 76 within the connect timeout plus
//! a round trip, instead of a wait that looks like a held key (before: `lock`
//! waited forever, `lock -w 3` exited 1 silently, `unlock` failed after 10 s).
//! A real lock server whose key is held keeps its waiter waiting.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::*;

/// Connect timeout given to every command here.
const CT: &str = "1s";
/// The longest a failure may take: the connect timeout, a round trip, and
/// the start and exit of the process on a loaded machine.
const FAIL_WITHIN: Duration = Duration::from_millis(2500);

fn lc(addr: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(&args[..1])
        .args(["--server", addr, "--connect-timeout", CT])
        .args(&args[1..])
        .env_remove("LC_SERVER")
        .env_remove("LC_SOURCE");
    cmd
}

/// Runs, checks the status, the time taken and that stderr is one line.
fn fails(addr: &str, args: &[&str], status: i32) -> String {
    let started = Instant::now();
    let out: Output = expect_status(&mut lc(addr, args), status);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        took < FAIL_WITHIN,
        "{args:?} on {addr} took {took:?}: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err:?}");
    err
}

/// A listener thread: for each connection, `reply` gets what arrives and
/// decides what to write (None: nothing yet); the connection stays open.
fn peer(reply: fn(&[u8]) -> Option<Vec<u8>>, greeting: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(50) {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let _ = conn.write_all(greeting);
                let mut got = Vec::new();
                let mut buf = [0u8; 256];
                conn.set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if let Some(answer) = reply(&got) {
                        let _ = conn.write_all(&answer);
                        let _ = conn.shutdown(std::net::Shutdown::Write);
                    }
                }
            });
        }
    });
    addr
}

/// As an HTTP/1.1 server: a 400 once a line has arrived.
fn http(got: &[u8]) -> Option<Vec<u8>> {
    got.windows(2)
        .any(|w| w == b"\r\n")
        .then(|| b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec())
}

#[test]
fn redis_port_is_refused_as_not_the_protocol() {
    let r = RedisServer::start();
    let addr = r.addr();
    for args in [
        &["lock", "k", "true"][..],
        &["lock", "-w", "3", "k", "true"],
        &["wait", "k"],
    ] {
        let err = fails(&addr, args, 76);
        assert!(
            err.contains("not the Locking-Center protocol") && err.contains("-ERR"),
            "{err}"
        );
    }
    // The short requests too: the Hello in front of them ends its client
    // version with CR LF, so Redis answers its line at once (before the
    // Hello, they got no answer at all: 69 after the connect timeout).
    for args in [
        &["trylock", "k", "true"][..],
        &["unlock", "k"],
        &["reset", "k"],
    ] {
        let err = fails(&addr, args, 76);
        assert!(
            err.contains("not the Locking-Center protocol") && err.contains("-ERR"),
            "{err}"
        );
    }
}

#[test]
fn an_http_server_is_refused() {
    let addr = peer(http, b"");
    let err = fails(&addr, &["lock", "k", "true"], 76);
    assert!(err.contains("HTTP/1.1 400"), "{err}");
}

#[test]
fn a_silent_peer_is_unavailable() {
    let addr = peer(|_| None, b"");
    let err = fails(&addr, &["lock", "-w", "30", "k", "true"], 69);
    assert!(err.contains("no answer within"), "{err}");
    fails(&addr, &["unlock", "k"], 69);
}

#[test]
fn a_peer_that_speaks_first_is_refused() {
    let addr = peer(|_| None, b"SSH-2.0-OpenSSH_9.2\r\n");
    for args in [
        &["lock", "k", "true"][..],
        &["trylock", "k", "true"],
        &["unlock", "k"],
    ] {
        let err = fails(&addr, args, 76);
        assert!(err.contains("SSH-2.0"), "{err}");
    }
}

#[test]
fn a_held_key_keeps_its_waiter_waiting() {
    let server = Server::start();
    let addr = server.addr.to_string();
    expect_status(&mut lc(&addr, &["lock", "k"]), 0);
    let started = Instant::now();
    expect_status(&mut lc(&addr, &["lock", "-w", "3", "k", "true"]), 1);
    assert!(started.elapsed() >= Duration::from_secs(3));
    expect_status(&mut lc(&addr, &["unlock", "k"]), 0);
}

#[test]
fn a_reference_server_answering_minus_to_the_ping_is_a_lock_server() {
    // Stays silent on a Lock (the key is held), answers `-` to anything else
    // (an unknown action), as the reference Locking-Center server does.
    fn reference(got: &[u8]) -> Option<Vec<u8>> {
        match got.first() {
            Some(1) | None => None,
            Some(_) => Some(b"-".to_vec()),
        }
    }
    let addr = peer(reference, b"");
    let started = Instant::now();
    let out = expect_status(&mut lc(&addr, &["lock", "-w", "3", "k", "true"]), 1);
    assert!(started.elapsed() >= Duration::from_secs(3), "{out:?}");
}

#[test]
fn lc_cli_serve_answers_the_ping_silently() {
    let server = Server::start();
    assert_eq!(server.raw(&[7, 2, b'\r', b'\n', 0]), Some(b'+'));
    assert_eq!(server.raw(&[7, 1, b'?', 0]), Some(b'+'));
    // An unknown action is still refused, and logged.
    assert_eq!(server.raw(&[200, 1, b'?', 0]), Some(b'-'));
    assert!(wait_until(Duration::from_secs(10), || server
        .logged(&["unknown action 200"])));
    assert!(!server.logged(&["unknown action 7"]), "{}", server.log());
}
