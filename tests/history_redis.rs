//! `lc-cli history KEY` on Redis (issue 46 item 2, docs/history.md),
//! through the real binary against a real redis-server: holds of one key
//! ending every way (exit 0, exit 3, a reset by an operator, the holding
//! lc-cli SIGKILLed and its lease run out, a kept hold's `--expire` run
//! out, the lock key deleted under a running holder, and a holder cut off
//! by a frozen proxy) are listed newest first with how each ended and the
//! status where lc-cli reported it; `--limit`; the cap (150 holds: the
//! stream keeps 100, `XLEN` checked); no command added to an uncontended
//! lock and release (MONITOR); a quorum of three lists each hold once.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::proxy::Proxy;
use common::redis::{lc, quorum_url, RedisServer, Running};
use common::*;

/// How long any one wait of these tests may take (a loaded machine).
const LIMIT: Duration = Duration::from_secs(30);

fn history(url: &str, key: &str, limit: &str) -> Vec<serde_json::Value> {
    let out = expect_status(
        &mut lc(url, &["history", key, "--json", "--limit", limit]),
        0,
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn all(url: &str, key: &str) -> Vec<serde_json::Value> {
    history(url, key, "1000")
}

fn held(url: &str, key: &str) -> bool {
    let out = lc(url, &["keys", "--json"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|k| k["key"] == key)
}

/// Waits until the key's history has `n` entries; panics past [`LIMIT`].
fn until_entries(url: &str, key: &str, n: usize) {
    assert!(
        wait_until(LIMIT, || all(url, key).len() >= n),
        "'{key}': not {n} entries: {:#?}",
        all(url, key)
    );
}

/// A holder of `key` running `sleep 60`.
fn holder(url: &str, key: &str) -> Running {
    let mut cmd = lc(url, &["lock", key, "--", "sleep", "60"]);
    cmd.stdin(Stdio::null());
    Running::spawn(&mut cmd)
}

fn until_held(url: &str, key: &str) {
    assert!(wait_until(LIMIT, || held(url, key)), "'{key}' never held");
}

fn endings(entries: &[serde_json::Value]) -> Vec<(String, Option<i64>)> {
    entries
        .iter()
        .map(|e| {
            (
                e["ended"].as_str().unwrap_or("?").to_string(),
                e["status"].as_i64(),
            )
        })
        .collect()
}

#[test]
fn holds_ending_every_way_newest_first() {
    let redis = RedisServer::start();
    // A 2 s lease, so a dead holder's runs out soon.
    let url = format!("{}?ttl=2s", redis.url());
    let key = "h5";
    expect_status(&mut lc(&url, &["lock", key, "--", "true"]), 0);
    until_entries(&url, key, 1);
    expect_status(&mut lc(&url, &["lock", key, "--", "sh", "-c", "exit 3"]), 3);
    until_entries(&url, key, 2);

    // Reset by an operator: `by` is its LC_SOURCE.
    let reset = holder(&url, key);
    until_held(&url, key);
    expect_status(lc(&url, &["reset", key]).env("LC_SOURCE", "ops-7"), 0);
    let (code, err) = reset.finish(LIMIT);
    assert_eq!(code, 75, "the reset holder: {err}");
    until_entries(&url, key, 3);

    // SIGKILL of lc-cli: nobody releases; the lease runs out and the next
    // script on the key (here `history`'s own) records it as freed.
    let mut killed = holder(&url, key);
    until_held(&url, key);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    until_entries(&url, key, 4);
    assert!(!held(&url, key), "the SIGKILLed holder's key is still held");

    // A kept hold's --expire runs out: expired.
    expect_status(&mut lc(&url, &["lock", key, "--expire", "1s"]), 0);
    until_entries(&url, key, 5);

    // The lock key deleted under a running holder: its renewal finds it
    // gone, lc-cli stops the command (75) and its release records `lost`.
    let lost = holder(&url, key);
    until_held(&url, key);
    let _: i64 = redis.query(&["DEL", &RedisServer::lock_key(key)]);
    let (code, err) = lost.finish(LIMIT);
    assert_eq!(code, 75, "the holder whose key was deleted: {err}");
    let entries = all(&url, key);
    assert_eq!(
        endings(&entries),
        [
            ("lost".to_string(), None),
            ("expired".to_string(), None),
            ("freed".to_string(), None),
            ("reset".to_string(), None),
            ("released".to_string(), Some(3)),
            ("released".to_string(), Some(0)),
        ],
        "{entries:#?}"
    );
    assert_eq!(entries[3]["by"], "ops-7", "{:#?}", entries[3]);
    for e in &entries {
        assert_eq!(e["key"], key, "{e}");
        assert_eq!(e["mode"], "exclusive", "{e}");
        assert!(e["granted"].as_str().is_some() && e["ended_at"].as_str().is_some());
        assert!(e["waited_ms"].as_u64().is_some(), "{e}");
    }
    // Newest first: every grant got a larger token than the one before.
    for pair in entries.windows(2) {
        assert!(
            pair[0]["token"].as_u64() > pair[1]["token"].as_u64(),
            "{pair:#?}"
        );
    }
    // --limit: the newest N, in the same order; the table has a header.
    assert_eq!(history(&url, key, "2"), entries[..2].to_vec());
    let table = expect_status(&mut lc(&url, &["history", key, "--limit", "3"]), 0);
    assert_eq!(
        String::from_utf8_lossy(&table.stdout).lines().count(),
        4,
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
    // A key that never ended a hold: nothing.
    assert!(all(&url, "never").is_empty());
}

/// A holder cut off by a frozen proxy (no bytes, connections left open):
/// lc-cli stops its command and exits 75, but cannot write its `lost`;
/// its lease runs out and the next script on the key records `freed`.
#[test]
fn a_partitioned_holder_is_recorded_by_the_next_one() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port);
    let through = format!("redis://{}?ttl=2s", proxy.addr());
    let direct = format!("{}?ttl=2s", redis.url());
    let cut = holder(&through, "hp");
    until_held(&direct, "hp");
    proxy.freeze();
    let (code, err) = cut.finish(LIMIT);
    assert_eq!(code, 75, "{err}");
    expect_status(&mut lc(&direct, &["lock", "hp", "--", "true"]), 0);
    let entries = all(&direct, "hp");
    assert_eq!(
        endings(&entries),
        [
            ("released".to_string(), Some(0)),
            ("freed".to_string(), None)
        ],
        "{entries:#?}"
    );
}

/// 150 holds of one key: the stream keeps the newest 100 (`XLEN`), and
/// `history` lists them newest first with their statuses.
#[test]
fn the_cap_keeps_the_newest_hundred() {
    let redis = RedisServer::start();
    let url = redis.url();
    for i in 1..=150 {
        let exit = format!("exit {}", i % 7);
        expect_status(
            &mut lc(&url, &["lock", "hc", "--", "sh", "-c", &exit]),
            i % 7,
        );
    }
    let len: i64 = redis.query(&["XLEN", "lc-cli:{hc}:history"]);
    assert_eq!(len, 100);
    let statuses: Vec<i64> = all(&url, "hc")
        .iter()
        .map(|e| e["status"].as_i64().unwrap())
        .collect();
    let newest: Vec<i64> = (51..=150).rev().map(|i| i64::from(i % 7)).collect();
    assert_eq!(statuses, newest);
    let five: Vec<i64> = history(&url, "hc", "5")
        .iter()
        .map(|e| e["status"].as_i64().unwrap())
        .collect();
    assert_eq!(five, newest[..5]);
}

/// What one lc-cli sends to the node: MONITOR's lines for commands from a
/// client (a script's own commands say `lua`), while `args` runs.
fn commands_sent(node: &RedisServer, args: &[&str]) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    let mut monitor = std::process::Command::new("redis-cli")
        .args(["-p", &node.port.to_string(), "monitor"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    let mut lines = BufReader::new(monitor.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "OK");
    expect_status(&mut lc(&node.url(), args), 0);
    // A marker of the end, sent by another client, after everything above.
    node.query::<String>(&["PING", "end-of-run"]);
    let mut sent = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("end-of-run") {
            break;
        }
        if !line.contains(" lua]") {
            sent.push(line);
        }
    }
    let _ = monitor.kill();
    let _ = monitor.wait();
    sent
}

/// The entry rides the release script: an uncontended lock and release
/// sends INFO, PING and two EVALSHA, as before history, and one entry is
/// written.
#[test]
fn history_adds_no_round_trip() {
    let node = RedisServer::start();
    // Once first: the scripts are loaded, as on a server in use.
    expect_status(&mut lc(&node.url(), &["lock", "k", "--", "true"]), 0);
    let sent = commands_sent(&node, &["lock", "k", "--", "true"]);
    let mut kinds: Vec<String> = sent
        .iter()
        .map(|l| l.split('"').nth(1).unwrap_or_default().to_ascii_uppercase())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["EVALSHA", "EVALSHA", "INFO", "PING"],
        "{}",
        sent.join("\n")
    );
    assert_eq!(all(&node.url(), "k").len(), 2);
}

/// On three nodes each keeps its own stream; a hold is listed once.
#[test]
fn a_quorum_lists_each_hold_once() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = quorum_url(&nodes);
    expect_status(&mut lc(&url, &["lock", "q", "--", "true"]), 0);
    expect_status(&mut lc(&url, &["lock", "q", "--", "sh", "-c", "exit 5"]), 5);
    let entries = all(&url, "q");
    assert_eq!(
        endings(&entries),
        [
            ("released".to_string(), Some(5)),
            ("released".to_string(), Some(0))
        ],
        "{entries:#?}"
    );
    for n in &nodes {
        let len: i64 = n.query(&["XLEN", "lc-cli:{q}:history"]);
        assert_eq!(len, 2);
    }
}
