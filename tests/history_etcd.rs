//! `lc-cli history KEY` on etcd (issue 46 item 2, docs/history.md), through
//! the real binary against a real etcd: five holds of one key ending five
//! ways (exit 0, exit 3, a reset by an operator, the holding lc-cli
//! SIGKILLed and its lease run out, a hold lost when its lease was revoked)
//! are listed newest first with how each ended, every one with its grant
//! and wait; a hold whose lease ran out with nobody waiting (listed
//! `freed`), for each way a grant opens its entry (into an empty line, a
//! shared hold beside another, a `--slots` claim); the cap (100 entries
//! after 150 holds, counted with etcdctl); `etcdctl lock` on the same name
//! with the history keys present.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::etcd::Etcd;
use common::spans::Kids;
use common::{expect_status, finish_within, wait_until};

/// How long any one wait of these tests may take (a loaded machine).
const LIMIT: Duration = Duration::from_secs(30);

fn history(e: &Etcd, key: &str) -> Vec<serde_json::Value> {
    let out = expect_status(
        &mut e.lc("", &["history", key, "--json", "--limit", "1000"]),
        0,
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|err| panic!("{err}: {l}")))
        .collect()
}

/// The queue keys of `key` (`key/<lease>`): etcdctl's view.
fn queued(e: &Etcd, key: &str) -> Vec<String> {
    e.keys(&format!("{key}/"))
}

/// Waits until `n` keys are in the queue of `key`.
fn until_queued(e: &Etcd, key: &str, n: usize) {
    assert!(
        wait_until(LIMIT, || queued(e, key).len() == n),
        "not {n} keys under {key}/: {:?}",
        queued(e, key)
    );
}

