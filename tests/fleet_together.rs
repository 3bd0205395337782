//! Several keys granted in one step by the built-in server (issue 45,
//! item 3; docs/several-keys.md, "The built-in server: in one step"):
//! a request for `a --and b` holds nothing while it waits; requests behind
//! it pass it until it stands at the head of every line; then it reserves
//! its keys and gets them together; `-w`, a signal or a SIGKILL of its
//! lc-cli gives its places back. Judged from the commands' own logs
//! (`start`/`end` lines) and the server's listing.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::spans::{self, Kids};
use common::Server;

/// Whether the server has queued `tag`'s request on `key`.
fn queued(server: &Server, key: &str, tag: &str) -> bool {
    server.count(&format!("queue '{key}' source '{tag}'")) > 0
}

fn wait_queued(server: &Server, key: &str, tag: &str) {
    assert!(
        common::wait_until(Duration::from_secs(20), || queued(server, key, tag)),
        "{tag} never queued on {key}; server log:\n{}",
        server.log()
    );
}

/// A command that logs its start, holds until `go` exists (at most 30 s),
/// and logs its end.
fn hold_until(log: &Path, tag: &str, go: &Path) -> String {
    let (log, go) = (log.display(), go.display());
    format!(
        "echo start {tag} $(date +%s%N) >> {log}; echo token {tag} $LC_LOCK_TOKEN >> {log}; \
         i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; \
         do sleep 0.05; i=$((i+1)); done; echo end {tag} $(date +%s%N) >> {log}"
    )
}

/// h: holds b until `go` exists; returned once its command runs.
fn holder_of_b(lc: &dyn Fn(&[&str]) -> Command, log: &Path, go: &Path) -> std::process::Child {
    let h = spawn(lc(&[
        "lock",
        "b",
        "--source",
        "h",
        "-c",
        &hold_until(log, "h", go),
    ]));
    let started = || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("start h ")
    };
    assert!(
        common::wait_until(Duration::from_secs(20), started),
        "h never ran"
    );
    h
}

