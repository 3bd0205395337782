//! Deploy queues on PostgreSQL (issue 44), against a real server: the
//! scenarios every backend runs (common::deploy), what a restart of the
//! server does (it ends every session: the page's promise, tested instead
//! of `pipelines_across_a_restart` and `orders` with a restart), what a role
//! without the CREATE privilege gets, and the round trips of a request
//! with fields against one without.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::deploy::{self, deploy, mark, until_waiting, OUTDATED};
use common::pg::{PgServer, PASSWORD};
use common::{wait_until, BIN};

/// lc-cli with `url` in front, for scenarios whose server restarts (the
/// closure must not borrow the server).
fn lc_at(url: String) -> impl Fn(&[&str]) -> Command {
    move |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.arg("--server").arg(&url).args(args);
        cmd.env_remove("LC_SERVER")
            .env_remove("LC_SOURCE")
            .env_remove("PGPASSWORD");
        cmd
    }
}

#[test]
fn newest_wins() {
    let pg = PgServer::start();
    let lc = |a: &[&str]| pg.lc(a);
    let delays = deploy::newest_wins(&lc, "deploy/prod");
    eprintln!("superseded after (ms): {delays:.1?}");
}

#[test]
fn orders_in_line() {
    let pg = PgServer::start();
    let lc = |a: &[&str]| pg.lc(a);
    deploy::orders(&lc, "deploy/prod", false, None);
}

#[test]
fn orders_with_newest() {
    let pg = PgServer::start();
    let lc = |a: &[&str]| pg.lc(a);
    deploy::orders(&lc, "deploy/prod", true, None);
}

/// The mark is a row of `lc_cli.marks`: it survives a crash and restart
/// of the server (SIGKILL to every process of it, then crash recovery).
#[test]
fn mark_rules_across_a_restart() {
    let mut pg = PgServer::start();
    let lc = lc_at(pg.url());
    deploy::mark_rules(
        &lc,
        "deploy/prod",
        Some(&mut || {
            pg.kill();
            pg.restart();
        }),
    );
}

#[test]
fn cancel_running() {
    let pg = PgServer::start();
    let lc = |a: &[&str]| pg.lc(a);
    let gaps = deploy::cancel_running(&lc, "deploy/prod", 5);
    eprintln!("the newer command started after the older one's end (ms): {gaps:.1?}");
}

#[test]
fn no_cancel_without_the_flag() {
    let pg = PgServer::start();
    let lc = |a: &[&str]| pg.lc(a);
    deploy::no_cancel_without_the_flag(&lc, "deploy/prod");
}

/// What the page says of a restart: it ends every session, so the holder's
/// command is stopped (75, the lock lost) and each waiter exits 69; its
/// mark stays where the last success left it (the stopped run does not
/// raise it), the lines' rows are gone (an unlogged table, emptied by the
/// crash recovery), and the pipelines run again in order: the newest runs,
/// an older one is outdated.
#[test]
fn a_restart_ends_the_holder_and_the_waiters() {
    let mut pg = PgServer::start();
    let lc = lc_at(pg.url());
    let lc: common::spans::Lc = &lc;
    let key = "deploy/prod";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let first = deploy(lc, &log, key, "v4-first", 0.0, 0, &["--order", "4"]);
    assert_eq!(first.status(), Some(0), "{}", first.stderr());
    let holder = deploy(lc, &log, key, "v4", 30.0, 0, &["--newest", "--order", "4"]);
    assert!(wait_until(Duration::from_secs(30), || deploy::started(
        &log, "v4"
    )));
    let v7 = deploy(lc, &log, key, "v7", 0.1, 0, &["--newest", "--order", "7"]);
    until_waiting(lc, &log, key, &v7);
    assert_eq!(pg.sql("select count(*) from lc_cli.requests"), "2");
    pg.kill();
    pg.restart();
    assert_eq!(holder.status(), Some(75), "v4: {}", holder.stderr());
    assert_eq!(v7.status(), Some(69), "v7: {}", v7.stderr());
    assert!(!deploy::started(&log, "v7"));
    assert_eq!(pg.sql("select count(*) from lc_cli.requests"), "0");
    assert_eq!(mark(lc, key), Some(4), "the stopped run raised the mark");
    let again = deploy(
        lc,
        &log,
        key,
        "v7-again",
        0.0,
        0,
        &["--newest", "--order", "7"],
    );
    assert_eq!(again.status(), Some(0), "{}", again.stderr());
    let late = deploy(lc, &log, key, "v5", 0.0, 0, &["--newest", "--order", "5"]);
    assert_eq!(late.status(), Some(OUTDATED), "{}", late.stderr());
    assert_eq!(mark(lc, key), Some(7));
}

/// A waiter's row holds its field list where psql sees it, and dead
/// sessions' rows do not count: a killed waiter's row is ignored, and the
/// next arrival on the key deletes it.
#[test]
fn rows_as_psql_sees_them() {
    let pg = PgServer::start();
    let lc = |a: &[&str]| pg.lc(a);
    let key = "deploy/prod";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let holder = deploy(&lc, &log, key, "h", 30.0, 0, &["--note", "first"]);
    assert!(wait_until(Duration::from_secs(30), || deploy::started(
        &log, "h"
    )));
    let w = deploy(&lc, &log, key, "w", 0.1, 0, &["--newest", "--order", "9"]);
    until_waiting(&lc, &log, key, &w);
    let rows =
        pg.sql("select source, replace(fields, chr(10), ';') from lc_cli.requests order by since");
    assert_eq!(rows, "h|note=first;\nw|order=9;newest=1;", "{rows}");
    // A killed waiter leaves its row; a newer --newest request is not
    // superseded by it and deletes it.
    drop(w);
    assert!(wait_until(Duration::from_secs(10), || pg.waiters(key) == 0));
    let v = deploy(&lc, &log, key, "v", 0.1, 0, &["--newest", "--order", "3"]);
    until_waiting(&lc, &log, key, &v);
    let rows = pg.sql("select source from lc_cli.requests order by since");
    assert_eq!(rows, "h\nv", "{rows}");
    drop(holder);
    assert_eq!(v.status(), Some(0), "{}", v.stderr());
}

