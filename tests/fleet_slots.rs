//! Issue 45 item 2, which slot: `--slots db1,db2,db3` tells each holder's
//! command its slot in `LC_SLOT`, `--limit 3` its index (0 to 2). Judged
//! from the commands' own logs: at most one holder per slot at any
//! instant, every slot used, arrival order kept. PostgreSQL only so far
//! (docs/fleet-slots.md says which backends tell the slot).

use crate::common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::pg::PgServer;
use common::slots::{check_slots, check_started_in_order, runs, script, Run};
use common::*;

const LIMIT: Duration = Duration::from_secs(30);

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

#[test]
fn pg_named_slots_one_holder_each() {
    let pg = PgServer::start();
    let runs = contend(&pg, "pool", &["--slots", "db1,db2,db3"]);
    check_slots(&runs, &["db1", "db2", "db3"]);
    check_started_in_order(&runs);
    let runs = contend(&pg, "pool3", &["--limit", "3"]);
    check_slots(&runs, &["0", "1", "2"]);
    check_started_in_order(&runs);
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
