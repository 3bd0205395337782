//! The key is held until every process of the command's process group has
//! ended, as flock(1)'s lock is held by a background job that inherited it;
//! a process that leaves the group (`setsid`) does not keep it.

use crate::common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::cli::{is_dead, read_pid, signal};
use common::*;

/// `lc-cli lock KEY -c SCRIPT` in the background, its output not captured
/// (a background job would keep a pipe open).
fn lock_with(server: &Server, key: &str, script: &str) -> Child {
    server
        .lc(&["lock", key, "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn wait_exit(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// 0 if the key was free (and is now released again), 1 if held.
fn trylock(server: &Server, key: &str) -> i32 {
    server
        .lc(&["trylock", key, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .code()
        .unwrap()
}

fn wait_file(path: &Path) {
    assert!(
        wait_until(Duration::from_secs(10), || path.exists()),
        "{} never appeared",
        path.display()
    );
}

/// Before the fix lc-cli released `k` as soon as the shell exited, while
/// its `sleep` still ran.
#[test]
fn a_background_job_keeps_the_key_until_it_ends() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let ended = dir.path().join("ended");
    let script = format!(
        "(sleep 1.5; : > '{}') & : > '{}'; exit 3",
        ended.display(),
        started.display()
    );
    let t0 = Instant::now();
    let mut lc = lock_with(&server, "k", &script);
    wait_file(&started);
    // The shell has exited; its job still runs and the key is still held.
    assert!(
        holds_for(QUIET, || lc.try_wait().unwrap().is_none()),
        "lc-cli left early"
    );
    assert_eq!(trylock(&server, "k"), 1, "the key was freed under the job");
    // The main command's status once the job is done, and only then.
    assert_eq!(wait_exit(&mut lc, Duration::from_secs(10)), Some(3));
    assert!(ended.exists(), "lc-cli exited before the job ended");
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(1500), "took {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(trylock(&server, "k"), 0, "the key is free after");
}

/// A job that left the group with `setsid` escapes: it does not keep the
/// key (documented in the README).
#[test]
fn a_setsid_job_does_not_keep_the_key() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!(
        "setsid sh -c 'echo $$ > \"{}\"; exec sleep 5' & while [ ! -s '{}' ]; do sleep 0.01; done; exit 0",
        pidfile.display(),
        pidfile.display()
    );
    let mut lc = lock_with(&server, "d", &script);
    assert_eq!(wait_exit(&mut lc, Duration::from_secs(3)), Some(0));
    let daemon = read_pid(&pidfile);
    assert!(!is_dead(daemon), "the setsid job should still run");
    assert_eq!(trylock(&server, "d"), 0, "the key is free");
    signal(daemon, libc::SIGKILL);
}

/// Signals still reach the group after the main command ended: SIGTERM to
/// lc-cli ends the job, then lc-cli exits with the main command's status.
#[test]
fn signals_reach_the_job_after_the_main_command_ended() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("sleep 30 & echo $! > '{}'; exit 0", pidfile.display());
    let mut lc = lock_with(&server, "s", &script);
    wait_file(&pidfile);
    let job = read_pid(&pidfile);
    assert!(
        holds_for(QUIET, || lc.try_wait().unwrap().is_none()),
        "lc-cli left early"
    );
    assert_eq!(trylock(&server, "s"), 1);
    signal(lc.id() as i32, libc::SIGTERM);
    assert_eq!(wait_exit(&mut lc, Duration::from_secs(5)), Some(0));
    assert!(wait_until(Duration::from_secs(2), || is_dead(job)));
    assert_eq!(trylock(&server, "s"), 0);
}
