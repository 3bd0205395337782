//! Naming the holder (issue 11, item 7): the one line of a conflict (`-n`,
//! trylock) or a timeout (`-w`) says who holds the key, since when, and the
//! exact `lc-cli reset` command that clears it; the status line names it
//! while waiting; `-q` silences the line.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::cli::Pty;
use common::redis::RedisServer;
use common::zk::Zk;
use common::*;

/// `lc-cli serve` on free ports, with the `lc://LOCK?manager=MANAGER`
/// address that reaches both (the manager is not the lock port + 1).
struct Serve {
    child: Child,
    url: String,
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
            line.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("{line:?}"))
                .to_string()
        };
        let lock = next("listening on ");
        let manager = next("manager on ");
        Serve {
            child,
            url: format!("lc://{lock}?manager={manager}"),
        }
    }

    fn lc(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(&args[..1])
            .args(["--server", &self.url])
            .args(&args[1..])
            .env_remove("LC_SERVER")
            .env_remove("LC_SOURCE");
        cmd
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command quoted between backticks in `line`.
fn quoted_command(line: &str) -> String {
    let start = line.find('`').expect("a command in backticks") + 1;
    let end = start + line[start..].find('`').unwrap();
    line[start..end].to_string()
}

#[test]
fn a_conflict_and_a_timeout_name_the_holder_and_the_reset_that_clears_it() {
    let s = Serve::start();
    expect_status(&mut s.lc(&["lock", "-q", "--source", "ci-7", "deploy"]), 0);
    for (args, what) in [
        (
            &["trylock", "deploy", "true"][..],
            "failed to get lock 'deploy'",
        ),
        (
            &["lock", "-n", "deploy", "true"],
            "failed to get lock 'deploy'",
        ),
        (
            &["lock", "-w", "0.5", "deploy", "true"],
            "timeout after 0.5",
        ),
        (&["wait", "-w", "0.5", "deploy"], "timeout after 0.5"),
    ] {
        let out = expect_status(&mut s.lc(args), 1);
        let line = stderr_of(&out);
        assert_eq!(line.lines().count(), 1, "{args:?}: {line:?}");
        assert!(line.contains(what), "{args:?}: {line}");
        assert!(
            line.contains("held by 'ci-7'") && line.contains(", since 20"),
            "{line}"
        );
        assert!(line.contains("peer 127.0.0.1:"), "{line}");
        assert!(line.contains("clears it"), "{line}");
    }
    // The command named is the one that clears it, as written.
    let out = expect_status(&mut s.lc(&["trylock", "deploy", "true"]), 1);
    let reset = quoted_command(&stderr_of(&out));
    assert!(reset.starts_with("lc-cli --server "), "{reset}");
    let dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
    let out = expect_status(
        Command::new("sh")
            .args(["-c", &reset])
            .env("PATH", path)
            .env_remove("LC_SERVER"),
        0,
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("released 'deploy'"));
    expect_status(&mut s.lc(&["trylock", "deploy", "true"]), 0);
}

#[test]
fn quiet_silences_the_line_and_an_unknown_holder_is_just_held() {
    let s = Serve::start();
    expect_status(&mut s.lc(&["lock", "-q", "k"]), 0);
    for args in [
        &["trylock", "-q", "k", "true"][..],
        &["lock", "-q", "-w", "0.2", "k", "true"],
        &["wait", "-q", "-w", "0.2", "k"],
    ] {
        let out = expect_status(&mut s.lc(args), 1);
        assert_eq!(stderr_of(&out), "", "{args:?}");
    }
    // A server whose manager port is not known (lock port + 1 assumed).
    let plain = Server::start();
    expect_status(&mut plain.lc(&["lock", "-q", "k"]), 0);
    let out = expect_status(&mut plain.lc(&["trylock", "k", "true"]), 1);
    let line = stderr_of(&out);
    assert!(line.ends_with(": it is held\n"), "{line:?}");
}

#[test]
fn the_status_line_names_the_holder() {
    let s = Serve::start();
    expect_status(&mut s.lc(&["lock", "-q", "--source", "ci-7", "tty"]), 0);
    let (pty, mut waiter) = Pty::spawn(s.lc(&["lock", "tty", "echo", "RAN"]));
    assert!(
        pty.wait_for_output("(held by 'ci-7' for ", Duration::from_secs(10)),
        "{:?}",
        pty.output()
    );
    expect_status(&mut s.lc(&["unlock", "tty"]), 0);
    assert_eq!(waiter.wait_for(Duration::from_secs(10)), Some(0));
}

#[test]
fn zookeeper_and_redis_name_the_holder_too() {
    let zk = Zk::start();
    let r = RedisServer::start();
    let zk_lc = |args: &[&str]| zk.lc("/holder", args);
    let redis_lc = |args: &[&str]| common::redis::lc(&r.url(), args);
    for lc in [&zk_lc as &dyn Fn(&[&str]) -> Command, &redis_lc] {
        expect_status(&mut lc(&["lock", "-q", "--source", "ops-1", "k"]), 0);
        let out = expect_status(&mut lc(&["trylock", "k", "true"]), 1);
        let line = stderr_of(&out);
        assert!(line.contains("held by 'ops-1'"), "{line}");
        assert!(line.contains("reset k` clears it"), "{line}");
        expect_status(&mut lc(&["unlock", "k"]), 0);
    }
}
