//! Quotas per token (issue 43, item 3), against a real `lc-cli serve
//! --token-file` on a non-loopback address: a line's `keys=PATTERNS`
//! lets its token lock, try, wait for, expire-lock and mark only the
//! matching keys; any other is refused in one line (76) naming the limit,
//! logged with the identity, no token anywhere; lines without `keys=`
//! (and `keys=*`) use every key as before.

use crate::common;

use std::process::Command;

use common::{expect_error_line, host_ip, Serve, Server};

const ADMIN: &str = "admin-Qu0ta-never-printed-0001";
const CI: &str = "ci-Qu0ta-never-printed-0002";
const ALL: &str = "all-Qu0ta-never-printed-0003";
const PLAIN: &str = "plain-Qu0ta-never-printed-0004";
const TOKENS: [&str; 5] = [ADMIN, CI, ALL, PLAIN, SMALL];

fn server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(
        &path,
        format!(
            "{ADMIN} admin name=alice\n{CI} lock name=ci keys=deploy/*,ci/*,exact\n\
             {ALL} keys=*\n{PLAIN}\n"
        ),
    )
    .unwrap();
    let s = Serve::new()
        .listen(&format!("{}:0", host_ip()))
        .args(&["--token-file", path.to_str().unwrap()])
        .start();
    (dir, s)
}

fn lc(s: &Server, token: &str, args: &[&str]) -> Command {
    common::lc_with_token(&s.addr.to_string(), "500ms", Some(token), args)
}

fn run(cmd: &mut Command, expected: i32) -> String {
    common::run_hiding(cmd, expected, &TOKENS)
}

const OUTSIDE: &str = "token 'ci' may use only keys matching deploy/*,ci/*,exact \
                       (keys= in the token file)";

#[test]
fn keys_limit_what_a_token_may_take() {
    let (_dir, s) = server();
    // Inside its patterns: as any lock token.
    run(&mut lc(&s, CI, &["lock", "deploy/prod", "--", "true"]), 0);
    run(&mut lc(&s, CI, &["trylock", "ci/build", "--", "true"]), 0);
    run(&mut lc(&s, CI, &["lock", "exact"]), 0);
    run(&mut lc(&s, CI, &["unlock", "exact"]), 0);
    run(&mut lc(&s, CI, &["wait", "-w", "1s", "deploy/prod"]), 0);
    // Outside: one line, 76, naming the limit, for each way to take a key.
    for args in [
        &["lock", "prod/db", "--", "true"][..],
        &["lock", "-w", "1s", "exactly", "--", "true"],
        &["trylock", "deploy", "--", "true"],
        &["lock", "other"],
        &["lock", "other", "--expire", "1h"],
        &["wait", "-w", "1s", "other"],
    ] {
        let line = expect_error_line(&mut lc(&s, CI, args), 76);
        common::assert_hides("a refusal", &line, &TOKENS);
        assert!(line.contains(OUTSIDE), "{args:?}: {line}");
    }
    // Nothing was taken by the refusals.
    run(&mut lc(&s, PLAIN, &["trylock", "other", "--", "true"]), 0);
    // keys=* and a line without keys= take any key; so does an admin.
    run(&mut lc(&s, ALL, &["trylock", "prod/db", "--", "true"]), 0);
    run(
        &mut lc(&s, PLAIN, &["lock", "anything/at/all", "--", "true"]),
        0,
    );
    run(&mut lc(&s, ADMIN, &["lock", "prod/x", "--", "true"]), 0);
    // Listing is not keyed.
    run(&mut lc(&s, CI, &["keys"]), 0);
    // The refusal is logged with the identity, never the token.
    assert!(
        s.logged(&["as 'ci'", "refused: token 'ci' may use only keys matching"]),
        "{}",
        s.log()
    );
    common::assert_hides("the server", &s.log(), &TOKENS);
}

#[test]
fn a_bad_keys_word_stops_the_start_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, format!("{ADMIN} admin\n{CI} keys=a*b\n")).unwrap();
    let out = Command::new(common::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2: keys= takes a * only at the end"),
        "{err}"
    );
    common::assert_hides("the start", &err, &TOKENS);
}

const SMALL: &str = "small-Qu0ta-never-printed-0005";

