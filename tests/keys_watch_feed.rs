//! `keys --watch --json` on the services' own change feeds (etcd's Watch,
//! ZooKeeper's persistent watch, Redis keyspace notifications), against
//! real servers:
//! - a hold taken by another process is told within 2 s, and its release;
//! - the feed is used: over 5 s of an idle watch at 100 held keys and
//!   `--interval 100ms`, the service counts a handful of requests, where
//!   the listing every interval made about 50 listings (etcd: unary gRPC
//!   calls from /metrics; ZooKeeper: `mntr` zk_packets_received; Redis:
//!   INFO commandstats' EVALSHA calls);
//! - a lost feed (the server SIGKILLed and started again) is recovered:
//!   holds taken after the restart are told, the second within 2 s;
//! - Redis with notifications off: the watch polls, still sees the hold,
//!   and says why with `-v`.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use common::etcd::Etcd;
use common::redis::RedisServer;
use common::zk::Zk;
use serde_json::Value;

/// How late a change may show (the feed tells it at once; a listing).
const WITHIN: Duration = Duration::from_secs(2);

/// How many holds the cost tests keep.
const HELD: usize = 100;

/// A running `keys --watch --json` and the events it printed.
struct Watching {
    child: Child,
    events: mpsc::Receiver<(SystemTime, Value)>,
}

impl Watching {
    fn start(mut cmd: Command) -> Watching {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line).unwrap();
                if tx.send((SystemTime::now(), v)).is_err() {
                    return;
                }
            }
        });
        Watching { child, events }
    }

    /// The first event (within `limit`) that `wanted` picks.
    fn wait_for(&self, limit: Duration, wanted: impl Fn(&Value) -> bool) -> Option<SystemTime> {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self
                .events
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok((at, v)) if wanted(&v) => return Some(at),
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
        None
    }

    /// Waits for `n` `held` events (the first look of `n` holds).
    fn wait_held(&self, n: usize) {
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen < n && Instant::now() < deadline {
            if let Ok((_, v)) = self.events.recv_timeout(Duration::from_millis(200)) {
                seen += usize::from(v["event"] == "held");
            }
        }
        assert_eq!(seen, n, "the watch's first look showed {seen} of {n} holds");
    }

    /// Ends the watch (SIGKILL) and gives its stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is(event: &'static str, key: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["event"] == event && v["key"] == key
}

/// `lock KEY` (a kept hold) or `unlock KEY`: the moment before it started.
fn run(lc: &dyn Fn(&[&str]) -> Command, args: &[&str]) -> SystemTime {
    let before = SystemTime::now();
    let out = lc(args).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    before
}

fn late(seen: SystemTime, at: SystemTime) -> Duration {
    seen.duration_since(at).unwrap_or_default()
}

/// A hold shows within 2 s, and its release, at the default interval.
fn appears_and_disappears(lc: &dyn Fn(&[&str]) -> Command) {
    let watch = Watching::start(lc(&["keys", "--watch", "--json"]));
    // The first look (nothing held) prints nothing: give it a second.
    std::thread::sleep(Duration::from_secs(1));
    let key = "feed-deploy";
    let taken = run(lc, &["lock", key]);
    let held = watch.wait_for(Duration::from_secs(15), is("held", key));
    let held = held.expect("the hold was never told");
    let released = run(lc, &["unlock", key]);
    let gone = watch.wait_for(Duration::from_secs(15), is("released", key));
    let gone = gone.expect("the release was never told");
    eprintln!(
        "held told {:?} after the lock started, released {:?} after the unlock started",
        late(held, taken),
        late(gone, released)
    );
    assert!(late(held, taken) < WITHIN);
    assert!(late(gone, released) < WITHIN);
}

