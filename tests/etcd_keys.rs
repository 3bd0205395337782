//! The etcd backend's operator side: detached holds (the key off its lease)
//! and unlock, `keys` with holder, source and waiters, reset --source, a
//! signal that withdraws a waiter, a prefix in the address.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::{expect_status, wait_until};

#[test]
fn a_detached_hold_outlives_its_process_until_unlock() {
    let e = Etcd::start();
    let out = expect_status(&mut e.lc("", &["lock", "d", "--source", "ops"]), 0);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unlock"));
    // Held, by a key without a lease: etcdctl's lock waits too.
    expect_status(&mut e.lc("", &["trylock", "d", "--", "true"]), 1);
    let waited = e
        .ctl(&["lock", "d", "--", "true"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || e.keys("d/").len() == 2));
    let out = expect_status(&mut e.lc("", &["keys"]), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("d"))
        .unwrap_or_else(|| panic!("no row for d:\n{text}"));
    assert!(row.contains("ops"), "{text}");
    assert!(
        row.split_whitespace().any(|f| f == "1"),
        "one waiter: {text}"
    );
    expect_status(&mut e.lc("", &["unlock", "d"]), 0);
    let mut waited = waited;
    let start = Instant::now();
    while waited.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "etcdctl never got d"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    expect_status(&mut e.lc("", &["trylock", "d", "--", "true"]), 0);
}

#[test]
fn reset_by_source_deletes_that_sources_keys_only() {
    let e = Etcd::start();
    expect_status(&mut e.lc("", &["lock", "a", "--source", "s1"]), 0);
    expect_status(&mut e.lc("", &["lock", "b", "--source", "s2"]), 0);
    expect_status(&mut e.lc("", &["reset", "--source", "s1"]), 0);
    assert!(e.keys("a/").is_empty());
    assert_eq!(e.keys("b/").len(), 1);
}

#[test]
fn a_signal_withdraws_a_waiter_and_its_lease() {
    let e = Etcd::start();
    let mut holder = e
        .lc("", &["lock", "w", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || e.keys("w/").len() == 1));
    let mut waiter = e
        .lc("", &["lock", "w", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || e.keys("w/").len() == 2));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(waiter.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = waiter.wait().unwrap();
    assert!(!status.success());
    assert_eq!(e.keys("w/").len(), 1, "the waiter's key is gone");
    let leases = e.ctl(&["lease", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&leases.stdout);
    assert!(listed.contains("found 1 leases"), "{listed}");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_prefix_in_the_address_is_etcdctls_prefix_slash_name() {
    let e = Etcd::start();
    let mut holder = e
        .lc("/locks", &["lock", "job", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || e
        .keys("locks/job/")
        .len()
        == 1));
    let out = e
        .ctl(&["lock", "locks/job", "--", "true"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // etcdctl waits behind lc-cli.
    assert!(wait_until(Duration::from_secs(10), || e
        .keys("locks/job/")
        .len()
        == 2));
    let mut out = out;
    assert!(out.try_wait().unwrap().is_none());
    // The same name without the prefix is another lock.
    expect_status(&mut e.lc("", &["trylock", "job", "--", "true"]), 0);
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = out.kill();
    let _ = out.wait();
}

#[test]
fn keys_waiters_lists_the_keys_with_later_revisions_in_order() {
    let e = Etcd::start();
    let queued = || e.keys("q/").len().saturating_sub(1);
    common::waiters::three_in_order(|args| e.lc("", args), "q", queued);
}
