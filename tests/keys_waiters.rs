//! `keys --waiters` on Redis (its queue) and PostgreSQL (`pg_locks` rows
//! not granted): three waiters in arrival order (the built-in server's,
//! ZooKeeper's and etcd's cases are in `serve_lockport.rs`, `zk_keys.rs`
//! and `etcd_keys.rs`).

use crate::common;

use common::pg::PgServer;
use common::redis::{lc as redis_lc, RedisServer};

#[test]
fn redis_lists_its_queue_in_line_order() {
    let r = RedisServer::start();
    let url = r.url();
    common::waiters::three_in_order(|args| redis_lc(&url, args), "q", || r.queued("q") as usize);
}

#[test]
fn postgresql_lists_the_sessions_that_wait_in_line_order() {
    let p = PgServer::start();
    common::waiters::three_in_order_behind_a_command(
        |args| p.lc(args),
        "q",
        || p.held("q"),
        || p.waiters("q"),
    );
}
