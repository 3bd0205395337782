//! `lc-cli history KEY` on ZooKeeper (issue 46 item 2, docs/history.md),
//! through the real binary against a real ZooKeeper: holds of one key
//! that end four ways (exit 0, exit 3, a reset by an operator, the holding
//! lc-cli SIGKILLed and its session expired) are listed newest first with
//! how each ended and the status where it was reported; a `--cancel-running`
//! hold is `cancelled` by the newer run; the cap (150 holds: the newest
//! 100 kept, no more nodes); Curator's `InterProcessMutex`, read-write lock
//! and semaphore still lock keys with history entries beside their queues.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::curator::{self, Recipe};
use common::spans::{self, Kids};
use common::zk::Zk;
use common::*;

/// How long any one wait of these tests may take (a loaded machine).
const LIMIT: Duration = Duration::from_secs(20);

type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

fn history(lc: Lc, key: &str) -> Vec<serde_json::Value> {
    let out = expect_status(&mut lc(&["history", key, "--json", "--limit", "1000"]), 0);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Waits until the key's history has `n` entries; panics past [`LIMIT`].
fn until_entries(lc: Lc, key: &str, n: usize) {
    assert!(
        wait_until(LIMIT, || history(lc, key).len() >= n),
        "'{key}': {} entries, not {n}: {:#?}",
        history(lc, key).len(),
        history(lc, key)
    );
}

/// The history nodes beside the queue of the lock node `dir`.
fn entry_nodes(zk: &Zk, dir: &str) -> Vec<String> {
    zk.children(dir)
        .into_iter()
        .filter(|c| c.starts_with("_c_lc-history-"))
        .collect()
}

/// A holder of `key` running `sleep`, its output dropped.
fn holder(lc: Lc, key: &str, source: &str) -> std::process::Child {
    let mut cmd = lc(&["lock", key, "--source", source, "--", "sleep", "30"]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd.spawn().unwrap()
}

fn ended(entries: &[serde_json::Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["ended"].as_str().unwrap_or("?"))
        .collect()
}

#[test]
fn holds_end_four_ways_newest_first() {
    let zk = Zk::start();
    let lc = |args: &[&str]| {
        let mut cmd = zk.lc("/h", args);
        cmd.env("LC_SOURCE", "ops-1");
        cmd
    };
    let key = "deploy/prod";
    let dir = "/h/deploy/prod";
    expect_status(
        &mut lc(&["lock", key, "--note", "first run", "--", "true"]),
        0,
    );
    until_entries(&lc, key, 1);
    expect_status(&mut lc(&["lock", key, "--", "sh", "-c", "exit 3"]), 3);
    until_entries(&lc, key, 2);

    // Reset by an operator (its LC_SOURCE is the `by`).
    let reset = holder(&lc, key, "held-1");
    assert!(wait_until(LIMIT, || entry_nodes(&zk, dir).len() == 3));
    expect_status(&mut lc(&["reset", key]), 0);
    let (code, err) = finish_within(LIMIT, reset);
    assert_ne!(code, Some(0), "the reset holder exited 0: {err}");
    until_entries(&lc, key, 3);

    // SIGKILL of lc-cli: nobody writes the end; its entry, opened at the
    // grant, is read as freed once the session (2 s) took the node.
    let mut killed = Kids(vec![holder(&lc, key, "killed-1")]);
    assert!(wait_until(LIMIT, || entry_nodes(&zk, dir).len() == 4));
    assert_eq!(history(&lc, key).len(), 3, "a running hold is listed");
    killed.0[0].kill().unwrap();
    killed.0[0].wait().unwrap();
    until_entries(&lc, key, 4);
    assert!(
        wait_until(LIMIT, || zk.queue(dir).is_empty()),
        "{:?}",
        zk.queue(dir)
    );

    let entries = history(&lc, key);
    assert_eq!(
        ended(&entries),
        ["freed", "reset", "released", "released"],
        "{entries:#?}"
    );
    let status: Vec<Option<i64>> = entries.iter().map(|e| e["status"].as_i64()).collect();
    assert_eq!(status, [None, None, Some(3), Some(0)], "{entries:#?}");
    let sources: Vec<&str> = entries
        .iter()
        .map(|e| e["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["killed-1", "held-1", "ops-1", "ops-1"]);
    assert_eq!(entries[1]["by"], "ops-1", "{:#?}", entries[1]);
    assert_eq!(
        entries[3]["fields"]["note"], "first run",
        "{:#?}",
        entries[3]
    );
    for e in &entries {
        assert_eq!(e["key"], key, "{e}");
        assert_eq!(e["mode"], "exclusive", "{e}");
        assert!(e["token"].as_u64().is_some(), "{e}");
        assert!(e["granted"].as_str().is_some(), "{e}");
        assert!(e["waited_ms"].as_u64().is_some(), "{e}");
    }
    // The end time where it was written; the killed one's is not known.
    assert!(entries[0]["ended_at"].is_null(), "{:#?}", entries[0]);
    assert!(entries[1..].iter().all(|e| e["ended_at"].is_string()));
    // Newest first: each token above the next one's.
    for pair in entries.windows(2) {
        assert!(
            pair[0]["token"].as_u64() > pair[1]["token"].as_u64(),
            "{pair:#?}"
        );
    }
    // --limit, and the table (a header and one line per entry).
    let out = expect_status(&mut lc(&["history", key, "--limit", "2"]), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains("freed") && text.contains("reset"), "{text}");
    // A key that never ended a hold: nothing.
    assert!(history(&lc, "never").is_empty());
}

/// A holder taken with `--cancel-running`, stopped by a newer one: its
/// entry says `cancelled`, by the newer run's source; a kept hold
/// (`lock KEY` without a command) released by `unlock`: `released`, by the
/// unlocking client.
#[test]
fn cancelled_and_unlocked_holds() {
    let zk = Zk::start();
    let lc = |args: &[&str]| zk.lc("/h", args);
    let old = lc(&[
        "lock",
        "--cancel-running",
        "k",
        "--source",
        "old",
        "--",
        "sleep",
        "30",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    assert!(wait_until(LIMIT, || entry_nodes(&zk, "/h/k").len() == 1));
    expect_status(
        &mut lc(&[
            "lock",
            "--cancel-running",
            "k",
            "--source",
            "new",
            "--",
            "true",
        ]),
        0,
    );
    let (code, err) = finish_within(LIMIT, old);
    assert_eq!(code, Some(81), "{err}");
    let entries = history(&lc, "k");
    assert_eq!(ended(&entries), ["released", "cancelled"], "{entries:#?}");
    assert_eq!(entries[1]["by"], "new", "{:#?}", entries[1]);
    assert_eq!(entries[1]["status"], 81, "{:#?}", entries[1]);

    expect_status(&mut lc(&["lock", "kept", "--source", "keeper"]), 0);
    assert!(history(&lc, "kept").is_empty(), "a kept hold is listed");
    let mut unlock = lc(&["unlock", "kept"]);
    unlock.env("LC_SOURCE", "ops-2");
    expect_status(&mut unlock, 0);
    let entries = history(&lc, "kept");
    assert_eq!(ended(&entries), ["released"], "{entries:#?}");
    assert_eq!(entries[0]["source"], "keeper");
    assert_eq!(entries[0]["by"], "ops-2");
}

/// 150 holds of one key, each with its number as its note: the newest 100
/// are kept, newest first, and no more than 100 entry nodes exist.
#[test]
fn the_cap_keeps_the_newest_hundred() {
    let zk = Zk::start();
    let lc = |args: &[&str]| zk.lc("/h", args);
    for i in 0..150 {
        let note = i.to_string();
        expect_status(&mut lc(&["lock", "c", "--note", &note, "--", "true"]), 0);
    }
    let nodes = entry_nodes(&zk, "/h/c");
    assert_eq!(nodes.len(), 100, "{nodes:?}");
    let entries = history(&lc, "c");
    assert_eq!(entries.len(), 100);
    let notes: Vec<String> = entries
        .iter()
        .map(|e| e["fields"]["note"].as_str().unwrap_or("?").to_string())
        .collect();
    let expected: Vec<String> = (50..150).rev().map(|i| i.to_string()).collect();
    assert_eq!(notes, expected);
    assert!(entries.iter().all(|e| e["ended"] == "released"));
}

/// Reads the peer's `waiting` line: it is connected and about to ask.
fn peer_waiting(child: &mut std::process::Child) {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "waiting");
}

fn started(log: &std::path::Path, tag: &str) -> bool {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(&format!("start {tag} "))
}

/// Curator's recipes with history entries beside the queue: an
/// `InterProcessMutex` queued between two lc-cli holders takes its turn
/// between them, none at once with another (an entry taken for a
/// contender ahead of it would keep it waiting for good); a Curator writer
/// and a semaphore lease are granted on keys whose entries are there.
#[test]
fn curator_recipes_lock_beside_the_entries() {
    let zk = Zk::start();
    let lc = |args: &[&str]| zk.lc_session("/h", "4s", args);
    let hosts = zk.hosts();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");

    // The mutex: two entries first.
    for _ in 0..2 {
        expect_status(&mut lc(&["lock", "m", "--", "true"]), 0);
    }
    assert_eq!(entry_nodes(&zk, "/h/m").len(), 2);
    // `a` holds until the gate exists (at most 20 s): the Curator mutex
    // and `b` queue behind it first, whatever the JVM's start takes.
    let gate = tmp.path().join("gate");
    let script = format!(
        "echo start a $(date +%s%N) >> {log}; for i in $(seq 400); do [ -e {gate} ] && break; sleep 0.05; done; sleep 0.3; echo end a $(date +%s%N) >> {log}",
        log = log.display(),
        gate = gate.display()
    );
    let mut a = lc(&["lock", "m", "--source", "a", "-c", &script]);
    let mut kids = Kids(vec![a.stdout(Stdio::null()).spawn().unwrap()]);
    assert!(wait_until(LIMIT, || started(&log, "a")));
    let mut peer = curator::peer(&hosts, "/h/m", Recipe::Mutex, 300, &log, "jm");
    peer_waiting(&mut peer);
    kids.0.push(peer);
    assert!(
        wait_until(LIMIT, || zk.queue("/h/m").len() == 2),
        "the Curator mutex did not queue: {:?}",
        zk.children("/h/m")
    );
    spans::note(&log, "arrive", "jm");
    let (_, mut b) = spans::contender(&lc, &log, &[], "m", "b", 0.3);
    kids.0.push(b.stdout(Stdio::null()).spawn().unwrap());
    assert!(
        wait_until(LIMIT, || zk.queue("/h/m").len() == 3),
        "b did not queue: {:?}",
        zk.children("/h/m")
    );
    std::fs::write(&gate, b"").unwrap();
    kids.all_succeed(Duration::from_secs(60));
    let spans = spans::read(&log);
    assert_eq!(spans::tags(&spans), ["a", "jm", "b"], "{spans:#?}");
    assert_eq!(spans::max_overlap(&spans), 1, "{spans:#?}");
    // lc-cli's holds have entries; the Curator client's writes none.
    let entries = history(&lc, "m");
    assert_eq!(entries.len(), 4, "{entries:#?}");
    assert_eq!(entries[0]["source"], "b");
    assert_eq!(entries[1]["source"], "a");

    // A Curator writer on a key whose readers left entries.
    for _ in 0..2 {
        expect_status(&mut lc(&["lock", "-s", "w", "--", "true"]), 0);
    }
    assert_eq!(entry_nodes(&zk, "/h/w").len(), 2);
    let mut writer = curator::peer(&hosts, "/h/w", Recipe::Write, 100, &log, "jw");
    peer_waiting(&mut writer);
    let mut more = Kids(vec![writer]);
    assert!(
        wait_until(LIMIT, || started(&log, "jw")),
        "the Curator writer never held: {:?}",
        zk.children("/h/w")
    );

    // A semaphore lease beside lc-cli's `--limit 2` holder and entries.
    for _ in 0..2 {
        expect_status(&mut lc(&["lock", "--limit", "2", "s", "--", "true"]), 0);
    }
    assert_eq!(entry_nodes(&zk, "/h/s").len(), 2);
    let (_, mut l) = spans::contender(&lc, &log, &["--limit", "2"], "s", "l", 3.0);
    more.0.push(l.stdout(Stdio::null()).spawn().unwrap());
    assert!(wait_until(LIMIT, || started(&log, "l")));
    let mut lease = curator::peer(&hosts, "/h/s", Recipe::Semaphore(2), 100, &log, "js");
    peer_waiting(&mut lease);
    more.0.push(lease);
    assert!(
        wait_until(LIMIT, || started(&log, "js")),
        "the Curator lease was never granted: {:?}",
        zk.children("/h/s")
    );
    more.all_succeed(Duration::from_secs(60));
    let entries = history(&lc, "s");
    assert_eq!(entries.len(), 3, "{entries:#?}");
    assert!(entries
        .iter()
        .all(|e| e["mode"] == "limit" && e["limit"] == 2));
}

/// The requests ZooKeeper receives (`mntr`'s `zk_packets_received`) for an
/// uncontended `lock k -- true`, the fewest of 5: printed for
/// docs/backends/zookeeper.md (the entry's listing and create are sent
/// while the command runs; its close rides in the release's transaction).
#[test]
fn requests_of_an_uncontended_lock() {
    let zk = Zk::start_with_tick(500);
    let lc = |args: &[&str]| zk.lc_session("/h", "10s", args);
    let received = || zk.mntr()["zk_packets_received"];
    assert!(wait_until(LIMIT, || zk
        .mntr()
        .contains_key("zk_packets_received")));
    let mut fewest = f64::MAX;
    for _ in 0..5 {
        let before = received();
        expect_status(&mut lc(&["lock", "k", "--", "true"]), 0);
        fewest = fewest.min(received() - before);
    }
    eprintln!("requests of an uncontended lock k -- true: {fewest}");
    assert_eq!(entry_nodes(&zk, "/h/k").len(), 5);
}

/// A holder whose lc-cli is SIGKILLed by its own command, at once (`kill
/// -9 $PPID`, the first thing the command does): its entry was opened
/// before the command started, so the hold is listed, `freed`, with its
/// grant, once its session took the node. A lock and a `--limit` lease.
#[test]
fn a_holder_killed_at_its_grant_is_listed() {
    use std::os::unix::process::ExitStatusExt;
    let zk = Zk::start();
    let lc = |args: &[&str]| zk.lc("/k", args);
    for (key, mode) in [("at-once", None), ("at-once-pool", Some("2"))] {
        let mut args = vec!["lock", key, "--note", "gone"];
        if let Some(n) = mode {
            args.extend(["--limit", n]);
        }
        args.extend(["--", "sh", "-c", "kill -9 $PPID"]);
        let mut cmd = lc(&args);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let status = cmd.status().unwrap();
        assert_eq!(status.signal(), Some(9), "{key}: {status:?}");
        until_entries(&lc, key, 1);
        let entries = history(&lc, key);
        assert_eq!(entries.len(), 1, "{entries:#?}");
        let e = &entries[0];
        assert_eq!(e["ended"], "freed", "{e}");
        assert_eq!(e["fields"]["note"], "gone", "{e}");
        assert!(e["granted"].as_str().is_some(), "{e}");
        assert!(e["waited_ms"].as_u64().is_some(), "{e}");
        assert!(e["token"].as_u64().is_some(), "{e}");
    }
}
