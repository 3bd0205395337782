//! A Redis just started without persistence does not count for one `ttl`
//! (its grants would be forgotten by an empty restart): lc-cli says so and
//! for how long, in the status line, with `-v` and in `trylock`'s line,
//! never naming the caller as the key's holder; it takes the key once the
//! node counts, never sooner. A node with `appendonly yes` and
//! `appendfsync always` counts at once. On a quorum the line says how
//! many nodes count and answer.

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cli::Pty;
use common::redis::{lc, quorum_url, RedisServer};
use common::*;

const TRIALS: usize = 3;
const TTL_S: u64 = 3;

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// The seconds in `, in N s` of a fresh node's line.
fn seconds_left(line: &str) -> u64 {
    line.split(", in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no seconds left in: {line:?}"))
}

/// At a terminal, with `-v`: the status line and the `-v` line name the
/// node, its uptime and the seconds left, never a holder; the command
/// starts no sooner than one ttl after the server was started.
#[test]
fn a_fresh_node_says_why_and_how_long_and_counts_after_one_ttl() {
    let mut margins = Vec::new();
    for _ in 0..TRIALS {
        let tmp = tempfile::tempdir().unwrap();
        let started_file = tmp.path().join("started");
        let before = now_ns();
        let r = RedisServer::start_volatile();
        let url = format!("{}?ttl={TTL_S}s", r.url());
        let script = format!("date +%s%N > {}", started_file.display());
        let (pty, mut guard) = Pty::spawn(lc(&url, &["lock", "-v", "fresh", "-c", &script]));
        let shown = |text: &str| pty.output().contains(text);
        assert!(
            wait_until(Duration::from_secs(10), || shown("waiting for 'fresh' on")),
            "nothing shown: {:?}",
            pty.output()
        );
        assert_eq!(guard.wait_for(Duration::from_secs(20)), Some(0));
        let out = pty.final_output(Duration::from_secs(10));
        let addr = r.addr();
        // The -v line once, and status lines, all with the reason.
        let lines: Vec<&str> = out
            .split("\r\x1b[K")
            .flat_map(|l| l.split("\r\n"))
            .filter(|l| l.starts_with("lc-cli: waiting for 'fresh' on redis://"))
            .collect();
        let verbose: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains(&format!("/0: {addr} up ")))
            .collect();
        assert_eq!(verbose.len(), 1, "not one -v line: {out:?}");
        let verbose = verbose[0];
        assert!(verbose.contains("without persistence"), "{verbose}");
        assert!((1..=TTL_S).contains(&seconds_left(verbose)), "{verbose}");
        assert!(verbose.contains("appendfsync always"), "{verbose}");
        let status = lines
            .iter()
            .find(|l| l.contains(&format!("s ({addr} up ")))
            .unwrap_or_else(|| panic!("no status line with the reason: {out:?}"));
        assert!((1..=TTL_S).contains(&seconds_left(status)), "{status}");
        assert!(
            !out.contains("held by"),
            "the caller named as holder: {out:?}"
        );
        let began: i128 = std::fs::read_to_string(&started_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let margin = began - before - (TTL_S as i128) * 1_000_000_000;
        assert!(
            margin >= 0,
            "granted {margin} ns before the node could have been up one ttl"
        );
        margins.push(margin as f64 / 1e6);
    }
    eprintln!("command began {margins:.0?} ms after one ttl from the server's spawn");
}

/// `trylock` on a fresh node: 1, one line with the node, its uptime, the
/// seconds left and the remedy (as at a `-w` deadline); a durable node is
/// taken at once.
#[test]
fn trylock_names_the_fresh_node_and_a_durable_one_counts_at_once() {
    let r = RedisServer::start_volatile();
    let url = format!("{}?ttl=30s", r.url());
    let err = expect_error_line(&mut lc(&url, &["trylock", "fresh", "true"]), 1);
    assert!(
        err.starts_with("lc-cli: failed to get lock 'fresh' on redis://")
            && err.contains(&format!("{} up ", r.addr()))
            && err.contains("without persistence")
            && err.contains("appendonly yes + appendfsync always: at once")
            && !err.contains("held by"),
        "{err}"
    );
    assert!((25..=30).contains(&seconds_left(&err)), "{err}");
    // Given back: nobody holds it on the node.
    assert_eq!(r.holder("fresh"), None);
    // The -w deadline says the same, with the conflict status.
    let err = expect_error_line(&mut lc(&url, &["lock", "-w", "0.5", "fresh", "true"]), 1);
    assert!(
        err.starts_with("lc-cli: timeout after ")
            && err.contains(&format!("{} up ", r.addr()))
            && !err.contains("held by"),
        "{err}"
    );

    let durable = RedisServer::start();
    let started = Instant::now();
    let out = expect_status(&mut lc(&durable.url(), &["lock", "-v", "k", "true"]), 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("up ") && !err.contains("count"), "{err}");
    expect_status(&mut lc(&durable.url(), &["trylock", "k", "true"]), 0);
    eprintln!(
        "durable node: lock and trylock done in {:?}",
        started.elapsed()
    );
}

/// Two fresh nodes of three: `trylock` says 1 of 3 count (3 answer), 2
/// needed, and names both; `lock -v` says it once, then gets the key once
/// they count, no sooner than one ttl after they started.
#[test]
fn a_quorum_with_two_fresh_nodes_says_how_many_count() {
    let mut nodes = vec![RedisServer::start()];
    let before = now_ns();
    nodes.push(RedisServer::start_volatile());
    nodes.push(RedisServer::start_volatile());
    let fresh = &nodes[1..];
    let url = format!("{}?ttl={TTL_S}s", quorum_url(&nodes));
    let err = expect_error_line(&mut lc(&url, &["trylock", "q", "true"]), 1);
    assert!(
        err.contains("1 of 3 nodes count (3 answer), a lock needs 2")
            && err.contains(&format!("{} up ", fresh[0].addr()))
            && err.contains(&format!("{} up ", fresh[1].addr()))
            && !err.contains("held by"),
        "{err}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let started_file = tmp.path().join("started");
    let script = format!("date +%s%N > {}", started_file.display());
    let out = expect_status(&mut lc(&url, &["lock", "-v", "q", "-c", &script]), 0);
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("nodes count")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("a lock needs 2"), "{err}");
    let began: i128 = std::fs::read_to_string(&started_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let margin = began - before - (TTL_S as i128) * 1_000_000_000;
    assert!(margin >= 0, "granted {margin} ns too soon");
    eprintln!(
        "quorum: command began {:.0} ms after one ttl",
        margin as f64 / 1e6
    );
}
