//! A waiter that dies in line (SIGKILL of its lc-cli) or stalls at the head
//! (SIGSTOP) on Redis: the release only offers it the key for a second, the
//! next live waiter's command starts soon after, never beside another.
//! Checked from the commands' own logged start and end times.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::redis::{keys_json, lc, quorum_url, RedisServer, Running};
use common::spans::{self, max_overlap, Span};
use common::timeline::now_ns;
use common::wait_until;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(20);

fn signal(r: &Running, sig: Signal) {
    nix::sys::signal::kill(Pid::from_raw(r.pid()), sig).unwrap();
}

/// `--ttl 10s lock KEY -c ...` logging its start and end as TAG; the
/// command runs until `gate` exists, or for `secs` without a gate.
fn contender(
    url: &str,
    mode: &[&str],
    key: &str,
    log: &Path,
    tag: &str,
    secs: f64,
    gate: Option<&Path>,
) -> Command {
    let body = match gate {
        Some(g) => spans::script(log, tag, 0.0).replace(
            "sleep 0;",
            &format!(
                "for i in $(seq 400); do [ -e {} ] && break; sleep 0.05; done;",
                g.display()
            ),
        ),
        None => spans::script(log, tag, secs),
    };
    let mut args = vec!["--ttl", "10s"];
    // A quorum's offer is 1 s plus two response timeouts (for a frozen
    // node): 1.8 s with these.
    if url.contains(',') {
        args.extend_from_slice(&["--connect-timeout", "400ms"]);
    }
    args.push("lock");
    args.extend_from_slice(mode);
    args.extend_from_slice(&[key, "--source", tag, "-c", &body]);
    lc(url, &args)
}

fn started(log: &Path, tag: &str) -> bool {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(&format!("start {tag} "))
}

/// Queue entries for `key` on every node.
fn queued(nodes: &[RedisServer], key: &str, n: i64) -> bool {
    nodes.iter().all(|r| r.queued(key) == n)
}

/// Whether an unconfirmed offer of `key` (the lock, or a slot of a
/// limited key) stands on a majority of nodes.
fn offered(nodes: &[RedisServer], key: &str) -> bool {
    let owner = format!("lc-cli:{{{key}}}:owner");
    let hinfo = format!("lc-cli:{{{key}}}:hinfo");
    let n = nodes
        .iter()
        .filter(|r| {
            let lock = r.holder(key).is_some()
                && r.query::<Option<String>>(&["HGET", &owner, "offered"])
                    .as_deref()
                    == Some("1");
            let slot = r
                .query::<Vec<String>>(&["HVALS", &hinfo])
                .iter()
                .any(|h| h.contains("\"o\":1"));
            lock || slot
        })
        .count();
    n > nodes.len() / 2
}

/// A holder, a waiter `dead` that is SIGKILLed (while in line, or with
/// `at_grant` right after the release offered it the key: stopped first,
/// so it cannot confirm) and a live waiter behind it. With `--limit 2`
/// (`mode`), a second holder `h2` keeps the other slot until the live
/// waiter is done. Returns the spans and the time (s) from the holder's
/// end to the live waiter's start.
fn one_trial(nodes: &[RedisServer], mode: &[&str], key: &str, at_grant: bool) -> (Vec<Span>, f64) {
    let url = if nodes.len() == 1 {
        nodes[0].url()
    } else {
        quorum_url(nodes)
    };
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let gate = tmp.path().join("gate");
    let gate2 = tmp.path().join("gate2");
    let second = (!mode.is_empty()).then(|| {
        let h2 = Running::spawn(&mut contender(
            &url,
            mode,
            key,
            &log,
            "h2",
            0.0,
            Some(&gate2),
        ));
        assert!(wait_until(LIMIT, || started(&log, "h2")), "h2 never ran");
        h2
    });
    let holder = Running::spawn(&mut contender(&url, mode, key, &log, "h", 0.0, Some(&gate)));
    assert!(
        wait_until(LIMIT, || started(&log, "h")),
        "the holder never ran"
    );
    let dead = Running::spawn(&mut contender(&url, mode, key, &log, "d", 0.1, None));
    assert!(
        wait_until(LIMIT, || queued(nodes, key, 1)),
        "d never queued"
    );
    let live = Running::spawn(&mut contender(&url, mode, key, &log, "w", 0.3, None));
    assert!(
        wait_until(LIMIT, || queued(nodes, key, 2)),
        "w never queued"
    );
    spans::note(&log, "arrive", "w");
    if at_grant {
        signal(&dead, Signal::SIGSTOP);
    } else {
        signal(&dead, Signal::SIGKILL);
    }
    std::fs::write(&gate, "").unwrap();
    if at_grant {
        assert!(
            wait_until(LIMIT, || offered(nodes, key)),
            "the release never offered the key to d"
        );
        // `keys` lists the offer as d's, neither a command's nor kept.
        let listed = keys_json(&url, &[], &[]);
        let offer = listed
            .iter()
            .find(|k| k["key"] == key && k["source"] == "d")
            .expect("the offer is listed");
        assert_eq!(offer["source"], "d", "{listed:?}");
        assert!(offer["kept"].is_null(), "{listed:?}");
        signal(&dead, Signal::SIGKILL);
    }
    holder.expect_exit(0, LIMIT);
    live.expect_exit(0, LIMIT);
    std::fs::write(&gate2, "").unwrap();
    if let Some(h2) = second {
        h2.expect_exit(0, LIMIT);
    }
    drop(dead);
    let spans = spans::read(&log);
    assert!(!started(&log, "d"), "the dead waiter ran");
    let (h, w) = (spans::by_tag(&spans, "h"), spans::by_tag(&spans, "w"));
    (spans.clone(), (w.start - h.end) as f64 / 1e9)
}

