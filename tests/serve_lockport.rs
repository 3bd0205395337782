//! One port for clients (issue 22, items 3 to 5): `keys`, the holder's
//! name and the place in line go over the lock port (lc-cli's Keys, action
//! 17), so a client on the machine's non-loopback address (the first of
//! `hostname -I`) needs nothing else, while the manager port stays on
//! loopback; `keys --waiters` lists the line in arrival order; a server
//! without Keys (the test-only reference mode) is still listed through its
//! manager port.

use crate::common;

use std::time::{Duration, Instant};

use common::{expect_status, lc_at, Serve};

/// A generous bound for a bound of 50 ms, as in `serve_team.rs`: the
/// machine is shared by several builds, and a process start is part of
/// the figure.
const TRYLOCK_BOUND: Duration = Duration::from_millis(500);

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn keys_and_holder_names_work_from_the_non_loopback_address() {
    let ip = common::host_ip();
    let s = Serve::new().listen(&format!("{ip}:0")).start();
    assert!(s.manager.ip().is_loopback(), "{}", s.manager);
    let lock = format!("{ip}:{}", s.addr.port());
    // The manager is not reachable from here, as from another host.
    let manager_here = format!("{ip}:{}", s.manager.port());
    assert!(std::net::TcpStream::connect(&manager_here).is_err());
    expect_status(
        &mut lc_at(&lock, &["lock", "-q", "--source", "ops1", "held1"]),
        0,
    );
    let out = expect_status(&mut lc_at(&lock, &["keys"]), 0);
    let table = stdout(&out);
    let row = table
        .lines()
        .find(|l| l.starts_with("held1 "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(" ops1 ") && row.contains(" kept "), "{table}");
    let out = expect_status(&mut lc_at(&lock, &["keys", "--json"]), 0);
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["source"], "ops1");
    assert!(
        v["peer"].as_str().unwrap().starts_with(&format!("{ip}:")),
        "{v}"
    );
    assert!(v["token"].as_u64().is_some(), "{v}");
    // A conflict names the holder, at once.
    let mut figures = Vec::new();
    for trial in 0..5 {
        let started = Instant::now();
        let out = expect_status(&mut lc_at(&lock, &["trylock", "held1", "true"]), 1);
        let took = started.elapsed();
        let line = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.contains("held by 'ops1' (peer "),
            "trial {trial}: {line}"
        );
        assert!(line.contains("lc-cli --server"), "{line}");
        assert!(
            took < TRYLOCK_BOUND,
            "trial {trial}: trylock took {took:?}: {line}"
        );
        figures.push(took.as_millis());
    }
    eprintln!("trylock on a held key from {ip}, holder named over the lock port (ms): {figures:?}");
    // `-w` names it too.
    let out = expect_status(
        &mut lc_at(&lock, &["lock", "-w", "0.2s", "held1", "true"]),
        1,
    );
    let line = String::from_utf8_lossy(&out.stderr);
    assert!(line.contains("held by 'ops1'"), "{line}");
}

#[test]
fn keys_waiters_lists_the_line_in_arrival_order() {
    let ip = common::host_ip();
    let s = Serve::new().listen(&format!("{ip}:0")).start();
    let lock = format!("{ip}:{}", s.addr.port());
    let queued = || {
        (1..=3)
            .filter(|i| s.logged(&["queue ", "'q'", &format!("source 'w{i}'")]))
            .count()
    };
    let waiters = common::waiters::three_in_order(|args| lc_at(&lock, args), "q", queued);
    // The server knows each waiter's address and hold.
    for w in &waiters {
        assert!(
            w["peer"].as_str().unwrap().starts_with(&format!("{ip}:")),
            "{w}"
        );
        assert_eq!(w["kept"], false, "{w}");
    }
}

#[test]
fn a_server_without_keys_is_listed_through_its_manager_port() {
    let s = Serve::new().env("LC_CLI_SERVE_AS_REFERENCE", "1").start();
    expect_status(
        &mut lc_at(&s.url(), &["lock", "-q", "--source", "ops", "k"]),
        0,
    );
    let out = expect_status(&mut lc_at(&s.url(), &["keys"]), 0);
    let table = stdout(&out);
    assert!(table.lines().nth(1).unwrap().starts_with("k "), "{table}");
    // The holder is named from the manager port too.
    let out = expect_status(&mut lc_at(&s.url(), &["trylock", "k", "true"]), 1);
    let line = String::from_utf8_lossy(&out.stderr);
    assert!(line.contains("held by 'ops'"), "{line}");
    // It does not say who waits: one line, and the holds all the same.
    let out = expect_status(&mut lc_at(&s.url(), &["keys", "--waiters"]), 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not say who waits"), "{err}");
    assert!(stdout(&out).lines().nth(1).unwrap().starts_with("k "));
    // Without `?manager=`, lock port + 1 is assumed: the error says how to
    // name it (unless, by chance, the manager is on the next port).
    if s.manager.port() != s.addr.port() + 1 {
        let out = expect_status(&mut lc_at(&s.addr.to_string(), &["keys"]), 69);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("?manager=HOST:PORT"), "{err}");
    }
}

#[test]
fn a_table_larger_than_one_piece_is_listed_whole() {
    let s = common::Server::start();
    // About 150 bytes a record: 1,500 holds make several 64 KiB pieces.
    let source = "s".repeat(100);
    let n = 1500;
    for i in 0..n {
        let frame = common::frame(
            common::action::LOCK,
            format!("big/{i:04}").as_bytes(),
            Some(source.as_bytes()),
        );
        assert_eq!(s.raw(&frame), Some(b'+'), "hold {i}");
    }
    let out = expect_status(&mut s.lc(&["keys", "--json"]), 0);
    let text = stdout(&out);
    let keys: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(keys.len(), n, "{} listed", keys.len());
    assert_eq!(keys[0], "big/0000");
    assert_eq!(keys[n - 1], format!("big/{:04}", n - 1));
}