/// A holder of `key` (with the address's `query`) that writes `file` once
/// it holds, then sleeps; its output dropped.
fn holder(e: &Etcd, query: &str, key: &str, file: &std::path::Path) -> Command {
    let script = format!("touch {}; sleep 30", file.display());
    let mut cmd = e.lc(query, &["lock", key, "-c", &script]);
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

#[test]
fn five_holds_end_five_ways() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let key = "h5";
    expect_status(
        &mut e.lc("", &["lock", key, "--note", "first", "--", "true"]),
        0,
    );
    expect_status(&mut e.lc("", &["lock", key, "--", "sh", "-c", "exit 3"]), 3);

    // Reset by an operator: the holder loses the key (75).
    let started = dir.path().join("reset");
    let reset = holder(&e, "", key, &started).spawn().unwrap();
    assert!(wait_until(LIMIT, || started.exists()), "never held");
    expect_status(&mut e.lc("", &["reset", key]), 0);
    let (code, err) = finish_within(LIMIT, reset);
    assert_eq!(code, Some(75), "{err}");

    // SIGKILL of the holding lc-cli (a 2 s lease): the next in line finds
    // its key gone with the lease and records it. That next one then loses
    // its own hold: its lease is revoked with etcdctl.
    let killed_at = dir.path().join("killed");
    let mut killed = Kids(vec![holder(&e, "?ttl=2s", key, &killed_at)
        .spawn()
        .unwrap()]);
    assert!(wait_until(LIMIT, || killed_at.exists()), "never held");
    let lost_at = dir.path().join("lost");
    let lost = holder(&e, "", key, &lost_at).spawn().unwrap();
    until_queued(&e, key, 2);
    killed.0[0].kill().unwrap();
    killed.0[0].wait().unwrap();
    assert!(
        wait_until(LIMIT, || lost_at.exists()),
        "the next never held"
    );
    until_queued(&e, key, 1);
    let lease = queued(&e, key)[0]
        .strip_prefix(&format!("{key}/"))
        .unwrap()
        .to_string();
    expect_status(e.ctl(&["lease", "revoke", &lease]).stdout(Stdio::null()), 0);
    let (code, err) = finish_within(LIMIT, lost);
    assert_eq!(code, Some(75), "{err}");

    let entries = history(&e, key);
    assert_eq!(entries.len(), 5, "{entries:#?}");
    let ended: Vec<&str> = entries
        .iter()
        .map(|e| e["ended"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        ended,
        ["lost", "freed", "reset", "released", "released"],
        "{entries:#?}"
    );
    let status: Vec<Option<i64>> = entries.iter().map(|e| e["status"].as_i64()).collect();
    // The lost holder's command was stopped by lc-cli: its status is told.
    assert_eq!(&status[1..], [None, None, Some(3), Some(0)], "{entries:#?}");
    assert!(entries[2]["by"].as_str().is_some(), "{:#?}", entries[2]);
    assert_eq!(entries[4]["fields"]["note"], "first", "{:#?}", entries[4]);
    for entry in &entries {
        assert_eq!(entry["key"], key, "{entry}");
        assert!(entry["token"].as_u64().is_some(), "{entry}");
        assert!(entry["ended_at"].as_str().is_some(), "{entry}");
        assert_eq!(entry["mode"], "exclusive");
    }
    // Every entry was opened at its grant: the reset's and the freed one
    // too have their grant and wait.
    for entry in &entries {
        assert!(entry["granted"].as_str().is_some(), "{entry}");
        assert!(entry["waited_ms"].as_u64().is_some(), "{entry}");
    }
    // Newest first.
    for pair in entries.windows(2) {
        assert!(
            pair[0]["token"].as_u64() > pair[1]["token"].as_u64(),
            "{pair:#?}"
        );
    }
    // --limit, and the table.
    let out = expect_status(&mut e.lc("", &["history", key, "--limit", "2"]), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    assert!(history(&e, "never").is_empty());
    // Nothing is left in the queue, and `keys` lists no history key.
    assert!(queued(&e, key).is_empty());
    let out = expect_status(&mut e.lc("", &["keys", "--json"]), 0);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_cap_holds_and_etcdctl_lock_ignores_the_history() {
    let e = Etcd::start();
    let key = "capped";
    let mut kids = Kids(Vec::new());
    // 150 holds in a row (bounded: one process each).
    for i in 0..150 {
        let status = if i == 149 { "exit 7" } else { "true" };
        let want = if i == 149 { 7 } else { 0 };
        expect_status(
            &mut e.lc("", &["lock", key, "--", "sh", "-c", status]),
            want,
        );
    }
    let stored = e.keys(&format!(".lc-cli-history/{key}/"));
    assert_eq!(stored.len(), 100, "{} entries kept", stored.len());
    let entries = history(&e, key);
    assert_eq!(entries.len(), 100);
    assert_eq!(entries[0]["status"], 7, "{}", entries[0]);
    // The 50 oldest went: the oldest kept is the 51st hold.
    let tokens: Vec<u64> = entries.iter().filter_map(|e| e["token"].as_u64()).collect();
    assert!(tokens.windows(2).all(|w| w[0] > w[1]), "{tokens:?}");

    // etcdctl lock takes NAME/ for its queue: the history beside it is no
    // contender. It holds at once, and lc-cli waits for it.
    let dir = tempfile::tempdir().unwrap();
    let held = dir.path().join("ctl");
    let script = format!("touch {}; sleep 1", held.display());
    let mut ctl = e.ctl(&["lock", key, "--", "sh", "-c", &script]);
    ctl.stdout(Stdio::null()).stderr(Stdio::null());
    kids.0.push(ctl.spawn().unwrap());
    assert!(
        wait_until(LIMIT, || held.exists()),
        "etcdctl lock never held"
    );
    expect_status(&mut e.lc("", &["trylock", key, "--", "true"]), 1);
    expect_status(&mut e.lc("", &["lock", "-w", "20", key, "--", "true"]), 0);
    let ctl = kids.0.pop().unwrap();
    let (code, err) = finish_within(LIMIT, ctl);
    assert_eq!(code, Some(0), "{err}");
    // etcdctl's hold is no lc-cli hold: the next entry is lc-cli's own.
    let entries = history(&e, key);
    assert_eq!(entries.len(), 100);
    assert_eq!(entries[0]["ended"], "released", "{}", entries[0]);
    assert_eq!(entries[0]["status"], 0, "{}", entries[0]);
    assert_eq!(e.keys(&format!(".lc-cli-history/{key}/")).len(), 100);
}

/// Holds whose lc-cli is SIGKILLed with nobody waiting: while they run,
/// `history` lists none of them (a hold that goes on); once their leases
/// ran out, each is listed `freed`, with its grant, its wait and no end
/// time. One for each way a grant opens its entry: into an empty line (the
/// put's transaction), a shared hold granted beside another (a transaction
/// of its own), a `--slots` hold (the slot claim's, naming the slot); and a
/// kept hold that expires (`--expire`): `expired`.
#[test]
fn holds_that_ran_out_with_nobody_waiting_are_listed_freed() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let script = |file: &std::path::Path| format!("touch {}; sleep 30", file.display());
    let spawn = |args: &[&str]| {
        let mut cmd = e.lc("?ttl=2s", args);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        cmd.spawn().unwrap()
    };
    let files: Vec<_> = (0..4).map(|i| dir.path().join(format!("h{i}"))).collect();
    let mut kids = Kids(vec![spawn(&[
        "lock",
        "alone",
        "--note",
        "n1",
        "-c",
        &script(&files[0]),
    ])]);
    assert!(wait_until(LIMIT, || files[0].exists()), "never held");
    kids.0
        .push(spawn(&["lock", "-s", "shared", "-c", &script(&files[1])]));
    assert!(wait_until(LIMIT, || files[1].exists()), "never held");
    kids.0
        .push(spawn(&["lock", "-s", "shared", "-c", &script(&files[2])]));
    assert!(wait_until(LIMIT, || files[2].exists()), "never held");
    kids.0.push(spawn(&[
        "lock",
        "--slots",
        "a,b",
        "pool",
        "-c",
        &script(&files[3]),
    ]));
    assert!(wait_until(LIMIT, || files[3].exists()), "never held");
    for key in ["alone", "shared", "pool"] {
        assert!(history(&e, key).is_empty(), "{key}: a running hold listed");
    }
    for kid in kids.0.iter_mut() {
        kid.kill().unwrap();
        kid.wait().unwrap();
    }
    for key in ["alone", "shared", "pool"] {
        until_queued(&e, key, 0);
    }
    let check = |key: &str, n: usize| {
        let entries = history(&e, key);
        assert_eq!(entries.len(), n, "{key}: {entries:#?}");
        for entry in &entries {
            assert_eq!(entry["ended"], "freed", "{entry}");
            assert!(entry["granted"].as_str().is_some(), "{entry}");
            assert!(entry["waited_ms"].as_u64().is_some(), "{entry}");
            assert!(entry["token"].as_u64().is_some(), "{entry}");
            assert!(entry["ended_at"].is_null(), "{entry}");
            assert!(entry["status"].is_null(), "{entry}");
        }
        entries
    };
    let alone = check("alone", 1);
    assert_eq!(alone[0]["fields"]["note"], "n1", "{}", alone[0]);
    assert_eq!(alone[0]["mode"], "exclusive");
    let shared = check("shared", 2);
    assert!(shared.iter().all(|e| e["mode"] == "shared"), "{shared:#?}");
    let pool = check("pool", 1);
    // The slot's index (etcd keeps no pool names: docs/backends/etcd.md).
    assert_eq!(pool[0]["slot"], "0", "{}", pool[0]);
    // `keys` lists nothing: no history key is taken for a lock.
    let out = expect_status(&mut e.lc("", &["keys", "--json"]), 0);
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A kept hold that expires with nobody waiting: not listed while kept,
    // `expired` once its lease ran out.
    expect_status(&mut e.lc("", &["lock", "kept", "--expire", "2s"]), 0);
    assert!(history(&e, "kept").is_empty());
    until_queued(&e, "kept", 0);
    let kept = history(&e, "kept");
    assert_eq!(kept.len(), 1, "{kept:#?}");
    assert_eq!(kept[0]["ended"], "expired", "{}", kept[0]);
    assert!(kept[0]["granted"].as_str().is_some(), "{}", kept[0]);
}