/// Keeps `HELD` holds (taken in parallel), then counts what an idle watch
/// at `--interval 100ms` asks the service over 5 s: at most `bound`.
fn idle_cost(lc: &dyn Fn(&[&str]) -> Command, count: &dyn Fn() -> f64, bound: f64) {
    let mut takers: Vec<Child> = (0..HELD)
        .map(|i| {
            lc(&["lock", &format!("feed-held-{i}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for t in &mut takers {
        assert!(t.wait().unwrap().success());
    }
    let watch = Watching::start(lc(&["keys", "--watch", "--json", "--interval", "100ms"]));
    watch.wait_held(HELD);
    std::thread::sleep(Duration::from_secs(1));
    let before = count();
    std::thread::sleep(Duration::from_secs(5));
    let asked = count() - before;
    watch.stop();
    eprintln!("an idle watch of {HELD} holds asked {asked} in 5 s (at most {bound})");
    assert!(
        asked <= bound,
        "{asked} requests in 5 s: the watch did not wait on the feed"
    );
}

/// The watch sees a change right after the server was SIGKILLed and
/// started again (its feed lost), and a second one within the bound (the
/// feed armed again).
fn recovers(lc: &dyn Fn(&[&str]) -> Command, restart: &mut dyn FnMut()) {
    let watch = Watching::start(lc(&["keys", "--watch", "--json", "--interval", "200ms"]));
    run(lc, &["lock", "feed-before"]);
    assert!(watch
        .wait_for(Duration::from_secs(15), is("held", "feed-before"))
        .is_some());
    restart();
    run(lc, &["lock", "feed-after"]);
    assert!(
        watch
            .wait_for(Duration::from_secs(20), is("held", "feed-after"))
            .is_some(),
        "the hold taken after the restart was never told"
    );
    let taken = run(lc, &["lock", "feed-again"]);
    let held = watch.wait_for(Duration::from_secs(15), is("held", "feed-again"));
    let held = held.expect("the second hold after the restart was never told");
    let released = run(lc, &["unlock", "feed-before"]);
    let gone = watch.wait_for(Duration::from_secs(15), is("released", "feed-before"));
    let gone = gone.expect("the release after the restart was never told");
    eprintln!(
        "after the restart: held told {:?}, released {:?}",
        late(held, taken),
        late(gone, released)
    );
    assert!(late(held, taken) < WITHIN);
    assert!(late(gone, released) < WITHIN);
}

/// etcd's count of unary gRPC calls handled (Range, Txn, ...), from its
/// /metrics.
fn etcd_unary_calls(etcd: &Etcd) -> f64 {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", etcd.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let total: f64 = text
        .lines()
        .filter(|l| l.starts_with("grpc_server_handled_total{") && l.contains("unary"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(total > 0.0, "no unary call counted in etcd's /metrics");
    total
}

fn redis_evalsha_calls(node: &RedisServer) -> f64 {
    let info: String = node.query(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A durable node with keyspace notifications on (kept across restarts).
fn redis_with_notifications() -> RedisServer {
    let on = ["--notify-keyspace-events".to_string(), "KA".to_string()];
    RedisServer::start_secured(true, &on, None)
}

#[test]
fn etcd_feed_tells_a_hold_and_its_release() {
    let etcd = Etcd::start();
    appears_and_disappears(&|args| etcd.lc("", args));
}

#[test]
fn etcd_idle_watch_asks_nothing() {
    let etcd = Etcd::start();
    idle_cost(&|args| etcd.lc("", args), &|| etcd_unary_calls(&etcd), 3.0);
}

#[test]
fn etcd_feed_lost_by_a_restart_is_armed_again() {
    let mut etcd = Etcd::start();
    let lc = {
        let endpoint = etcd.endpoint();
        move |args: &[&str]| common::lc_at(&format!("etcd://{endpoint}"), args)
    };
    recovers(&lc, &mut || etcd.restart());
}

#[test]
fn zookeeper_feed_tells_a_hold_and_its_release() {
    let zk = Zk::start();
    appears_and_disappears(&|args| zk.lc("/lc-feed", args));
}

#[test]
fn zookeeper_idle_watch_asks_little() {
    let zk = Zk::start();
    let packets = || zk.mntr()["zk_packets_received"];
    idle_cost(&|args| zk.lc("/lc-feed", args), &packets, 60.0);
}

#[test]
fn zookeeper_feed_lost_by_a_restart_is_armed_again() {
    let mut zk = Zk::start();
    let url = zk.url("/lc-feed");
    let lc = move |args: &[&str]| common::lc_at(&url, args);
    recovers(&lc, &mut || zk.restart_after(Duration::from_millis(500)));
}

#[test]
fn redis_feed_tells_a_hold_and_its_release() {
    let node = redis_with_notifications();
    let url = node.url();
    appears_and_disappears(&|args| common::lc_at(&url, args));
}

#[test]
fn redis_idle_watch_asks_nothing() {
    let node = redis_with_notifications();
    let url = node.url();
    idle_cost(
        &|args| common::lc_at(&url, args),
        &|| redis_evalsha_calls(&node),
        2.0,
    );
}

#[test]
fn redis_feed_lost_by_a_restart_is_armed_again() {
    let mut node = redis_with_notifications();
    let url = node.url();
    let lc = move |args: &[&str]| common::lc_at(&url, args);
    recovers(&lc, &mut || node.restart());
}

#[test]
fn redis_without_notifications_polls_and_says_so() {
    let node = RedisServer::start();
    let url = node.url();
    let lc = |args: &[&str]| common::lc_at(&url, args);
    let watch = Watching::start(lc(&["-v", "keys", "--watch", "--json"]));
    std::thread::sleep(Duration::from_secs(1));
    let taken = run(&lc, &["lock", "feed-polled"]);
    let held = watch.wait_for(Duration::from_secs(15), is("held", "feed-polled"));
    let held = held.expect("the hold was never told");
    assert!(late(held, taken) < WITHIN);
    let err = watch.stop();
    assert!(
        err.contains("keyspace notifications are off") && err.contains("listing every 1s"),
        "{err}"
    );
}

/// On Redis a shared holder's lease is a deadline in a sorted set, which
/// passes without a notification: a holder SIGKILLed is still told gone
/// within its lease (2 s here) and the bound, the watch listing every
/// interval while such a hold is listed.
#[test]
fn redis_shared_hold_of_a_killed_holder_is_told_gone() {
    let node = redis_with_notifications();
    let url = format!("{}?ttl=2s", node.url());
    let lc = |args: &[&str]| common::lc_at(&url, args);
    let watch = Watching::start(lc(&["keys", "--watch", "--json"]));
    let mut holder = lc(&["lock", "--shared", "feed-shared", "--", "sleep", "8"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let held = watch.wait_for(Duration::from_secs(15), is("held", "feed-shared"));
    assert!(held.is_some(), "the shared hold was never told");
    let killed = SystemTime::now();
    holder.kill().unwrap();
    holder.wait().unwrap();
    let gone = watch.wait_for(Duration::from_secs(40), is("released", "feed-shared"));
    let gone = gone.expect("the dead holder's hold was never told gone");
    eprintln!("told gone {:?} after the kill", late(gone, killed));
    assert!(late(gone, killed) < Duration::from_secs(2) + WITHIN);
}
