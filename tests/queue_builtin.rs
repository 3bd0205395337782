//! Deploy queues (issue 44) on the built-in server: the scenarios of
//! `common::deploy` against a real `lc-cli serve`, with and without a
//! restart of `serve --data` (SIGTERM, the same command line), and the one
//! line a server without the feature gets.

use crate::common;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::deploy;
use common::serve::{Serve, Server};
use common::*;

/// A server with its log in a temp dir, restartable on the same port.
struct Restartable {
    serve: Serve,
    server: Arc<Mutex<Server>>,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Restartable {
    fn start() -> Restartable {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("lc.log");
        let serve = Serve::new().args(&["--data", data.to_str().unwrap()]);
        // The manager on the lock port + 1 from the start: the restart's
        // `--listen ADDR` puts it there by default, which must be ours.
        let server = serve.clone().port_pair().start();
        let addr = server.addr.to_string();
        let serve = serve.listen(&addr);
        Restartable {
            serve,
            server: Arc::new(Mutex::new(server)),
            addr,
            _dir: dir,
        }
    }

    /// lc-cli against it, riding out a restart within its connect timeout.
    fn lc(&self, args: &[&str]) -> Command {
        let mut cmd = lc_at(&self.addr, &["--connect-timeout", "10s"]);
        cmd.args(args);
        cmd
    }

    /// SIGTERM, then the same command line again.
    fn restart(&self) {
        let mut server = self.server.lock().unwrap();
        let status = server.stop_with(libc::SIGTERM, Duration::from_secs(10));
        assert!(status.is_some(), "serve did not stop on SIGTERM");
        *server = self.serve.clone().restart();
    }
}

fn plain() -> (Server, impl Fn(&[&str]) -> Command) {
    let server = Server::start();
    let addr = server.addr.to_string();
    (server, move |args: &[&str]| lc_at(&addr, args))
}

#[test]
fn newest_wins() {
    let (_server, lc) = plain();
    let delays = deploy::newest_wins(&lc, "deploy/prod");
    eprintln!("superseded after the newer request's spawn (ms): {delays:.1?}");
}

#[test]
fn orders_without_newest() {
    let (_server, lc) = plain();
    deploy::orders(&lc, "deploy/prod", false, None);
}

#[test]
fn orders_with_newest() {
    let (_server, lc) = plain();
    deploy::orders(&lc, "deploy/prod", true, None);
}

#[test]
fn orders_without_newest_across_a_restart() {
    let s = Restartable::start();
    let lc = |args: &[&str]| s.lc(args);
    deploy::orders(&lc, "deploy/prod", false, Some(&mut || s.restart()));
}

#[test]
fn orders_with_newest_across_a_restart() {
    let s = Restartable::start();
    let lc = |args: &[&str]| s.lc(args);
    deploy::orders(&lc, "deploy/prod", true, Some(&mut || s.restart()));
}

#[test]
fn mark_rules_across_a_restart() {
    let s = Restartable::start();
    let lc = |args: &[&str]| s.lc(args);
    deploy::mark_rules(&lc, "deploy/prod", Some(&mut || s.restart()));
}

#[test]
fn mark_rules() {
    let (_server, lc) = plain();
    deploy::mark_rules(&lc, "deploy/prod", None);
}

#[test]
fn cancel_running() {
    let (_server, lc) = plain();
    let gaps = deploy::cancel_running(&lc, "deploy/prod", 5);
    eprintln!("the newer command started after the older one's end (ms): {gaps:.1?}");
}

#[test]
fn no_cancel_without_the_flag() {
    let (_server, lc) = plain();
    deploy::no_cancel_without_the_flag(&lc, "deploy/prod");
}

#[test]
fn pipelines_across_a_restart() {
    let s = Restartable::start();
    let lc = |args: &[&str]| s.lc(args);
    deploy::pipelines_across_a_restart(&lc, "deploy/prod", &mut || s.restart());
}

/// A server that answers `-` to ExtendedLock, as a reference
/// Locking-Center server does: one line, 76, nothing run.
#[test]
fn a_server_without_fields_refuses_in_one_line() {
    let server = Serve::new().env("LC_CLI_SERVE_AS_REFERENCE", "1").start();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let out = server
        .lc(&[
            "lock",
            "--newest",
            "--order",
            "7",
            "k",
            "--",
            "touch",
            ran.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--newest") && stderr.contains("--order"),
        "{stderr}"
    );
    assert!(!ran.exists(), "the command ran");
    // The mark too.
    let out = server.lc(&["mark", "k"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(76),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
