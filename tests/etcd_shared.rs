//! Shared locks and `--limit N` on etcd, against a real etcd and the real
//! `etcdctl lock`: at most N at once and exactly N while enough wait, first
//! come first served, readers together and writers alone, etcdctl's holders
//! exclusive to lc-cli's readers both ways, dead holders freed by their
//! lease, disagreeing requests refused (78).

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::etcd::Etcd;
use common::spans::{self, Kids};
use common::*;

/// Whether a key under `KEY/` holds lc-cli's value for source `tag`.
fn queued(etcd: &Etcd, key: &str, tag: &str) -> bool {
    let out = etcd
        .ctl(&["get", "--prefix", "--print-value-only", &format!("{key}/")])
        .output()
        .expect("etcdctl get");
    String::from_utf8_lossy(&out.stdout).contains(&format!("\"source\":\"{tag}\""))
}

#[test]
fn limit_n_runs_n_at_once_in_arrival_order() {
    let etcd = Etcd::start();
    let gap = spans::limit_n(&|args| etcd.lc("", args), |tag| queued(&etcd, "sem", tag));
    eprintln!("limit 3, 6 contenders: longest hand-off {gap:.1} ms");
}

#[test]
fn readers_share_writers_exclude_in_arrival_order() {
    let etcd = Etcd::start();
    spans::readers_and_writers(&|args| etcd.lc("", args), |tag| queued(&etcd, "rw", tag));
}

/// Three trials: the SIGKILLed holders' keys go with their leases (TTL
/// 2 s) and the waiter behind them runs after the holders' commands ended.
#[test]
fn dead_shared_and_semaphore_holders_are_freed_by_the_lease() {
    let etcd = Etcd::start();
    for trial in 0..3 {
        let waited = spans::dead_holders_freed(
            &|args| etcd.lc("?ttl=2s", args),
            |key, tag| queued(&etcd, key, tag),
            "lease TTL 2 s",
        );
        eprintln!("trial {trial}: waiters ran {waited:.2?} s after the kill");
        // The next trial starts on an empty queue.
        assert!(wait_until(Duration::from_secs(10), || etcd
            .keys("dead-")
            .is_empty()));
    }
}

#[test]
fn disagreeing_modes_and_limits_are_refused() {
    let etcd = Etcd::start();
    spans::refusals(&|args| etcd.lc("", args));
}

#[test]
fn keys_and_resets_of_shared_and_limited_keys() {
    let etcd = Etcd::start();
    spans::keys_and_resets(&|args| etcd.lc("?ttl=2s", args));
}

/// `etcdctl lock` and lc-cli readers on one name: an etcdctl holder, two
/// lc-cli readers behind it, an etcdctl waiter behind them, a reader last.
/// The readers share, each etcdctl holder runs alone, all in arrival order.
#[test]
fn etcdctl_lock_holders_and_lc_cli_readers_exclude_each_other() {
    let etcd = Etcd::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let ctl = |tag: &str, secs: f64| {
        let mut c = etcd.ctl(&[
            "lock",
            "mix",
            "--",
            "sh",
            "-c",
            &spans::script(&log, tag, secs),
        ]);
        c.stdout(Stdio::null());
        (tag.to_string(), c)
    };
    let reader =
        |tag: &str| spans::contender(&|args| etcd.lc("", args), &log, &["-s"], "mix", tag, 0.8);
    let cmds: Vec<(String, Command)> = vec![
        ctl("c1", 1.0),
        reader("r1"),
        reader("r2"),
        ctl("c2", 0.8),
        reader("r3"),
    ];
    // etcdctl's key carries no source: it is in line once the count grows.
    let seen = std::cell::Cell::new(0);
    let mut kids = spans::arrive_in_order(&log, cmds, |tag| {
        let n = etcd.keys("mix/").len();
        let ok = if tag.starts_with('c') {
            n > seen.get()
        } else {
            queued(&etcd, "mix", tag)
        };
        if ok {
            seen.set(n);
        }
        ok
    });
    kids.all_succeed(Duration::from_secs(60));
    let spans = spans::read(&log);
    // r1 and r2 start together: in either order.
    let mut order = spans::tags(&spans);
    order[1..3].sort();
    assert_eq!(order, ["c1", "r1", "r2", "c2", "r3"], "{spans:#?}");
    let s = |t| spans::by_tag(&spans, t);
    assert!(
        spans::overlap(s("r1"), s("r2")),
        "readers did not share: {spans:#?}"
    );
    spans::assert_alone(&spans, &["c1", "c2"]);
    assert!(s("r1").start >= s("c1").end, "{spans:#?}");
    assert!(
        s("c2").start >= s("r2").end && s("c2").end <= s("r3").start,
        "{spans:#?}"
    );
    assert!(etcd.keys("mix/").is_empty(), "left behind");
}

/// A `--limit` request on a key an `etcdctl lock` holds is refused (its key
/// is an exclusive lock's); an lc-cli reader's trylock there is busy (1).
#[test]
fn etcdctl_lock_keys_are_exclusive_to_lc_cli() {
    let etcd = Etcd::start();
    let mut holder = Kids(vec![etcd
        .ctl(&["lock", "held", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()]);
    assert!(wait_until(Duration::from_secs(10), || !etcd
        .keys("held/")
        .is_empty()));
    expect_status(&mut etcd.lc("", &["trylock", "-s", "held", "true"]), 1);
    let err = expect_error_line(
        &mut etcd.lc("", &["lock", "--limit", "2", "held", "true"]),
        78,
    );
    assert!(err.contains("as a lock"), "{err}");
    if let Some(mut c) = holder.0.pop() {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}
