//! A ZooKeeper holder cut off from the server (its TCP path frozen by a
//! proxy: no bytes, connections left open) while a waiter keeps a direct
//! path: the holder's command must have ended before ZooKeeper expires the
//! session and the waiter's command starts. Checked from the commands' own
//! logged times, over several trials and two session timeouts, with a
//! command that exits on SIGTERM and one that ignores it (the SIGKILL
//! deadline must not wait for `--kill-after`).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::proxy::Proxy;
use common::redis::Running;
use common::timeline::{gone_at, now_ns, OnTerm, Timeline};
use common::zk::Zk;
use common::{wait_until, BIN};

const LIMIT: Duration = Duration::from_secs(40);

/// Times after the freeze, in ms: the holder's command gone, the waiter's
/// command started.
#[derive(Debug)]
struct Trial {
    holder_gone: f64,
    waiter_start: f64,
}

fn trial(zk: &Zk, session: &str, n: usize, on_term: OnTerm) -> Trial {
    let root = format!("/p{n}");
    let proxy = Proxy::start(zk.port);
    let tmp = tempfile::tempdir().unwrap();
    let tl = Timeline::new(tmp.path());
    let holder = Running::spawn(
        Command::new(BIN)
            .args([
                "--server",
                &format!("zk://{}{root}?session-timeout={session}", proxy.addr()),
            ])
            .args(["--connect-timeout", "10s"])
            .args(["lock", "k", "-c", &tl.holder("holder", on_term)])
            .env_remove("LC_SERVER")
            .stdin(Stdio::null()),
    );
    assert!(
        wait_until(LIMIT, || tl.start_of("holder").is_some()),
        "the holder's command never started"
    );
    let (_, holder_pid) = tl.start_of("holder").unwrap();
    let waiter = Running::spawn(
        zk.lc_session(&root, session, &["lock", "k", "-c", &tl.one_shot("waiter")])
            .stdin(Stdio::null()),
    );
    assert!(
        wait_until(LIMIT, || zk.queue(&format!("{root}/k")).len() == 2),
        "the waiter never queued"
    );
    let frozen_at = now_ns();
    proxy.freeze();
    let gone = gone_at(holder_pid, LIMIT).expect("the holder's command never ended");
    assert!(
        wait_until(LIMIT, || tl.start_of("waiter").is_some()),
        "the waiter never got the key:\n{}",
        tl.text()
    );
    let (waiter_start, _) = tl.start_of("waiter").unwrap();
    if on_term == OnTerm::LogAndExit {
        assert!(tl.end_of("holder").is_some(), "no SIGTERM:\n{}", tl.text());
    }
    let (code, err) = holder.finish(LIMIT);
    assert_eq!(code, 75, "holder: {err}");
    assert!(err.contains("lost the lock"), "holder: {err}");
    let (code, err) = waiter.finish(LIMIT);
    assert_eq!(code, 0, "waiter: {err}");
    let ms = |t: i128| (t - frozen_at) as f64 / 1e6;
    Trial {
        holder_gone: ms(gone),
        waiter_start: ms(waiter_start),
    }
}

/// Three trials at once (each with its own path and proxy), two whose
/// command exits on SIGTERM and one whose command ignores it.
fn partitions(session: &str) {
    // tickTime 300 ms: ZooKeeper allows sessions of 0.6 s to 6 s.
    let zk = Zk::start_with_tick(300);
    let kinds = [OnTerm::LogAndExit, OnTerm::LogAndExit, OnTerm::Ignore];
    let trials: Vec<(OnTerm, Trial)> = std::thread::scope(|s| {
        let handles: Vec<_> = kinds
            .iter()
            .enumerate()
            .map(|(n, &kind)| {
                let zk = &zk;
                s.spawn(move || (kind, trial(zk, session, n, kind)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (kind, t) in &trials {
        eprintln!(
            "session {session}, command {kind:?}: holder's command gone {:.0} ms after the freeze, waiter's started at {:.0} ms: margin {:.0} ms",
            t.holder_gone,
            t.waiter_start,
            t.waiter_start - t.holder_gone
        );
    }
    for (kind, t) in &trials {
        assert!(
            t.holder_gone < t.waiter_start,
            "session {session}, {kind:?}: two commands ran at once for {:.0} ms ({t:?})",
            t.holder_gone - t.waiter_start
        );
    }
}

#[test]
fn frozen_holder_stops_before_its_session_can_expire_4s() {
    partitions("4s");
}

#[test]
fn frozen_holder_stops_before_its_session_can_expire_6s() {
    partitions("6s");
}
