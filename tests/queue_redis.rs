//! Deploy queues on Redis (issue 44): the scenarios of
//! `common::deploy` against a real redis-server, one node that keeps its
//! data (AOF, so a restart is a restart of the service, not an emptied
//! node), and a quorum of three; the round trips of an uncontended lock
//! with `--newest --order` against a plain one, counted by MONITOR.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::deploy;
use common::redis::{lc, quorum_url, RedisServer, Running};

/// lc-cli against `url`, as the scenarios call it.
fn at(url: &str) -> impl Fn(&[&str]) -> Command + '_ {
    move |args: &[&str]| lc(url, args)
}

#[test]
fn newest_wins() {
    let node = RedisServer::start();
    let url = node.url();
    let delays = deploy::newest_wins(&at(&url), "deploy/prod");
    eprintln!("superseded after (ms): {delays:.1?}");
}

#[test]
fn orders_without_newest() {
    let node = RedisServer::start();
    deploy::orders(&at(&node.url()), "deploy/prod", false, None);
}

#[test]
fn orders_with_newest() {
    let node = RedisServer::start();
    deploy::orders(&at(&node.url()), "deploy/prod", true, None);
}

#[test]
fn orders_across_a_restart() {
    let mut node = RedisServer::start();
    let url = node.url();
    deploy::orders(
        &at(&url),
        "deploy/prod",
        false,
        Some(&mut || node.restart()),
    );
}

#[test]
fn orders_with_newest_across_a_restart() {
    let mut node = RedisServer::start();
    let url = node.url();
    deploy::orders(&at(&url), "deploy/prod", true, Some(&mut || node.restart()));
}

#[test]
fn mark_rules() {
    let mut node = RedisServer::start();
    let url = node.url();
    deploy::mark_rules(&at(&url), "deploy/prod", Some(&mut || node.restart()));
}

#[test]
fn cancel_running() {
    let node = RedisServer::start();
    let gaps = deploy::cancel_running(&at(&node.url()), "deploy/prod", 5);
    eprintln!("new command started after the old one's end (ms): {gaps:.1?}");
}

#[test]
fn no_cancel_without_the_flag() {
    let node = RedisServer::start();
    deploy::no_cancel_without_the_flag(&at(&node.url()), "deploy/prod");
}

#[test]
fn pipelines_across_a_restart() {
    let mut node = RedisServer::start();
    let url = node.url();
    deploy::pipelines_across_a_restart(&at(&url), "deploy/prod", &mut || node.restart());
}

/// Three nodes that keep their data: every rule runs on each node in its
/// scripts, and the client reads the majority.
fn quorum() -> (Vec<RedisServer>, String) {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url = quorum_url(&nodes);
    (nodes, url)
}

#[test]
fn quorum_newest_wins() {
    let (_nodes, url) = quorum();
    let delays = deploy::newest_wins(&at(&url), "deploy/prod");
    eprintln!("quorum: superseded after (ms): {delays:.1?}");
}

#[test]
fn quorum_orders() {
    let (_nodes, url) = quorum();
    deploy::orders(&at(&url), "deploy/a", false, None);
    deploy::orders(&at(&url), "deploy/b", true, None);
}

#[test]
fn quorum_mark_and_cancel() {
    let (mut nodes, url) = quorum();
    deploy::mark_rules(&at(&url), "deploy/prod", Some(&mut || nodes[1].restart()));
    let gaps = deploy::cancel_running(&at(&url), "deploy/cancel", 2);
    eprintln!("quorum: new command started after the old one's end (ms): {gaps:.1?}");
}