/// A line's `held=N`: the token's N+1st hold is refused in one line (76)
/// naming the limit, each way of taking one; a release makes room again;
/// the count comes back with the holds from `--data` after a restart; the
/// refusal is logged with the identity, and no token is shown anywhere.
#[test]
fn held_caps_the_holds_of_a_token_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(
        &path,
        format!("{ADMIN} admin name=alice\n{SMALL} name=small held=3\n{PLAIN}\n"),
    )
    .unwrap();
    let wal = common::serve::data_arg(&dir.path().join("held.wal"));
    let serve = Serve::new().listen(&format!("{}:0", host_ip())).args(&[
        "--token-file",
        path.to_str().unwrap(),
        "--data",
        &wal,
    ]);
    let mut s = serve.clone().start();
    let over = "token 'small' holds 3 keys, its quota (held= in the token file, default 10000)";
    for k in ["a", "b", "c"] {
        run(&mut lc(&s, SMALL, &["lock", k]), 0);
    }
    for args in [
        &["lock", "d"][..],
        &["lock", "d", "--", "true"],
        &["trylock", "d", "--", "true"],
        &["lock", "d", "--expire", "1h"],
    ] {
        let line = expect_error_line(&mut lc(&s, SMALL, args), 76);
        common::assert_hides("a refusal", &line, &TOKENS);
        assert!(line.contains(over), "{args:?}: {line}");
    }
    // Another token is not counted with it.
    run(&mut lc(&s, PLAIN, &["lock", "d", "--", "true"]), 0);
    // A release makes room.
    run(&mut lc(&s, SMALL, &["unlock", "a"]), 0);
    run(&mut lc(&s, SMALL, &["lock", "d", "--", "true"]), 0);
    run(&mut lc(&s, SMALL, &["lock", "a"]), 0);
    assert!(
        s.logged(&["as 'small'", "refused: token 'small' holds 3 keys"]),
        "{}",
        s.log()
    );
    common::assert_hides("the server", &s.log(), &TOKENS);
    // After a restart the three holds are counted again.
    s.kill();
    let s = serve.listen(&s.addr.to_string()).restart();
    let line = expect_error_line(&mut lc(&s, SMALL, &["lock", "e"]), 76);
    assert!(line.contains(over), "{line}");
    run(&mut lc(&s, SMALL, &["unlock", "b"]), 0);
    run(&mut lc(&s, SMALL, &["lock", "e"]), 0);
    common::assert_hides("the server", &s.log(), &TOKENS);
}

#[test]
fn a_bad_held_word_stops_the_start_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(&path, format!("{ADMIN} admin\n{CI} held=0\n")).unwrap();
    let out = Command::new(common::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 2: held= takes a number of holds"),
        "{err}"
    );
    common::assert_hides("the start", &err, &TOKENS);
}

/// `keys PATTERN` is filtered by the server: with a million other keys
/// held (restored from a log written here, each hold a 127-byte key and
/// source, a listing of about 300 MB), the whole listing is more than a
/// client reads (one line, 76), while `keys 'legit/*'` lists the three
/// keys under `legit/`, for an admin and a lock token alike.
#[test]
fn a_pattern_lists_its_keys_among_a_million_others() {
    use lc_cli::mode::LockMode;
    use lc_cli::wal::Record;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{ADMIN} admin name=alice\n{PLAIN}\n")).unwrap();
    let log = dir.path().join("million.wal");
    let mut bytes = lc_cli::wal::file::header().to_vec();
    let source = [b's'; 127];
    for i in 0..1_000_000u64 {
        let mut key = format!("other/{i:07}/").into_bytes();
        key.resize(127, b'x');
        Record::Grant {
            key,
            source: source.to_vec(),
            peer: b"10.0.0.1:1".to_vec(),
            since_ms: 1_700_000_000_000,
            token: i + 1,
            session: false,
            mode: LockMode::Exclusive,
            expires_ms: None,
            ownership: Default::default(),
        }
        .encode_into(&mut bytes);
    }
    std::fs::write(&log, &bytes).unwrap();
    drop(bytes);
    let s = Serve::new().listen(&format!("{}:0", host_ip())).args(&[
        "--token-file",
        tokens.to_str().unwrap(),
        "--data",
        &common::serve::data_arg(&log),
    ]);
    let s = s.start();
    for k in ["legit/a", "legit/b", "legit/c/d"] {
        run(&mut lc(&s, PLAIN, &["lock", k]), 0);
    }
    // Not under the prefix: listed by the whole listing only.
    run(&mut lc(&s, PLAIN, &["lock", "legit"]), 0);
    // Room to read a whole listing of 300 MB: its refusal is its size.
    let slow =
        |token, args: &[&str]| common::lc_with_token(&s.addr.to_string(), "60s", Some(token), args);
    for token in [ADMIN, PLAIN] {
        let out = run(&mut slow(token, &["keys", "legit/*", "--json"]), 0);
        let listed: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut keys: Vec<&str> = listed.iter().map(|v| v["key"].as_str().unwrap()).collect();
        keys.sort();
        assert_eq!(keys, ["legit/a", "legit/b", "legit/c/d"], "{out}");
        let table = run(&mut slow(token, &["keys", "other/0999999/*"]), 0);
        assert_eq!(table.lines().count(), 2, "{table}");
    }
    let line = expect_error_line(&mut slow(ADMIN, &["keys"]), 76);
    assert!(line.contains("a listing of more than 256 MiB"), "{line}");
}

