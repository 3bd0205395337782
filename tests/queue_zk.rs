//! Deploy queues on ZooKeeper (issue 44): the scenarios of
//! `common::deploy` against a real ZooKeeper, restarts included (killed and
//! started again on its dataDir: the sessions and their ephemeral nodes
//! come back); the requests an uncontended lock with `--newest --order`
//! sends against a plain one, counted by `mntr`.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::deploy;
use common::zk::Zk;

/// Sessions of 10 s (the server allows 2 to 20 ticks of 500 ms), so a
/// holder's command rides out a restart of the JVM on a busy machine: its
/// stop begins at two thirds of the session timeout without contact.
const TICK_MS: u64 = 500;
const SESSION: &str = "10s";

/// lc-cli against the server at `url` (`zk://127.0.0.1:PORT/ROOT`), as
/// `Zk::lc_session` starts it, without borrowing the server (a restart
/// needs it mutably).
fn at(url: &str) -> impl Fn(&[&str]) -> Command + '_ {
    move |args: &[&str]| {
        let mut cmd = Command::new(common::BIN);
        cmd.arg("--server")
            .arg(format!("{url}?session-timeout={SESSION}"))
            .args(["--connect-timeout", "10s"])
            .args(args);
        cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
        cmd
    }
}

fn start() -> (Zk, String) {
    let zk = Zk::start_with_tick(TICK_MS);
    let url = zk.url("/q");
    (zk, url)
}

fn restart(zk: &mut Zk) {
    zk.restart_after(Duration::from_millis(200));
}

#[test]
fn newest_wins() {
    let (_zk, url) = start();
    let delays = deploy::newest_wins(&at(&url), "deploy/prod");
    eprintln!("superseded after (ms): {delays:.1?}");
}

#[test]
fn orders_without_newest() {
    let (_zk, url) = start();
    deploy::orders(&at(&url), "deploy/prod", false, None);
}

#[test]
fn orders_with_newest() {
    let (_zk, url) = start();
    deploy::orders(&at(&url), "deploy/prod", true, None);
}

#[test]
fn orders_across_a_restart() {
    let (mut zk, url) = start();
    deploy::orders(
        &at(&url),
        "deploy/prod",
        false,
        Some(&mut || restart(&mut zk)),
    );
}

#[test]
fn orders_with_newest_across_a_restart() {
    let (mut zk, url) = start();
    deploy::orders(&at(&url), "deploy/prod", true, Some(&mut || restart(&mut zk)));
}

#[test]
fn mark_rules() {
    let (mut zk, url) = start();
    deploy::mark_rules(&at(&url), "deploy/prod", Some(&mut || restart(&mut zk)));
}

#[test]
fn cancel_running() {
    let (_zk, url) = start();
    let gaps = deploy::cancel_running(&at(&url), "deploy/prod", 5);
    eprintln!("new command started after the old one's end (ms): {gaps:.1?}");
}

#[test]
fn no_cancel_without_the_flag() {
    let (_zk, url) = start();
    deploy::no_cancel_without_the_flag(&at(&url), "deploy/prod");
}

#[test]
fn pipelines_across_a_restart() {
    let (mut zk, url) = start();
    deploy::pipelines_across_a_restart(&at(&url), "deploy/prod", &mut || restart(&mut zk));
}
