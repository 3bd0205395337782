//! Issue 45 item 2 on ZooKeeper: `--slots db1,db2,db3` tells each holder's
//! command its slot in `LC_SLOT` (`--limit 3`: its index, 0 to 2), the
//! lowest free one at the grant, kept as the ephemeral node
//! `KEY/_c_lc-slot-<i>` beside Curator's `locks` and `leases`. Judged from
//! the commands' own logs against a real ZooKeeper: at most one holder per
//! slot at any instant, every slot used, granted in arrival order; `keys
//! --json` and `history` show each hold's slot; a SIGKILLed holder's slot
//! is granted again once its session expired; kept holds keep their slot
//! until `unlock`, `reset` or their TTL; a Curator `InterProcessSemaphoreV2`
//! on the same path counts lc-cli's holders and nothing else.

use crate::common;
use crate::common::slots::slot_of;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::curator::{self, Recipe};
use common::slots::{check_slots, runs, script, Run};
use common::spans::Kids;
use common::zk::Zk;
use common::*;

const LIMIT: Duration = Duration::from_secs(40);

/// Long enough for a loaded machine (a request unanswered for 2/3 of it
/// ends a hold); the test of a killed holder gives its own.
const SESSION: &str = "4s";

fn lc(zk: &Zk, args: &[&str]) -> Command {
    zk.lc_session("/s", SESSION, args)
}

/// Whether some node of the semaphore at `/s/KEY` (its acquirers' queue or
/// its leases) carries lc-cli's data for `source`.
fn queued(zk: &Zk, key: &str, source: &str) -> bool {
    let dir = format!("/s/{key}");
    let want = format!("source={source}");
    zk.with_client(move |c| {
        Box::pin(async move {
            for d in [format!("{dir}/locks"), format!("{dir}/leases")] {
                let Ok(children) = c.list_children(&d).await else {
                    continue;
                };
                for child in children {
                    if let Ok((data, _)) = c.get_data(&format!("{d}/{child}")).await {
                        if String::from_utf8_lossy(&data).ends_with(&want) {
                            return true;
                        }
                    }
                }
            }
            false
        })
    })
}

/// The slot nodes under `/s/KEY`, sorted.
fn slot_nodes(zk: &Zk, key: &str) -> Vec<String> {
    let mut v: Vec<String> = zk
        .children(&format!("/s/{key}"))
        .into_iter()
        .filter(|c| c.starts_with("_c_lc-slot-"))
        .collect();
    v.sort();
    v
}

/// `keys --json`: the slot (`fields.slot`) of each holder of `key`, sorted.
fn shown_slots(zk: &Zk, key: &str) -> Vec<String> {
    let out = expect_status(&mut lc(zk, &["keys", "--json"]), 0);
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|k| k["key"] == key)
        .map(|k| k["fields"]["slot"].as_str().unwrap_or("none").to_string())
        .collect();
    v.sort();
    v
}

