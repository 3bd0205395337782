//! Shared locks and `--limit N` on Redis, one node and a quorum of three:
//! at most N at once and exactly N while enough wait, first come first
//! served, readers together and writers alone, dead holders freed by their
//! lease, disagreeing requests refused (78).

use crate::common;

use common::redis::{lc, quorum_url, RedisServer};
use common::spans;

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

fn limit_n(nodes: &[RedisServer], url: &str) {
    let gap = spans::limit_n(&|args| lc(url, args), |tag| queued(nodes, "sem", tag));
    eprintln!(
        "{} node(s), limit 3, 6 contenders: longest hand-off {gap:.1} ms",
        nodes.len()
    );
}

fn readers_and_writers(nodes: &[RedisServer], url: &str) {
    spans::readers_and_writers(&|args| lc(url, args), |tag| queued(nodes, "rw", tag));
}

fn dead_holders(nodes: &[RedisServer], url: &str) {
    let url = format!("{url}?ttl=2s");
    let freed_by = format!("{} node(s), ttl 2 s", nodes.len());
    spans::dead_holders_freed(
        &|args| lc(&url, args),
        |key, tag| queued(nodes, key, tag),
        &freed_by,
    );
}

fn refusals(url: &str) {
    spans::refusals(&|args| lc(url, args));
    // An exclusive hold taken at once (no kind recorded): still a lock.
    let holder = spans::Kids(vec![lc(url, &["lock", "x", "sleep", "30"])
        .spawn()
        .unwrap()]);
    let limit = std::time::Duration::from_secs(10);
    assert!(common::wait_until(limit, || {
        let out = lc(url, &["keys", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains("\"x\"")
    }));
    for args in [
        &["lock", "--limit", "2", "x", "true"][..],
        &["trylock", "--limit", "2", "x", "true"],
    ] {
        let err = common::expect_error_line(&mut lc(url, args), 78);
        assert!(err.contains("as a lock"), "{args:?}: {err}");
    }
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
