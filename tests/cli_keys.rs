//! `lc-cli keys` (issue 11, item 8): control characters escaped in the
//! table, `--sort age`, and the manager of a server on `--listen ...:0`
//! reached with `?manager=`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

struct Serve {
    child: Child,
    lock: String,
    manager: String,
}

impl Serve {
    fn start() -> Serve {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = |prefix: &str| {
            let line = lines.next().unwrap().unwrap();
            line.strip_prefix(prefix).unwrap().to_string()
        };
        let lock = next("listening on ");
        let manager = next("manager on ");
        Serve {
            child,
            lock,
            manager,
        }
    }

    fn lc(&self, server: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(&args[..1])
            .args(["--server", server])
            .args(&args[1..])
            .env_remove("LC_SERVER")
            .env_remove("LC_SOURCE");
        cmd
    }

    fn url(&self) -> String {
        format!("lc://{}?manager={}", self.lock, self.manager)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_manager_of_a_server_on_port_0_is_reached_with_the_manager_parameter() {
    let s = Serve::start();
    expect_status(
        &mut s.lc(&s.url(), &["lock", "-q", "--source", "ops", "k"]),
        0,
    );
    let out = expect_status(&mut s.lc(&s.url(), &["keys"]), 0);
    let table = stdout_of(&out);
    assert!(table.lines().nth(1).unwrap().starts_with("k "), "{table}");
    // Without it, lock port + 1 is assumed: the error says how to name it
    // (unless, by chance, the manager is on the next port).
    if s.manager
        != format!(
            "127.0.0.1:{}",
            s.lock.rsplit(':').next().unwrap().parse::<u16>().unwrap() + 1
        )
    {
        let out = expect_status(&mut s.lc(&s.lock, &["keys"]), 69);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("?manager=HOST:PORT"), "{err}");
    }
}

#[test]
fn control_characters_are_escaped_in_the_table() {
    let s = Serve::start();
    let url = s.url();
    let key = "forged\nevil  x  -  9h  0";
    expect_status(
        &mut s.lc(&url, &["lock", "-q", "--source", "\x1b[31mred", key]),
        0,
    );
    let out = expect_status(&mut s.lc(&url, &["keys"]), 0);
    let table = stdout_of(&out);
    assert_eq!(table.lines().count(), 2, "a row was forged: {table:?}");
    assert!(!table.contains('\x1b'), "{table:?}");
    assert!(
        table.contains("forged\\nevil") && table.contains("\\x1b[31mred"),
        "{table}"
    );
    // JSON keeps the exact bytes, JSON-escaped.
    let out = expect_status(&mut s.lc(&url, &["keys", "--json"]), 0);
    let v: serde_json::Value = serde_json::from_str(stdout_of(&out).trim()).unwrap();
    assert_eq!(v["key"], key);
    assert_eq!(v["source"], "\x1b[31mred");
}

#[test]
fn sort_by_age_puts_the_oldest_hold_first() {
    let s = Serve::start();
    let url = s.url();
    expect_status(&mut s.lc(&url, &["lock", "-q", "z-old"]), 0);
    std::thread::sleep(Duration::from_millis(100));
    expect_status(&mut s.lc(&url, &["lock", "-q", "a-new"]), 0);
    let first_column = |args: &[&str]| -> Vec<String> {
        let out = expect_status(&mut s.lc(&url, args), 0);
        stdout_of(&out)
            .lines()
            .skip(1)
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(first_column(&["keys"]), ["a-new", "z-old"]);
    assert_eq!(first_column(&["keys", "--sort", "age"]), ["z-old", "a-new"]);
    expect_status(&mut s.lc(&url, &["keys", "--sort", "size"]), 64);
}