const WAITY: &str = "waity-Qu0ta-never-printed-0006";

/// A line's `waits=N`: with N of its requests in line, the token's next
/// lock that would wait is refused in one line (76) naming the limit; a
/// lock granted at once and a trylock are not waits; a waiter that leaves
/// (its lc-cli SIGKILLed) gives its place back; another token is not
/// counted with it; logged with the identity, no token anywhere.
#[test]
fn waits_caps_the_requests_a_token_has_in_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens");
    std::fs::write(
        &path,
        format!("{ADMIN} admin name=alice\n{WAITY} name=waity waits=2\n{PLAIN}\n"),
    )
    .unwrap();
    let s = Serve::new()
        .listen(&format!("{}:0", host_ip()))
        .args(&["--token-file", path.to_str().unwrap()])
        .start();
    let tokens = [ADMIN, WAITY, PLAIN];
    for k in ["a", "b"] {
        run(&mut lc(&s, PLAIN, &["lock", k]), 0);
    }
    // A lock that waits on `k` as `source`, queued.
    let wait = |token, k: &str, source: &str| {
        let mut cmd = lc(&s, token, &["lock", "-w", "60s", k, "--", "true"]);
        cmd.env("LC_SOURCE", source)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let child = cmd.spawn().unwrap();
        s.wait_queued(k, source);
        child
    };
    let mut w1 = wait(WAITY, "a", "w1");
    let w2 = wait(WAITY, "b", "w2");
    let over = "token 'waity' has 2 requests waiting, its quota (waits= in the token file, \
                default 10000)";
    let line = expect_error_line(
        &mut lc(&s, WAITY, &["lock", "-w", "60s", "a", "--", "true"]),
        76,
    );
    common::assert_hides("a refusal", &line, &tokens);
    assert!(line.contains(over), "{line}");
    // Not waits: a free key, a trylock; nor another token's wait.
    run(&mut lc(&s, WAITY, &["lock", "free", "--", "true"]), 0);
    run(&mut lc(&s, WAITY, &["trylock", "a", "--", "true"]), 1);
    let theirs = wait(PLAIN, "a", "p1");
    // A waiter that leaves gives its place back.
    w1.kill().unwrap();
    w1.wait().unwrap();
    s.wait_for("withdraw", 1, std::time::Duration::from_secs(10));
    let again = wait(WAITY, "b", "w3");
    let line = expect_error_line(
        &mut lc(&s, WAITY, &["lock", "-w", "60s", "b", "--", "true"]),
        76,
    );
    assert!(line.contains(over), "{line}");
    // The keys freed, every wait ends in its grant.
    run(&mut lc(&s, PLAIN, &["unlock", "a"]), 0);
    run(&mut lc(&s, PLAIN, &["unlock", "b"]), 0);
    for child in [w2, theirs, again] {
        let (code, err) = common::finish_within(std::time::Duration::from_secs(20), child);
        assert_eq!(code, Some(0), "{err}");
    }
    assert!(
        s.logged(&[
            "as 'waity'",
            "refused: token 'waity' has 2 requests waiting"
        ]),
        "{}",
        s.log()
    );
    common::assert_hides("the server", &s.log(), &tokens);
}
