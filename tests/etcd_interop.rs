//! lc-cli's etcd backend against a real etcd and the real `etcdctl lock`:
//! they exclude each other both ways, a mixed queue is served in arrival
//! order, the command sees etcdctl's variables, trylock, unreachable.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::timeline::Timeline;
use common::{expect_status, wait_until};

/// A `sh -c` script: logs NAME's start, works `secs`, logs its end.
fn work(t: &Timeline, name: &str, secs: f64) -> String {
    let f = t.path.display();
    format!(
        "echo \"{name} start $(date +%s%N) $$\" >> {f}; sleep {secs}; echo \"{name} end $(date +%s%N) $$\" >> {f}"
    )
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn")
}

fn etcdctl_lock(e: &Etcd, key: &str, script: &str) -> Command {
    let mut c = e.ctl(&["lock", key, "--", "sh", "-c", script]);
    c.stdout(Stdio::null());
    c
}

/// Waits until `n` keys are queued under `key/`.
fn wait_queued(e: &Etcd, key: &str, n: usize) {
    assert!(
        wait_until(Duration::from_secs(10), || e.keys(&format!("{key}/")).len()
            >= n),
        "{n} keys never queued under {key}/: {:?}",
        e.keys(&format!("{key}/"))
    );
}

/// Checks from the logged times that the holds did not overlap and came in
/// `order`.
fn assert_in_order(t: &Timeline, order: &[&str]) {
    let mut last_end = 0;
    for name in order {
        let (start, _) = t
            .start_of(name)
            .unwrap_or_else(|| panic!("{name} never started:\n{}", t.text()));
        let end = t
            .end_of(name)
            .unwrap_or_else(|| panic!("{name} never ended:\n{}", t.text()));
        assert!(
            start > last_end,
            "{name} started before the previous holder ended:\n{}",
            t.text()
        );
        last_end = end;
    }
}

#[test]
fn lc_cli_and_etcdctl_lock_exclude_each_other_both_ways() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Timeline::new(dir.path());
    // etcdctl holds, lc-cli waits.
    let mut first = spawn(etcdctl_lock(&e, "job", &work(&t, "ctl1", 1.0)));
    assert!(wait_until(Duration::from_secs(10), || t
        .start_of("ctl1")
        .is_some()));
    let mut lc = e.lc("", &["lock", "job", "-c", &work(&t, "lc1", 0.5)]);
    expect_status(&mut lc, 0);
    assert!(first.wait().unwrap().success());
    // lc-cli holds, etcdctl waits.
    let mut second = spawn(e.lc("", &["lock", "job", "-c", &work(&t, "lc2", 1.0)]));
    assert!(wait_until(Duration::from_secs(10), || t
        .start_of("lc2")
        .is_some()));
    let status = etcdctl_lock(&e, "job", &work(&t, "ctl2", 0.1))
        .status()
        .unwrap();
    assert!(status.success());
    assert!(second.wait().unwrap().success());
    assert_in_order(&t, &["ctl1", "lc1", "lc2", "ctl2"]);
    assert!(
        e.keys("job/").is_empty(),
        "left behind: {:?}",
        e.keys("job/")
    );
}

#[test]
fn a_mixed_queue_is_served_in_arrival_order() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Timeline::new(dir.path());
    let names = ["h", "w1", "w2", "w3", "w4", "w5"];
    let mut children = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let script = work(&t, name, if i == 0 { 1.0 } else { 0.2 });
        // Odd places are etcdctl's, even ones lc-cli's.
        let cmd = if i % 2 == 1 {
            etcdctl_lock(&e, "q", &script)
        } else {
            e.lc("", &["lock", "q", "-c", &script])
        };
        children.push(spawn(cmd));
        wait_queued(&e, "q", i + 1);
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    assert_in_order(&t, &names);
}

#[test]
fn the_command_sees_the_lock_key_revision_and_token() {
    let e = Etcd::start();
    let mut cmd = e.lc(
            "",
            &[
                "lock",
                "env",
                "-c",
                "echo $ETCD_LOCK_KEY $ETCD_LOCK_REV $LC_LOCK_TOKEN; etcdctl --endpoints $EP get --print-value-only $ETCD_LOCK_KEY >/dev/null && echo present",
            ],
        );
    cmd.env("EP", e.endpoint()).env("ETCDCTL_API", "3");
    let out = expect_status(&mut cmd, 0);
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(f.len(), 4, "{text}");
    let lease = f[0].strip_prefix("env/").expect("env/<lease>");
    assert!(i64::from_str_radix(lease, 16).is_ok(), "{text}");
    assert!(f[1].parse::<i64>().unwrap() >= f[2].parse::<i64>().unwrap());
    assert_eq!(f[3], "present");
}

#[test]
fn trylock_and_wait_limit_on_a_key_held_by_etcdctl() {
    let e = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let t = Timeline::new(dir.path());
    let mut holder = spawn(etcdctl_lock(&e, "busy", &work(&t, "ctl", 3.0)));
    assert!(wait_until(Duration::from_secs(10), || t
        .start_of("ctl")
        .is_some()));
    let out = expect_status(&mut e.lc("", &["trylock", "busy", "--", "true"]), 1);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lease "),
        "the holder is named by its lease: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = Instant::now();
    expect_status(
        &mut e.lc("", &["lock", "-w", "0.5", "busy", "--", "true"]),
        1,
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // Both withdrew: only the holder's key is left.
    assert_eq!(e.keys("busy/").len(), 1, "{:?}", e.keys("busy/"));
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_name_with_a_slash_is_refused_and_an_unreachable_server_is_69() {
    let e = Etcd::start();
    let out = expect_status(&mut e.lc("", &["lock", "a/b", "--", "true"]), 64);
    assert!(String::from_utf8_lossy(&out.stderr).contains("'/'"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(common::BIN);
    cmd.args([
        "--server",
        &format!("etcd://127.0.0.1:{port}"),
        "--connect-timeout",
        "1s",
        "lock",
        "k",
        "--",
        "true",
    ]);
    let out = expect_status(&mut cmd, 69);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach"));
    let out = expect_status(&mut e.lc("?tll=3s", &["lock", "k", "--", "true"]), 64);
    assert!(String::from_utf8_lossy(&out.stderr).contains("ttl"));
}
