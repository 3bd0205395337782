//! The deploy-queue options' own rules, checked before anything is sent
//! (docs/deploy-queues.md): each wrong use is one line and 64, against an
//! address where nothing listens (so a status 69 would mean it was sent).

use crate::common::{expect_error_line, lc_at};

/// A port nothing listens on: a request that got that far would exit 69.
const NOWHERE: &str = "127.0.0.1:1";

#[test]
fn wrong_uses_are_refused_before_anything_is_sent() {
    let long = "x".repeat(201);
    let cases: &[(&[&str], &str)] = &[
        (
            &["lock", "--newest", "-s", "k", "--", "true"],
            "are for an exclusive lock",
        ),
        (
            &["lock", "--order", "3", "--limit", "2", "k", "--", "true"],
            "are for an exclusive lock",
        ),
        (&["lock", "--order", "3", "k"], "need a command to run"),
        (
            &["lock", "--newest", "-n", "k", "--", "true"],
            "not for trylock or -n",
        ),
        (
            &["trylock", "--cancel-running", "k", "--", "true"],
            "not for trylock or -n",
        ),
        (
            &["lock", "--superseded-exit-code", "0", "k", "--", "true"],
            "is for a request with --newest",
        ),
        (
            &["lock", "--outdated-exit-code", "0", "k", "--", "true"],
            "is for a request with --order",
        ),
        (
            &["lock", "--note", &long, "k", "--", "true"],
            "--note is 201 bytes long; at most 200",
        ),
        (
            &["lock", "--note", "a\tb", "k", "--", "true"],
            "control character",
        ),
        (
            &["lock", "--order", "9223372036854775808", "k", "--", "true"],
            "above 2^63-1",
        ),
    ];
    for (args, says) in cases {
        let line = expect_error_line(&mut lc_at(NOWHERE, args), 64);
        assert!(line.contains(says), "{args:?}: {line}");
    }
}

#[test]
fn a_mark_needs_a_key_and_the_exit_statuses_are_in_help() {
    let out = lc_at(NOWHERE, &["--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for status in ["79 superseded", "80 outdated", "81 cancelled"] {
        assert!(help.contains(status), "--help lacks {status}: {help}");
    }
    let out = lc_at(NOWHERE, &["mark"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn a_mark_of_an_unreachable_service_is_one_line_and_69() {
    for args in [&["mark", "k"][..], &["mark", "--clear", "k"]] {
        let line = expect_error_line(&mut lc_at(NOWHERE, args), 69);
        assert!(
            line.contains("mark") && line.contains("'k'"),
            "{args:?}: {line}"
        );
    }
}
