//! Issue 45 item 2 on etcd: `--slots db1,db2,db3` tells each holder's
//! command its slot in `LC_SLOT` (`--limit 3` its index), judged from the
//! commands' own logs against a real etcd: at most one holder per slot at
//! any instant, every slot used; `keys --json` shows each holder's slot
//! (its index);
//! a SIGKILLed holder's slot is granted again once its lease ran out,
//! while the other slot's holder keeps its own.

use crate::common;
use crate::common::slots::slot_of;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::etcd::Etcd;
use common::slots::{check_slots, runs, script, Run};
use common::spans::Kids;
use common::{expect_status, finish_within, wait_until};

const LIMIT: Duration = Duration::from_secs(30);

/// 12 contenders, 0.25 s apart, each holding 1 s: their logs.
fn contend(e: &Etcd, key: &str, mode: &[&str]) -> Vec<Run> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log_s = log.to_str().unwrap().to_string();
    let mut kids: Vec<Child> = Vec::new();
    for i in 0..12 {
        let mut args = vec!["lock"];
        args.extend_from_slice(mode);
        let sc = script(&log_s, i);
        args.extend_from_slice(&[key, "-c", &sc]);
        kids.push(
            e.lc("", &args)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        wait_until(LIMIT, || runs(&log).len() == 12),
        "{:?}",
        runs(&log)
    );
    for k in kids {
        let (code, err) = finish_within(LIMIT, k);
        assert_eq!(code, Some(0), "{err}");
    }
    runs(&log)
}

#[test]
fn named_slots_one_holder_each() {
    let e = Etcd::start();
    let runs = contend(&e, "pool", &["--slots", "db1,db2,db3"]);
    check_slots(&runs, &["db1", "db2", "db3"]);
    // Every slot key went with its holder's release.
    assert!(
        e.keys("pool.lc-cli/slot.").is_empty(),
        "{:?}",
        e.keys("pool.lc-cli/slot.")
    );
    // The history names each hold's slot (its index: the names are the
    // client's own mapping, not sent with the request).
    let out = expect_status(
        &mut e.lc("", &["history", "pool", "--json", "--limit", "100"]),
        0,
    );
    let slots: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|h| h["fields"]["slot"].as_str().map(str::to_string))
        .collect();
    assert_eq!(slots.len(), 12, "{slots:?}");
    assert!(slots.iter().all(|s| ["0", "1", "2"].contains(&s.as_str())));
}

#[test]
fn limit_tells_the_index() {
    let e = Etcd::start();
    let runs = contend(&e, "idx", &["--limit", "3"]);
    check_slots(&runs, &["0", "1", "2"]);
}

/// Holds `key` in slot pool `a,b` (the address's `query`), writing its
/// LC_SLOT into `file` once it holds, then sleeping.
fn slot_holder(e: &Etcd, query: &str, key: &str, file: &std::path::Path) -> Child {
    let script = format!(
        "echo $LC_SLOT > {}.t; mv {0}.t {0}; sleep 30",
        file.display()
    );
    e.lc(query, &["lock", "--slots", "a,b", key, "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_killed_holders_slot_is_granted_again_after_its_lease() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let file = |n: &str| dir.path().join(n);
    let mut kids = Kids(Vec::new());
    // The first takes slot a on a 2 s lease, the second slot b.
    kids.0.push(slot_holder(&e, "?ttl=2s", "dev", &file("one")));
    assert!(wait_until(LIMIT, || slot_of(&file("one")).is_some()));
    kids.0.push(slot_holder(&e, "", "dev", &file("two")));
    assert!(wait_until(LIMIT, || slot_of(&file("two")).is_some()));
    assert_eq!(slot_of(&file("one")).as_deref(), Some("a"));
    assert_eq!(slot_of(&file("two")).as_deref(), Some("b"));
    // keys --json shows each holder's slot.
    let out = expect_status(&mut e.lc("", &["keys", "--json"]), 0);
    let mut shown: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|k| k["fields"]["slot"].as_str().map(str::to_string))
        .collect();
    shown.sort();
    // (as the index: the pool's names are the client's own mapping)
    assert_eq!(
        shown,
        ["0", "1"],
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A third waits; the first's lc-cli is SIGKILLed: once its lease runs
    // out, the third holds, in the slot the first had.
    kids.0.push(slot_holder(&e, "", "dev", &file("three")));
    assert!(wait_until(LIMIT, || e.keys("dev/").len() == 3));
    assert_eq!(slot_of(&file("three")), None, "a third holder of two slots");
    kids.0[0].kill().unwrap();
    kids.0[0].wait().unwrap();
    assert!(wait_until(LIMIT, || slot_of(&file("three")).is_some()));
    assert_eq!(slot_of(&file("three")).as_deref(), Some("a"));
    assert!(
        kids.0[1].try_wait().unwrap().is_none(),
        "the holder of b ended"
    );
    assert_eq!(e.keys("dev.lc-cli/slot.").len(), 2);
}
