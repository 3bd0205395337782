//! At a terminal, the status line of a waiter shows its place in the queue on
//! the backends that know it (the built-in server, ZooKeeper, Redis and
//! etcd), and the place improves as the line ahead of it shortens.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::cli::Pty;
use common::etcd::Etcd;
use common::redis::{lc as redis_lc, RedisServer};
use common::zk::Zk;
use common::{expect_status, lc_at, wait_until, Server};

const LIMIT: Duration = Duration::from_secs(20);

/// Every place shown, in order: `, N ahead` as N, `next in line` as 0.
fn places(output: &str) -> Vec<usize> {
    output
        .split("\r\x1b[K")
        .filter_map(|line| {
            if line.contains(", next in line") {
                return Some(0);
            }
            let (_, rest) = line.rsplit_once(", ")?;
            rest.split(' ')
                .next()?
                .parse()
                .ok()
                .filter(|_| rest.contains(" ahead"))
        })
        .collect()
}

/// A hold and two waiters ahead; a third waiter at a terminal must see its
/// place, and a better one once the waiter just ahead of it gives up (a
/// release wakes only the next in line, so that is when a waiter further back
/// learns its place: at once on ZooKeeper and etcd, whose waiter watches the one just ahead;
/// at its next re-check on Redis).
fn check_places(lc: impl Fn(&[&str]) -> Command, queued: impl Fn() -> usize) {
    expect_status(&mut lc(&["lock", "q"]), 0);
    let spawn_quiet = |args: &[&str]| -> Child {
        lc(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = spawn_quiet(&["lock", "q", "--", "true"]);
    assert!(
        wait_until(LIMIT, || queued() >= 1),
        "the first waiter never queued"
    );
    let mut quitter = spawn_quiet(&["lock", "q", "-w", "3", "--", "true"]);
    assert!(
        wait_until(LIMIT, || queued() >= 2),
        "the second waiter never queued"
    );
    let (pty, mut last) = Pty::spawn(lc(&["lock", "q", "--", "echo", "RAN"]));
    assert!(
        wait_until(LIMIT, || !places(&pty.output()).is_empty()),
        "no place in the status line: {:?}",
        pty.output()
    );
    let before = places(&pty.output())[0];
    assert!(before >= 2, "{:?}", pty.output());
    assert_eq!(
        quitter.wait().unwrap().code(),
        Some(1),
        "the quitter did not time out"
    );
    assert!(
        wait_until(LIMIT, || places(&pty.output()).iter().any(|&p| p < before)),
        "the place never improved from {before}: {:?}",
        pty.output()
    );
    expect_status(&mut lc(&["unlock", "q"]), 0);
    assert_eq!(last.wait_for(LIMIT), Some(0));
    let out = pty.final_output(LIMIT);
    assert!(out.contains("RAN"), "{out:?}");
    assert!(first.wait().unwrap().success());
    let shown = places(&out);
    assert!(
        shown.windows(2).all(|w| w[1] <= w[0]),
        "places went back: {shown:?}"
    );
}

#[test]
fn the_built_in_server_shows_the_place_in_line() {
    let s = Server::start();
    // How many requests queued on `q`, from the server's log.
    let queued = || s.count("queue 'q'");
    check_places(|args| lc_at(&s.addr.to_string(), args), queued);
}

#[test]
fn zookeeper_shows_the_place_in_line() {
    let zk = Zk::start();
    check_places(
        |args| zk.lc("/places", args),
        || zk.queue("/places/q").len().saturating_sub(1),
    );
}

#[test]
fn redis_shows_the_place_in_line() {
    let r = RedisServer::start();
    // A short lease makes the waiters re-check every second.
    check_places(
        |args| redis_lc(&r.url(), &[&["--ttl", "3s"], args].concat()),
        || r.queued("q") as usize,
    );
}

#[test]
fn etcd_shows_the_place_in_line() {
    let e = Etcd::start();
    check_places(
        |args| e.lc("", args),
        || e.keys("q/").len().saturating_sub(1),
    );
}

#[test]
fn places_are_read_from_status_lines() {
    let out = "\r\x1b[Klc-cli: waiting for 'q' on h:1: 1s, 2 ahead\r\x1b[Klc-cli: waiting for 'q' on h:1: 2s, next in line\r\x1b[K";
    assert_eq!(places(out), [2, 0]);
}
