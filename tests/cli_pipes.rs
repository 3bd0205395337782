//! One policy for a closed stdout (issue 12): the output is dropped, the
//! command does its whole work and ends with its own status, without a
//! message. Before: `reset` panicked in println! (101) and left the next keys
//! held, `completions` exited 70. And an invalid --source is 64 everywhere.

use crate::common;

use std::process::{Command, Output};

use common::*;

/// Runs with stdout a pipe whose reading end is already closed.
fn with_closed_stdout(cmd: &mut Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    cmd.stdout(writer).output().unwrap()
}

fn check_quiet_success(out: &Output, what: &str) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        (out.status.code(), out.status.signal()),
        (Some(0), None),
        "{what}: {out:?}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{what}");
}

#[test]
fn a_closed_stdout_ends_each_command_quietly_with_its_status() {
    let server = Server::start();
    let out = with_closed_stdout(Command::new(BIN).args(["completions", "bash"]));
    check_quiet_success(&out, "completions");
    for key in ["a", "b", "c"] {
        expect_status(&mut server.lc(&["lock", "-q", key]), 0);
    }
    let out = with_closed_stdout(&mut server.lc(&["reset", "a", "b", "c"]));
    check_quiet_success(&out, "reset");
    // Every key was reset, not only the first.
    for key in ["a", "b", "c"] {
        expect_status(&mut server.lc(&["trylock", key, "true"]), 0);
    }
    let out = with_closed_stdout(&mut server.lc(&["keys"]));
    // keys reaches the manager on port + 1 only by chance here: its status
    // is whatever it is, but never a write error.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("stdout") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn an_invalid_source_is_a_usage_error_on_every_path() {
    let server = Server::start();
    let long = "s".repeat(128);
    for args in [
        &["lock", "--source", &long, "k", "true"][..],
        &["trylock", "--source", &long, "k", "true"],
        &["wait", "--source", &long, "k"],
        &["reset", "--source", &long],
    ] {
        let out = expect_status(&mut server.lc(args), 64);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid source"), "{args:?}: {err}");
    }
    let out = expect_status(
        server.lc(&["lock", "k", "true"]).env("LC_SOURCE", &long),
        64,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid source"));
}
