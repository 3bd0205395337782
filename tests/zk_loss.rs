//! Losing and keeping the lock on ZooKeeper: the holder's node deleted from
//! outside, session expiry, a server restart, a killed waiter, a signal
//! while waiting.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::zk::Zk;
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Kids {
    /// Waits for child `i` to exit within `limit`, returns its output.
    fn finish(&mut self, i: usize, limit: Duration) -> Output {
        let start = Instant::now();
        loop {
            if self.0[i].try_wait().unwrap().is_some() {
                let mut c = self.0.remove(i);
                let status = c.wait().unwrap();
                let mut stderr = String::new();
                if let Some(mut e) = c.stderr.take() {
                    use std::io::Read;
                    e.read_to_string(&mut stderr).unwrap();
                }
                return Output {
                    status,
                    stdout: Vec::new(),
                    stderr: stderr.into_bytes(),
                };
            }
            assert!(
                start.elapsed() < limit,
                "lc-cli did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Starts lc-cli (stderr piped, for `finish`) and waits for its command
/// to mark its start in `dir`.
fn started(mut lc: Command, dir: &Path) -> Kids {
    let kids = Kids(vec![lc.stderr(Stdio::piped()).spawn().unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || dir
        .join("started")
        .exists()));
    kids
}

/// A command that marks its start, and on SIGTERM marks that too and exits.
fn guarded_child(dir: &Path) -> String {
    format!(
        "trap 'touch {d}/term; exit 0' TERM; echo $$ > {d}/pid; touch {d}/started; while :; do sleep 0.05; done",
        d = dir.display()
    )
}

fn assert_lost(out: &Output, dir: &Path, why: &str) {
    assert_lost_stopped(out, why);
    assert!(dir.join("term").exists(), "the child was not sent SIGTERM");
}

/// Lost, and the command stopped one way or another (when the session is
/// known to be over already, the SIGKILL deadline has passed: no grace).
fn assert_lost_stopped(out: &Output, why: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(75),
        "status {:?}, stderr: {err}",
        out.status
    );
    assert!(err.contains("lost") && err.contains(why), "stderr: {err}");
}

#[test]
fn holder_node_deleted_from_outside_stops_the_child() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut kids = started(
        zk.lc("/l", &["lock", "k", "-c", &guarded_child(tmp.path())]),
        tmp.path(),
    );
    let q = zk.queue("/l/k");
    assert_eq!(q.len(), 1);
    zk.delete(&format!("/l/k/{}", q[0]));
    let out = kids.finish(0, Duration::from_secs(20));
    assert_lost(&out, tmp.path(), "deleted");
    assert!(zk.queue("/l/k").is_empty());
}

/// lc-cli stopped past its session timeout: its guardian stops the command
/// meanwhile, before the server expires the session; when lc-cli runs again
/// it reports the loss.
#[test]
fn session_expiry_stops_the_child() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut kids = started(
        zk.lc_session("/l", "1s", &["lock", "k", "-c", &guarded_child(tmp.path())]),
        tmp.path(),
    );
    let pid = Pid::from_raw(kids.0[0].id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    // The server expires the session and deletes the node while we sleep.
    assert!(
        wait_until(Duration::from_secs(20), || zk.queue("/l/k").is_empty()),
        "the session did not expire"
    );
    // Stopped by SIGTERM, or by the SIGKILL that follows it when the
    // trap had no time to run (lc-cli is frozen: the shell stays a zombie).
    let shell: i32 = std::fs::read_to_string(tmp.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        common::cli::is_dead(shell),
        "the command of a frozen lc-cli ran on past its session"
    );
    kill(pid, Signal::SIGCONT).unwrap();
    let out = kids.finish(0, Duration::from_secs(30));
    // Whichever lc-cli notices first on waking: the server's word that the
    // session expired, or its own clock (no contact for 2/3 of it).
    let err = String::from_utf8_lossy(&out.stderr);
    let why = if err.contains("expired") {
        "expired"
    } else {
        "no contact"
    };
    assert_lost_stopped(&out, why);
}

/// ZooKeeper gone for good while the command runs: after the session
/// timeout without contact, the lock is taken as lost.
#[test]
fn server_gone_longer_than_the_session_timeout_stops_the_child() {
    let mut zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut kids = started(
        zk.lc_session("/g", "2s", &["lock", "k", "-c", &guarded_child(tmp.path())]),
        tmp.path(),
    );
    zk.stop();
    let out = kids.finish(0, Duration::from_secs(40));
    assert_lost(&out, tmp.path(), "no contact");
}

/// A ZooKeeper restart shorter than the session timeout keeps the lock:
/// the command finishes normally and a trylock meanwhile conflicts.
#[test]
fn server_restart_within_the_session_timeout_keeps_the_lock() {
    let mut zk = Zk::start_with_tick(500);
    let tmp = tempfile::tempdir().unwrap();
    let go = tmp.path().join("go");
    let script = format!(
        "touch {d}/started; while [ ! -e {go} ]; do sleep 0.05; done; echo done",
        d = tmp.path().display(),
        go = go.display()
    );
    let mut cmd = zk.lc_session("/r", "8s", &["lock", "k", "-c", &script]);
    cmd.stdout(Stdio::null());
    let mut kids = started(cmd, tmp.path());
    let before = zk.queue("/r/k");
    assert_eq!(before.len(), 1);
    zk.restart_after(Duration::from_millis(500));
    assert_eq!(zk.queue("/r/k"), before, "the node survived the restart");
    expect_status(&mut zk.lc("/r", &["trylock", "k", "--", "true"]), 1);
    // Long enough for the client to have reconnected and still hold it.
    let reconnect = Duration::from_secs(2);
    assert!(holds_for(reconnect, || zk.queue("/r/k") == before));
    std::fs::write(&go, "").unwrap();
    let out = kids.finish(0, Duration::from_secs(30));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(wait_until(Duration::from_secs(5), || zk
        .queue("/r/k")
        .is_empty()));
}

/// A waiter killed with SIGKILL keeps its place until its session expires;
/// then the next waiter gets the key.
#[test]
fn killed_waiter_leaves_the_queue_when_its_session_expires() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let ran = tmp.path().join("ran");
    expect_status(&mut zk.lc("/w", &["lock", "k"]), 0);
    let mut kids = Kids(Vec::new());
    kids.0.push(
        zk.lc_session("/w", "4s", &["lock", "k", "--", "true"])
            .spawn()
            .unwrap(),
    );
    zk.wait_queue_len("/w/k", 2);
    kids.0.push(
        zk.lc("/w", &["lock", "k", "--", "touch"])
            .arg(&ran)
            .spawn()
            .unwrap(),
    );
    zk.wait_queue_len("/w/k", 3);
    kids.0[0].kill().unwrap();
    kids.0[0].wait().unwrap();
    let killed_at = Instant::now();
    expect_status(&mut zk.lc("/w", &["unlock", "k"]), 0);
    std::thread::sleep(Duration::from_millis(500));
    if killed_at.elapsed() < Duration::from_secs(3) {
        assert!(
            !ran.exists(),
            "the next waiter ran before the dead one expired"
        );
        assert_eq!(
            zk.queue("/w/k").len(),
            2,
            "the dead waiter's node stays until expiry"
        );
    }
    let out = kids.finish(1, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0));
    assert!(ran.exists());
    assert!(zk.queue("/w/k").is_empty());
}

/// SIGTERM while waiting: lc-cli leaves the queue at once (no wait for
/// the session to expire) and exits 128+15.
#[test]
fn signal_while_waiting_removes_the_node_at_once() {
    let zk = Zk::start();
    expect_status(&mut zk.lc("/s", &["lock", "k"]), 0);
    let mut kids = Kids(vec![zk
        .lc_session("/s", "4s", &["lock", "k", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()]);
    zk.wait_queue_len("/s/k", 2);
    kill(Pid::from_raw(kids.0[0].id() as i32), Signal::SIGTERM).unwrap();
    let out = kids.finish(0, Duration::from_secs(20));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(15), "{out:?}");
    assert_eq!(
        zk.queue("/s/k").len(),
        1,
        "the waiter's node is gone on exit"
    );
    expect_status(&mut zk.lc("/s", &["unlock", "k"]), 0);
}
