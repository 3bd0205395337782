//! `lc-cli reset` says what it released, on every backend.

use crate::common;

use std::process::Command;

use common::expect_status;
use common::redis::{lc as redis_lc, RedisServer};
use common::zk::Zk;
use common::Serve;

/// Holds k1 and k2 for source alpha and k3 for beta, then resets by key and
/// by source through `lc`, checking what each reset printed.
fn check_reset_report(lc: impl Fn(&[&str]) -> Command) {
    for (key, source) in [("k1", "alpha"), ("k2", "alpha"), ("k3", "beta")] {
        expect_status(&mut lc(&["lock", key, "--source", source]), 0);
    }
    let out = expect_status(&mut lc(&["reset", "k1", "nothere"]), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("released 'k1' (held by 'alpha' for "),
        "{text}"
    );
    assert_eq!(lines[1], "'nothere' was not held");

    let out = expect_status(
        &mut lc(&["reset", "--source", "alpha", "--source", "nobody"]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("released 'k2' (held by 'alpha' for "),
        "{text}"
    );
    assert_eq!(lines[1], "source 'nobody' held no key");

    // Only beta's key is left, and it is still held.
    let out = expect_status(&mut lc(&["keys", "--json"]), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    let keys: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(keys.len(), 1, "{text}");
    assert_eq!(keys[0]["key"], "k3");
    assert_eq!(keys[0]["source"], "beta");
    expect_status(&mut lc(&["trylock", "k1", "--", "true"]), 0);
    expect_status(&mut lc(&["trylock", "k2", "--", "true"]), 0);
    expect_status(&mut lc(&["trylock", "k3", "--", "true"]), 1);
}

#[test]
fn built_in_server() {
    let server = Serve::new().port_pair().start();
    check_reset_report(|args| server.lc(args));
}

#[test]
fn redis() {
    let r = RedisServer::start();
    check_reset_report(|args| redis_lc(&r.url(), args));
}

#[test]
fn zookeeper() {
    let zk = Zk::start();
    check_reset_report(|args| zk.lc("/reset-report", args));
}