/// A role that may not create lc-cli's tables: a request with fields is
/// refused at once (76) in one line naming the privilege; without fields,
/// its locks work as before.
#[test]
fn refused_without_the_create_privilege() {
    let pg = PgServer::start();
    pg.sql("create role plain login password 'plain-pw'");
    let url = format!("postgres://plain:plain-pw@127.0.0.1:{}/postgres", pg.port);
    let lc = lc_at(url);
    let out = lc(&["lock", "--order", "3", "k", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("CREATE privilege on database 'postgres'"),
        "{err}"
    );
    let out = lc(&["lock", "k", "--", "true"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A superseded waiter whose session the newer request may not signal
/// (another role, without `pg_signal_backend`) is marked all the same: it
/// is not interrupted, and leaves without running when its turn comes.
#[test]
fn a_waiter_of_another_role_leaves_at_its_turn() {
    let pg = PgServer::start();
    let key = "deploy/prod";
    // The tables, made by the superuser, then opened to two roles.
    let out = pg
        .lc(&["lock", "--order", "1", "warm", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for role in ["ci_a", "ci_b"] {
        pg.sql(&format!(
            "create role {role} login password 'pw'; grant usage on schema lc_cli to {role}; \
             grant select, insert, update, delete on all tables in schema lc_cli to {role}; \
             grant usage on all sequences in schema lc_cli to {role}"
        ));
    }
    let as_role = |role: &str| {
        lc_at(format!(
            "postgres://{role}:pw@127.0.0.1:{}/postgres",
            pg.port
        ))
    };
    let (a, b) = (as_role("ci_a"), as_role("ci_b"));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let holder = deploy(&a, &log, key, "h", 1.5, 0, &[]);
    assert!(wait_until(Duration::from_secs(30), || deploy::started(
        &log, "h"
    )));
    let old = deploy(&a, &log, key, "old", 0.1, 0, &["--newest"]);
    until_waiting(&a, &log, key, &old);
    let new = deploy(&b, &log, key, "new", 0.1, 0, &["--newest"]);
    until_waiting(&b, &log, key, &new);
    assert_eq!(
        pg.sql(
            "select source || ' by ' || by_source from lc_cli.requests where by_pid is not null"
        ),
        "old by new"
    );
    assert_eq!(holder.status(), Some(0), "{}", holder.stderr());
    assert_eq!(old.status(), Some(deploy::SUPERSEDED), "{}", old.stderr());
    assert!(old.stderr().contains("'new'"), "{}", old.stderr());
    assert_eq!(new.status(), Some(0), "{}", new.stderr());
    let spans = deploy::alone(&log);
    assert_eq!(common::spans::tags(&spans), ["h", "new"]);
}

/// A TCP relay to `to` that counts the client's flights: each time the
/// client sends after the server last did (or first), one round trip.
pub(crate) fn counting_relay(to: u16) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let flights = Arc::new(AtomicUsize::new(0));
    let count = flights.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { break };
            let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let last = Arc::new(Mutex::new(0u8));
            pump(&client, &server, 1, last.clone(), Some(count.clone()));
            pump(&server, &client, 2, last, None);
        }
    });
    (port, flights)
}

fn pump(
    from: &TcpStream,
    to: &TcpStream,
    side: u8,
    last: Arc<Mutex<u8>>,
    count: Option<Arc<AtomicUsize>>,
) {
    let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut l = last.lock().unwrap();
            if *l != side {
                *l = side;
                if let Some(c) = &count {
                    c.fetch_add(1, Ordering::SeqCst);
                }
            }
            drop(l);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

/// Round trips of an uncontended `lock --newest --order N k -- true`
/// against `lock k -- true`, in the same rounds (the fewest of 5 each,
/// pings of the held session left out that way): at most one more.
#[test]
fn round_trips() {
    let pg = PgServer::start();
    let (port, flights) = counting_relay(pg.port);
    let lc = lc_at(format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"
    ));
    let run = |args: &[&str]| -> usize {
        let before = flights.load(Ordering::SeqCst);
        let out = lc(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The relay's count settles once the session's end went through.
        std::thread::sleep(Duration::from_millis(100));
        flights.load(Ordering::SeqCst) - before
    };
    // The first request with fields creates the tables.
    run(&["lock", "--order", "1", "warm", "--", "true"]);
    let (mut plain, mut fields) = (usize::MAX, usize::MAX);
    for n in 0..5 {
        plain = plain.min(run(&["lock", "k", "--", "true"]));
        let order = (10 + n).to_string();
        fields = fields.min(run(&[
            "lock", "--newest", "--order", &order, "k", "--", "true",
        ]));
    }
    eprintln!("round trips: lock k -- true: {plain}; lock --newest --order N k -- true: {fields}");
    assert!(fields <= plain + 1, "{fields} against {plain}");
}

/// `pipelines_across_a_restart` cannot hold here as written: a restart of
/// PostgreSQL ends every session, so each waiter exits 69 (the page says
/// so; `a_restart_ends_the_holder_and_the_waiters` tests it). Named here so
/// that the scenario is not left unused in this backend's build.
#[allow(dead_code)]
const NOT_ON_POSTGRES: fn(common::spans::Lc, &str, &mut dyn FnMut()) =
    deploy::pipelines_across_a_restart;
