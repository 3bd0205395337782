//! Issue 45 item 2, which slot: `--slots db1,db2,db3` tells each holder's
//! command its slot in `LC_SLOT`, `--limit 3` its index (0 to 2). Judged
//! from the commands' own logs: at most one holder per slot at any
//! instant, every slot used, arrival order kept. PostgreSQL only so far
//! (docs/fleet-slots.md says which backends tell the slot).

use crate::common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::pg::PgServer;
use common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// One command's log line: its index, LC_SLOT, start and end (seconds).
#[derive(Debug)]
struct Run {
    i: usize,
    slot: String,
    start: f64,
    end: f64,
}

/// The script a contender runs: logs LC_SLOT with its start and end.
fn script(log: &str, i: usize) -> String {
    format!(
        "s=$(date +%s.%N); sleep 1; e=$(date +%s.%N); echo \"{i} ${{LC_SLOT:-none}} $s $e\" >> {log}"
    )
}

fn runs(log: &std::path::Path) -> Vec<Run> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Run {
                i: f[0].parse().unwrap(),
                slot: f[1].to_string(),
                start: f[2].parse().unwrap(),
                end: f[3].parse().unwrap(),
            }
        })
        .collect()
}

/// 12 contenders, 0.25 s apart, each holding 1 s: returns their logs.
fn contend(pg: &PgServer, key: &str, mode: &[&str]) -> Vec<Run> {
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
            pg.lc(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(wait_until(LIMIT, || runs(&log).len() == 12));
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    runs(&log)
}

/// At most one holder per slot at any instant, every slot used, and the
/// commands started in their arrival order.
fn check(runs: &[Run], slots: &[&str]) {
    for a in runs {
        assert!(slots.contains(&a.slot.as_str()), "unknown slot: {a:?}");
        for b in runs {
            if a.i != b.i && a.slot == b.slot {
                assert!(
                    a.end <= b.start || b.end <= a.start,
                    "two holders of slot {}: {a:?} {b:?}",
                    a.slot
                );
            }
        }
    }
    for s in slots {
        assert!(runs.iter().any(|r| r.slot == *s), "slot {s} never used");
    }
    let mut by_start: Vec<&Run> = runs.iter().collect();
    by_start.sort_by(|a, b| a.start.partial_cmp(&b.start).unwrap());
    let order: Vec<usize> = by_start.iter().map(|r| r.i).collect();
    assert_eq!(order, (0..12).collect::<Vec<_>>(), "arrival order lost");
}

#[test]
fn pg_named_slots_one_holder_each() {
    let pg = PgServer::start();
    let runs = contend(&pg, "pool", &["--slots", "db1,db2,db3"]);
    check(&runs, &["db1", "db2", "db3"]);
    let runs = contend(&pg, "pool3", &["--limit", "3"]);
    check(&runs, &["0", "1", "2"]);
    // --limit that disagrees with --slots: a usage error (64).
    let out = pg
        .lc(&["lock", "--slots", "a,b", "--limit", "3", "k", "-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

/// Where no slot can be told, `--slots` is refused at once (one line, 76)
/// and nothing is taken: the key is free after it. The built-in protocol
/// against a reference Locking-Center server (played by `lc-cli serve`
/// in its reference mode), which takes no `--limit`; an `lc-cli serve`
/// from before slots: tests/fleet_slots_builtin.rs.
#[test]
fn slots_refused_where_no_slot_is_told() {
    let server = Serve::new().env("LC_CLI_SERVE_AS_REFERENCE", "1").start();
    let line = expect_error_line(
        &mut server.lc(&["lock", "--slots", "db1,db2", "pool", "--", "true"]),
        76,
    );
    assert!(
        line.contains("cannot take shared or limited locks (asked for --limit 2"),
        "{line}"
    );
    expect_status(&mut server.lc(&["trylock", "pool", "--", "true"]), 0);
}

#[test]
fn zookeeper_refuses_slots_at_once() {
    // Nothing listens there: the refusal comes before anything is sent.
    let line = expect_error_line(
        &mut lc_at(
            "zk://127.0.0.1:1/h",
            &["lock", "--slots", "a,b", "k", "--", "true"],
        ),
        76,
    );
    assert!(
        line.contains("cannot take --slots: it cannot tell a holder which slot it has yet"),
        "{line}"
    );
}
