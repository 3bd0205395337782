//! Losing an etcd lock while the command runs: a silent network path (the
//! proxy freezes) stops the command before the lease can expire and the
//! next holder (a real `etcdctl lock`) start; a lease revoked with etcdctl,
//! or the key reset, stops it too. All exit 75.

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::proxy::Proxy;
use common::timeline::{OnTerm, Timeline};
use common::wait_until;

fn status_of(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    None
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
    }
    s
}

#[test]
fn a_frozen_network_stops_the_command_before_etcdctl_gets_the_lock() {
    let e = Etcd::start();
    for trial in 0..3 {
        let proxy = Proxy::start(e.port);
        let dir = tempfile::tempdir().unwrap();
        let t = Timeline::new(dir.path());
        let mut holder = std::process::Command::new(common::BIN)
            .args(["--server", &format!("etcd://{}?ttl=3s", proxy.addr())])
            .args(["lock", "part", "-c", &t.holder("lc", OnTerm::LogAndExit)])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(10), || t
            .start_of("lc")
            .is_some()));
        proxy.freeze();
        let frozen = Instant::now();
        let next = e
            .ctl(&["lock", "part", "--", "sh", "-c", &t.one_shot("ctl")])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(next.success());
        let code = status_of(&mut holder, Duration::from_secs(10));
        let err = stderr_of(&mut holder);
        assert_eq!(code, Some(75), "trial {trial}: {err}");
        assert!(err.contains("lost the lock 'part'"), "{err}");
        let end = t.end_of("lc").expect("the holder logged its end");
        let (next_start, _) = t.start_of("ctl").unwrap();
        assert!(
            end < next_start,
            "trial {trial}: the command ended {} ms after etcdctl's started:\n{}",
            (end - next_start) / 1_000_000,
            t.text()
        );
        eprintln!(
            "trial {trial}: stopped {:.0} ms after the freeze, {:.0} ms before the next holder",
            (end - (common::timeline::now_ns() - frozen.elapsed().as_nanos() as i128)) as f64 / 1e6,
            (next_start - end) as f64 / 1e6
        );
    }
}

#[test]
fn a_lease_revoked_with_etcdctl_stops_the_command_with_75() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Timeline::new(dir.path());
    let mut holder = e
        .lc(
            "",
            &["lock", "rv", "-c", &t.holder("lc", OnTerm::LogAndExit)],
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || t
        .start_of("lc")
        .is_some()));
    let keys = e.keys("rv/");
    let lease = keys[0].strip_prefix("rv/").unwrap();
    let revoked = Instant::now();
    assert!(e
        .ctl(&["lease", "revoke", lease])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success());
    let code = status_of(&mut holder, Duration::from_secs(10));
    let err = stderr_of(&mut holder);
    assert_eq!(code, Some(75), "{err}");
    assert!(err.contains("revoked or expired"), "{err}");
    assert!(revoked.elapsed() < Duration::from_secs(5));
    // The key was free the moment the lease went: no grace, the command is
    // killed at once.
    let (_, pid) = t.start_of("lc").unwrap();
    assert!(!common::timeline::alive(pid), "the command still runs");
}

#[test]
fn reset_deletes_the_holder_key_and_its_command_is_stopped() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Timeline::new(dir.path());
    let mut holder = e
        .lc(
            "",
            &["lock", "rs", "-c", &t.holder("lc", OnTerm::LogAndExit)],
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || t
        .start_of("lc")
        .is_some()));
    common::expect_status(&mut e.lc("", &["reset", "rs"]), 0);
    let code = status_of(&mut holder, Duration::from_secs(10));
    let err = stderr_of(&mut holder);
    assert_eq!(code, Some(75), "{err}");
    assert!(err.contains("deleted from outside"), "{err}");
    assert!(e.keys("rs/").is_empty(), "{:?}", e.keys("rs/"));
}
