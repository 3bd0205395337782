//! A Redis holder cut off from its server (the TCP path frozen by a proxy:
//! no bytes, connection left open) while a waiter keeps a direct path: the
//! holder's command must have ended before its lease can run out on the
//! server and the waiter's command starts, whatever `--kill-after` says.
//! Checked from the commands' own logged times over several trials: a
//! command that exits on SIGTERM at once, one that takes half a second,
//! and one that ignores SIGTERM.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::proxy::Proxy;
use common::redis::{lc, RedisServer, Running};
use common::timeline::{gone_at, now_ns, OnTerm, Timeline};
use common::wait_until;

const LIMIT: Duration = Duration::from_secs(40);

/// Times after the freeze, in ms.
#[derive(Debug)]
struct Trial {
    holder_gone: f64,
    waiter_start: f64,
}

fn trial(redis: &RedisServer, ttl: &str, n: usize, on_term: OnTerm) -> Trial {
    let key = format!("k{n}");
    let proxy = Proxy::start(redis.port);
    let tmp = tempfile::tempdir().unwrap();
    let tl = Timeline::new(tmp.path());
    let holder = Running::spawn(
        lc(
            &format!("redis://{}", proxy.addr()),
            &[
                "--ttl",
                ttl,
                "lock",
                &key,
                "-c",
                &tl.holder("holder", on_term),
            ],
        )
        .stdin(Stdio::null()),
    );
    assert!(
        wait_until(LIMIT, || tl.start_of("holder").is_some()),
        "the holder's command never started"
    );
    let (_, holder_pid) = tl.start_of("holder").unwrap();
    let waiter = Running::spawn(
        lc(
            &redis.url(),
            &["--ttl", ttl, "lock", &key, "-c", &tl.one_shot("waiter")],
        )
        .stdin(Stdio::null()),
    );
    assert!(
        wait_until(LIMIT, || redis.queued(&key) == 1),
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
    if on_term != OnTerm::Ignore {
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

/// The three kinds of command at once, each on its own key and proxy.
fn partitions(ttl: &str) {
    let redis = RedisServer::start();
    let kinds = [OnTerm::LogAndExit, OnTerm::SlowExit, OnTerm::Ignore];
    let trials: Vec<(OnTerm, Trial)> = std::thread::scope(|s| {
        let handles: Vec<_> = kinds
            .iter()
            .enumerate()
            .map(|(n, &kind)| {
                let redis = &redis;
                s.spawn(move || (kind, trial(redis, ttl, n, kind)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (kind, t) in &trials {
        eprintln!(
            "ttl {ttl}, command {kind:?}: holder's command gone {:.0} ms after the freeze, waiter's started at {:.0} ms: margin {:.0} ms",
            t.holder_gone,
            t.waiter_start,
            t.waiter_start - t.holder_gone
        );
    }
    for (kind, t) in &trials {
        assert!(
            t.holder_gone < t.waiter_start,
            "ttl {ttl}, {kind:?}: two commands ran at once for {:.0} ms ({t:?})",
            t.holder_gone - t.waiter_start
        );
    }
}

#[test]
fn frozen_holder_stops_before_its_lease_can_run_out_2s() {
    partitions("2s");
}

#[test]
fn frozen_holder_stops_before_its_lease_can_run_out_4s() {
    partitions("4s");
}