/// 12 contenders, each spawned once the one before is queued, each
/// holding 1 s: their logs, and the slots `keys --json` showed meanwhile.
fn contend(zk: &Zk, key: &str, mode: &[&str]) -> (Vec<Run>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log_s = log.to_str().unwrap().to_string();
    let mut kids: Vec<Child> = Vec::new();
    let mut shown = Vec::new();
    for i in 0..12 {
        let source = format!("c{i}");
        let mut args = vec!["lock", "--source", &source];
        args.extend_from_slice(mode);
        let sc = script(&log_s, i);
        args.extend_from_slice(&[key, "-c", &sc]);
        kids.push(
            lc(zk, &args)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        // Queued (or already done: the first ones may have ended).
        assert!(wait_until(LIMIT, || queued(zk, key, &source)
            || runs(&log).iter().any(|r| r.i == i)));
        if i % 4 == 3 {
            shown.extend(shown_slots(zk, key));
        }
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
    (runs(&log), shown)
}

/// Granted in arrival order: the tokens (each lease's creation zxid, made
/// when its acquirer's turn in the mutex came) grow with the contender's
/// index.
fn check_granted_in_order(runs: &[Run]) {
    let mut by_i: Vec<&Run> = runs.iter().collect();
    by_i.sort_by_key(|r| r.i);
    assert!(
        by_i.windows(2).all(|w| w[0].token < w[1].token),
        "not granted in arrival order: {by_i:?}"
    );
}

#[test]
fn named_slots_one_holder_each() {
    let zk = Zk::start();
    let (runs, shown) = contend(&zk, "pool", &["--slots", "db1,db2,db3"]);
    check_slots(&runs, &["db1", "db2", "db3"]);
    check_granted_in_order(&runs);
    // keys --json showed the holders' slots (the index: the names are the
    // client's own mapping).
    assert!(!shown.is_empty());
    assert!(
        shown.iter().all(|s| ["0", "1", "2"].contains(&s.as_str())),
        "{shown:?}"
    );
    // Every slot node went with its holder's release.
    assert_eq!(slot_nodes(&zk, "pool"), Vec::<String>::new());
    // The history names each hold's slot.
    let out = expect_status(
        &mut lc(&zk, &["history", "pool", "--json", "--limit", "100"]),
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
    let zk = Zk::start();
    let (runs, _) = contend(&zk, "idx", &["--limit", "3"]);
    check_slots(&runs, &["0", "1", "2"]);
    check_granted_in_order(&runs);
    // A --limit that disagrees with --slots: a usage error (64).
    let out = lc(
        &zk,
        &["lock", "--slots", "a,b", "--limit", "3", "k", "-c", "true"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

/// Holds `key` in the slot pool `a,b`, writing its LC_SLOT into `file` once
/// it holds, then sleeping (at most 60 s).
fn slot_holder(zk: &Zk, session: &str, key: &str, file: &Path) -> Child {
    let script = format!(
        "echo $LC_SLOT > {}.t; mv {0}.t {0}; sleep 60",
        file.display()
    );
    zk.lc_session(
        "/s",
        session,
        &["lock", "--slots", "a,b", key, "-c", &script],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

#[test]
fn a_killed_holders_slot_is_granted_again_after_its_session() {
    let zk = Zk::start();
    let dir = tempfile::tempdir().unwrap();
    let file = |n: &str| dir.path().join(n);
    let mut kids = Kids(Vec::new());
    // The first takes slot a on a 2 s session, the second slot b.
    kids.0.push(slot_holder(&zk, "2s", "dev", &file("one")));
    assert!(wait_until(LIMIT, || slot_of(&file("one")).is_some()));
    kids.0.push(slot_holder(&zk, SESSION, "dev", &file("two")));
    assert!(wait_until(LIMIT, || slot_of(&file("two")).is_some()));
    assert_eq!(slot_of(&file("one")).as_deref(), Some("a"));
    assert_eq!(slot_of(&file("two")).as_deref(), Some("b"));
    assert_eq!(shown_slots(&zk, "dev"), ["0", "1"]);
    assert_eq!(slot_nodes(&zk, "dev"), ["_c_lc-slot-0", "_c_lc-slot-1"]);
    // The slot nodes are not where Curator counts leases.
    assert_eq!(zk.children("/s/dev/leases").len(), 2);
    // A third waits; the first's lc-cli is SIGKILLed: once its session
    // expired, the third holds, in the slot the first had.
    kids.0
        .push(slot_holder(&zk, SESSION, "dev", &file("three")));
    assert!(wait_until(LIMIT, || zk.children("/s/dev/leases").len() == 3));
    assert_eq!(slot_of(&file("three")), None, "a third holder of two slots");
    kids.0[0].kill().unwrap();
    kids.0[0].wait().unwrap();
    assert!(wait_until(LIMIT, || slot_of(&file("three")).is_some()));
    assert_eq!(slot_of(&file("three")).as_deref(), Some("a"));
    assert!(
        kids.0[1].try_wait().unwrap().is_none(),
        "the holder of b ended"
    );
    assert_eq!(slot_nodes(&zk, "dev"), ["_c_lc-slot-0", "_c_lc-slot-1"]);
    assert_eq!(shown_slots(&zk, "dev"), ["0", "1"]);
}

/// Runs `lock --slots a,b KEY` with a command that writes its LC_SLOT into
/// `file`: the slot it got.
fn slot_now(zk: &Zk, key: &str, file: &Path) -> String {
    let script = format!("echo $LC_SLOT > {}", file.display());
    expect_status(
        &mut lc(zk, &["trylock", "--slots", "a,b", key, "-c", &script]),
        0,
    );
    slot_of(file).unwrap()
}

/// A kept hold (`lock --slots a,b KEY`, no command) keeps its slot after
/// lc-cli exits; `unlock` frees it, and so does `reset` (a running holder's
/// too, which then stops with 75); with `--expire`, the server's TTL check.
#[test]
fn kept_holds_keep_their_slot_until_unlock_reset_or_ttl() {
    let zk = Zk::start_extended();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("slot");
    expect_status(&mut lc(&zk, &["lock", "-q", "--slots", "a,b", "kept"]), 0);
    assert_eq!(slot_nodes(&zk, "kept"), ["_c_lc-slot-0"]);
    assert_eq!(shown_slots(&zk, "kept"), ["0"]);
    // The slot node is persistent now, as the kept lease.
    let (_, owner) = zk.node("/s/kept/_c_lc-slot-0").unwrap();
    assert_eq!(owner, 0);
    assert_eq!(slot_now(&zk, "kept", &f), "b");
    assert_eq!(slot_now(&zk, "kept", &f), "b");
    expect_status(&mut lc(&zk, &["unlock", "kept"]), 0);
    assert_eq!(slot_nodes(&zk, "kept"), Vec::<String>::new());
    assert_eq!(slot_now(&zk, "kept", &f), "a");

    // reset: a running holder loses its lease and its slot at once.
    let mut kids = Kids(Vec::new());
    kids.0
        .push(slot_holder(&zk, SESSION, "run", &dir.path().join("r1")));
    assert!(wait_until(LIMIT, || slot_of(&dir.path().join("r1")).is_some()));
    expect_status(&mut lc(&zk, &["lock", "-q", "--slots", "a,b", "run"]), 0);
    assert_eq!(slot_nodes(&zk, "run"), ["_c_lc-slot-0", "_c_lc-slot-1"]);
    expect_status(&mut lc(&zk, &["reset", "run"]), 0);
    let (code, _) = finish_within(LIMIT, kids.0.remove(0));
    assert_eq!(code, Some(75));
    assert_eq!(slot_nodes(&zk, "run"), Vec::<String>::new());
    assert_eq!(slot_now(&zk, "run", &f), "a");

    // --expire: the kept lease and its slot are TTL nodes; once the server
    // deleted them, slot a is free again.
    expect_status(
        &mut lc(
            &zk,
            &["lock", "-q", "--slots", "a,b", "--expire", "1s", "ttl"],
        ),
        0,
    );
    assert_eq!(slot_nodes(&zk, "ttl"), ["_c_lc-slot-0"]);
    assert_eq!(slot_now(&zk, "ttl", &f), "b");
    assert!(wait_until(LIMIT, || slot_nodes(&zk, "ttl").is_empty()
        && zk.children("/s/ttl/leases").is_empty()));
    assert_eq!(slot_now(&zk, "ttl", &f), "a");
}

/// One `start TAG NS` or `end TAG NS` line's time.
fn at(log: &Path, what: &str, tag: &str) -> Option<u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what} {tag} ")))
        .and_then(|t| t.trim().parse().ok())
}

fn peer_waiting(child: &mut Child) {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "waiting");
}

/// An lc-cli holder of `--slots a,b` on `/s/cs` that logs `start TAG` and
/// `end TAG` and holds until `stop` exists (at most 60 s), its LC_SLOT in
/// the file `TAG` beside the log.
fn held_until(zk: &Zk, log: &Path, tag: &str, stop: &Path) -> Child {
    let (log_s, stop_s) = (log.display(), stop.display());
    let slot = log.with_file_name(tag);
    let script = format!(
        "echo start {tag} $(date +%s%N) >> {log_s}; echo $LC_SLOT > {}; \
         for i in $(seq 1200); do [ -e {stop_s} ] && break; sleep 0.05; done; \
         echo end {tag} $(date +%s%N) >> {log_s}",
        slot.display()
    );
    lc(
        zk,
        &[
            "lock", "--source", tag, "--slots", "a,b", "cs", "-c", &script,
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::inherit())
    .spawn()
    .unwrap()
}

/// Curator's `InterProcessSemaphoreV2` (2 leases) and lc-cli's `--slots
/// a,b` on one path: Curator counts lc-cli's holders (whose slot nodes sit
/// beside its `leases`) and nothing else. lc-cli l1 holds (slot a); a
/// Curator j1 gets the second lease beside it; lc-cli l2 waits for j1's
/// end and gets slot b; a Curator j2 waits while l1 and l2 hold, and runs
/// once l1 ends.
#[test]
fn curator_semaphore_counts_lc_cli_holders_with_slots() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let (stop1, stop2) = (tmp.path().join("stop1"), tmp.path().join("stop2"));
    let hosts = zk.hosts();
    let mut kids = Kids(Vec::new());
    kids.0.push(held_until(&zk, &log, "l1", &stop1));
    assert!(wait_until(LIMIT, || at(&log, "start", "l1").is_some()));
    let mut j1 = curator::peer(&hosts, "/s/cs", Recipe::Semaphore(2), 1500, &log, "j1");
    peer_waiting(&mut j1);
    kids.0.push(j1);
    assert!(wait_until(LIMIT, || at(&log, "start", "j1").is_some()));
    // Two leases for two holders: the slot node is not one of them.
    assert_eq!(zk.children("/s/cs/leases").len(), 2);
    assert_eq!(slot_nodes(&zk, "cs"), ["_c_lc-slot-0"]);
    kids.0.push(held_until(&zk, &log, "l2", &stop2));
    assert!(wait_until(LIMIT, || at(&log, "start", "l2").is_some()));
    let l2 = tmp.path().join("l2");
    assert!(wait_until(LIMIT, || slot_of(&l2).is_some()));
    assert_eq!(slot_of(&tmp.path().join("l1")).as_deref(), Some("a"));
    assert_eq!(slot_of(&l2).as_deref(), Some("b"));
    let j1_end = at(&log, "end", "j1").expect("j1 ended before l2 started");
    assert!(at(&log, "start", "l2").unwrap() >= j1_end);
    // A Curator j2 while l1 and l2 hold: its lease is the third, and it
    // waits (as Curator counts: every child of leases).
    let mut j2 = curator::peer(&hosts, "/s/cs", Recipe::Semaphore(2), 300, &log, "j2");
    peer_waiting(&mut j2);
    kids.0.push(j2);
    assert!(wait_until(LIMIT, || zk.children("/s/cs/leases").len() == 3));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        at(&log, "start", "j2"),
        None,
        "a third holder of two leases"
    );
    std::fs::write(&stop1, "").unwrap();
    assert!(wait_until(LIMIT, || at(&log, "start", "j2").is_some()));
    assert!(at(&log, "start", "j2").unwrap() >= at(&log, "end", "l1").unwrap());
    std::fs::write(&stop2, "").unwrap();
    kids.all_succeed(LIMIT);
    assert_eq!(slot_nodes(&zk, "cs"), Vec::<String>::new());
}

/// The requests ZooKeeper receives (`mntr`'s `zk_packets_received`) for an
/// uncontended `lock --limit 2 k -- true` and `--slots a,b`, the fewest of
/// 5: printed for docs/fleet-slots.md (the slot's listing is sent with the
/// leases' listing; its claim is the transaction that gives back the
/// acquirers' mutex, in place of that delete).
#[test]
fn requests_of_an_uncontended_limit() {
    let zk = Zk::start_with_tick(500);
    let received = || zk.mntr()["zk_packets_received"];
    assert!(wait_until(LIMIT, || zk
        .mntr()
        .contains_key("zk_packets_received")));
    for mode in [&["--limit", "2"][..], &["--slots", "a,b"][..]] {
        let mut fewest = f64::MAX;
        for _ in 0..5 {
            let before = received();
            let mut args = vec!["lock"];
            args.extend_from_slice(mode);
            args.extend_from_slice(&["k", "--", "true"]);
            expect_status(&mut zk.lc_session("/r", "10s", &args), 0);
            fewest = fewest.min(received() - before);
        }
        eprintln!("requests of an uncontended lock {mode:?} k -- true: {fewest}");
    }
}
