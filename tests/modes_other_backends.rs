//! Modes on PostgreSQL's advisory locks: `-s` keeps the order across modes
//! (`--limit`: pg_limit.rs; etcd's modes: etcd_shared.rs; a reference
//! Locking-Center server's refusal: serve_shared.rs).

use crate::common;

use std::time::Duration;

use common::pg::PgServer;
use common::spans;
use common::*;

/// Whether `tag`'s session holds or waits for an advisory lock.
fn pg_queued(pg: &PgServer, tag: &str) -> bool {
    let n = pg.sql(&format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND a.application_name LIKE '%{tag}'"
    ));
    n.trim() != "0"
}

/// -s is PostgreSQL's shared advisory lock: readers together, writers
/// alone, in arrival order across modes (--limit: pg_limit.rs).
#[test]
fn postgres_shares_in_order() {
    let pg = PgServer::start();
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
