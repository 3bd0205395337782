//! `--connect-timeout` is how long to keep trying to reach ZooKeeper: a
//! client started before the server gets through once it is up, on every
//! subcommand; with no server it gives up after about that long (69).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::redis::{free_port, Running};
use common::zk::Zk;
use common::{expect_status, BIN};

const LIMIT: Duration = Duration::from_secs(40);

fn lc(port: u16, connect_timeout: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "--server",
        &format!("zk://127.0.0.1:{port}/c?session-timeout=2s"),
    ])
    .args(["--connect-timeout", connect_timeout])
    .args(args)
    .env_remove("LC_SERVER")
    .stdin(Stdio::null());
    cmd
}

#[test]
fn every_subcommand_waits_for_a_server_started_later() {
    let port = free_port();
    let clients: Vec<(&str, i32, Running)> = [
        (&["lock", "k", "--", "true"][..], 0),
        (&["trylock", "t", "--", "true"][..], 0),
        (&["keys"][..], 0),
        (&["reset", "k"][..], 0),
        (&["unlock", "u"][..], 1),
    ]
    .into_iter()
    .map(|(args, code)| (args[0], code, Running::spawn(&mut lc(port, "30s", args))))
    .collect();
    // Refused meanwhile: nothing listens yet.
    std::thread::sleep(Duration::from_secs(1));
    let _zk = Zk::start_at(port, 200);
    for (name, expected, client) in clients {
        let (code, err) = client.finish(LIMIT);
        assert_eq!(code, expected, "{name}: {err}");
    }
}

#[test]
fn no_server_fails_after_about_the_connect_timeout() {
    let port = free_port();
    for args in [&["lock", "k", "--", "true"][..], &["keys"][..]] {
        let started = Instant::now();
        let out = expect_status(&mut lc(port, "2s", args), 69);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
            "{args:?} gave up after {took:?}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("cannot reach"), "{err}");
    }
}
