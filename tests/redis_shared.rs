//! Shared locks and `--limit N` on Redis, one node and a quorum of three:
//! at most N at once and exactly N while enough wait, first come first
//! served, readers together and writers alone, dead holders freed by their
//! lease, disagreeing requests refused (78).

mod common;

use std::process::Command;
use std::time::Duration;

use common::redis::{lc, quorum_url, RedisServer};
use common::spans;
use common::*;

/// Whether a waiter or holder with source `tag` is recorded for `key` on
/// a majority of `nodes`.
fn queued(nodes: &[RedisServer], key: &str, tag: &str) -> bool {
    let want = format!("\"s\":\"{tag}\"");
    let on = nodes
        .iter()
        .filter(|r| {
            ["waiters", "hinfo"].iter().any(|h| {
                let vals: Vec<String> = r.query(&["HVALS", &format!("lc-cli:{{{key}}}:{h}")]);
                vals.iter().any(|v| v.contains(&want))
            }) || r.holder(key).is_some_and(|_| {
                let s: Option<String> =
                    r.query(&["HGET", &format!("lc-cli:{{{key}}}:owner"), "source"]);
                s.as_deref() == Some(tag)
            })
        })
        .count();
    on > nodes.len() / 2
}

fn contender(
    url: &str,
    log: &std::path::Path,
    mode: &[&str],
    key: &str,
    tag: &str,
    secs: f64,
) -> (String, Command) {
    let mut args = vec!["lock"];
    args.extend_from_slice(mode);
    let script = spans::script(log, tag, secs);
    args.extend_from_slice(&[key, "--source", tag, "-c", &script]);
    (tag.to_string(), lc(url, &args))
}

fn limit_n(nodes: &[RedisServer], url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let n = 3;
    let cmds: Vec<_> = (0..2 * n)
        .map(|i| contender(url, &log, &["--limit", "3"], "sem", &format!("c{i}"), 1.0))
        .collect();
    let mut kids = spans::arrive_in_order(&log, cmds, |tag| queued(nodes, "sem", tag));
    let codes = kids.wait_all(Duration::from_secs(60));
    assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?}");
    let spans = spans::read(&log);
    assert_eq!(spans::max_overlap(&spans), n, "{spans:#?}");
    let gap = spans::longest_shortfall_ms(&spans, n);
    assert!(
        gap < 400.0,
        "fewer than {n} ran for {gap} ms while {n} waited: {spans:#?}"
    );
    let order: Vec<String> = (0..2 * n).map(|i| format!("c{i}")).collect();
    assert_eq!(spans::tags(&spans), order, "not first come, first served");
    spans::assert_tokens_grow(&log, &spans);
    eprintln!(
        "{} node(s), limit 3, 6 contenders: longest hand-off {gap:.1} ms",
        nodes.len()
    );
}

fn readers_and_writers(nodes: &[RedisServer], url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let plan = [
        ("r1", "-s"),
        ("r2", "-s"),
        ("w1", "-x"),
        ("r3", "-s"),
        ("r4", "-s"),
        ("w2", "-x"),
        ("r5", "-s"),
    ];
    let cmds: Vec<_> = plan
        .iter()
        .map(|(tag, m)| contender(url, &log, &[m], "rw", tag, 0.8))
        .collect();
    let mut kids = spans::arrive_in_order(&log, cmds, |tag| queued(nodes, "rw", tag));
    let codes = kids.wait_all(Duration::from_secs(60));
    assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?}");
    spans::readers_and_writers_in_arrival_order(&spans::read(&log));
}