fn spawn(mut cmd: Command) -> std::process::Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The keys the server lists as held.
fn held(server: &Server) -> String {
    let out = server.lc(&["keys"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn is_held(server: &Server, key: &str) -> bool {
    held(server)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(key))
}

#[test]
fn a_group_holds_nothing_while_it_waits_is_passed_then_reserves() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (log, go) = (dir.path().join("log"), dir.path().join("go"));
    let lc = |args: &[&str]| server.lc(args);
    let mut kids = Kids(Vec::new());
    // h holds b; w waits for b; g asks a and b, and waits behind w in b's
    // line: it is not at the head of every line.
    kids.0.push(holder_of_b(&lc, &log, &go));
    kids.0.push(spawn(lc(&[
        "lock",
        "b",
        "--source",
        "w",
        "-c",
        &spans::script(&log, "w", 0.5),
    ])));
    wait_queued(&server, "b", "w");
    let g = format!(
        "echo tokens g $LC_LOCK_TOKENS >> {}; {}",
        log.display(),
        spans::script(&log, "g", 0.3)
    );
    kids.0.push(spawn(lc(&[
        "lock", "a", "--and", "b", "--source", "g", "-c", &g,
    ])));
    wait_queued(&server, "a", "g");
    wait_queued(&server, "b", "g");
    assert!(
        !is_held(&server, "a"),
        "the group holds a while it waits for b:\n{}",
        held(&server)
    );
    // p passes g in a's line, at once.
    let p = spans::script(&log, "p", 0.1);
    common::expect_status(
        &mut lc(&["lock", "-w", "5s", "a", "--source", "p", "-c", &p]),
        0,
    );
    // h ends: w gets b, and g stands at the head of both lines: it
    // reserves them. s, asking for a (free while w holds b), waits for g.
    std::fs::write(&go, "").unwrap();
    assert!(common::wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("start w ")
    }));
    let s = spans::script(&log, "s", 0.1);
    kids.0.push(spawn(lc(&[
        "lock", "-w", "20s", "a", "--source", "s", "-c", &s,
    ])));
    wait_queued(&server, "a", "s");
    kids.all_succeed(Duration::from_secs(30));
    let spans = spans::read(&log);
    let text = std::fs::read_to_string(&log).unwrap();
    let at = |tag| spans::by_tag(&spans, tag).clone();
    let (h, w, g, p, s) = (at("h"), at("w"), at("g"), at("p"), at("s"));
    assert!(
        p.end < h.end,
        "p did not pass the group while b was held:\n{text}"
    );
    assert!(
        w.start >= h.end && g.start >= w.end,
        "b's holders overlap:\n{text}"
    );
    assert!(g.start >= p.end, "a's holders overlap:\n{text}");
    assert!(
        s.start >= g.end,
        "s passed the group that had reserved a:\n{text}"
    );
    // Both keys' tokens reached the command, granted in one step: no other
    // grant's token lies between g's two (tokens grow with each grant).
    let tokens = text
        .lines()
        .find_map(|l| l.strip_prefix("token g "))
        .unwrap_or_else(|| panic!("no token for g:\n{text}"));
    assert!(!tokens.trim().is_empty(), "g has no LC_LOCK_TOKEN:\n{text}");
    let both: Vec<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("tokens g "))
        .unwrap_or_else(|| panic!("no LC_LOCK_TOKENS for g:\n{text}"))
        .split(',')
        .map(|kv| kv.rsplit_once('=').unwrap().1.trim().parse().unwrap())
        .collect();
    assert_eq!(both.len(), 2, "{text}");
    let (lo, hi) = (both[0].min(both[1]), both[0].max(both[1]));
    for tag in ["h", "w", "p", "s"] {
        let t: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("token {tag} ")))
            .unwrap_or_else(|| panic!("no token for {tag}:\n{text}"))
            .trim()
            .parse()
            .unwrap();
        assert!(
            t < lo || t > hi,
            "{tag}'s grant came between g's two:\n{text}"
        );
    }
}

#[test]
fn a_group_that_times_out_or_is_stopped_or_killed_gives_its_places_back() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (log, go) = (dir.path().join("log"), dir.path().join("go"));
    let lc = |args: &[&str]| server.lc(args);
    let mut kids = Kids(Vec::new());
    kids.0.push(holder_of_b(&lc, &log, &go));
    // -w: one line naming b and its holder, status 1, nothing held or left
    // in line.
    let line = common::expect_error_line(
        &mut lc(&[
            "lock", "-w", "1s", "a", "--and", "b", "--source", "t", "--", "true",
        ]),
        1,
    );
    assert!(
        line.contains("timeout") && line.contains("'b'") && line.contains("'h'"),
        "{line}"
    );
    let empty = || {
        !is_held(&server, "a")
            && server.count("withdraw 'a' source 't'") == 1
            && server.count("withdraw 'b' source 't'") == 1
    };
    assert!(
        common::wait_until(Duration::from_secs(5), empty),
        "{}\n{}",
        held(&server),
        server.log()
    );
    // A SIGTERM while waiting: 143, its places given back.
    let t = spawn(lc(&[
        "lock", "a", "--and", "b", "--source", "term", "--", "true",
    ]));
    wait_queued(&server, "b", "term");
    common::cli::signal(t.id() as i32, libc::SIGTERM);
    let mut t = t;
    assert!(common::wait_until(Duration::from_secs(10), || t
        .try_wait()
        .unwrap()
        .is_some()));
    let status = t.wait().unwrap();
    // lc-cli ends by the signal it was stopped with.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    let gone = || server.count("withdraw 'b' source 'term'") == 1;
    assert!(
        common::wait_until(Duration::from_secs(5), gone),
        "{}",
        server.log()
    );
    // g waits, reserving a (free) and b (held by h); s waits behind it for
    // a. g's lc-cli is SIGKILLed: its places go, and s gets a while h
    // still holds b.
    let mut g = spawn(lc(&[
        "lock", "a", "--and", "b", "--source", "g", "--", "true",
    ]));
    wait_queued(&server, "a", "g");
    wait_queued(&server, "b", "g");
    let s = spans::script(&log, "s", 0.1);
    let s = spawn(lc(&["lock", "-w", "20s", "a", "--source", "s", "-c", &s]));
    wait_queued(&server, "a", "s");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !std::fs::read_to_string(&log).unwrap().contains("start s "),
        "s passed a group that had reserved a"
    );
    // Who waits on a free key says why: the reservation, by whom.
    let line = common::expect_error_line(
        &mut lc(&["lock", "-w", "0.5s", "a", "--source", "u", "--", "true"]),
        1,
    );
    assert!(
        line.contains("reserved by 'g'") && line.contains("2 keys"),
        "{line}"
    );
    let _ = g.kill();
    let _ = g.wait();
    assert_eq!(common::finish_within(Duration::from_secs(10), s).0, Some(0));
    assert!(is_held(&server, "b"), "h lost b");
    std::fs::write(&go, "").unwrap();
    kids.all_succeed(Duration::from_secs(30));
}

