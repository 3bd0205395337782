//! Shared locks and `--limit N` on ZooKeeper, through the real binary and,
//! for interop, Curator's own recipes (a Java peer): at most N at once and
//! exactly N while enough wait, first come first served, readers together
//! and writers alone, dead holders freed by their session, disagreeing
//! requests refused.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::curator::{self, Recipe};
use common::spans::{self, Kids};
use common::zk::Zk;
use common::*;

/// The longest session the test server allows: no test here measures how
/// long a session lasts, and a shorter one fails on a loaded machine (a
/// request unanswered for 800 ms ends it).
const SESSION: &str = "4s";

/// Whether a node under ROOT/KEY (or its semaphore's `locks`/`leases`)
/// carries lc-cli's data for source `tag`.
fn queued(zk: &Zk, dir: &str, tag: &str) -> bool {
    let dir = dir.to_string();
    let want = format!("source={tag}");
    zk.with_client(move |c| {
        Box::pin(async move {
            for d in [dir.clone(), format!("{dir}/locks"), format!("{dir}/leases")] {
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

fn contender(
    zk: &Zk,
    log: &std::path::Path,
    mode: &[&str],
    key: &str,
    tag: &str,
    secs: f64,
) -> (String, Command) {
    spans::contender(
        &|args| zk.lc_session("/s", SESSION, args),
        log,
        mode,
        key,
        tag,
        secs,
    )
}

/// 2N contenders with `--limit N` (N = 3): never more than N run, exactly N
/// while N or more are there (each hand-off well under the run time), and
/// they start in the order they queued.
#[test]
fn limit_n_runs_n_at_once_in_arrival_order() {
    let zk = Zk::start();
    let gap = spans::limit_n(&|args| zk.lc_session("/s", SESSION, args), |tag| {
        queued(&zk, "/s/sem", tag)
    });
    eprintln!("limit 3, 6 contenders: longest hand-off {gap:.1} ms");
}

/// r1 r2 w1 r3 r4 w2 r5 in that order: r1 and r2 run together, w1 alone
/// after them (before r3 and r4, which came after it), r3 and r4 together,
/// w2 alone, then r5.
#[test]
fn readers_share_writers_exclude_in_arrival_order() {
    let zk = Zk::start();
    spans::readers_and_writers(&|args| zk.lc_session("/s", SESSION, args), |tag| {
        queued(&zk, "/s/rw", tag)
    });
}

/// A `--limit 2` holder and a shared holder killed with SIGKILL: their
/// nodes go with their sessions and the waiters behind them run.
#[test]
fn dead_semaphore_and_shared_holders_are_freed_by_the_session() {
    let zk = Zk::start();
    spans::dead_holders_freed(
        &|args| zk.lc_session("/s", SESSION, args),
        |key, tag| queued(&zk, &format!("/s/{key}"), tag),
        "session 2 s",
    );
}

/// Disagreeing requests are refused with 78 and one line; the key's N
/// changes once nobody holds or waits for it.
#[test]
fn disagreeing_modes_and_limits_are_refused() {
    let zk = Zk::start();
    let mut holder = Kids(vec![zk
        .lc("/s", &["lock", "--limit", "2", "m", "sleep", "30"])
        .spawn()
        .unwrap()]);
    assert!(wait_until(Duration::from_secs(10), || !zk
        .children("/s/m/leases")
        .is_empty()));
    for args in [
        &["trylock", "--limit", "3", "m", "true"][..],
        &["lock", "m", "true"],
        &["lock", "-s", "m", "true"],
        &["wait", "-x", "m"],
    ] {
        let err = expect_error_line(&mut zk.lc_session("/s", SESSION, args), 78);
        assert!(err.contains("--limit 2"), "{err}");
    }
    // The same N is not refused: the second lease is free.
    expect_status(
        &mut zk.lc_session(
            "/s",
            SESSION,
            &["lock", "-w", "0.5", "--limit", "2", "m", "true"],
        ),
        0,
    );
    if let Some(mut c) = holder.0.pop() {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    holder = Kids(vec![zk
        .lc("/s", &["lock", "-s", "r", "sleep", "30"])
        .spawn()
        .unwrap()]);
    assert!(wait_until(Duration::from_secs(10), || !zk
        .children("/s/r")
        .is_empty()));
    let out = expect_status(
        &mut zk.lc_session("/s", SESSION, &["lock", "--limit", "2", "r", "true"]),
        78,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("as a lock"));
    // Shared holders take shared requests at once, exclusive ones wait.
    expect_status(
        &mut zk.lc_session("/s", SESSION, &["trylock", "-s", "r", "true"]),
        0,
    );
    expect_status(
        &mut zk.lc_session("/s", SESSION, &["trylock", "r", "true"]),
        1,
    );
    drop(holder);
    // Free again (the killed holder's session gone): another N is fine.
    assert!(wait_until(Duration::from_secs(10), || zk
        .children("/s/m/leases")
        .is_empty()));
    expect_status(
        &mut zk.lc_session("/s", SESSION, &["trylock", "--limit", "3", "m", "true"]),
        0,
    );
}

fn peer_waiting(child: &mut std::process::Child) {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "waiting");
}

/// Curator's InterProcessReadWriteLock and lc-cli on one path: a Curator
/// reader holds, an lc-cli reader joins it, an lc-cli writer waits behind
/// both, a Curator reader that came after the writer waits for it, then a
/// Curator writer, then an lc-cli reader: in that order, writers alone.
#[test]
fn curator_read_write_lock_and_lc_cli_queue_together() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let hosts = zk.hosts();
    let mut kids = Kids(Vec::new());
    let java = |recipe, hold, tag: &str, kids: &mut Kids| {
        let before = zk.children("/s/crw");
        let mut c = curator::peer(&hosts, "/s/crw", recipe, hold, &log, tag);
        peer_waiting(&mut c);
        kids.0.push(c);
        assert!(
            wait_until(Duration::from_secs(20), || {
                // A new queue node (not an lc-cli hold's history entry).
                zk.children("/s/crw")
                    .iter()
                    .any(|n| !before.contains(n) && !n.starts_with("_c_lc-"))
            }),
            "the Curator peer {tag} did not queue"
        );
        spans::note(&log, "arrive", tag);
    };
    java(Recipe::Read, 3000, "jr1", &mut kids);
    let lc = |mode: &str, tag: &str, kids: &mut Kids| {
        let (_, mut cmd) = contender(&zk, &log, &[mode], "crw", tag, 0.8);
        kids.0.push(cmd.spawn().unwrap());
        assert!(wait_until(Duration::from_secs(20), || queued(
            &zk, "/s/crw", tag
        )));
        spans::note(&log, "arrive", tag);
    };
    lc("-s", "lr1", &mut kids);
    lc("-x", "lw1", &mut kids);
    java(Recipe::Read, 800, "jr2", &mut kids);
    java(Recipe::Write, 800, "jw1", &mut kids);
    lc("-s", "lr2", &mut kids);
    kids.all_succeed(Duration::from_secs(60));
    let spans = spans::read(&log);
    assert_eq!(
        spans::tags(&spans),
        ["jr1", "lr1", "lw1", "jr2", "jw1", "lr2"],
        "{spans:#?}"
    );
    let s = |t| spans::by_tag(&spans, t);
    assert!(spans::overlap(s("jr1"), s("lr1")), "{spans:#?}");
    spans::assert_alone(&spans, &["lw1", "jw1"]);
    // Every node, lc-cli's and Curator's, is gone (lc-cli's holds left
    // their history entries, `_c_lc-history-`).
    let left: Vec<String> = zk
        .children("/s/crw")
        .into_iter()
        .filter(|n| !n.starts_with("_c_lc-history-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Curator's InterProcessSemaphoreV2 (2 leases) and lc-cli `--limit 2` on
/// one path: two Curator holders, two lc-cli waiters, a Curator waiter
/// behind them; at most 2 at once, in arrival order.
#[test]
fn curator_semaphore_and_lc_cli_share_the_leases() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let hosts = zk.hosts();
    let mut kids = Kids(Vec::new());
    let nodes = || zk.children("/s/cs/leases").len() + zk.children("/s/cs/locks").len();
    for tag in ["j1", "j2"] {
        let mut c = curator::peer(&hosts, "/s/cs", Recipe::Semaphore(2), 1200, &log, tag);
        peer_waiting(&mut c);
        kids.0.push(c);
        let want = kids.0.len();
        assert!(wait_until(
            Duration::from_secs(20),
            || std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("start j")
                .count()
                == want
        ));
        spans::note(&log, "arrive", tag);
    }
    for tag in ["l1", "l2"] {
        let (_, mut cmd) = contender(&zk, &log, &["--limit", "2"], "cs", tag, 1.0);
        kids.0.push(cmd.spawn().unwrap());
        assert!(wait_until(Duration::from_secs(20), || queued(
            &zk, "/s/cs", tag
        )));
        spans::note(&log, "arrive", tag);
    }
    let before = nodes();
    let mut c = curator::peer(&hosts, "/s/cs", Recipe::Semaphore(2), 800, &log, "j3");
    peer_waiting(&mut c);
    kids.0.push(c);
    assert!(wait_until(Duration::from_secs(20), || nodes() > before
        || std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("start j3")));
    spans::note(&log, "arrive", "j3");
    kids.all_succeed(Duration::from_secs(60));
    let spans = spans::read(&log);
    assert_eq!(spans::max_overlap(&spans), 2, "{spans:#?}");
    let order = spans::tags(&spans);
    assert_eq!(&order[2..], ["l1", "l2", "j3"], "{spans:#?}");
    let gap = spans::longest_shortfall_ms(&spans, 2);
    assert!(
        gap < 800.0,
        "a lease stayed free {gap} ms while others waited: {spans:#?}"
    );
}

#[test]
fn keys_and_resets_of_shared_and_limited_keys() {
    let zk = Zk::start();
    spans::keys_and_resets(&|args| zk.lc_session("/s", SESSION, args));
}
