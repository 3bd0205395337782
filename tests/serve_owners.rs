//! Whose a hold is on `lc-cli serve --data --token-file`, across restarts,
//! and who did what (issue 43, items 1 and 4), with the real binary on
//! both sides:
//!
//! - the restart hijack: token A holds `victim/t1` under `sleep 8`; token
//!   B polls Reclaim and releases with the hold's fencing token (which
//!   `keys` no longer shows it) through 3 restarts (SIGTERM, the same
//!   command line), with and without a pause: every one is refused, and
//!   A's command runs on and releases normally (exit 0);
//! - a `lock` token releases its own kept hold after a restart, another
//!   `lock` token may not;
//! - without tokens, a Reclaim without the hold's secret is refused,
//!   before and after a restart, and the holder's own goes through;
//! - the log names the identity (`name=` of the token line, else
//!   `token:FINGERPRINT`) in its grant, release, reset and refusal lines,
//!   `keys` in a column and `keys --json` in a field; a `lock` token sees
//!   the fencing tokens of its own holds only; no token is in any log
//!   line, listing or error.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::serve::data_arg;
use common::{expect_error_line, finish_within, Serve, Server};

const A: &str = "team-a-Tok3n-never-printed-0001";
const B: &str = "team-b-Tok3n-never-printed-0002";
const ADMIN: &str = "root-Tok3n-never-printed-00003";

