//! The status line while waiting at a terminal (issue 11, items 7 and 9):
//! redrawn from column 0 with the rest of the line erased at each tick, "N
//! ahead" counting the same waiters on every backend, the holder named.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::cli::Pty;
use common::redis::RedisServer;
use common::zk::Zk;
use common::*;

const LIMIT: Duration = Duration::from_secs(20);

/// The first place a status line showed: `N ahead` as N, `next in line` as 0.
fn first_place(output: &str) -> Option<usize> {
    output.split("\r\x1b[K").find_map(|line| {
        if line.contains(", next in line") {
            return Some(0);
        }
        let at = line.find(" ahead")?;
        line[..at].rsplit(' ').next()?.parse().ok()
    })
}

fn quiet(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A detached holder and one waiter: a second waiter at a terminal has one
/// waiter ahead of it, whatever the backend.
fn one_ahead(lc: impl Fn(&[&str]) -> Command, queued: impl Fn() -> usize) {
    expect_status(&mut lc(&["lock", "q"]), 0);
    let mut first = quiet(lc(&["lock", "q", "true"]));
    assert!(
        wait_until(LIMIT, || queued() == 1),
        "the first waiter never queued"
    );
    let (pty, mut second) = Pty::spawn(lc(&["lock", "q", "echo", "RAN"]));
    assert!(
        wait_until(LIMIT, || first_place(&pty.output()).is_some()),
        "no place shown: {:?}",
        pty.output()
    );
    assert_eq!(first_place(&pty.output()), Some(1), "{:?}", pty.output());
    expect_status(&mut lc(&["unlock", "q"]), 0);
    assert_eq!(second.wait_for(LIMIT), Some(0));
    assert!(first.wait().unwrap().success());
}

#[test]
fn zookeeper_counts_the_waiters_ahead_not_the_holder() {
    let zk = Zk::start();
    one_ahead(
        |args| zk.lc("/ahead", args),
        || zk.queue("/ahead/q").len().saturating_sub(1),
    );
}

#[test]
fn redis_counts_the_waiters_ahead_not_the_holder() {
    let r = RedisServer::start();
    let url = format!("redis://{}/0?ttl=3s", r.addr());
    one_ahead(
        |args| common::redis::lc(&url, args),
        || r.queued("q") as usize,
    );
}

#[test]
fn typed_characters_do_not_stay_glued_to_the_status_line() {
    let server = Server::start();
    expect_status(&mut server.lc(&["lock", "glue"]), 0);
    let (mut pty, mut waiter) = Pty::spawn(server.lc(&["lock", "glue", "echo", "RAN"]));
    assert!(pty.wait_for_output("lc-cli: waiting for 'glue'", LIMIT));
    pty.type_bytes(b"zz");
    // The next tick goes back to column 0 and erases the line, the echoed
    // characters with it, before drawing.
    assert!(
        pty.wait_for_output("zz\r\x1b[Klc-cli: waiting for 'glue'", LIMIT),
        "{:?}",
        pty.output()
    );
    expect_status(&mut server.lc(&["unlock", "glue"]), 0);
    assert_eq!(waiter.wait_for(LIMIT), Some(0));
}
