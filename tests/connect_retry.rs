//! `--connect-timeout` is how long lc-cli keeps trying to reach the built-in
//! server: a client started before the server gets through once it is up,
//! on every subcommand; with no server at all it gives up (69) after about
//! the timeout, not at once.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A port free on 127.0.0.1 with the next one free too (the manager port).
fn free_pair() -> u16 {
    for _ in 0..50 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
    panic!("no free pair of ports");
}

fn lc(addr: &str, args: &[&str]) -> Command {
    let mut cmd = lc_at(addr, &["--connect-timeout", "8s"]);
    cmd.args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Before the fix every one of them exited 69 within milliseconds.
#[test]
fn clients_started_before_the_server_get_through() {
    let port = free_pair();
    let addr = format!("127.0.0.1:{port}");
    let cases: [(&[&str], i32); 6] = [
        (&["lock", "a", "--", "true"], 0),
        (&["trylock", "b", "--", "true"], 0),
        (&["wait", "c"], 0),
        (&["unlock", "d"], 1), // not held: the server answered
        (&["reset", "e"], 0),
        (&["keys"], 0),
    ];
    let mut clients: Vec<(String, Child)> = cases
        .iter()
        .map(|(args, _)| (args.join(" "), lc(&addr, args).spawn().unwrap()))
        .collect();
    // Before the fix they all gave up within milliseconds; a second of
    // nothing to connect to is well past that.
    let before_the_server = Duration::from_secs(1);
    assert!(
        holds_for(before_the_server, || clients
            .iter_mut()
            .all(|(_, c)| c.try_wait().unwrap().is_none())),
        "a client gave up before the server started"
    );
    let _server = Serve::new().listen(&addr).start();
    for ((name, mut c), (_, expected)) in clients.into_iter().zip(cases) {
        let code = wait_exit(&mut c, Duration::from_secs(10));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(code, Some(expected), "{name}: {err}");
    }
}

#[test]
fn with_no_server_it_gives_up_after_about_the_timeout() {
    let port = free_pair();
    let addr = format!("127.0.0.1:{port}");
    for args in [&["trylock", "k", "--", "true"][..], &["keys"][..]] {
        let started = Instant::now();
        let out = Command::new(BIN)
            .args(["--server", &addr, "--connect-timeout", "1s"])
            .args(args)
            .output()
            .unwrap();
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {err}");
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_secs(3),
            "{args:?} gave up after {took:?}"
        );
        assert!(err.contains("refused"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        eprintln!("{args:?}: exit 69 after {took:?}: {}", err.trim());
    }
}