/// A token file: A named `team-a`, B without a name, the admin `root`.
fn token_file(dir: &std::path::Path) -> String {
    let path = dir.join("tokens");
    std::fs::write(
        &path,
        format!("# the team\n{A} lock name=team-a\n{B}\n{ADMIN} admin name=root\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_string()
}

/// `serve --data DIR/held.wal [--token-file DIR/tokens]` on `listen`.
fn serve(dir: &std::path::Path, tokens: bool, listen: &str) -> Serve {
    let wal = data_arg(&dir.join("held.wal"));
    let mut s = Serve::new()
        .listen(listen)
        .args(&["--data", &wal, "--reclaim-grace", "10s"]);
    if tokens {
        let file = token_file(dir);
        s = s.args(&["--token-file", &file]);
    } else {
        // Not the lock port + 1, which a restart on the same port may
        // find taken.
        s = s.args(&["--manager", "127.0.0.1:0"]);
    }
    s
}

/// `lc-cli -v --server ADDR ARGS` with LC_TOKEN set to `token` (none: unset).
fn lc(s: &Server, token: Option<&str>, args: &[&str]) -> Command {
    common::lc_with_token(&s.addr.to_string(), "5s", token, args)
}

/// Whether a log line holds every one of `parts`, within 5 s (the
/// server's stderr is read by a thread of its own).
fn logged(s: &Server, parts: &[&str]) -> bool {
    common::wait_until(Duration::from_secs(5), || s.logged(parts))
}

/// Text that must hold no token.
fn no_token_in(what: &str, text: &str) {
    common::assert_hides(what, text, &[A, B, ADMIN]);
}

/// Runs `cmd` for its status; its output must hold no token.
fn run(cmd: &mut Command, expected: i32) -> String {
    common::run_hiding(cmd, expected, &[A, B, ADMIN])
}

/// `keys --json` as `token` sees it: one object per hold.
fn keys_json(s: &Server, token: Option<&str>) -> Vec<serde_json::Value> {
    let out = run(&mut lc(s, token, &["keys", "--json"]), 0);
    out.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The one hold of `key` in a listing.
fn hold_of<'a>(listing: &'a [serde_json::Value], key: &str) -> &'a serde_json::Value {
    let found: Vec<&serde_json::Value> = listing.iter().filter(|v| v["key"] == key).collect();
    assert_eq!(found.len(), 1, "{listing:?}");
    found[0]
}

/// A raw connection's frames: lc-cli's Hello (the feature `secret` named
/// after the version, as lc-cli sends it) with `token`, if any, then `frame`.
fn with_hello(token: Option<&str>, frame: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(t) = token {
        let client = b"0.1.0 secret\r\n";
        out.push(16);
        out.push(client.len() as u8);
        out.extend_from_slice(client);
        out.push(t.len() as u8);
        out.extend_from_slice(t.as_bytes());
    }
    out.extend_from_slice(frame);
    out
}

/// `[action][keySize][key][8][token]`: Reclaim (10) or SessionRelease (11).
fn token_frame(action: u8, key: &[u8], token: u64) -> Vec<u8> {
    let mut f = vec![action, key.len() as u8];
    f.extend_from_slice(key);
    f.push(8);
    f.extend_from_slice(&token.to_be_bytes());
    f
}

/// Sends `bytes` on a new connection; the answer after the Hello's (all
/// of it, until the close or 3 s), or None if the server is not there.
fn ask(addr: SocketAddr, bytes: &[u8], hello: bool) -> Option<Vec<u8>> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    c.set_nodelay(true).unwrap();
    c.write_all(bytes).ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while got.len() < 4096 {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    if !hello {
        return Some(got);
    }
    // `*[len][version][len][role]` (tokens) or `+[len][version]`.
    let fields = match got.first() {
        Some(b'*') => 2,
        Some(b'+') => 1,
        _ => return (!got.is_empty()).then_some(got),
    };
    let mut pos = 1;
    for _ in 0..fields {
        pos += 1 + usize::from(*got.get(pos)?);
    }
    got.get(pos..).map(<[u8]>::to_vec)
}

/// Each answer of an attack, with the action it answered.
type Answers = Vec<(u8, Vec<u8>)>;

/// Token B's attack, in a thread of its own: Reclaim, SessionRelease and
/// Release of `key` under `token`, in turn, every 2 ms, until stopped (at
/// most 30,000 tries or 60 s). Every answer is kept.
struct Attack {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Answers>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Attack {
    fn start(
        addr: SocketAddr,
        token: Option<&'static str>,
        key: &'static str,
        fence: u64,
    ) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), answers.clone());
        let thread = std::thread::spawn(move || {
            let frames = [
                (10, token_frame(10, key.as_bytes(), fence)),
                (11, token_frame(11, key.as_bytes(), fence)),
                (
                    6,
                    vec![6, key.len() as u8]
                        .into_iter()
                        .chain(key.bytes())
                        .collect(),
                ),
            ];
            let started = Instant::now();
            for i in 0..30_000usize {
                if s.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(60) {
                    break;
                }
                let (action, frame) = &frames[i % frames.len()];
                let bytes = with_hello(token, frame);
                if let Some(answer) = ask(addr, &bytes, token.is_some()) {
                    a.lock().unwrap().push((*action, answer));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        Attack {
            stop,
            answers,
            thread: Some(thread),
        }
    }

    /// Stops it; every answer it got.
    fn finish(mut self) -> Answers {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.answers.lock().unwrap())
    }
}

/// Spawns `lc-cli lock KEY -- sleep SECS` as `token`; waits (10 s at most)
/// for the server to log its grant.
fn hold_under_sleep(s: &Server, token: Option<&str>, key: &str, secs: &str) -> Child {
    let child = lc(s, token, &["lock", key, "--", "sleep", secs])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    s.wait_for(&format!("grant '{key}'"), 1, Duration::from_secs(10));
    child
}

/// SIGTERM, then the same command line again (after `pause`) on the same
/// address; waits for `key`'s holder to reclaim it (`reclaims` lines in
/// all, 8 s at most).
fn restart(s: &mut Server, again: &Serve, pause: Duration, key: &str) -> Server {
    let status = s.stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert!(status.is_some_and(|st| st.success()), "{status:?}");
    no_token_in("the server log", &s.log());
    std::thread::sleep(pause);
    let next = again.clone().restart();
    next.wait_for(
        &format!("reclaimed the session hold of '{key}'"),
        1,
        Duration::from_secs(8),
    );
    next
}

#[test]
fn another_token_can_neither_reclaim_nor_release_a_hold_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = serve(dir.path(), true, "127.0.0.1:0").start();
    let again = serve(dir.path(), true, &s.addr.to_string());
    let holder = hold_under_sleep(&s, Some(A), "victim/t1", "8");
    // B sees the hold and its owner, not its fencing token; A and the
    // admin see it.
    let seen_by_b = keys_json(&s, Some(B));
    let theirs = hold_of(&seen_by_b, "victim/t1");
    assert_eq!(theirs["ident"], "team-a", "{theirs}");
    assert_eq!(theirs["token"], serde_json::Value::Null, "{theirs}");
    let mine = keys_json(&s, Some(A));
    let fence = hold_of(&mine, "victim/t1")["token"].as_u64().unwrap();
    let all = keys_json(&s, Some(ADMIN));
    assert_eq!(hold_of(&all, "victim/t1")["token"].as_u64(), Some(fence));
    // B has the fencing token anyway (as it had before this release).
    let attack = Attack::start(s.addr, Some(B), "victim/t1", fence);
    std::thread::sleep(Duration::from_millis(300));
    // Three restarts: at once, after a pause, at once.
    for pause in [0, 1500, 0] {
        s = restart(&mut s, &again, Duration::from_millis(pause), "victim/t1");
        std::thread::sleep(Duration::from_millis(300));
    }
    let answers = attack.finish();
    let (status, err) = finish_within(Duration::from_secs(20), holder);
    assert_eq!(status, Some(0), "the holder's command: {err}");
    no_token_in("the holder", &err);
    // B reached the servers, before and after each restart, and was refused
    // every time with `%` and the reason; never `=` nor `+`.
    let refused = answers
        .iter()
        .filter(|(_, a)| a.first() == Some(&b'%'))
        .count();
    assert!(refused >= 30, "only {refused} answers: {answers:?}");
    for (action, answer) in &answers {
        let text = String::from_utf8_lossy(answer);
        assert!(
            matches!(answer.first(), Some(b'%') | None),
            "action {action} answered {text:?}"
        );
        no_token_in("an answer to B", &text);
    }
    for action in [10, 11, 6] {
        assert!(
            answers.iter().any(|(a, r)| *a == action
                && String::from_utf8_lossy(r)
                    .contains("may release only the holds of its own token")),
            "no refusal of action {action}"
        );
    }
    // The log says who was refused, and that A reclaimed its own.
    assert!(logged(
        &s,
        &["as 'token:", "refused: token role 'lock' may release only"]
    ));
    assert!(
        logged(&s, &["restored 'victim/t1'", "as 'team-a'"]),
        "{}",
        s.log()
    );
    assert!(logged(
        &s,
        &["as 'team-a': reclaimed the session hold of 'victim/t1'"]
    ));
    s.wait_for("release 'victim/t1'", 1, Duration::from_secs(5));
    assert!(
        logged(&s, &["release 'victim/t1'", "as 'team-a'"]),
        "{}",
        s.log()
    );
    no_token_in("the server log", &s.log());
    run(
        &mut lc(&s, Some(B), &["trylock", "victim/t1", "--", "true"]),
        0,
    );
}

#[test]
fn a_lock_token_releases_its_own_kept_hold_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = serve(dir.path(), true, "127.0.0.1:0").start();
    let again = serve(dir.path(), true, &s.addr.to_string());
    run(&mut lc(&s, Some(A), &["lock", "kept/a"]), 0);
    run(&mut lc(&s, Some(B), &["lock", "kept/b"]), 0);
    let status = s.stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert!(status.is_some_and(|st| st.success()), "{status:?}");
    let s = again.restart();
    assert!(
        logged(&s, &["restored 'kept/a'", "as 'team-a'"]),
        "{}",
        s.log()
    );
    let line = expect_error_line(&mut lc(&s, Some(B), &["unlock", "kept/a"]), 76);
    assert!(
        line.contains("may release only the holds of its own token"),
        "{line}"
    );
    no_token_in("a refusal", &line);
    run(&mut lc(&s, Some(A), &["unlock", "kept/a"]), 0);
    run(&mut lc(&s, Some(A), &["unlock", "kept/a"]), 1);
    run(&mut lc(&s, Some(B), &["unlock", "kept/b"]), 0);
    no_token_in("the server log", &s.log());
}