/// A group waiting across a SIGKILL and restart of the server (`--data`):
/// its requests take their places back (tickets), b's holder reclaims b,
/// and the group still gets a and b together once b is free.
#[test]
fn a_waiting_group_survives_a_restart_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("locks.wal");
    let serve = common::serve::Serve::new().args(&["--data", data.to_str().unwrap()]);
    let mut server = serve.clone().port_pair().start();
    let listen = server.addr.to_string();
    let url = server.url();
    let lc = |args: &[&str]| common::lc_at(&url, args);
    let (log, go) = (dir.path().join("log"), dir.path().join("go"));
    let mut kids = Kids(Vec::new());
    kids.0.push(holder_of_b(&lc, &log, &go));
    let g = spans::script(&log, "g", 0.2);
    kids.0.push(spawn(lc(&[
        "lock", "a", "--and", "b", "--source", "g", "-c", &g,
    ])));
    wait_queued(&server, "a", "g");
    wait_queued(&server, "b", "g");
    server.kill();
    server = serve.clone().listen(&listen).restart();
    // Both of g's requests back in line, b's hold reclaimed.
    wait_queued(&server, "a", "g");
    wait_queued(&server, "b", "g");
    assert!(
        is_held(&server, "b") && !is_held(&server, "a"),
        "{}",
        held(&server)
    );
    std::fs::write(&go, "").unwrap();
    kids.all_succeed(Duration::from_secs(30));
    let spans = spans::read(&log);
    let text = std::fs::read_to_string(&log).unwrap();
    let (h, g) = (spans::by_tag(&spans, "h"), spans::by_tag(&spans, "g"));
    assert!(g.start >= h.end, "b's holders overlap:\n{text}");
    drop(server);
}

/// A server that does not name the feature `group` (here one serving as a
/// reference server does) is asked key after key, in sorted order.
#[test]
fn a_server_without_the_feature_is_asked_key_after_key() {
    let server = common::serve::Serve::new()
        .env("LC_CLI_SERVE_AS_REFERENCE", "1")
        .port_pair()
        .start();
    let out = common::expect_status(
        &mut server.lc(&["-v", "lock", "b", "--and", "a", "--", "true"]),
        0,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("getting lock 'a'") && err.contains("(1 of 2)") && err.contains("(2 of 2)"),
        "{err}"
    );
    assert!(!err.contains("granted together"), "{err}");
}

/// A server that cannot be reached: one line naming the first key, 69,
/// before anything is asked.
#[test]
fn an_unreachable_server_is_one_line() {
    let port = common::free_port_pair();
    let url = format!("lc://127.0.0.1:{port}");
    let line = common::expect_error_line(
        &mut common::lc_at(&url, &["lock", "b", "--and", "a", "--", "true"]),
        69,
    );
    assert!(
        line.contains("lock 'a'") && line.contains("cannot reach"),
        "{line}"
    );
}
