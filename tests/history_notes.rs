//! Notes (issue 46 item 1) on every backend, against the real servers: a
//! note given to `lock` shows in `keys`, `keys --json`, a failed trylock's
//! line and a waiter's status line; `wait --note` shows with the waiter
//! where the backend lists waiters; a note over the limit is refused with 64
//! and nothing is taken. (The refusals' wording: cli_queue_options.rs.)

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::cli::Pty;
use common::etcd::Etcd;
use common::pg::PgServer;
use common::redis::RedisServer;
use common::spans::Kids;
use common::zk::Zk;
use common::*;

const LIMIT: Duration = Duration::from_secs(15);
const NOTE: &str = "deploy 1.4.2 by ana";

fn keys_json(lc: &dyn Fn(&[&str]) -> Command, args: &[&str]) -> Vec<serde_json::Value> {
    let out = lc(args).output().unwrap();
    assert!(out.status.success(), "{:?}", out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn note_of(v: &serde_json::Value) -> Option<&str> {
    v["fields"]["note"].as_str()
}

fn notes_everywhere(lc: &dyn Fn(&[&str]) -> Command) {
    // Over the limit: 64, and nothing is taken.
    let long = "x".repeat(201);
    for sub in ["lock", "trylock", "wait"] {
        let mut args = vec![sub, "--note", &long, "nk2"];
        if sub != "wait" {
            args.extend(["--", "true"]);
        }
        let line = expect_error_line(&mut lc(&args), 64);
        assert!(line.contains("at most 200"), "{sub}: {line}");
    }
    assert!(
        keys_json(lc, &["keys", "--json"])
            .iter()
            .all(|k| k["key"] != "nk2"),
        "an over-long note took the key"
    );

    let mut holder = lc(&["lock", "--note", NOTE, "nk", "sleep", "60"]);
    holder.stdout(Stdio::null()).stderr(Stdio::null());
    let _kids = Kids(vec![holder.spawn().unwrap()]);
    assert!(
        wait_until(LIMIT, || keys_json(lc, &["keys", "--json"])
            .iter()
            .any(|k| k["key"] == "nk" && note_of(k) == Some(NOTE))),
        "keys --json never showed the note"
    );
    let table = String::from_utf8_lossy(&lc(&["keys"]).output().unwrap().stdout).into_owned();
    assert!(table.contains("NOTE") && table.contains(NOTE), "{table}");

    // A failed trylock names the note in its one line.
    let line = expect_error_line(&mut lc(&["trylock", "nk", "--", "true"]), 1);
    assert!(line.contains(&format!("note '{NOTE}'")), "{line}");

    // A waiter at a terminal shows the holder's note in its status line,
    // and its own note with the waiters, where the backend lists them.
    let (pty, _waiter) = Pty::spawn(lc(&["wait", "--note", "waiting w", "-w", "60", "nk"]));
    assert!(
        pty.wait_for_output(&format!("note '{NOTE}'"), LIMIT),
        "no note in the status line: {:?}",
        pty.output()
    );
    let listed = wait_until(LIMIT, || {
        keys_json(lc, &["keys", "--waiters", "--json"])
            .iter()
            .filter(|k| k["key"] == "nk")
            .any(|k| match k["waiters"].as_array() {
                // The service does not say who waits: nothing to show.
                None => true,
                Some(w) => w.iter().any(|w| note_of(w) == Some("waiting w")),
            })
    });
    assert!(
        listed,
        "the waiter's note never showed: {:?}",
        keys_json(lc, &["keys", "--waiters", "--json"])
    );
}

#[test]
fn builtin_server() {
    let server = Server::start();
    notes_everywhere(&|args| server.lc(args));
}

#[test]
fn redis() {
    let r = RedisServer::start();
    let url = r.url();
    notes_everywhere(&|args| lc_at(&url, args));
}

#[test]
fn etcd() {
    let e = Etcd::start();
    notes_everywhere(&|args| e.lc("", args));
}

#[test]
fn zookeeper() {
    let zk = Zk::start();
    notes_everywhere(&|args| zk.lc("/notes", args));
}

#[test]
fn postgresql() {
    let pg = PgServer::start();
    notes_everywhere(&|args| pg.lc(args));
}
