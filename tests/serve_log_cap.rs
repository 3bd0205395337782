//! `serve --max-log-bytes` (issue 43, item 3): with the log's held keys
//! at half the cap, every new hold is refused in one line (76) that names
//! the limit and the remedy, releases are still taken and make room, and
//! the file stays under the cap through compactions.

use crate::common;

use std::path::Path;

use common::{expect_error_line, Serve, Server};
use lc_cli::mode::LockMode;
use lc_cli::wal::Record;

fn grant(i: u64) -> Record {
    let mut key = format!("held/{i:05}/").into_bytes();
    key.resize(127, b'x');
    Record::Grant {
        key,
        source: vec![b's'; 127],
        peer: b"10.0.0.1:1".to_vec(),
        since_ms: 1_700_000_000_000,
        token: i + 1,
        session: false,
        mode: LockMode::Exclusive,
        expires_ms: None,
        ownership: Default::default(),
    }
}

fn key(i: u64) -> String {
    String::from_utf8(grant(i).key().to_vec()).unwrap()
}

fn lc(s: &Server, args: &[&str]) -> std::process::Command {
    common::lc_with_token(&s.addr.to_string(), "2s", None, args)
}

fn ok(cmd: &mut std::process::Command) -> String {
    String::from_utf8_lossy(&common::expect_status(cmd, 0).stdout).into_owned()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn a_full_log_refuses_new_holds_and_stays_under_its_cap() {
    const CAP: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("capped.wal");
    // Just over half the cap of held keys, written as a log.
    let per = grant(0).encode().len() as u64;
    let n = CAP / 2 / per + 5;
    let mut bytes = lc_cli::wal::file::header().to_vec();
    for i in 0..n {
        grant(i).encode_into(&mut bytes);
    }
    std::fs::write(&log, &bytes).unwrap();
    let s = Serve::new()
        // Without history: an ended hold leaves no entry, so releases make
        // room (with it, each leaves its entry in the log, up to --history
        // per key).
        .args(&[
            "--data",
            &common::serve::data_arg(&log),
            "--max-log-bytes",
            "1MiB",
            "--history",
            "0",
        ])
        .start();
    // Every way to take a new hold: one line, 76, the limit and the remedy.
    for args in [
        &["lock", "new", "--", "true"][..],
        &["trylock", "new", "--", "true"],
        &["lock", "new"],
        &["lock", "new", "--expire", "1h"],
        &["lock", "--shared", "new", "--", "true"],
    ] {
        let line = expect_error_line(&mut lc(&s, args), 76);
        assert!(
            line.contains("the server's log is full")
                && line.contains("half its --max-log-bytes 1.0 MiB")
                && line.contains("release keys or have it raised"),
            "{args:?}: {line}"
        );
    }
    assert!(
        s.logged(&["refused: the server's log is full"]),
        "{}",
        s.log()
    );
    // Nothing was taken.
    let keys = ok(&mut lc(&s, &["keys", "new"]));
    assert!(!keys.contains("new"), "{keys}");
    // Releases are taken, and make room.
    for i in 0..10 {
        ok(&mut lc(&s, &["unlock", &key(i)]));
    }
    ok(&mut lc(&s, &["lock", "new", "--", "true"]));
    // Churn near the cap (long keys and sources, raw Lock and Unlock frames,
    // about 440 bytes a round: over 800 KB in all, more than the room left):
    // the log is compacted before it passes the cap.
    let (mut largest, mut shrank, mut last) = (0, false, file_len(&log));
    let source = [b'c'; 127];
    for round in 0..2_000u32 {
        let mut key = format!("churn/{round}/").into_bytes();
        key.resize(127, b'y');
        let lock = common::frame(common::action::LOCK, &key, Some(&source));
        assert_eq!(s.raw(&lock), Some(b'+'), "round {round}");
        let unlock = common::frame(common::action::UNLOCK, &key, Some(&source));
        assert_eq!(s.raw(&unlock), Some(b'+'), "round {round}");
        let len = file_len(&log);
        shrank |= len < last;
        (largest, last) = (largest.max(len), len);
    }
    assert!(largest <= CAP, "the log reached {largest} bytes");
    assert!(shrank, "never compacted: at most {largest} bytes");
}

#[test]
fn max_log_bytes_needs_data_and_a_size() {
    for (args, says) in [
        (&["--max-log-bytes", "1G"][..], "--data"),
        (
            &["--data", "x.wal", "--max-log-bytes", "12"],
            "less than 1MiB",
        ),
        (
            &["--data", "x.wal", "--max-log-bytes", "lots"],
            "is not a size",
        ),
    ] {
        let out = std::process::Command::new(common::BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
