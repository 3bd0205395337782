//! The Redis backend on a quorum of three real redis-servers.

use crate::common;

use std::fs;
use std::time::Duration;

use common::redis::{
    hold_k, keys_json, keys_table, lc, quorum_url, serve_a_line, until_exists, RedisServer, Running,
};
use common::{expect_error_line, expect_status, wait_until};

const LIMIT: Duration = Duration::from_secs(20);

fn three() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

fn queued_everywhere(nodes: &[RedisServer], key: &str, n: i64) -> bool {
    nodes.iter().all(|r| r.queued(key) == n)
}

/// Waiters that each finished enqueueing before the next began are served in
/// that order, even when the nodes' ticket counters disagree (the waiter's
/// ticket is the largest of a majority, and every node catches up to it).
#[test]
fn fifo_on_a_quorum_with_diverging_counters() {
    let nodes = three();
    let url = quorum_url(&nodes);
    let _: () = nodes[0].query(&["SET", "lc-cli:{k}:seq", "500"]);
    let _: () = nodes[1].query(&["SET", "lc-cli:{k}:seq", "7"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("order");
    let waiter = |i| {
        let script = format!("echo {i} >> {}", out.display());
        lc(&url, &["lock", "k", "-c", &script])
    };
    // Each in line on every node before the next comes.
    let queued = |n| queued_everywhere(&nodes, "k", n);
    serve_a_line(&url, 6, waiter, queued, LIMIT);
    let order = fs::read_to_string(&out).unwrap();
    assert_eq!(order, "0\n1\n2\n3\n4\n5\n");
    for r in &nodes {
        assert_eq!(r.queued("k"), 0);
        assert_eq!(r.holder("k"), None);
        // Every node's counter caught up with the largest tickets.
        let seq: i64 = r.query(&["GET", "lc-cli:{k}:seq"]);
        assert!(seq > 500, "seq {seq} on {}", r.addr());
    }
}

#[test]
fn mutual_exclusion_on_a_quorum() {
    let nodes = three();
    let url = quorum_url(&nodes);
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let tokens = dir.path().join("tokens");
    fs::write(&counter, "0\n").unwrap();
    let script = format!(
        "n=$(cat {f}); sleep 0.02; echo $((n + 1)) > {f}; echo $LC_LOCK_TOKEN >> {t}",
        f = counter.display(),
        t = tokens.display()
    );
    let procs: Vec<Running> = (0..6)
        .map(|_| Running::spawn(&mut lc(&url, &["lock", "c", "-c", &script])))
        .collect();
    for p in procs {
        p.expect_exit(0, Duration::from_secs(60));
    }
    assert_eq!(fs::read_to_string(&counter).unwrap().trim(), "6");
    // Fencing tokens grow with each grant.
    let tokens: Vec<u64> = fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn one_node_down_still_grants_and_releases() {
    let mut nodes = three();
    let url = quorum_url(&nodes);
    nodes[1].stop();
    let out = expect_status(
        &mut lc(
            &url,
            &[
                "--connect-timeout",
                "1s",
                "lock",
                "k",
                "-c",
                "echo $LC_LOCK_TOKEN",
            ],
        ),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n");
    assert_eq!(nodes[0].holder("k"), None);
    assert_eq!(nodes[2].holder("k"), None);
    expect_status(&mut lc(&url, &["--connect-timeout", "1s", "lock", "k"]), 0);
    expect_status(
        &mut lc(
            &url,
            &["--connect-timeout", "1s", "trylock", "k", "--", "true"],
        ),
        1,
    );
    expect_status(
        &mut lc(&url, &["--connect-timeout", "1s", "unlock", "k"]),
        0,
    );
    expect_status(
        &mut lc(
            &url,
            &["--connect-timeout", "1s", "trylock", "k", "--", "true"],
        ),
        0,
    );
}

#[test]
fn two_nodes_down_fails_with_a_clear_error() {
    let mut nodes = three();
    let url = quorum_url(&nodes);
    nodes[0].stop();
    nodes[2].stop();
    let err = expect_error_line(
        &mut lc(
            &url,
            &["--connect-timeout", "1s", "lock", "k", "--", "true"],
        ),
        69,
    );
    assert!(
        err.contains("quorum lost: 1 of 3 Redis nodes answered, 2 needed"),
        "{err}"
    );
    // Nothing was left on the surviving node.
    assert_eq!(nodes[1].holder("k"), None);
    assert_eq!(nodes[1].queued("k"), 0);
}

#[test]
fn a_hold_survives_one_lost_node_and_is_lost_with_two() {
    let mut nodes = three();
    let url = quorum_url(&nodes);
    let holder = hold_everywhere(&nodes, &url, "2s", "4");
    let _: i64 = nodes[0].query(&["DEL", "lc-cli:{k}:lock"]);
    // Still held on a majority: the command runs to its end.
    holder.expect_exit(0, LIMIT);

    let holder = hold_everywhere(&nodes, &url, "1s", "30");
    nodes[1].stop();
    nodes[2].stop();
    let err = holder.expect_exit(75, LIMIT);
    assert!(err.contains("lost the lock 'k'"), "{err}");
}

/// Holds `k` with lease `ttl` running `sleep SECS` (a loss stops it within
/// a second); returns once every node records the hold.
fn hold_everywhere(nodes: &[RedisServer], url: &str, ttl: &str, secs: &str) -> Running {
    let holder = hold_k(
        url,
        &["--connect-timeout", "1s"],
        ttl,
        &["--", "sleep", secs],
    );
    assert!(wait_until(LIMIT, || nodes
        .iter()
        .all(|r| r.holder("k").is_some())));
    holder
}

/// A grant on a minority is rolled back: trylock answers busy and leaves
/// nothing behind on the node that granted it.
#[test]
fn a_minority_grant_is_rolled_back() {
    let nodes = three();
    let url = quorum_url(&nodes);
    for r in &nodes[..2] {
        let _: () = r.query(&["SET", "lc-cli:{k}:lock", "someone-else"]);
    }
    expect_status(&mut lc(&url, &["trylock", "k", "--", "true"]), 1);
    assert_eq!(nodes[2].holder("k"), None);
    // The grant did happen there (the fence counter moved) before the rollback.
    let fence: i64 = nodes[2].query(&["GET", "lc-cli:{k}:fence"]);
    assert_eq!(fence, 1);
    // A waiting lock with a timeout leaves no entry anywhere either.
    expect_status(&mut lc(&url, &["lock", "-w", "0.5", "k", "--", "true"]), 1);
    for r in &nodes {
        assert_eq!(r.queued("k"), 0);
    }
    assert_eq!(nodes[2].holder("k"), None);
}

#[test]
fn resets_on_a_quorum() {
    let nodes = three();
    let url = quorum_url(&nodes);
    expect_status(&mut lc(&url, &["lock", "--source", "alpha", "a"]), 0);
    expect_status(&mut lc(&url, &["lock", "--source", "beta", "b"]), 0);
    expect_status(&mut lc(&url, &["reset", "--source", "alpha"]), 0);
    expect_status(&mut lc(&url, &["trylock", "a", "--", "true"]), 0);
    expect_status(&mut lc(&url, &["trylock", "b", "--", "true"]), 1);
    expect_status(&mut lc(&url, &["reset", "b"]), 0);
    expect_status(&mut lc(&url, &["trylock", "b", "--", "true"]), 0);
    for r in &nodes {
        assert_eq!(r.holder("a"), None);
        assert_eq!(r.holder("b"), None);
    }
}

/// `keys` on three nodes, one of them stopped: the keys a majority holds,
/// not what one node alone claims; with two stopped, a clear error.
#[test]
fn keys_on_a_quorum_with_one_node_down() {
    let mut nodes = three();
    let url = quorum_url(&nodes);
    let fast = ["--connect-timeout", "1s"];
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    expect_status(&mut lc(&url, &["lock", "--source", "alpha", "a"]), 0);
    let running = Running::spawn(&mut lc(
        &url,
        &[
            "--connect-timeout",
            "1s",
            "lock",
            "--source",
            "beta",
            "b",
            "-c",
            &until_exists(&gate),
        ],
    ));
    assert!(wait_until(LIMIT, || nodes
        .iter()
        .all(|r| r.holder("b").is_some())));
    let waiter = Running::spawn(&mut lc(
        &url,
        &[
            "--connect-timeout",
            "1s",
            "lock",
            "--source",
            "gamma",
            "a",
            "--",
            "true",
        ],
    ));
    assert!(wait_until(LIMIT, || queued_everywhere(&nodes, "a", 1)));
    // One node alone claims "m": not held on a majority.
    let _: () = nodes[0].query(&["SET", "lc-cli:{m}:lock", "someone"]);
    let _: i64 = nodes[0].query(&["SADD", "lc-cli:keys", "m"]);
    nodes[2].stop();

    let listed = keys_json(&url, &fast, &[]);
    assert_eq!(listed.len(), 2, "{listed:?}");
    for (v, (key, source, waiting)) in listed.iter().zip([("a", "alpha", 1), ("b", "beta", 0)]) {
        assert_eq!(v["key"], key, "{v}");
        assert_eq!(v["source"], source, "{v}");
        assert_eq!(v["waiting"], waiting, "{v}");
        assert!(v["held_ms"].as_u64().unwrap() < 60_000, "{v}");
        assert!(v["since"].is_string(), "{v}");
    }
    let table = keys_table(&url, &fast, &["b"]);
    assert_eq!(table.len(), 2, "{table:?}");
    assert_eq!(table[1][..3], ["b", "beta", "-"]);
    assert_eq!(table[1][4..], ["command", "0"]);

    expect_status(
        &mut lc(&url, &["--connect-timeout", "1s", "unlock", "a"]),
        0,
    );
    fs::write(&gate, "").unwrap();
    for p in [running, waiter] {
        p.expect_exit(0, LIMIT);
    }
    assert!(keys_json(&url, &fast, &[]).is_empty());

    nodes[1].stop();
    let err = expect_error_line(&mut lc(&url, &["--connect-timeout", "1s", "keys"]), 69);
    assert!(
        err.contains("quorum lost: 1 of 3 Redis nodes answered"),
        "{err}"
    );
}