fn dead_holders(nodes: &[RedisServer], url: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let url = format!("{url}?ttl=2s");
    for (mode, waiter_mode, key) in [
        (&["--limit", "2"][..], &["--limit", "2"][..], "dead-sem"),
        (&["-s"][..], &["-x"][..], "dead-rw"),
    ] {
        let holders: Vec<_> = (0..2)
            .map(|i| contender(&url, &log, mode, key, &format!("{key}-h{i}"), 120.0))
            .collect();
        let mut held = spans::arrive_in_order(&log, holders, |tag| queued(nodes, key, tag));
        assert!(wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches(&format!("start {key}-h"))
                .count()
                == 2
        }));
        let waiter = vec![contender(
            &url,
            &log,
            waiter_mode,
            key,
            &format!("{key}-w"),
            0.1,
        )];
        let mut waiting = spans::arrive_in_order(&log, waiter, |tag| queued(nodes, key, tag));
        std::thread::sleep(Duration::from_millis(300));
        assert!(!std::fs::read_to_string(&log)
            .unwrap()
            .contains(&format!("start {key}-w ")));
        let killed = common::timeline::now_ns();
        for h in &mut held.0 {
            h.kill().unwrap(); // SIGKILL of lc-cli: its lease (2 s) runs out
        }
        assert_eq!(waiting.wait_all(Duration::from_secs(20)), [Some(0)]);
        let spans = spans::read(&log);
        let after = (spans::by_tag(&spans, &format!("{key}-w")).start - killed) as f64 / 1e9;
        assert!(
            after < 6.0,
            "{key}: the waiter ran {after} s after the kill"
        );
        eprintln!(
            "{} node(s), {key}: waiter ran {after:.2} s after SIGKILL of the holders (ttl 2 s)",
            nodes.len()
        );
    }
}

fn refusals(url: &str) {
    let mut holder = spans::Kids(vec![lc(url, &["lock", "--limit", "2", "m", "sleep", "30"])
        .spawn()
        .unwrap()]);
    assert!(wait_until(Duration::from_secs(10), || {
        let out = lc(url, &["keys", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains("\"m\"")
    }));
    for args in [
        &["trylock", "--limit", "3", "m", "true"][..],
        &["lock", "m", "true"],
        &["lock", "-s", "m", "true"],
        &["wait", "-x", "m"],
    ] {
        let out = expect_status(&mut lc(url, args), 78);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--limit 2"), "{err}");
    }
    expect_status(&mut lc(url, &["trylock", "--limit", "2", "m", "true"]), 0);
    drop(holder);
    holder = spans::Kids(vec![lc(url, &["lock", "-s", "r", "sleep", "30"])
        .spawn()
        .unwrap()]);
    assert!(wait_until(Duration::from_secs(10), || {
        lc(url, &["trylock", "r", "true"]).status().unwrap().code() == Some(1)
    }));
    let out = expect_status(&mut lc(url, &["lock", "--limit", "2", "r", "true"]), 78);
    assert!(String::from_utf8_lossy(&out.stderr).contains("as a lock"));
    expect_status(&mut lc(url, &["trylock", "-s", "r", "true"]), 0);
    drop(holder);
}

#[test]
fn limit_n_runs_n_at_once_in_arrival_order() {
    let node = [RedisServer::start()];
    limit_n(&node, &node[0].url());
}

#[test]
fn limit_n_on_a_quorum() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    limit_n(&nodes, &quorum_url(&nodes));
}

#[test]
fn readers_share_writers_exclude_in_arrival_order() {
    let node = [RedisServer::start()];
    readers_and_writers(&node, &node[0].url());
}

#[test]
fn readers_and_writers_on_a_quorum() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    readers_and_writers(&nodes, &quorum_url(&nodes));
}

#[test]
fn dead_shared_and_semaphore_holders_are_freed_by_the_lease() {
    let node = [RedisServer::start()];
    dead_holders(&node, &node[0].url());
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    dead_holders(&nodes, &quorum_url(&nodes));
}

#[test]
fn disagreeing_modes_and_limits_are_refused() {
    let node = RedisServer::start();
    refusals(&node.url());
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    refusals(&quorum_url(&nodes));
}

#[test]
fn keys_and_resets_of_shared_and_limited_keys() {
    let node = RedisServer::start();
    let url = format!("{}?ttl=1s", node.url());
    spans::keys_and_resets(&|args| lc(&url, args));
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = format!("{}?ttl=1s", quorum_url(&nodes));
    spans::keys_and_resets(&|args| lc(&url, args));
}
