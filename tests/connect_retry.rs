//! `--connect-timeout` is how long lc-cli keeps trying to reach its
//! server, on every backend: a client started before the server gets
//! through once it is up, on every subcommand; with no server at all it
//! gives up (69) after about the timeout, with one line, not at once.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::redis::{free_port, RedisServer, Running};
use common::zk::Zk;
use common::*;

/// What each subcommand ends with once the server is up.
const CASES: [(&[&str], i32); 6] = [
    (&["lock", "a", "--", "true"], 0),
    (&["trylock", "b", "--", "true"], 0),
    (&["wait", "c"], 0),
    (&["unlock", "d"], 1), // not held: the server answered
    (&["reset", "e"], 0),
    (&["keys"], 0),
];

fn lc(server: &str, connect_timeout: &str, args: &[&str]) -> Command {
    let mut cmd = lc_at(server, &["--connect-timeout", connect_timeout]);
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// Starts every case against `server` while nothing listens there, checks
/// they are all still trying a second later (before the fix each gave up
/// within milliseconds), starts the server, and checks each one's status.
fn clients_get_through<S>(server: &str, start: impl FnOnce() -> S, limit: Duration) {
    let mut clients: Vec<(&str, i32, Running)> = CASES
        .iter()
        .map(|&(args, code)| (args[0], code, Running::spawn(&mut lc(server, "30s", args))))
        .collect();
    let before_the_server = Duration::from_secs(1);
    assert!(
        holds_for(before_the_server, || clients.iter_mut().all(|(_, _, c)| c
            .0
            .try_wait()
            .unwrap()
            .is_none())),
        "a client gave up before the server started"
    );
    let _server = start();
    for (name, expected, client) in clients {
        let (code, err) = client.finish(limit);
        assert_eq!(code, expected, "{name}: {err}");
    }
}

/// With nothing at `server`, a 2 s connect timeout ends in 69 after 2 s
/// or a little more, with one line containing `says`.
fn gives_up(server: &str, says: &str) {
    for args in [&["lock", "k", "--", "true"][..], &["keys"][..]] {
        let started = Instant::now();
        let out = expect_status(&mut lc(server, "2s", args), 69);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
            "{server} {args:?} gave up after {took:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
        eprintln!("{server} {args:?}: exit 69 after {took:?}: {}", err.trim());
    }
}

#[test]
fn builtin_clients_started_before_the_server_get_through() {
    let addr = format!("127.0.0.1:{}", free_port_pair());
    let start = || Serve::new().listen(&addr).start();
    clients_get_through(&addr, start, Duration::from_secs(10));
}

#[test]
fn builtin_with_no_server_gives_up_after_about_the_timeout() {
    gives_up(&format!("127.0.0.1:{}", free_port_pair()), "refused");
}

#[test]
fn redis_clients_started_before_the_server_get_through() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    clients_get_through(
        &url,
        || RedisServer::start_at(port),
        Duration::from_secs(20),
    );
}

#[test]
fn redis_with_no_server_gives_up_after_about_the_timeout() {
    gives_up(
        &format!("redis://127.0.0.1:{}", free_port()),
        "cannot reach",
    );
}

#[test]
fn zookeeper_clients_started_before_the_server_get_through() {
    let port = free_port();
    let url = format!("zk://127.0.0.1:{port}/c?session-timeout=2s");
    clients_get_through(&url, || Zk::start_at(port, 200), Duration::from_secs(40));
}

#[test]
fn zookeeper_with_no_server_gives_up_after_about_the_timeout() {
    let url = format!("zk://127.0.0.1:{}/c?session-timeout=2s", free_port());
    gives_up(&url, "cannot reach");
}