/// At most `slots` commands at once, the live waiter after the holder, and
/// well within the ttl.
fn check(spans: &[Span], slots: usize, handoff: f64, what: &str) {
    assert_eq!(
        max_overlap(spans),
        slots,
        "{what}: commands overlapped: {spans:?}"
    );
    assert!(
        handoff > 0.0,
        "{what}: the live waiter ran beside the holder"
    );
    // The ttl is 10 s: a dead waiter's grant used to cost all of it.
    assert!(
        handoff < 3.0,
        "{what}: the live waiter started {handoff:.2} s after the holder ended"
    );
    eprintln!("{what}: the live waiter started {handoff:.2} s after the holder ended");
}

#[test]
fn a_dead_waiter_at_the_head_holds_the_key_up_about_a_second() {
    let r = vec![RedisServer::start()];
    for trial in 0..5 {
        let at_grant = trial % 2 == 1;
        let key = format!("dead{trial}");
        let (spans, handoff) = one_trial(&r, &[], &key, at_grant);
        let when = if at_grant { "at its grant" } else { "in line" };
        check(&spans, 1, handoff, &format!("trial {trial}, killed {when}"));
    }
    // Nothing is left behind: the dead waiter's offer and entry are gone.
    assert!(wait_until(LIMIT, || r[0].holder("dead4").is_none()
        && r[0].queued("dead4") == 0));
}

/// The same for a slot of a `--limit 2` key (the holders' set, not the
/// lock key).
#[test]
fn a_dead_waiter_for_a_slot_holds_it_up_about_a_second() {
    let r = vec![RedisServer::start()];
    for (trial, at_grant) in [false, true].into_iter().enumerate() {
        let key = format!("slot{trial}");
        let (spans, handoff) = one_trial(&r, &["--limit", "2"], &key, at_grant);
        let when = if at_grant { "at its grant" } else { "in line" };
        check(&spans, 2, handoff, &format!("--limit 2, killed {when}"));
    }
}

#[test]
fn a_dead_waiter_on_a_quorum_holds_the_key_up_about_a_second() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for (trial, at_grant) in [false, true].into_iter().enumerate() {
        let key = format!("qdead{trial}");
        let (spans, handoff) = one_trial(&nodes, &[], &key, at_grant);
        let when = if at_grant { "at its grant" } else { "in line" };
        check(&spans, 1, handoff, &format!("quorum, killed {when}"));
    }
}

/// A waiter whose lc-cli is SIGSTOPped for 2 s while the release offers it
/// the key loses the offer to the next waiter, and on waking learns so: it
/// joins the line again (one node: at its end) and runs after the other,
/// never beside it; both exit 0.
#[test]
fn a_stalled_waiter_loses_its_offer_and_runs_later_alone() {
    stalled(&[RedisServer::start()], 5);
}

/// The same on a quorum of 3, where it joins the line again with its ticket.
#[test]
fn a_stalled_waiter_on_a_quorum_runs_later_alone() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    stalled(&nodes, 1);
}

