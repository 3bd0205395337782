//! The backends that cannot take shared or limited locks refuse them with
//! one line and 76, before anything is granted: never an exclusive lock in
//! their place (PostgreSQL `--limit`; a reference Locking-Center server, in
//! `serve_shared.rs`); PostgreSQL's shared advisory locks keep
//! the order across modes.

mod common;

use std::process::Command;
use std::time::Duration;

use common::pg::PgServer;
use common::spans;
use common::*;

fn refused(mut lc: impl FnMut(&[&str]) -> Command, what: &str, requests: &[&[&str]]) {
    for args in requests {
        let err = expect_error_line(&mut lc(args), 76);
        assert!(err.contains(what) && err.contains("cannot take"), "{err}");
    }
    // The key was never taken: an exclusive trylock gets it.
    expect_status(&mut lc(&["trylock", "k", "true"]), 0);
    // --limit 1 is the exclusive lock.
    expect_status(&mut lc(&["trylock", "--limit", "1", "k", "true"]), 0);
}

/// Whether `tag`'s session holds or waits for an advisory lock.
fn pg_queued(pg: &PgServer, tag: &str) -> bool {
    let n = pg.sql(&format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND a.application_name LIKE '%{tag}'"
    ));
    n.trim() != "0"
}

/// --limit is refused; -s is PostgreSQL's shared advisory lock: readers
/// together, writers alone, in arrival order across modes.
#[test]
fn postgres_refuses_limits_and_shares_in_order() {
    let pg = PgServer::start();
    refused(
        |args| pg.lc(args),
        "PostgreSQL",
        &[&["lock", "--limit", "2", "k", "true"]],
    );
    spans::readers_and_writers(&|args| pg.lc(args), |tag| pg_queued(&pg, tag));
    // keys shows both shared holders.
    let mut holder = spans::Kids(vec![pg
        .lc(&["lock", "-s", "k2", "sleep", "30"])
        .spawn()
        .unwrap()]);
    holder
        .0
        .push(pg.lc(&["lock", "-s", "k2", "sleep", "30"]).spawn().unwrap());
    assert!(wait_until(Duration::from_secs(10), || {
        let out = pg.lc(&["keys", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .matches("\"shared\"")
            .count()
            == 2
    }));
}
