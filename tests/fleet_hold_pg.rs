//! `--hold-at-least` on PostgreSQL (issue 45, item 1; docs/fleet-jobs.md,
//! docs/backends/postgresql.md): the rest of the window is a row of
//! `lc_cli.kept` with its deadline on the server's clock, written at the
//! command's end ahead of the unlock; every lc-cli grant reads it. Three
//! skewed "hosts" under libfaketime run once per tick
//! (`fleet_hold::once_per_tick`, which also clears a window with
//! `unlock`); the kept window shows in `keys` with its deadline, keeps
//! `trylock` and a waiting `lock` out, is cleared by `unlock` and `reset`
//! (which wake the waiting `lock`), frees itself at its deadline, and
//! survives a crash and restart of PostgreSQL; a role that may not create
//! the table is told in one line (76) and the key is free again; a SIGKILLed
//! lc-cli keeps no window; the kept window adds no round trip.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::hold::*;
use common::pg::PgServer;
use common::*;

/// A `lock KEY -- true` started now, waiting.
fn waiting_lock(lc: Lc, key: &str) -> std::process::Child {
    lc(&["lock", key, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Its status once it ends, within `limit` (bounded); None if it did not.
fn ended_within(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn once_per_tick() {
    let pg = PgServer::start();
    crate::fleet_hold::once_per_tick(&|args: &[&str]| pg.lc(args));
    // The window was a row, gone or expired: nothing of it holds a lock.
    assert!(!pg.held("job"));
}

/// The kept window shows in `keys` (kept, with a deadline about the
/// window after the grant), keeps `trylock` and a waiting `lock` out, and is
/// cleared by `unlock` and by `reset` (the waiting `lock` then runs, long
/// before the window's end); a short one frees itself; a command that
/// outlasts its window releases at its end.
#[test]
fn kept_window_shows_and_clears() {
    let pg = PgServer::start();
    let lc = |args: &[&str]| pg.lc(args);
    let before = now_ms();
    run_with_window(&lc, "k", "60s");
    let after = now_ms();
    let e = entry(&lc, "k").expect("held after the command");
    assert_eq!(e["kept"], true, "{e}");
    let at = expires_ms(&e);
    assert!(at <= after + 60_000 + 1000, "{e}");
    assert!(at >= before + 60_000 - 10_000, "{e}");
    // No session holds the advisory lock: the row keeps the key.
    assert!(!pg.held("k"));
    let out = expect_status(&mut lc(&["trylock", "k", "--", "true"]), 1);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("held by"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A waiting lock is kept out, then runs once `unlock` clears the window.
    let mut waiter = waiting_lock(&lc, "k");
    assert_eq!(ended_within(&mut waiter, Duration::from_secs(2)), None);
    expect_status(&mut lc(&["unlock", "k"]), 0);
    assert_eq!(ended_within(&mut waiter, Duration::from_secs(30)), Some(0));
    assert!(entry(&lc, "k").is_none());
    expect_status(&mut lc(&["trylock", "k", "--", "true"]), 0);
    // Nothing kept any more: unlock says so (1).
    expect_status(&mut lc(&["unlock", "k"]), 1);

    run_with_window(&lc, "r", "60s");
    let mut waiter = waiting_lock(&lc, "r");
    assert_eq!(ended_within(&mut waiter, Duration::from_secs(2)), None);
    expect_status(&mut lc(&["reset", "r"]), 0);
    assert_eq!(ended_within(&mut waiter, Duration::from_secs(30)), Some(0));
    assert!(entry(&lc, "r").is_none());
    expect_status(&mut lc(&["trylock", "r", "--", "true"]), 0);

    // A short window: held just after, free once it is over, never before.
    run_with_window(&lc, "short", "3s");
    let at = expires_ms(&entry(&lc, "short").expect("kept"));
    expect_status(&mut lc(&["trylock", "short", "--", "true"]), 1);
    taken_within(&lc, "short", FREED_WITHIN);
    assert!(now_ms() >= at - 50, "'short' taken before its deadline");

    // A command that outlasts its window releases at its end as usual.
    expect_status(
        &mut lc(&[
            "trylock",
            "--hold-at-least",
            "1ms",
            "long",
            "--",
            "sleep",
            "0.2",
        ]),
        0,
    );
    assert!(entry(&lc, "long").is_none());
    expect_status(&mut lc(&["trylock", "long", "--", "true"]), 0);
}

/// `unlock` refuses a key held by a running command (only `reset` ends
/// that), and `reset --source` clears a source's kept windows.
#[test]
fn unlock_and_reset_by_source() {
    let pg = PgServer::start();
    let lc = |args: &[&str]| pg.lc(args);
    let url = pg.url();
    let inner = format!("{BIN} --server {url} unlock busy");
    let out = expect_status(&mut lc(&["trylock", "busy", "-c", &inner]), 76);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("running"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    expect_status(
        &mut lc(&[
            "trylock",
            "--source",
            "box-a",
            "--hold-at-least",
            "60s",
            "s1",
            "--",
            "true",
        ]),
        0,
    );
    assert_eq!(entry(&lc, "s1").expect("kept")["source"], "box-a");
    expect_status(&mut lc(&["trylock", "s1", "--", "true"]), 1);
    expect_status(&mut lc(&["reset", "--source", "box-a"]), 0);
    expect_status(&mut lc(&["trylock", "s1", "--", "true"]), 0);
}

/// The window is a row of a logged table: after SIGKILL to every process
/// of the server and crash recovery, it is still there with the same
/// deadline, keeps others out, and is cleared by `unlock`.
#[test]
fn kept_window_survives_a_restart() {
    let mut pg = PgServer::start();
    run_with_window(&|a: &[&str]| pg.lc(a), "k", "60s");
    let at = expires_ms(&entry(&|a: &[&str]| pg.lc(a), "k").unwrap());
    pg.kill();
    pg.restart();
    let lc = |args: &[&str]| pg.lc(args);
    let e = entry(&lc, "k").expect("still kept after the restart");
    assert_eq!(e["kept"], true, "{e}");
    assert!((expires_ms(&e) - at).abs() <= 1, "{e} vs {at}");
    expect_status(&mut lc(&["trylock", "k", "--", "true"]), 1);
    expect_status(&mut lc(&["unlock", "k"]), 0);
    expect_status(&mut lc(&["trylock", "k", "--", "true"]), 0);
}

/// A role without CREATE (lc-cli's tables not there): the command runs,
/// the window cannot be kept, one line says why (76), and the key is free.
#[test]
fn a_role_that_may_not_create_the_table_is_told_with_76() {
    let pg = PgServer::start();
    pg.sql("create role plain login password 'plain'");
    let url = format!("postgres://plain:plain@127.0.0.1:{}/postgres", pg.port);
    let mut cmd = Command::new(BIN);
    cmd.args([
        "--server",
        &url,
        "trylock",
        "--hold-at-least",
        "60s",
        "k",
        "--",
        "true",
    ]);
    let out = expect_status(&mut cmd, 76);
    let err = String::from_utf8_lossy(&out.stderr);
    let refusal: Vec<&str> = err.lines().filter(|l| l.contains("lc_cli.kept")).collect();
    assert_eq!(refusal.len(), 1, "{err}");
    assert!(
        refusal[0].contains("--hold-at-least") && refusal[0].contains("not kept"),
        "{err}"
    );
    assert!(!pg.held("k"));
    expect_status(&mut pg.lc(&["trylock", "k", "--", "true"]), 0);
}

/// Round trips (the flights of lc-cli's connections, counted by a relay;
/// the fewest of 5 each): `trylock --hold-at-least 60s` whose window is
/// kept against a plain `trylock`, both uncontended: the kept row rides the
/// release's flight and the grant's read the token's (docs/fleet-jobs.md
/// says 0 added; one more is tolerated, as a flight the relay may see split).
#[test]
fn round_trips() {
    let pg = PgServer::start();
    let (port, flights) = crate::queue_pg::counting_relay(pg.port);
    let url = format!(
        "postgres://postgres:{}@127.0.0.1:{port}/postgres",
        common::pg::PASSWORD
    );
    let run = |args: &[&str]| -> usize {
        let before = flights.load(std::sync::atomic::Ordering::SeqCst);
        let out = lc_at(&url, args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The relay's count settles once the session's end went through.
        std::thread::sleep(Duration::from_millis(100));
        flights.load(std::sync::atomic::Ordering::SeqCst) - before
    };
    // The first kept window creates the table.
    run(&["trylock", "--hold-at-least", "60s", "warm", "--", "true"]);
    let (mut plain, mut kept) = (usize::MAX, usize::MAX);
    for n in 0..5 {
        plain = plain.min(run(&["trylock", "k", "--", "true"]));
        let key = format!("kept{n}");
        kept = kept.min(run(&[
            "trylock",
            "--hold-at-least",
            "60s",
            &key,
            "--",
            "true",
        ]));
    }
    eprintln!(
        "round trips: trylock k -- true: {plain}; trylock --hold-at-least 60s k -- true: {kept}"
    );
    assert!(kept <= plain + 1, "{kept} against {plain}");
    assert!(entry(&|a: &[&str]| pg.lc(a), "kept4").is_some());
}

/// lc-cli SIGKILLed while its command runs: the window is not kept (the
/// backend learns of it only at the command's end, docs/fleet-jobs.md):
/// the guardian stops the command and closes the session once it is gone,
/// and the key is free again, well inside the 60 s window; no row is left.
#[test]
fn a_killed_lc_cli_keeps_no_window() {
    let pg = PgServer::start();
    let mut holder = pg
        .lc(&[
            "trylock",
            "--hold-at-least",
            "60s",
            "k",
            "--",
            "sleep",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pg.held("k") {
        assert!(Instant::now() < deadline, "never granted");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(holder.id() as i32, libc::SIGKILL) };
    let _ = holder.wait();
    taken_within(&|a: &[&str]| pg.lc(a), "k", FREED_WITHIN);
    // No hold was ever kept here: lc_cli.kept was never created.
    assert_eq!(
        pg.sql(
            "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace \
             where n.nspname = 'lc_cli' and c.relname = 'kept'"
        ),
        "0"
    );
}
