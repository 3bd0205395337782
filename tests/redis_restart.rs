//! Redis nodes restarted empty under a holder: on a quorum of three, two
//! nodes (together, or one after the other within a lease), and a single
//! node. A fresh client must not get the key while the old holder's
//! command runs, and the two never see the same `LC_LOCK_TOKEN`. Checked
//! from the commands' own logged times.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::redis::{lc, quorum_url, RedisServer, Running};
use common::timeline::{gone_at, now_ns, OnTerm, Timeline};
use common::wait_until;

const LIMIT: Duration = Duration::from_secs(30);
const TTL: &str = "3s";
/// Between the two restarts of the staggered order: less than a lease.
const SPACING: Duration = Duration::from_millis(1500);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    /// The only node.
    Single,
    /// Two of three at once.
    TwoTogether,
    /// One, then another SPACING later.
    TwoStaggered,
}

/// A command that records its token, then its start (see [`Timeline`]).
fn with_token(tl: &Timeline, name: &str, script: &str) -> String {
    format!(
        "echo \"token {name} $LC_LOCK_TOKEN\" >> {}; {script}",
        tl.path.with_extension("tokens").display()
    )
}

/// `lock k` with the lease TTL running `script`.
fn lock_k(url: &str, script: &str) -> Running {
    Running::spawn(lc(url, &["--ttl", TTL, "lock", "k", "-c", script]).stdin(Stdio::null()))
}

fn scenario(restart: Restart) {
    let mut nodes: Vec<RedisServer> = (0..if restart == Restart::Single { 1 } else { 3 })
        .map(|_| RedisServer::start_volatile())
        .collect();
    let url = quorum_url(&nodes);
    let tmp = tempfile::tempdir().unwrap();
    let tl = Timeline::new(tmp.path());
    let a = lock_k(
        &url,
        &with_token(&tl, "a", &tl.holder("a", OnTerm::LogAndExit)),
    );
    assert!(
        wait_until(LIMIT, || tl.start_of("a").is_some()),
        "the first holder never started"
    );
    let (_, a_pid) = tl.start_of("a").unwrap();
    // Past one renewal, so the key is everywhere.
    std::thread::sleep(Duration::from_millis(1200));
    match restart {
        Restart::Single => nodes[0].restart(),
        Restart::TwoTogether => {
            nodes[1].stop();
            nodes[2].stop();
            nodes[1].restart();
            nodes[2].restart();
        }
        Restart::TwoStaggered => {
            nodes[1].restart();
            std::thread::sleep(SPACING);
            nodes[2].restart();
        }
    }
    let restarted = now_ns();
    let started = Instant::now();
    let c = lock_k(&url, &with_token(&tl, "c", &tl.one_shot("c")));
    let c_started = wait_until(LIMIT, || tl.start_of("c").is_some());
    let a_gone = gone_at(a_pid, LIMIT).expect("the first holder's command never ended");
    assert!(c_started, "the newcomer never got the key:\n{}", tl.text());
    let (c_start, _) = tl.start_of("c").unwrap();
    let a_end = tl.end_of("a").unwrap_or(a_gone);
    let ms = |t: i128| (t - restarted) as f64 / 1e6;
    eprintln!(
        "{restart:?}: first holder's command ended {:.0} ms after the restart, the newcomer's started at {:.0} ms ({:?} after it was spawned)",
        ms(a_end),
        ms(c_start),
        started.elapsed()
    );
    assert!(
        a_end < c_start,
        "{restart:?}: two commands ran at once for {:.0} ms:\n{}",
        (a_end - c_start) as f64 / 1e6,
        tl.text()
    );
    let (code, err) = a.finish(LIMIT);
    assert_eq!(code, 75, "first holder: {err}");
    let (code, err) = c.finish(LIMIT);
    assert_eq!(code, 0, "newcomer: {err}");
    let tokens = std::fs::read_to_string(tl.path.with_extension("tokens")).unwrap();
    let token = |name: &str| {
        tokens
            .lines()
            .find_map(|l| l.strip_prefix(&format!("token {name} ")))
            .unwrap_or_else(|| panic!("no token for {name}: {tokens}"))
            .to_string()
    };
    eprintln!("{restart:?}: tokens a={} c={}", token("a"), token("c"));
    // The only node lost its data, and the newcomer came before the old
    // holder's next renewal could raise the counter again: the token may
    // repeat (README). On the quorum the old holder's release, on the node
    // that kept its data, passes a higher counter on.
    if restart != Restart::Single {
        assert_ne!(token("a"), token("c"), "two holders with the same token");
    }
}

#[test]
fn two_nodes_restarted_empty_together() {
    scenario(Restart::TwoTogether);
}

#[test]
fn two_nodes_restarted_empty_one_after_the_other() {
    scenario(Restart::TwoStaggered);
}

#[test]
fn a_single_node_restarted_empty() {
    scenario(Restart::Single);
}