#[test]
fn without_tokens_a_reclaim_needs_the_holds_secret() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = serve(dir.path(), false, "127.0.0.1:0").start();
    let again = serve(dir.path(), false, &s.addr.to_string());
    let holder = hold_under_sleep(&s, None, "victim/t2", "6");
    let listed = keys_json(&s, None);
    let fence = hold_of(&listed, "victim/t2")["token"].as_u64().unwrap();
    assert_eq!(
        hold_of(&listed, "victim/t2")["ident"],
        serde_json::Value::Null
    );
    let reclaim = token_frame(10, b"victim/t2", fence);
    // Without a Hello: `!`; with one (as lc-cli sends it): `%` and why.
    let check = |s: &Server| {
        let raw = ask(s.addr, &reclaim, false).unwrap();
        assert_eq!(raw, b"!", "{:?}", String::from_utf8_lossy(&raw));
        let hello = ask(s.addr, &with_hello(Some(""), &reclaim), true).unwrap();
        let text = String::from_utf8_lossy(&hello);
        assert!(
            hello.first() == Some(&b'%') && text.contains("secret"),
            "{text:?}"
        );
    };
    check(&s);
    s = restart(&mut s, &again, Duration::ZERO, "victim/t2");
    check(&s);
    let (status, err) = finish_within(Duration::from_secs(20), holder);
    assert_eq!(status, Some(0), "the holder's command: {err}");
    assert!(
        logged(&s, &["refused: the hold was granted with a secret"]),
        "{}",
        s.log()
    );
}

