//! `lc-cli keys` (issue 11, item 8): control characters escaped in the
//! table, `--sort age`, and a server on `--listen ...:0` listed with or
//! without `?manager=` (its lock port answers Keys).

use crate::common;

use std::time::Duration;

use common::*;

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_manager_of_a_server_on_port_0_is_reached_with_the_manager_parameter() {
    let s = Server::start();
    expect_status(
        &mut lc_at(&s.url(), &["lock", "-q", "--source", "ops", "k"]),
        0,
    );
    let out = expect_status(&mut lc_at(&s.url(), &["keys"]), 0);
    let table = stdout_of(&out);
    assert!(table.lines().nth(1).unwrap().starts_with("k "), "{table}");
    // Without it too: lc-cli's server lists its keys on the lock port (a
    // server without that, through its manager: `serve_lockport.rs`).
    let out = expect_status(&mut lc_at(&s.addr.to_string(), &["keys"]), 0);
    let plain = stdout_of(&out);
    assert!(plain.lines().nth(1).unwrap().starts_with("k "), "{plain}");
}

#[test]
fn control_characters_are_escaped_in_the_table() {
    let s = Server::start();
    let url = s.url();
    let key = "forged\nevil  x  -  9h  0";
    expect_status(
        &mut lc_at(&url, &["lock", "-q", "--source", "\x1b[31mred", key]),
        0,
    );
    let out = expect_status(&mut lc_at(&url, &["keys"]), 0);
    let table = stdout_of(&out);
    assert_eq!(table.lines().count(), 2, "a row was forged: {table:?}");
    assert!(!table.contains('\x1b'), "{table:?}");
    assert!(
        table.contains("forged\\nevil") && table.contains("\\x1b[31mred"),
        "{table}"
    );
    // JSON keeps the exact bytes, JSON-escaped.
    let out = expect_status(&mut lc_at(&url, &["keys", "--json"]), 0);
    let v: serde_json::Value = serde_json::from_str(stdout_of(&out).trim()).unwrap();
    assert_eq!(v["key"], key);
    assert_eq!(v["source"], "\x1b[31mred");
}

#[test]
fn sort_by_age_puts_the_oldest_hold_first() {
    let s = Server::start();
    let url = s.url();
    expect_status(&mut lc_at(&url, &["lock", "-q", "z-old"]), 0);
    std::thread::sleep(Duration::from_millis(100));
    expect_status(&mut lc_at(&url, &["lock", "-q", "a-new"]), 0);
    let first_column = |args: &[&str]| -> Vec<String> {
        let out = expect_status(&mut lc_at(&url, args), 0);
        stdout_of(&out)
            .lines()
            .skip(1)
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(first_column(&["keys"]), ["a-new", "z-old"]);
    assert_eq!(first_column(&["keys", "--sort", "age"]), ["z-old", "a-new"]);
    expect_status(&mut lc_at(&url, &["keys", "--sort", "size"]), 64);
}
