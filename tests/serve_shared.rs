//! Shared locks and `--limit N` on the built-in server: at most N at once
//! and exactly N while enough wait, first come first served, readers
//! together and writers alone, dead holders freed by the session grace,
//! holds kept across a SIGKILL and restart of the server with its log,
//! disagreeing requests refused (78), and a reference server's refusal
//! (76) instead of an exclusive lock in their place.
//! Who held the key when is read from the commands' own logged times.

use crate::common;

use std::time::Duration;

use common::serve::data_arg;
use common::spans;
use common::*;

const GRACE: &str = "2s";
const LIMIT: Duration = Duration::from_secs(20);

/// The manager on the lock port + 1, where `keys` looks for it.
fn server() -> Server {
    Serve::new()
        .args(&["--reclaim-grace", GRACE])
        .port_pair()
        .start()
}

/// Whether the server has queued or granted `tag`'s request on `key`.
fn queued(server: &Server, key: &str, tag: &str) -> bool {
    ["queue", "grant"]
        .iter()
        .any(|what| server.count(&format!("{what} '{key}' source '{tag}'")) > 0)
}

#[test]
fn limit_n_runs_n_at_once_in_arrival_order() {
    let server = server();
    let gap = spans::limit_n(&|args| server.lc(args), |tag| queued(&server, "sem", tag));
    eprintln!("built-in server, limit 3, 6 contenders: longest hand-off {gap:.1} ms");
}

#[test]
fn readers_share_writers_exclude_in_arrival_order() {
    let server = server();
    spans::readers_and_writers(&|args| server.lc(args), |tag| queued(&server, "rw", tag));
}

/// SIGKILLed holders (lc-cli) of a semaphore and of a shared key: the
/// waiter behind them runs once the grace has passed since they were last
/// heard from (at most a quarter of it before the kill), not before.
#[test]
fn dead_shared_and_semaphore_holders_are_freed_by_the_grace() {
    let server = server();
    let waited = spans::dead_holders_freed(
        &|args| server.lc(args),
        |key, tag| queued(&server, key, tag),
        &format!("built-in server, grace {GRACE}"),
    );
    for after in waited {
        assert!(
            (1.4..4.5).contains(&after),
            "the waiter ran {after} s after the kill (grace {GRACE})"
        );
    }
}

#[test]
fn disagreeing_modes_and_limits_are_refused() {
    let server = server();
    let lc = |args: &[&str]| server.lc(args);
    spans::refusals(&lc);
    // Once nobody holds or waits, the key takes any mode again.
    assert!(wait_until(LIMIT, || lc(&[
        "trylock", "--limit", "5", "r", "true"
    ])
    .status()
    .unwrap()
    .success()));
}

#[test]
fn keys_and_resets_of_shared_and_limited_keys() {
    let server = server();
    spans::keys_and_resets(&|args| server.lc(args));
}

/// The server is SIGKILLed while two readers hold and a writer waits, and
/// restarted with its log: both shared holds come back, the readers'
/// commands run on and release normally, and then the writer runs.
#[test]
fn shared_holds_survive_a_server_restart_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_arg(&dir.path().join("wal"));
    // A longer grace: the readers must reclaim before their commands are
    // stopped, two thirds of it after the server was last heard from.
    let grace = "3s";
    let mut server = Serve::new()
        .args(&["--reclaim-grace", grace, "--data", &data])
        .start();
    let port = server.addr.port();
    let log = dir.path().join("log");
    let readers: Vec<_> = ["r1", "r2"]
        .iter()
        .map(|tag| spans::contender(&|args| server.lc(args), &log, &["-s"], "k", tag, 4.0))
        .collect();
    let mut readers = spans::arrive_in_order(&log, readers, |tag| queued(&server, "k", tag));
    assert!(wait_until(LIMIT, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("start r1 ") && text.contains("start r2 ")
    }));
    server.stop_with(libc::SIGKILL, LIMIT);
    drop(server);
    let restarted = Serve::new()
        .listen(&format!("127.0.0.1:{port}"))
        .args(&[
            "--manager",
            "127.0.0.1:0",
            "--reclaim-grace",
            grace,
            "--data",
            &data,
        ])
        .restart();
    restarted.wait_for("restored 'k'", 2, LIMIT);
    assert_eq!(restarted.count("a shared lock"), 2, "{}", restarted.log());
    restarted.wait_for("reclaimed the session hold of 'k'", 2, LIMIT);
    let lc = |args: &[&str]| restarted.lc(args);
    let writer = vec![spans::contender(&lc, &log, &["-x"], "k", "w", 0.1)];
    let mut writer = spans::arrive_in_order(&log, writer, |tag| queued(&restarted, "k", tag));
    assert_eq!(readers.wait_all(LIMIT), [Some(0), Some(0)]);
    assert_eq!(writer.wait_all(LIMIT), [Some(0)]);
    let spans = spans::read(&log);
    let s = |t| spans::by_tag(&spans, t);
    assert!(spans::overlap(s("r1"), s("r2")), "{spans:#?}");
    assert!(
        s("w").start >= s("r1").end && s("w").start >= s("r2").end,
        "the writer ran beside a reader restored from the log: {spans:#?}"
    );
}