#[test]
fn the_log_and_keys_name_identities_never_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), true, "127.0.0.1:0").start();
    // Grant and release.
    run(&mut lc(&s, Some(A), &["lock", "j"]), 0);
    run(&mut lc(&s, Some(A), &["unlock", "j"]), 0);
    assert!(logged(&s, &["grant 'j'", "as 'team-a'"]), "{}", s.log());
    assert!(logged(&s, &["release 'j'", "as 'team-a'"]), "{}", s.log());
    // A refusal names who was refused.
    run(&mut lc(&s, Some(A), &["lock", "k"]), 0);
    let line = expect_error_line(&mut lc(&s, Some(B), &["reset", "k"]), 76);
    no_token_in("a refusal", &line);
    assert!(
        logged(
            &s,
            &["as 'token:", "refused: token role 'lock' may not reset"]
        ),
        "{}",
        s.log()
    );
    // keys: an IDENTITY column; B's own token's identity is its fingerprint.
    run(&mut lc(&s, Some(B), &["lock", "b-kept"]), 0);
    let table = run(&mut lc(&s, Some(B), &["keys"]), 0);
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("IDENTITY") && header.contains("TOKEN"),
        "{table}"
    );
    let k_row = table.lines().find(|l| l.starts_with("k ")).unwrap();
    assert!(k_row.contains("team-a") && k_row.ends_with(" -"), "{table}");
    let b_row = table.lines().find(|l| l.starts_with("b-kept ")).unwrap();
    assert!(b_row.contains(" token:"), "{table}");
    assert!(
        !b_row.ends_with(" -"),
        "B sees its own hold's token: {table}"
    );
    let b_id = b_row
        .split_whitespace()
        .find(|w| w.starts_with("token:"))
        .unwrap()
        .to_string();
    assert_eq!(b_id.len(), "token:".len() + 16, "{b_id}");
    // A waiter's identity: in `keys --waiters`, a column of its own, and in
    // its JSON.
    let waiter = lc(&s, Some(A), &["lock", "b-kept", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    s.wait_for("queue 'b-kept'", 1, Duration::from_secs(10));
    let table = run(&mut lc(&s, Some(B), &["keys", "--waiters"]), 0);
    let header = table
        .lines()
        .find(|l| l.starts_with("WAITER OF"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(header.ends_with("IDENTITY"), "{table}");
    let row = table
        .lines()
        .find(|l| l.starts_with("b-kept ") && l.ends_with(" team-a"))
        .unwrap_or_else(|| panic!("no waiter row naming team-a:\n{table}"));
    no_token_in("a waiter's row", row);
    let json = run(&mut lc(&s, Some(B), &["keys", "--waiters", "--json"]), 0);
    let b_kept: serde_json::Value = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["key"] == "b-kept")
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(b_kept["waiters"][0]["ident"], "team-a", "{json}");
    // The admin's reset names the resetter and the holder.
    run(&mut lc(&s, Some(ADMIN), &["reset", "k"]), 0);
    assert!(
        logged(&s, &["as 'root': reset key 'k' held by", "as 'team-a'"]),
        "{}",
        s.log()
    );
    run(&mut lc(&s, Some(ADMIN), &["unlock", "b-kept"]), 0);
    // The waiter gets it at last.
    let (code, err) = finish_within(Duration::from_secs(10), waiter);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        logged(
            &s,
            &["release 'b-kept'", &format!("as '{b_id}'"), "by 'root'"]
        ),
        "{}",
        s.log()
    );
    run(
        &mut lc(&s, Some(B), &["lock", "by-source", "--source", "ci-7"]),
        0,
    );
    run(&mut lc(&s, Some(ADMIN), &["reset", "--source", "ci-7"]), 0);
    assert!(
        logged(
            &s,
            &[
                "as 'root': reset source 'ci-7'",
                &format!("by-source as '{b_id}'")
            ]
        ),
        "{}",
        s.log()
    );
    no_token_in("the server log", &s.log());
}
