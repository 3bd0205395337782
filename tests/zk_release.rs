//! A release on ZooKeeper is confirmed by the server before lc-cli exits 0:
//! ZooKeeper (its dataDir kept, so our session and node come back with it)
//! is killed with SIGKILL while the command runs. Back after ~2.5 s (past
//! the client library's own give-up, 1.4 x the 2 s session): lc-cli exits 0
//! only once the server is back and the node gone, and a trylock right
//! after sees the key free. Kept down past the 10 s release retry: exit 74
//! with one line naming `reset`.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::spans;
use common::timeline::now_ns;
use common::zk::Zk;
use common::*;

/// What the holder's lc-cli did: its status, when it exited (ns), its
/// stderr, and the status of a trylock started the moment it exited.
struct Ended {
    code: Option<i32>,
    at: i128,
    stderr: String,
    trylock: Option<i32>,
}

/// Runs `lc` (a holder) until it exits, within `limit`, then `trylock` at once.
fn watch(mut lc: Command, mut trylock: Command, limit: Duration) -> std::thread::JoinHandle<Ended> {
    let mut child = spans::Kids(vec![lc
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()]);
    std::thread::spawn(move || {
        let code = child.wait_all(limit)[0];
        let at = now_ns();
        let trylock = trylock.stderr(Stdio::null()).status().unwrap().code();
        let mut stderr = String::new();
        let _ = child.0[0]
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr);
        Ended {
            code,
            at,
            stderr,
            trylock,
        }
    })
}

fn started(log: &Path, tag: &str) -> bool {
    wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains(&format!("start {tag} "))
    })
}

#[test]
fn release_waits_for_the_server_to_confirm_after_a_restart() {
    let mut zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let mut figures = Vec::new();
    for i in 0..5 {
        let tag = format!("t{i}");
        let key = format!("k{i}");
        let script = spans::script(&log, &tag, 0.6);
        let holder = zk.lc("/z", &["lock", &key, "-c", &script]);
        let trylock = zk.lc("/z", &["trylock", &key, "--", "true"]);
        let ended = watch(holder, trylock, Duration::from_secs(60));
        assert!(started(&log, &tag), "{tag} never ran");
        let killed = now_ns();
        zk.stop();
        std::thread::sleep(Duration::from_millis(2500));
        let back_from = now_ns();
        zk.start_again();
        let ready = now_ns();
        let ended = ended.join().unwrap();
        let end = spans::by_tag(&spans::read(&log), &tag).end;
        assert_eq!(ended.code, Some(0), "{tag}: stderr: {}", ended.stderr);
        assert!(
            ended.at > back_from,
            "{tag}: lc-cli exited {:.0} ms after the kill, while ZooKeeper was down",
            (ended.at - killed) as f64 / 1e6
        );
        assert_eq!(
            ended.trylock,
            Some(0),
            "{tag}: the key was still held right after lc-cli's exit 0"
        );
        assert!(zk.queue(&format!("/z/{key}")).is_empty());
        let ms = |t: i128| (t - killed) as f64 / 1e6;
        figures.push([ms(end), ms(back_from), ms(ready), ms(ended.at)]);
    }
    for (i, [end, back, ready, exit]) in figures.iter().enumerate() {
        // (`ruok` is a late bound: the first one may wait on a JVM that
        // already serves sessions.)
        eprintln!(
            "trial {i}: after the kill, the command ended at {end:.0} ms, ZooKeeper was started again at {back:.0} ms and answered ruok by {ready:.0} ms, lc-cli exited 0 at {exit:.0} ms"
        );
    }
}

