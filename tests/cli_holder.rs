//! Naming the holder (issue 11, item 7): the one line of a conflict (`-n`,
//! trylock) or a timeout (`-w`) says who holds the key, since when, and the
//! exact `lc-cli reset` command that clears it; the status line names it
//! while waiting; `-q` silences the line.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::cli::Pty;
use common::redis::RedisServer;
use common::zk::Zk;
use common::*;

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
    let s = Server::start();
    expect_status(
        &mut lc_at(&s.url(), &["lock", "-q", "--source", "ci-7", "deploy"]),
        0,
    );
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
        let out = expect_status(&mut lc_at(&s.url(), args), 1);
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
    let out = expect_status(&mut lc_at(&s.url(), &["trylock", "deploy", "true"]), 1);
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
    expect_status(&mut lc_at(&s.url(), &["trylock", "deploy", "true"]), 0);
}

#[test]
fn quiet_silences_the_line_and_an_unknown_holder_is_just_held() {
    let s = Server::start();
    expect_status(&mut lc_at(&s.url(), &["lock", "-q", "k"]), 0);
    for args in [
        &["trylock", "-q", "k", "true"][..],
        &["lock", "-q", "-w", "0.2", "k", "true"],
        &["wait", "-q", "-w", "0.2", "k"],
    ] {
        let out = expect_status(&mut lc_at(&s.url(), args), 1);
        assert_eq!(stderr_of(&out), "", "{args:?}");
    }
    // A server without lc-cli's Keys (the reference mode) whose manager
    // port is not known (lock port + 1 assumed).
    let plain = common::Serve::new()
        .env("LC_CLI_SERVE_AS_REFERENCE", "1")
        .start();
    expect_status(&mut plain.lc(&["lock", "-q", "k"]), 0);
    let out = expect_status(&mut plain.lc(&["trylock", "k", "true"]), 1);
    let line = stderr_of(&out);
    assert!(line.ends_with(": it is held\n"), "{line:?}");
}

#[test]
fn the_status_line_names_the_holder() {
    let s = Server::start();
    expect_status(
        &mut lc_at(&s.url(), &["lock", "-q", "--source", "ci-7", "tty"]),
        0,
    );
    let (pty, mut waiter) = Pty::spawn(lc_at(&s.url(), &["lock", "tty", "echo", "RAN"]));
    assert!(
        pty.wait_for_output("(held by 'ci-7' for ", Duration::from_secs(10)),
        "{:?}",
        pty.output()
    );
    expect_status(&mut lc_at(&s.url(), &["unlock", "tty"]), 0);
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