/// What one lc-cli sends to the node: MONITOR's lines for commands from a
/// client (a script's own commands say `lua`), counted while `args` runs.
fn commands_sent(node: &RedisServer, args: &[&str]) -> Vec<String> {
    let mut monitor = Command::new("redis-cli")
        .args(["-p", &node.port.to_string(), "monitor"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    let mut lines = BufReader::new(monitor.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "OK");
    let out = lc(&node.url(), args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A marker of the end, sent by another client, after everything above.
    node.query::<String>(&["PING", "end-of-run"]);
    let mut sent = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("end-of-run") {
            break;
        }
        if !line.contains(" lua]") {
            sent.push(line);
        }
    }
    let _ = monitor.kill();
    let _ = monitor.wait();
    sent
}

/// An uncontended `lock --newest --order N k -- true` sends what a plain
/// `lock k -- true` does: the same commands, the same number.
#[test]
fn no_extra_round_trip() {
    let node = RedisServer::start();
    let kind = |line: &String| {
        line.split('"')
            .nth(1)
            .unwrap_or_default()
            .to_ascii_uppercase()
    };
    // Once each first: the scripts are loaded, as on a server in use.
    for args in [
        &["lock", "k", "--", "true"][..],
        &["lock", "--newest", "--order", "1", "k", "--", "true"],
    ] {
        let _ = lc(&node.url(), args).output().unwrap();
    }
    let plain = commands_sent(&node, &["lock", "k", "--", "true"]);
    let queued = commands_sent(
        &node,
        &["lock", "--newest", "--order", "7", "k", "--", "true"],
    );
    let (p, q): (Vec<String>, Vec<String>) = (
        plain.iter().map(kind).collect(),
        queued.iter().map(kind).collect(),
    );
    eprintln!(
        "round trips: plain {} ({p:?}), --newest --order {} ({q:?})",
        p.len(),
        q.len()
    );
    assert_eq!(
        p,
        q,
        "plain:\n{}\nqueued:\n{}",
        plain.join("\n"),
        queued.join("\n")
    );
    assert_eq!(deploy::mark(&at(&node.url()), "k"), Some(7));
}

/// How soon a `--cancel-running` holder hears of a newer request: from the
/// newer lc-cli's spawn to the SIGTERM the holder's command logs (printed;
/// the holder's BLPOP on its cancel list wakes it, no renewal is waited
/// for: the lease here is the default 30 s, renewed every 10 s).
#[test]
fn cancel_notice_is_prompt() {
    let node = RedisServer::start();
    let url = node.url();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut delays = Vec::new();
    for trial in 0..3 {
        let tag = format!("old{trial}");
        let script = format!(
            "trap 'echo term {tag} $(date +%s%N) >> {0}; exit 0' TERM; echo start {tag} $(date +%s%N) >> {0}; sleep 30 & wait",
            log.display()
        );
        let old = deploy::Request::start(
            &at(&url),
            &log,
            &tag,
            &[
                "lock",
                "--cancel-running",
                "k",
                "--source",
                &tag,
                "-c",
                &script,
            ],
        );
        assert!(
            common::wait_until(Duration::from_secs(10), || deploy::started(&log, &tag)),
            "{}",
            old.stderr()
        );
        let new = deploy::Request::start(
            &at(&url),
            &log,
            &format!("new{trial}"),
            &["lock", "--cancel-running", "k", "--", "true"],
        );
        assert_eq!(old.status(), Some(deploy::CANCELLED), "{}", old.stderr());
        assert_eq!(new.status(), Some(0), "{}", new.stderr());
        let text = std::fs::read_to_string(&log).unwrap();
        let term: i128 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("term {tag} ")))
            .expect("the old command got SIGTERM")
            .trim()
            .parse()
            .unwrap();
        delays.push((term - new.spawned) as f64 / 1e6);
    }
    eprintln!("SIGTERM after the newer request's spawn (ms): {delays:.1?}");
}

/// A `--newest` waiter frozen (SIGSTOP) while a newer one supersedes it
/// has left the line all the same: the newer one runs after the holder,
/// and the frozen one, resumed afterwards, exits superseded without
/// running (its marker waits for it).
#[test]
fn a_frozen_superseded_waiter_never_runs() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let node = RedisServer::start();
    let url = node.url();
    let lc = at(&url);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let key = "deploy/prod";
    let holder = deploy::deploy(&lc, &log, key, "holder", 1.0, 0, &["--newest"]);
    assert!(common::wait_until(Duration::from_secs(10), || {
        deploy::started(&log, "holder")
    }));
    // Spawned here, not by `deploy::deploy`, for its pid.
    let script = common::spans::script(&log, "frozen", 0.1);
    let frozen = Running::spawn(&mut lc(&[
        "lock", "--newest", key, "--source", "frozen", "-c", &script,
    ]));
    assert!(common::wait_until(Duration::from_secs(10), || {
        deploy::is_waiting(&lc, key, "frozen")
    }));
    let pid = Pid::from_raw(frozen.pid());
    kill(pid, Signal::SIGSTOP).unwrap();
    let newer = deploy::deploy(&lc, &log, key, "newer", 0.1, 0, &["--newest"]);
    assert_eq!(holder.status(), Some(0), "{}", holder.stderr());
    assert_eq!(newer.status(), Some(0), "{}", newer.stderr());
    kill(pid, Signal::SIGCONT).unwrap();
    let said = frozen.expect_exit(deploy::SUPERSEDED, Duration::from_secs(10));
    assert!(said.contains("'newer'"), "{said}");
    let spans = deploy::alone(&log);
    assert_eq!(common::spans::tags(&spans), ["holder", "newer"]);
}

#[test]
fn quorum_pipelines_across_a_restart() {
    let (mut nodes, url) = quorum();
    deploy::pipelines_across_a_restart(&at(&url), "deploy/prod", &mut || nodes[0].restart());
}