#[test]
fn release_never_confirmed_exits_74_with_the_reset_line() {
    let mut zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let mut figures = Vec::new();
    for i in 0..3 {
        let tag = format!("d{i}");
        let key = format!("k{i}");
        let script = spans::script(&log, &tag, 0.6);
        let holder = zk.lc("/d", &["lock", &key, "-c", &script]);
        // Run after the exit, while ZooKeeper is still down: it cannot get
        // a session either (69), so it shows the key is not known free.
        let server = format!("{}?session-timeout=2s", zk.url("/d"));
        let args = ["--connect-timeout", "1s", "trylock", &key, "--", "true"];
        let trylock = lc_at(&server, &args);
        let ended = watch(holder, trylock, Duration::from_secs(60));
        assert!(started(&log, &tag), "{tag} never ran");
        let killed = now_ns();
        zk.stop();
        let ended = ended.join().unwrap();
        let end = spans::by_tag(&spans::read(&log), &tag).end;
        assert_eq!(ended.code, Some(74), "{tag}: stderr: {}", ended.stderr);
        assert_eq!(ended.stderr.lines().count(), 1, "{}", ended.stderr);
        assert!(
            ended.stderr.starts_with("lc-cli: ") && ended.stderr.contains(&format!("reset {key}`")),
            "{}",
            ended.stderr
        );
        assert_eq!(ended.trylock, Some(69));
        figures.push((
            (end - killed) as f64 / 1e6,
            (ended.at - killed) as f64 / 1e6,
            ended.stderr.trim().to_string(),
        ));
        zk.start_again();
    }
    for (i, (end, exit, line)) in figures.iter().enumerate() {
        eprintln!("trial {i}: command ended {end:.0} ms after the kill, lc-cli exited 74 at {exit:.0} ms: {line}");
    }
}

/// The session expires on the server before lc-cli can confirm the delete
/// (lc-cli stopped while ZooKeeper restarts): the server took the node with
/// the session, which is a confirmed release: exit 0, not 74.
#[test]
fn a_session_expired_meanwhile_is_a_confirmed_release() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    // tickTime 500 ms: sessions up to 10 s (the default 200 ms caps them at 4 s).
    let mut zk = Zk::start_with_tick(500);
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    for i in 0..3 {
        let tag = format!("e{i}");
        let key = format!("k{i}");
        let dir = format!("/e/{key}");
        let script = spans::script(&log, &tag, 0.3);
        // An 8 s session: its command (0.3 s) must end after ZooKeeper is
        // stopped and well before lc-cli counts the lock lost (two thirds of
        // the session after the last contact), and the restarted server
        // must still have the node when the test looks: the session expires
        // a session timeout after the server loaded it, and under load a
        // restart (the JVM's start to `ruok`) took 5.8 s, past a 4 s session.
        let mut holder = spans::Kids(vec![zk
            .lc_session("/e", "8s", &["lock", &key, "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()]);
        let pid = Pid::from_raw(holder.0[0].id() as i32);
        assert!(started(&log, &tag), "{tag} never ran");
        zk.stop();
        let ended = wait_until(Duration::from_secs(5), || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains(&format!("end {tag} "))
        });
        assert!(ended, "{tag}'s command did not end");
        // Stopped only once it has reaped the command: a command that ended
        // while lc-cli was stopped ended, for lc-cli, past its deadline.
        assert!(
            wait_until(Duration::from_secs(5), || !runs_its_command(pid.as_raw())),
            "{tag}: lc-cli never reaped its command"
        );
        kill(pid, Signal::SIGSTOP).unwrap();
        zk.start_again();
        let node_back = zk.queue(&dir).len();
        // Restored with the session, then expired with it.
        let expired = wait_until(Duration::from_secs(30), || zk.queue(&dir).is_empty());
        kill(pid, Signal::SIGCONT).unwrap();
        let code = holder.wait_all(Duration::from_secs(30))[0];
        let mut stderr = String::new();
        let _ = holder.0[0]
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr);
        assert_eq!(
            node_back, 1,
            "{tag}: the node did not come back with ZooKeeper"
        );
        assert!(expired, "{tag}: the session never expired");
        assert_eq!(code, Some(0), "{tag}: stderr: {stderr}");
        assert!(stderr.is_empty(), "{stderr}");
    }
}

/// Whether `pid` still has a child that is not its guardian (the command,
/// running or not yet reaped).
fn runs_its_command(pid: i32) -> bool {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    tasks.flatten().any(|task| {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.split_whitespace().any(|child| {
            let comm = std::fs::read(format!("/proc/{child}/comm")).unwrap_or_default();
            comm != b"lc-cli-guardian\n"
        })
    })
}
