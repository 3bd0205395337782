//! Losing an etcd lock while the command runs: a silent network path (the
//! proxy freezes) stops the command before the lease can expire and the
//! next holder (a real `etcdctl lock`) start; a lease revoked with etcdctl,
//! or the key reset, stops it too. All exit 75.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::partition::{trial, trials};
use common::proxy::Proxy;
use common::redis::Running;
use common::timeline::{alive, OnTerm, Timeline};
use common::{lc_at, wait_until};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn a_frozen_network_stops_the_command_before_etcdctl_gets_the_lock() {
    let e = Etcd::start();
    let kinds = [OnTerm::LogAndExit, OnTerm::SlowExit, OnTerm::Ignore];
    // A 4 s lease: SIGTERM about 2.7 s after the last renewal, SIGKILL at
    // 3.8 s, so SlowExit's half-second clean-up fits with room under load
    // (with 3 s it had about 0.3 s to spare, and once ran out).
    trials("etcd ttl 4s", &kinds, |n, kind| {
        let key = format!("part{n}");
        let proxy = Proxy::start(e.port);
        let through_proxy = format!("etcd://{}?ttl=4s", proxy.addr());
        trial(
            &proxy,
            kind,
            |script| lc_at(&through_proxy, &["lock", &key, "-c", script]),
            |script| {
                let mut ctl = e.ctl(&["lock", &key, "--", "sh", "-c", script]);
                ctl.stdout(Stdio::null());
                ctl
            },
            || e.keys(&format!("{key}/")).len() == 2,
        )
    });
}

/// Takes `key` with a command that logs its start and end, lets `remove`
/// take the hold away from outside once it runs, and checks that lc-cli
/// stopped the command and exited 75 with a line containing `says`, within
/// `within` of the removal.
fn stopped_from_outside(key: &str, remove: impl FnOnce(&Etcd, &str), says: &str, within: Duration) {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Timeline::new(dir.path());
    let holder = Running::spawn(&mut e.lc(
        "",
        &["lock", key, "-c", &t.holder("lc", OnTerm::LogAndExit)],
    ));
    assert!(wait_until(LIMIT, || t.start_of("lc").is_some()));
    let removed = Instant::now();
    remove(&e, key);
    let (code, err) = holder.finish(LIMIT);
    assert_eq!(code, 75, "{err}");
    assert!(err.contains(says), "{err}");
    assert!(removed.elapsed() < within, "took {:?}", removed.elapsed());
    // The key was free the moment the hold went: no grace, the command is
    // stopped at once.
    let (_, pid) = t.start_of("lc").unwrap();
    assert!(!alive(pid), "the command still runs");
    assert!(e.keys(&format!("{key}/")).is_empty(), "{:?}", e.keys(key));
}

#[test]
fn a_lease_revoked_with_etcdctl_stops_the_command_with_75() {
    let revoke = |e: &Etcd, key: &str| {
        let keys = e.keys(&format!("{key}/"));
        let lease = keys[0].strip_prefix(&format!("{key}/")).unwrap();
        assert!(e
            .ctl(&["lease", "revoke", lease])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success());
    };
    stopped_from_outside("rv", revoke, "revoked or expired", Duration::from_secs(5));
}

#[test]
fn reset_deletes_the_holder_key_and_its_command_is_stopped() {
    let reset = |e: &Etcd, key: &str| {
        common::expect_status(&mut e.lc("", &["reset", key]), 0);
    };
    stopped_from_outside("rs", reset, "deleted from outside", LIMIT);
}
