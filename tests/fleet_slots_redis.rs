//! Issue 45 item 2 on Redis: `--slots db1,db2,db3` tells each holder's
//! command its slot in `LC_SLOT` (`--limit 3`: its index, 0 to 2), the
//! lowest free one at the grant. Judged from the commands' own logs: at
//! most one holder per slot at any instant, every slot used, arrival order
//! kept; `keys --json` shows each holder's slot; a SIGKILLed holder's slot
//! is granted again once its lease (`?ttl=2s`) runs out.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::redis::{keys_json, lc, RedisServer, Running};
use common::slots::{check_slots, check_started_in_order, runs, script, Run};
use common::*;

const LIMIT: Duration = Duration::from_secs(40);

/// 12 contenders, 0.25 s apart, each holding 1 s: their logs, and the
/// slots `keys --json` showed while some held.
fn contend(url: &str, key: &str, mode: &[&str]) -> (Vec<Run>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log_s = log.to_str().unwrap().to_string();
    let mut kids: Vec<Running> = Vec::new();
    let mut shown = Vec::new();
    for i in 0..12 {
        let mut args = vec!["lock"];
        args.extend_from_slice(mode);
        let sc = script(&log_s, i);
        args.extend_from_slice(&[key, "-c", &sc]);
        kids.push(Running::spawn(lc(url, &args).stdin(Stdio::null())));
        std::thread::sleep(Duration::from_millis(250));
        for k in keys_json(url, &[], &[]) {
            if k["key"] == key {
                shown.push(k["fields"]["slot"].as_str().unwrap_or("none").to_string());
            }
        }
    }
    assert!(
        wait_until(LIMIT, || runs(&log).len() == 12),
        "{:?}",
        runs(&log)
    );
    for k in kids {
        k.expect_exit(0, LIMIT);
    }
    (runs(&log), shown)
}

#[test]
fn named_slots_one_holder_each() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (runs, shown) = contend(&url, "pool", &["--slots", "db1,db2,db3"]);
    check_slots(&runs, &["db1", "db2", "db3"]);
    check_started_in_order(&runs);
    // keys --json: each holder's slot index, in its fields.
    assert!(!shown.is_empty());
    for s in &shown {
        assert!(["0", "1", "2"].contains(&s.as_str()), "{shown:?}");
    }
    let (runs, _) = contend(&url, "pool3", &["--limit", "3"]);
    check_slots(&runs, &["0", "1", "2"]);
    check_started_in_order(&runs);
    // The history of a --limit key names each hold's slot.
    let out = expect_status(
        &mut lc(&url, &["history", "pool", "--json", "--limit", "3"]),
        0,
    );
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let e: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(e["fields"]["slot"].as_str().is_some(), "{e}");
    }
}

/// The slot of a SIGKILLed holder frees when its lease runs out and is
/// granted again; never while it might still be held.
#[test]
fn a_killed_holders_slot_is_granted_again() {
    let redis = RedisServer::start();
    let url = format!("{}?ttl=2s", redis.url());
    let dir = tempfile::tempdir().unwrap();
    let slot_of = |name: &str| {
        let f = dir.path().join(name);
        let f = f.to_str().unwrap().to_string();
        move || {
            std::fs::read_to_string(&f)
                .ok()
                .filter(|s| s.ends_with('\n'))
        }
    };
    let holder = |name: &str| {
        let f = dir.path().join(name);
        let sc = format!("echo $LC_SLOT > {}; sleep 60", f.to_str().unwrap());
        Running::spawn(
            lc(&url, &["lock", "--slots", "a,b", "pool", "-c", &sc]).stdin(Stdio::null()),
        )
    };
    let mut first = holder("first");
    assert!(wait_until(LIMIT, || slot_of("first")().is_some()));
    let second = holder("second");
    assert!(wait_until(LIMIT, || slot_of("second")().is_some()));
    assert_ne!(slot_of("first")(), slot_of("second")());
    let third = holder("third");
    // Both slots held: the third waits in line.
    assert!(wait_until(LIMIT, || redis.queued("pool") == 1));
    assert!(slot_of("third")().is_none());
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert!(
        wait_until(LIMIT, || slot_of("third")().is_some()),
        "the killed holder's slot was never granted again"
    );
    assert_eq!(slot_of("third")(), slot_of("first")());
    let slots: Vec<String> = keys_json(&url, &[], &[])
        .iter()
        .map(|k| k["fields"]["slot"].as_str().unwrap_or("?").to_string())
        .collect();
    let mut sorted = slots.clone();
    sorted.sort();
    assert_eq!(sorted, ["0", "1"], "{slots:?}");
    drop((second, third));
}
