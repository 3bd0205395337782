//! `lc-cli history KEY` on PostgreSQL (issue 46 item 2, docs/history.md),
//! through the real binary against a real server: holds of one key ending
//! in five ways (exit 0, exit 3, a reset by an operator, the holding lc-cli
//! SIGKILLed, a holder cut off by a partition) are listed newest first with
//! how each ended (the last two as `freed`: the server cannot tell them
//! apart, and they are found by whoever looks next) and the status where it
//! was reported; the same after the server is killed and started again; the
//! cap (150 holds: 100 kept); a role that may not create lc-cli's tables
//! locks as before and is told in one line that no history is kept.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::pg::{PgServer, PASSWORD};
use common::proxy::Proxy;
use common::*;

/// How long any one wait of these tests may take (a loaded machine).
const LIMIT: Duration = Duration::from_secs(20);

fn history(pg: &PgServer, key: &str) -> Vec<serde_json::Value> {
    let out = expect_status(
        &mut pg.lc(&["history", key, "--json", "--limit", "1000"]),
        0,
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn until_entries(pg: &PgServer, key: &str, n: usize) {
    assert!(
        wait_until(LIMIT, || history(pg, key).len() >= n),
        "'{key}': {:?}, not {n} entries",
        history(pg, key)
    );
}

/// A holder whose command says it runs (a file), then sleeps; returned
/// once the command runs (the grant and its record are done).
fn holder(mut cmd: Command, ran: &std::path::Path) -> std::process::Child {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    assert!(wait_until(LIMIT, || ran.exists()), "the command never ran");
    child
}

/// `lock KEY -- sh -c 'touch RAN; exec sleep 30'`
fn sleeper(key: &str, ran: &std::path::Path) -> Vec<String> {
    let script = format!("touch {}; exec sleep 30", ran.display());
    ["lock", key, "--", "sh", "-c", &script]
        .iter()
        .map(|s| s.to_string())
        .collect()
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
fn five_endings_newest_first_and_after_a_restart() {
    let mut pg = PgServer::start();
    let key = "deploy/prod";
    expect_status(
        &mut pg.lc(&["lock", "--note", "first", key, "--", "true"]),
        0,
    );
    expect_status(&mut pg.lc(&["lock", key, "--", "sh", "-c", "exit 3"]), 3);
    until_entries(&pg, key, 2);

    // Reset by an operator: its session is ended and the hold recorded.
    let dir = tempfile::tempdir().unwrap();
    let ran = |n: &str| dir.path().join(n);
    let args = sleeper(key, &ran("reset"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let reset = holder(pg.lc(&args), &ran("reset"));
    let said = expect_status(&mut pg.lc(&["reset", key]), 0);
    let mut reset = reset;
    if !wait_until(LIMIT, || reset.try_wait().unwrap().is_some()) {
        panic!(
            "reset said {:?}; sessions: {}; locks: {}",
            String::from_utf8_lossy(&said.stderr),
            pg.sql("select pid, application_name, state, query from pg_stat_activity"),
            pg.sql("select pid, objid, granted from pg_locks where locktype = 'advisory'")
        );
    }
    let (code, err) = finish_within(LIMIT, reset);
    assert_eq!(code, Some(75), "{err}");
    until_entries(&pg, key, 3);

    // The holding lc-cli SIGKILLed: its session ends with its connection,
    // and `history` finds the hold gone.
    let args = sleeper(key, &ran("killed"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut killed = holder(pg.lc(&args), &ran("killed"));
    killed.kill().unwrap();
    let _ = killed.wait();
    assert!(wait_until(LIMIT, || !pg.held(key)), "still held");
    until_entries(&pg, key, 4);

    // Cut off by a partition: lc-cli stops its command (75); the server
    // frees the session once the connection ends.
    let proxy = Proxy::start(pg.port);
    let url = format!(
        "postgres://postgres:{PASSWORD}@{}/postgres?keepalive=2s",
        proxy.addr()
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["--server", &url]).args(sleeper(key, &ran("cut")));
    let cut = holder(cmd, &ran("cut"));
    proxy.freeze();
    let (code, err) = finish_within(LIMIT, cut);
    assert_eq!(code, Some(75), "{err}");
    drop(proxy);
    assert!(wait_until(LIMIT, || !pg.held(key)), "still held");
    until_entries(&pg, key, 5);

    let check = |entries: &[serde_json::Value]| {
        assert_eq!(
            endings(entries),
            vec![
                ("freed".to_string(), None),
                ("freed".to_string(), None),
                ("reset".to_string(), None),
                ("released".to_string(), Some(3)),
                ("released".to_string(), Some(0)),
            ],
            "{entries:?}"
        );
        let first = &entries[4];
        assert_eq!(first["fields"]["note"], "first", "{first}");
        assert_eq!(first["ident"], "postgres", "{first}");
        assert!(first["token"].as_u64().is_some(), "{first}");
        assert!(first["granted"].is_string() && first["ended_at"].is_string());
        assert!(entries[2]["by"].is_string(), "{}", entries[2]);
        let tokens: Vec<u64> = entries.iter().filter_map(|e| e["token"].as_u64()).collect();
        assert!(tokens.windows(2).all(|w| w[0] > w[1]), "{tokens:?}");
    };
    let before = history(&pg, key);
    check(&before);

    // Killed and started again: the history is in a table.
    pg.kill();
    pg.restart();
    assert_eq!(history(&pg, key), before);
    let table = expect_status(&mut pg.lc(&["history", key, "--limit", "2"]), 0);
    let table = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(table.lines().nth(1).unwrap().contains("freed"), "{table}");
}

#[test]
fn the_cap_keeps_the_newest_hundred() {
    let pg = PgServer::start();
    let key = "nightly";
    for i in 0..150 {
        let note = format!("run {i}");
        expect_status(&mut pg.lc(&["lock", "--note", &note, key, "--", "true"]), 0);
    }
    let entries = history(&pg, key);
    assert_eq!(entries.len(), 100);
    assert_eq!(entries[0]["fields"]["note"], "run 149");
    assert_eq!(entries[99]["fields"]["note"], "run 50");
    assert_eq!(
        pg.sql("select count(*) from lc_cli.history where key = 'nightly'"),
        "100"
    );
    assert_eq!(pg.sql("select count(*) from lc_cli.holds"), "0");
}

#[test]
fn a_role_that_may_not_create_the_tables_locks_without_history() {
    let pg = PgServer::start();
    pg.sql("create role plain login password 'plain'");
    let url = format!("postgres://plain:plain@127.0.0.1:{}/postgres", pg.port);
    let mut cmd = Command::new(BIN);
    cmd.args(["--server", &url, "lock", "k", "--", "true"]);
    let out = expect_status(&mut cmd, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("no history of 'k' is kept") && lines[0].contains("CREATE"),
        "{err}"
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["--server", &url, "history", "k"]);
    let out = expect_status(&mut cmd, 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}