/// A server that answers lc-cli's own actions `-`, as the reference does:
/// a shared or limited request is refused with one line and 76, never
/// granted as an exclusive lock, and the key is left free.
#[test]
fn a_reference_server_refuses_shared_and_limited_locks() {
    let server = Serve::new().env("LC_CLI_SERVE_AS_REFERENCE", "1").start();
    for args in [
        &["lock", "-s", "k", "true"][..],
        &["trylock", "--limit", "2", "k", "true"],
        &["wait", "--shared", "k"],
        &["lock", "--limit", "3", "k"],
    ] {
        let err = expect_error_line(&mut server.lc(args), 76);
        assert!(
            err.contains("cannot take shared or limited locks"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(server.count("grant 'k'"), 0, "{}", server.log());
    expect_status(&mut server.lc(&["trylock", "k", "true"]), 0);
}

/// Kept holds (`lock KEY` without a command) of a shared key: each is
/// listed as kept, `unlock KEY` ends one at a time (the oldest first), and
/// a writer gets the key once both are gone.
#[test]
fn kept_shared_holds_are_unlocked_one_at_a_time() {
    let server = server();
    let lc = |args: &[&str]| server.lc(args);
    for source in ["a", "b"] {
        expect_status(&mut lc(&["lock", "-s", "k", "--source", source, "-q"]), 0);
    }
    let out = lc(&["keys", "--json"]).output().unwrap();
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r["mode"] == "shared" && r["kept"] == true),
        "{rows:?}"
    );
    expect_status(&mut lc(&["trylock", "k", "true"]), 1);
    expect_status(&mut lc(&["unlock", "k"]), 0);
    expect_status(&mut lc(&["trylock", "k", "true"]), 1);
    expect_status(&mut lc(&["trylock", "-s", "k", "true"]), 0);
    expect_status(&mut lc(&["unlock", "k"]), 0);
    expect_status(&mut lc(&["unlock", "k"]), 1);
    expect_status(&mut lc(&["trylock", "k", "true"]), 0);
}

/// The mode actions byte by byte: a session grant is `=`, its token and the
/// grace; a kept one `=`, its token and 0; a request whose mode the key's
/// refuses is answered `~` and the key's mode (lc-cli's actions), or `-`
/// (the reference's Lock and TryLock).
#[test]
fn the_mode_actions_on_the_wire() {
    use std::io::{Read, Write};
    let server = server();
    let mode_frame = |action: u8, source: &[u8], word: u32| {
        let mut f = frame(action, b"k", Some(source));
        f.push(4);
        f.extend_from_slice(&word.to_be_bytes());
        f
    };
    let answer = |bytes: &[u8]| {
        let mut s = server.connect();
        s.write_all(bytes).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        out
    };
    // A session hold of a --limit 2 key: its connection stays open.
    let mut held = server.connect();
    held.write_all(&mode_frame(12, b"a", 2)).unwrap();
    let mut grant = [0u8; 13];
    held.read_exact(&mut grant).unwrap();
    assert_eq!(grant[0], b'=');
    assert_eq!(u32::from_be_bytes(grant[9..].try_into().unwrap()), 2000);
    let refused = [b'~', 0, 0, 0, 2];
    assert_eq!(answer(&mode_frame(15, b"b", 0)), refused, "shared");
    assert_eq!(answer(&mode_frame(13, b"b", 3)), refused, "--limit 3");
    assert_eq!(
        answer(&frame(9, b"k", Some(b"b"))),
        refused,
        "exclusive session"
    );
    assert_eq!(answer(&frame(action::TRY, b"k", Some(b"b"))), b"-");
    assert_eq!(answer(&frame(action::LOCK, b"k", Some(b"b"))), b"-");
    // The second slot, kept: its token, a grace of 0, then the close.
    let kept = answer(&mode_frame(15, b"c", 2));
    assert_eq!((kept.len(), kept[0]), (13, b'='), "{kept:?}");
    assert_eq!(kept[9..], [0, 0, 0, 0]);
    assert!(
        u64::from_be_bytes(kept[1..9].try_into().unwrap())
            > u64::from_be_bytes(grant[1..9].try_into().unwrap())
    );
    // Both slots taken: a try finds no room.
    assert_eq!(answer(&mode_frame(15, b"d", 2)), b"#");
}
