//! `lc-cli history KEY` on the built-in server (issue 46 item 2,
//! docs/history.md), through the real binary against a real `lc-cli
//! serve`: five holds of one key ending five ways (exit 0, exit 3, a reset
//! by an operator, the holding lc-cli SIGKILLed and its session freed after
//! the reclaim grace, a kept hold's `--expire` run out) are listed newest
//! first with how each ended and the status where it was reported; with
//! `--data` the same after a restart (SIGTERM, the same command line); the
//! cap (`--history 10`, 30 holds: 10 entries, also after a restart); a
//! server with `--history 0`, and one that answers as a reference server
//! does, refuse in one line (76).

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::spans::Kids;
use common::*;

/// How long any one wait of these tests may take (a loaded machine).
const LIMIT: Duration = Duration::from_secs(20);

type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

fn history(lc: Lc, key: &str) -> Vec<serde_json::Value> {
    let out = expect_status(&mut lc(&["history", key, "--json", "--limit", "1000"]), 0);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn held(lc: Lc, key: &str) -> bool {
    let out = lc(&["keys", "--json"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|k| k["key"] == key)
}

/// Waits until `key` is held; panics past [`LIMIT`].
fn until_held(lc: Lc, key: &str) {
    assert!(wait_until(LIMIT, || held(lc, key)), "'{key}' never held");
}

/// Waits until the key's history has `n` entries; panics past [`LIMIT`].
fn until_entries(lc: Lc, key: &str, n: usize) {
    assert!(
        wait_until(LIMIT, || history(lc, key).len() >= n),
        "'{key}': {} entries, not {n}: {:?}",
        history(lc, key).len(),
        history(lc, key)
    );
}

/// A holder of `key` running `sleep`, returned once its command runs (a
/// key held in the server's table may not yet be granted to its client:
/// a client killed then has no hold to end).
fn holder(lc: Lc, key: &str) -> std::process::Child {
    use std::io::BufRead;
    let mut cmd = lc(&[
        "lock",
        "-w",
        "20s",
        key,
        "--",
        "sh",
        "-c",
        "echo up; exec sleep 20",
    ]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    // Bounded: the command prints at once, or lc-cli gives up within 20 s
    // (EOF).
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        "up",
        "the holder of '{key}' never ran its command"
    );
    child
}

/// The five endings of `key`, one after the other, each seen in the
/// history before the next.
fn five_endings(lc: Lc, key: &str) {
    expect_status(&mut lc(&["lock", key, "--", "true"]), 0);
    until_entries(lc, key, 1);
    expect_status(&mut lc(&["lock", key, "--", "sh", "-c", "exit 3"]), 3);
    until_entries(lc, key, 2);

    let reset = holder(lc, key);
    until_held(lc, key);
    expect_status(&mut lc(&["reset", key]), 0);
    let (code, err) = finish_within(LIMIT, reset);
    assert_ne!(code, Some(0), "the reset holder exited 0: {err}");
    until_entries(lc, key, 3);

    let mut killed = Kids(vec![holder(lc, key)]);
    until_held(lc, key);
    killed.0[0].kill().unwrap();
    killed.0[0].wait().unwrap();
    // Freed a reclaim grace (1 s) after its connection closed.
    until_entries(lc, key, 4);
    assert!(!held(lc, key), "the SIGKILLed holder's key is still held");

    expect_status(&mut lc(&["lock", key, "--expire", "1s"]), 0);
    until_entries(lc, key, 5);
}

/// The history of [`five_endings`], newest first.
fn check_five(entries: &[serde_json::Value], key: &str) {
    assert_eq!(entries.len(), 5, "{entries:#?}");
    let ended: Vec<&str> = entries
        .iter()
        .map(|e| e["ended"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        ended,
        ["expired", "freed", "reset", "released", "released"],
        "{entries:#?}"
    );
    let status: Vec<Option<i64>> = entries.iter().map(|e| e["status"].as_i64()).collect();
    assert_eq!(status, [None, None, None, Some(3), Some(0)], "{entries:#?}");
    assert!(entries[2]["by"].as_str().is_some(), "{:#?}", entries[2]);
    for e in entries {
        assert_eq!(e["key"], key, "{e}");
        assert!(e["token"].as_u64().is_some(), "{e}");
        assert!(e["granted"].as_str().is_some() && e["ended_at"].as_str().is_some());
        assert_eq!(e["mode"], "exclusive");
    }
    // Newest first: each granted no earlier than the one after it.
    for pair in entries.windows(2) {
        assert!(
            pair[0]["token"].as_u64() > pair[1]["token"].as_u64(),
            "{pair:#?}"
        );
    }
}

#[test]
fn five_holds_end_five_ways() {
    let server = Serve::new().args(&["--reclaim-grace", "1s"]).start();
    let lc = |args: &[&str]| server.lc(args);
    five_endings(&lc, "h5");
    check_five(&history(&lc, "h5"), "h5");
    // --limit, and the table's columns.
    assert_eq!(
        expect_status(&mut lc(&["history", "h5", "--limit", "2"]), 0)
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        3
    );
    // A key that never ended a hold: nothing.
    assert!(history(&lc, "never").is_empty());
}

/// A server with `--data` in a directory of its own, restarted with the
/// same command line.
struct Restartable {
    serve: Serve,
    server: Server,
    _dir: tempfile::TempDir,
}

impl Restartable {
    fn start(extra: &[&str]) -> Restartable {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("lc.log");
        let serve = Serve::new()
            .args(&["--data", data.to_str().unwrap()])
            .args(extra);
        let server = serve.clone().port_pair().start();
        let serve = serve.listen(&server.addr.to_string());
        Restartable {
            serve,
            server,
            _dir: dir,
        }
    }

    fn lc(&self, args: &[&str]) -> Command {
        let mut cmd = lc_at(&self.server.addr.to_string(), &["--connect-timeout", "10s"]);
        cmd.args(args);
        cmd
    }

    /// SIGTERM, then the same command line again.
    fn restart(&mut self) {
        let status = self.server.stop_with(libc::SIGTERM, LIMIT);
        assert!(status.is_some(), "serve did not stop on SIGTERM");
        self.server = self.serve.clone().restart();
    }
}

#[test]
fn history_survives_a_restart_with_data() {
    let mut s = Restartable::start(&["--reclaim-grace", "1s"]);
    five_endings(&|a: &[&str]| s.lc(a), "hd");
    let before = history(&|a: &[&str]| s.lc(a), "hd");
    check_five(&before, "hd");
    s.restart();
    let after = history(&|a: &[&str]| s.lc(a), "hd");
    assert_eq!(after, before);
}

#[test]
fn the_cap_keeps_the_newest_also_after_a_restart() {
    let mut s = Restartable::start(&["--history", "10"]);
    for i in 1..=30 {
        let exit = format!("exit {}", i % 7);
        expect_status(&mut s.lc(&["lock", "hc", "--", "sh", "-c", &exit]), i % 7);
    }
    let statuses = |s: &Restartable| -> Vec<i64> {
        history(&|a: &[&str]| s.lc(a), "hc")
            .iter()
            .map(|e| e["status"].as_i64().unwrap())
            .collect()
    };
    let newest: Vec<i64> = (21..=30).rev().map(|i| i64::from(i % 7)).collect();
    assert_eq!(statuses(&s), newest);
    s.restart();
    assert_eq!(statuses(&s), newest);
    assert!(
        s.server.logged(&["restored"]) || s.server.logged(&["record(s) read"]),
        "{}",
        s.server.log()
    );
}

#[test]
fn a_server_without_history_refuses_in_one_line() {
    let off = Serve::new().args(&["--history", "0"]).start();
    expect_status(&mut off.lc(&["lock", "k", "--", "true"]), 0);
    let line = expect_error_line(&mut off.lc(&["history", "k"]), 76);
    assert!(
        line.contains("cannot show a key's history") && line.contains("--history 0"),
        "{line}"
    );
    let reference = Serve::new().env("LC_CLI_SERVE_AS_REFERENCE", "1").start();
    let line = expect_error_line(&mut reference.lc(&["history", "k", "--json"]), 76);
    assert!(
        line.contains("a reference Locking-Center server keeps no history"),
        "{line}"
    );
}
