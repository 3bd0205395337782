//! `lc-cli history KEY` (docs/history.md) is built on every backend: the
//! built-in server (tests/history_builtin.rs, which also has the refusals
//! of a server with `--history 0` and of a reference server), Redis, etcd,
//! ZooKeeper and PostgreSQL (tests/history_<backend>.rs). Against
//! addresses where nothing listens, each request gets as far as connecting
//! (69), none is refused before it is sent.

use crate::common::{expect_error_line, expect_status, lc_at};

#[test]
fn every_backend_is_asked_not_refused() {
    for url in [
        "lc://127.0.0.1:1",
        "redis://127.0.0.1:1",
        "etcd://127.0.0.1:1",
        "zk://127.0.0.1:1/h",
        "postgres://u:p@127.0.0.1:1/db",
    ] {
        // Nothing listens: the request got as far as connecting.
        let line = expect_error_line(
            &mut lc_at(url, &["--connect-timeout", "1s", "history", "k"]),
            69,
        );
        assert!(
            !line.contains("cannot show a key's history"),
            "{url}: {line}"
        );
    }
}

#[test]
fn history_checks_its_limit_before_anything_is_sent() {
    // A usage error as clap words it (with its hint line), status 64.
    let out = expect_status(
        &mut lc_at("127.0.0.1:1", &["history", "k", "--limit", "0"]),
        64,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--limit"), "{err}");
}