fn stalled(r: &[RedisServer], trials: usize) {
    let url = if r.len() == 1 {
        r[0].url()
    } else {
        quorum_url(r)
    };
    for trial in 0..trials {
        let key = format!("slow{trial}");
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("log");
        let gate = tmp.path().join("gate");
        let holder = Running::spawn(&mut contender(&url, &[], &key, &log, "h", 0.0, Some(&gate)));
        assert!(wait_until(LIMIT, || started(&log, "h")));
        let slow = Running::spawn(&mut contender(&url, &[], &key, &log, "s", 0.2, None));
        assert!(wait_until(LIMIT, || queued(r, &key, 1)));
        spans::note(&log, "arrive", "s");
        // Long enough to be running when the stalled one wakes.
        let next = Running::spawn(&mut contender(&url, &[], &key, &log, "w", 2.0, None));
        assert!(wait_until(LIMIT, || queued(r, &key, 2)));
        spans::note(&log, "arrive", "w");
        signal(&slow, Signal::SIGSTOP);
        std::fs::write(&gate, "").unwrap();
        holder.expect_exit(0, LIMIT);
        std::thread::sleep(Duration::from_secs(2));
        let woke = now_ns();
        signal(&slow, Signal::SIGCONT);
        next.expect_exit(0, LIMIT);
        slow.expect_exit(0, LIMIT);
        let spans = spans::read(&log);
        assert_eq!(max_overlap(&spans), 1, "trial {trial}: overlap: {spans:?}");
        let (h, s, w) = (
            spans::by_tag(&spans, "h"),
            spans::by_tag(&spans, "s"),
            spans::by_tag(&spans, "w"),
        );
        assert!(
            w.start < woke,
            "trial {trial}: w waited for the stalled one"
        );
        assert!(s.start >= w.end, "trial {trial}: {spans:?}");
        spans::assert_tokens_grow(&log, &spans);
        eprintln!(
            "{} node(s), trial {trial}: w started {:.2} s after h ended; s, woken {:.2} s after, started {:.2} s after w ended",
            r.len(),
            (w.start - h.end) as f64 / 1e9,
            (woke - h.end) as f64 / 1e9,
            (s.start - w.end) as f64 / 1e9
        );
    }
}

/// On a quorum of 3 with one node's path frozen (no answers, connections
/// left open), a live waiter still confirms its offer in time: its check
/// and its renewal each wait a whole `--connect-timeout` (2 s) for the
/// frozen node, which the quorum's offer (1 s + 2 × 2 s) allows for.
#[test]
fn a_frozen_node_does_not_keep_a_live_waiter_from_its_offer() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let proxy = common::proxy::Proxy::start(nodes[2].port);
    let url = format!(
        "redis://{},{},{}",
        nodes[0].addr(),
        nodes[1].addr(),
        proxy.addr()
    );
    proxy.freeze();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let gate = tmp.path().join("gate");
    let script = |tag: &str, gate: Option<&Path>| match gate {
        Some(g) => spans::script(&log, tag, 0.0).replace(
            "sleep 0;",
            &format!(
                "for i in $(seq 400); do [ -e {} ] && break; sleep 0.05; done;",
                g.display()
            ),
        ),
        None => spans::script(&log, tag, 0.2),
    };
    let lock = |tag: &str, body: &str| lc(&url, &["lock", "fz", "--source", tag, "-c", body]);
    let holder = Running::spawn(&mut lock("h", &script("h", Some(&gate))));
    assert!(wait_until(LIMIT, || started(&log, "h")), "h never ran");
    let waiter = Running::spawn(&mut lock("w", &script("w", None)));
    assert!(
        wait_until(LIMIT, || queued(&nodes[..2], "fz", 1)),
        "w never queued"
    );
    spans::note(&log, "arrive", "w");
    std::fs::write(&gate, "").unwrap();
    holder.expect_exit(0, LIMIT);
    waiter.expect_exit(0, LIMIT);
    let spans = spans::read(&log);
    assert_eq!(max_overlap(&spans), 1, "{spans:?}");
    let (h, w) = (spans::by_tag(&spans, "h"), spans::by_tag(&spans, "w"));
    eprintln!(
        "one node frozen: w started {:.2} s after h ended",
        (w.start - h.end) as f64 / 1e9
    );
}
