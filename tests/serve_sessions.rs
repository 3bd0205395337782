//! Session holds on the built-in server, with real faults: a holder killed
//! with SIGKILL, its network path frozen by a proxy, a reset or someone's
//! unlock while its command runs, the server killed and restarted, and a
//! server that answers lc-cli's own actions `-` as the reference does.
//! Who held the key when is read from the commands' own logged times.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::serve::data_arg;
use common::timeline::{alive, gone_at, now_ns, OnTerm, Timeline};
use common::{wait_until, BIN};
use common::{Serve, Server};

/// The session timeout these servers run with: short, so the tests are.
const SESSION: &str = "3s";
const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
const LIMIT: Duration = Duration::from_secs(20);

fn lc(addr: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--server").arg(addr).args(args);
    cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
    cmd
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lc-cli")
}

/// Waits (bounded) for a child and returns its output.
fn finish(mut child: Child, limit: Duration) -> Output {
    let ok = wait_until(limit, || child.try_wait().unwrap().is_some());
    if !ok {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(ok, "lc-cli did not end within {limit:?}: {out:?}");
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// lc-cli's own lines (the shell may add its "Terminated").
fn own_lines(err: &str) -> usize {
    err.lines().filter(|l| l.starts_with("lc-cli:")).count()
}

fn session_server(extra: &[&str]) -> Server {
    Serve::new()
        .args(&["--reclaim-grace", SESSION])
        .args(extra)
        .start()
}

fn holder(addr: &str, key: &str, script: &str) -> Child {
    spawn(lc(addr, &["lock", key, "--", "sh", "-c", script]))
}

fn started(tl: &Timeline, name: &str) -> (i128, i32) {
    assert!(
        wait_until(LIMIT, || tl.start_of(name).is_some()),
        "{name} never started: {}",
        tl.text()
    );
    tl.start_of(name).unwrap()
}

fn kill_group(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes only integers: no memory of ours is involved.
    unsafe { libc::kill(-pid, sig) };
}

/// A holder and its command killed with SIGKILL: the next waiter gets the
/// key once the holder has not been heard from for the session timeout
/// (documented bound: the timeout after its last heartbeat, which is at most
/// a quarter of it old), not before, and not never.
#[test]
fn a_killed_holder_frees_the_key_within_the_session_timeout() {
    let server = session_server(&[]);
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let tl = Timeline::new(dir.path());
    let mut h = holder(&addr, "k", &tl.holder("h", OnTerm::LogAndExit));
    let (_, pid) = started(&tl, "h");
    // lc-cli first: with its command gone first, it would release the key.
    h.kill().unwrap();
    h.wait().unwrap();
    kill_group(pid, libc::SIGKILL);
    let killed = Instant::now();
    let w = spawn(lc(
        &addr,
        &["lock", "k", "--", "sh", "-c", &tl.one_shot("w")],
    ));
    let out = finish(w, LIMIT);
    let took = killed.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        took <= SESSION_TIMEOUT + Duration::from_millis(1500),
        "the waiter got the key after {took:?}"
    );
    assert!(
        took >= SESSION_TIMEOUT / 2,
        "the key went on after {took:?}: before the holder could reclaim it"
    );
    server.wait_for("session hold of 'k' by", 1, LIMIT);
}

/// One trial: the holder's path is frozen (no bytes, connections open) for
/// longer than the session timeout; the holder's command must have ended
/// before the waiter's started. Returns the margin.
fn frozen_trial(on_term: OnTerm, n: usize) -> Duration {
    let server = session_server(&[]);
    let proxy = Proxy::start(server.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let tl = Timeline::new(dir.path());
    let h = holder(&proxy.addr(), "k", &tl.holder("h", on_term));
    let (_, pid) = started(&tl, "h");
    let watch = std::thread::spawn(move || gone_at(pid, LIMIT));
    proxy.freeze();
    let frozen_at = now_ns();
    let w = spawn(lc(
        &server.addr.to_string(),
        &["lock", "k", "--", "sh", "-c", &tl.one_shot("w")],
    ));
    let out = finish(h, LIMIT);
    assert_eq!(out.status.code(), Some(75), "trial {n}: {}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(own_lines(&err), 1, "trial {n}: {err}");
    assert!(err.contains("no word from the server"), "trial {n}: {err}");
    let wout = finish(w, LIMIT);
    assert!(wout.status.success(), "trial {n}: {}", stderr(&wout));
    let (w_start, _) = tl.start_of("w").unwrap();
    let h_end = match on_term {
        OnTerm::Ignore => watch
            .join()
            .unwrap()
            .expect("the holder's command never ended"),
        _ => tl.end_of("h").unwrap_or_else(|| {
            panic!(
                "trial {n}: the holder's end is not logged\n{}\nholder: {err}",
                tl.text()
            )
        }),
    };
    assert!(
        h_end < w_start,
        "trial {n} ({on_term:?}): the waiter started {} ms before the holder's command ended\n{}",
        (h_end - w_start) / 1_000_000,
        tl.text()
    );
    assert!(
        w_start - frozen_at >= SESSION_TIMEOUT.as_nanos() as i128 / 2,
        "trial {n}: the key went on too early"
    );
    Duration::from_nanos((w_start - h_end) as u64)
}

#[test]
fn a_frozen_holder_stops_before_the_server_grants_the_key_again() {
    let mut margins = Vec::new();
    for (n, on_term) in [
        OnTerm::LogAndExit,
        OnTerm::SlowExit,
        OnTerm::Ignore,
        OnTerm::LogAndExit,
    ]
    .into_iter()
    .enumerate()
    {
        margins.push(frozen_trial(on_term, n));
    }
    eprintln!("margins between the holder's end and the waiter's start: {margins:?}");
}

/// A freeze shorter than two thirds of the session timeout loses nothing:
/// the command runs on and ends on its own, released normally.
#[test]
fn a_short_freeze_loses_nothing() {
    let server = session_server(&[]);
    let proxy = Proxy::start(server.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let tl = Timeline::new(dir.path());
    let script = format!("{}; sleep 3; {}", tl.one_shot("h"), tl.one_shot("h-done"));
    let h = holder(&proxy.addr(), "k", &script);
    started(&tl, "h");
    let w = spawn(lc(
        &server.addr.to_string(),
        &["lock", "k", "--", "sh", "-c", &tl.one_shot("w")],
    ));
    proxy.freeze();
    std::thread::sleep(Duration::from_millis(1200));
    proxy.thaw();
    let out = finish(h, LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let wout = finish(w, LIMIT);
    assert!(wout.status.success(), "{}", stderr(&wout));
    let (done, _) = tl.start_of("h-done").expect("the command ran to its end");
    let (w_start, _) = tl.start_of("w").unwrap();
    assert!(done < w_start, "{}", tl.text());
    assert_eq!(server.count("expired"), 0, "{}", server.log());
}

/// `reset` (or someone's `unlock`) of a running holder: it stops its
/// command and exits 75; its late release frees nothing, so the next
/// holder runs undisturbed (a third client cannot get in meanwhile).
fn taken_away(how: &[&str], reason: &str) {
    let server = session_server(&[]);
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let tl = Timeline::new(dir.path());
    let h = holder(&addr, "k", &tl.holder("h", OnTerm::LogAndExit));
    started(&tl, "h");
    let second = format!("{}; sleep 2; {}", tl.one_shot("b"), tl.one_shot("b-done"));
    let b = holder(&addr, "k", &second);
    server.wait_for("queue 'k'", 1, LIMIT);
    let out = lc(&addr, how).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let hout = finish(h, LIMIT);
    assert_eq!(hout.status.code(), Some(75), "{}", stderr(&hout));
    let err = stderr(&hout);
    assert!(err.contains(reason), "{err}");
    assert_eq!(own_lines(&err), 1, "{err}");
    let (b_start, _) = started(&tl, "b");
    assert!(tl.end_of("h").is_some(), "{}", tl.text());
    // The holder has exited, its late release sent: the key is still b's.
    assert!(tl.start_of("b-done").is_none(), "b ended too soon");
    let third = lc(&addr, &["trylock", "k", "--", "true"]).output().unwrap();
    assert_eq!(third.status.code(), Some(1), "{third:?}");
    let bout = finish(b, LIMIT);
    assert!(bout.status.success(), "{}", stderr(&bout));
    let (b_done, _) = tl.start_of("b-done").unwrap();
    assert!(b_done - b_start >= 1_900_000_000, "{}", tl.text());
}

#[test]
fn a_reset_of_a_running_holder_stops_it_and_its_late_release_frees_nothing() {
    taken_away(&["reset", "k"], "took the hold away");
}

#[test]
fn an_unlock_of_a_running_holder_stops_it_and_its_late_release_frees_nothing() {
    taken_away(&["unlock", "k"], "took the hold away");
}

fn token_of(addr: &str, key: &str) -> u64 {
    let out = lc(
        addr,
        &["lock", key, "--", "sh", "-c", "echo $LC_LOCK_TOKEN"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("no token: {text:?}"))
}

fn restart_on(port: u16, extra: &[&str]) -> Server {
    Serve::new()
        .listen(&format!("127.0.0.1:{port}"))
        .args(&["--manager", "127.0.0.1:0", "--reclaim-grace", SESSION])
        .args(extra)
        .restart()
}

#[test]
fn tokens_grow_across_grants_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_arg(&dir.path().join("wal"));
    let mut server = session_server(&["--data", &data]);
    let port = server.addr.port();
    let addr = server.addr.to_string();
    let mut tokens = vec![
        token_of(&addr, "k"),
        token_of(&addr, "k"),
        token_of(&addr, "j"),
    ];
    server.stop_with(libc::SIGKILL, LIMIT);
    drop(server);
    let server = restart_on(port, &["--data", &data]);
    tokens.push(token_of(&addr, "k"));
    drop(server);
    // Without a log: the tokens start from the wall clock, still above.
    let server = restart_on(port, &[]);
    tokens.push(token_of(&addr, "k"));
    drop(server);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// The server is killed and restarted with its log while commands run:
/// their holders reclaim, the commands run on and release normally; a
/// holder that died meanwhile is freed once the session timeout has passed.
#[test]
fn a_server_restart_with_data_keeps_running_commands() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_arg(&dir.path().join("wal"));
    let mut server = session_server(&["--data", &data]);
    let port = server.addr.port();
    let addr = server.addr.to_string();
    let tl = Timeline::new(dir.path());
    let a_script = format!("{}; sleep 4; {}", tl.one_shot("a"), tl.one_shot("a-done"));
    let a = holder(&addr, "a", &a_script);
    let mut b = holder(&addr, "b", &tl.holder("b", OnTerm::LogAndExit));
    started(&tl, "a");
    let (_, b_pid) = started(&tl, "b");
    server.stop_with(libc::SIGKILL, LIMIT);
    drop(server);
    // b dies with the server down: nobody will reclaim its hold.
    b.kill().unwrap();
    b.wait().unwrap();
    kill_group(b_pid, libc::SIGKILL);
    let server = restart_on(port, &["--data", &data]);
    let restarted = Instant::now();
    server.wait_for("reclaimed the session hold of 'a'", 1, LIMIT);
    // b's key: free once the timeout after the restart has passed.
    let w = spawn(lc(&addr, &["lock", "b", "--", "true"]));
    let wout = finish(w, LIMIT);
    assert!(wout.status.success(), "{}", stderr(&wout));
    let took = restarted.elapsed();
    assert!(
        took >= SESSION_TIMEOUT - Duration::from_millis(500)
            && took <= SESSION_TIMEOUT + Duration::from_millis(2500),
        "b's hold freed {took:?} after the restart"
    );
    let aout = finish(a, LIMIT);
    assert!(aout.status.success(), "{}", stderr(&aout));
    assert!(tl.start_of("a-done").is_some(), "{}", tl.text());
    // a released normally: the key is free.
    let again = lc(&addr, &["trylock", "a", "--", "true"]).output().unwrap();
    assert!(again.status.success(), "{again:?}");
    assert!(!alive(b_pid));
}

/// A server that answers lc-cli's own actions `-`, as the reference does:
/// lc-cli holds the classic way, says so once with -v, and works as before.
#[test]
fn against_a_reference_style_server_lc_cli_falls_back_to_classic_frames() {
    let server = Serve::new().env("LC_CLI_SERVE_AS_REFERENCE", "1").start();
    let addr = server.addr.to_string();
    assert_eq!(
        server.raw(&common::frame(8, b"k", Some(b"s"))),
        Some(b'-'),
        "a session frame is an unknown action"
    );
    let out = lc(
        &addr,
        &[
            "-v",
            "lock",
            "k",
            "--",
            "sh",
            "-c",
            "echo token=${LC_LOCK_TOKEN-none}",
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "token=none");
    let err = stderr(&out);
    assert_eq!(
        err.matches("does not know session locks").count(),
        1,
        "{err}"
    );
    // Released (by Unlock, after Release was answered `-`).
    let again = lc(&addr, &["trylock", "k", "--", "true"]).output().unwrap();
    assert!(again.status.success(), "{again:?}");
    // A detached hold and its unlock, as today.
    let out = lc(&addr, &["lock", "k"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let busy = lc(&addr, &["trylock", "k", "--", "true"]).output().unwrap();
    assert_eq!(busy.status.code(), Some(1));
    assert!(lc(&addr, &["unlock", "k"])
        .output()
        .unwrap()
        .status
        .success());
    let free = lc(&addr, &["trylock", "k", "--", "true"]).output().unwrap();
    assert!(free.status.success(), "{free:?}");
}

/// A peer that speaks the protocol but never confirms a withdrawn wait (a
/// reference server that does not notice the half-close): `-w 1s` ends
/// within a short bounded wait after the second, saying with -v that a
/// late grant may still come and how to clear it.
#[test]
fn a_withdrawal_never_confirmed_is_given_up_quickly() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut parked = Vec::new();
        for stream in listener.incoming().take(50) {
            let Ok(mut s) = stream else { continue };
            // The whole frame (it comes in one segment), so the close
            // after the answer is a FIN, not a reset.
            let mut frame = [0u8; 300];
            if !matches!(s.read(&mut frame), Ok(n) if n > 0) {
                continue;
            }
            if frame[0] == 1 {
                // A Lock: never answered, never closed.
                parked.push(s);
            } else {
                let _ = s.write_all(b"-");
            }
        }
    });
    let started = Instant::now();
    let out = lc(&addr, &["-v", "lock", "-q", "-w", "1s", "k", "--", "true"])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(took < Duration::from_millis(3000), "took {took:?}");
    let err = stderr(&out);
    assert!(err.contains("did not confirm the withdrawal"), "{err}");
    assert!(err.contains("unlock k"), "{err}");
}

/// `keys` shows each hold's token and kind: a command's session hold and a
/// hold kept by `lock KEY`; the token is the command's LC_LOCK_TOKEN.
#[test]
fn keys_shows_tokens_and_the_kind_of_each_hold() {
    let manager = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let server = session_server(&["--manager", &manager]);
    let url = format!("lc://{}?manager={manager}", server.addr);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let script = format!("echo $LC_LOCK_TOKEN > {}; sleep 30", token_file.display());
    let mut h = holder(&url, "run", &script);
    assert!(wait_until(LIMIT, || std::fs::read_to_string(&token_file)
        .is_ok_and(|t| t.ends_with('\n'))));
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.trim();
    assert!(lc(&url, &["lock", "kept"])
        .output()
        .unwrap()
        .status
        .success());
    let out = lc(&url, &["keys"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["KEY", "SOURCE", "PEER", "HELD", "HOLD", "WAITING", "TOKEN"],
        "{table}"
    );
    let run = rows.iter().find(|r| r[0] == "run").expect(&table);
    assert_eq!((run[4], run[6]), ("command", token), "{table}");
    let kept = rows.iter().find(|r| r[0] == "kept").expect(&table);
    assert_eq!(kept[4], "kept", "{table}");
    assert!(kept[6].parse::<u64>().unwrap() > token.parse::<u64>().unwrap());
    let json = lc(&url, &["keys", "--json"]).output().unwrap();
    let json = String::from_utf8_lossy(&json.stdout).into_owned();
    assert!(json.contains(&format!("\"token\":{token}")), "{json}");
    h.kill().unwrap();
    h.wait().unwrap();
}
