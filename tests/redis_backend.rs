//! The Redis backend on one real redis-server, driving the real binary.

use crate::common;

use std::fs;
use std::time::{Duration, Instant};

use common::redis::{
    hold_k, keys_json, keys_table, lc, serve_a_line, until_exists, RedisServer, Running,
};
use common::{expect_error_line, expect_status, wait_until};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(20);

fn spawn(server: &RedisServer, args: &[&str]) -> Running {
    Running::spawn(&mut lc(&server.url(), args))
}

fn signal(pid: i32, sig: Signal) {
    nix::sys::signal::kill(Pid::from_raw(pid), sig).unwrap();
}

/// Kills the command whose pid a killed lc-cli's command wrote to
/// `pidfile` (an orphan now, ours to clean up).
fn kill_orphan(pidfile: &std::path::Path) {
    if let Ok(pid) = fs::read_to_string(pidfile).unwrap().trim().parse::<i32>() {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Holds `k` with lease `ttl` while running `sleep 30`; a loss stops the
/// command within a second.
fn spawn_holder(server: &RedisServer, ttl: &str) -> Running {
    hold_k(&server.url(), &[], ttl, &["--", "sleep", "30"])
}

#[test]
fn runs_the_command_with_a_growing_fence_token() {
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tokens");
    let script = format!("echo $LC_LOCK_TOKEN >> {}", out.display());
    for _ in 0..3 {
        expect_status(&mut lc(&r.url(), &["lock", "k", "-c", &script]), 0);
    }
    assert_eq!(fs::read_to_string(&out).unwrap(), "1\n2\n3\n");
    expect_status(
        &mut lc(&r.url(), &["lock", "k", "--", "sh", "-c", "exit 3"]),
        3,
    );
    // Nothing is left held or queued.
    assert_eq!(r.holder("k"), None);
    assert_eq!(r.queued("k"), 0);
}

/// Eight waiters started one after another (each only once the previous one is
/// in line) are served in that order.
#[test]
fn fifo_across_eight_processes() {
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("order");
    let waiter = |i| {
        let script = format!("echo {i} >> {}", out.display());
        lc(&r.url(), &["lock", "k", "-c", &script])
    };
    serve_a_line(&r.url(), 8, waiter, |n| r.queued("k") == n, LIMIT);
    let order: Vec<String> = fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(order, ["0", "1", "2", "3", "4", "5", "6", "7"]);
    assert_eq!(r.queued("k"), 0);
}

/// libfaketime shifts the clock of the processes it is preloaded into.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The same line, with every other waiter's clock an hour ahead and the rest
/// an hour behind (libfaketime): the order still comes from the server.
#[test]
fn fifo_with_skewed_client_clocks() {
    assert!(
        std::path::Path::new(FAKETIME_LIB).exists(),
        "{FAKETIME_LIB} missing: install Debian's libfaketime package"
    );
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("order");
    let waiter = |i| {
        let skew = if i % 2 == 0 { "+1h" } else { "-1h" };
        // The command runs under the same clock, so it records the skew it saw.
        let script = format!("echo {i} $(date +%s) >> {}", out.display());
        let mut cmd = lc(&r.url(), &["lock", "k", "-c", &script]);
        cmd.env("LD_PRELOAD", FAKETIME_LIB).env("FAKETIME", skew);
        cmd
    };
    serve_a_line(&r.url(), 8, waiter, |n| r.queued("k") == n, LIMIT);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let lines = fs::read_to_string(&out).unwrap();
    let mut order = Vec::new();
    for line in lines.lines() {
        let (i, t) = line.split_once(' ').unwrap();
        let i: i64 = i.parse().unwrap();
        let skew = t.parse::<i64>().unwrap() - now;
        let expected = if i % 2 == 0 { 3600 } else { -3600 };
        assert!(
            (skew - expected).abs() < 120,
            "waiter {i} saw a skew of {skew} s"
        );
        order.push(i);
    }
    assert_eq!(order, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(r.queued("k"), 0);
}

/// Ten processes read, increment and write a counter file under the lock.
#[test]
fn mutual_exclusion_counter() {
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    fs::write(&counter, "0\n").unwrap();
    let script = format!(
        "n=$(cat {f}); sleep 0.02; echo $((n + 1)) > {f}",
        f = counter.display()
    );
    let procs: Vec<Running> = (0..10)
        .map(|_| spawn(&r, &["lock", "counter", "-c", &script]))
        .collect();
    for p in procs {
        p.expect_exit(0, Duration::from_secs(60));
    }
    assert_eq!(fs::read_to_string(&counter).unwrap().trim(), "10");
}

#[test]
fn a_killed_holder_frees_the_key_after_its_ttl() {
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let holder = spawn(&r, &["--ttl", "1s", "lock", "k", "-c", &script]);
    assert!(wait_until(LIMIT, || pidfile.exists() && r.holder("k").is_some()));
    signal(holder.pid(), Signal::SIGKILL);
    holder.expect_exit(128 + 9, LIMIT); // killed by SIGKILL
                                        // The orphaned command is ours to clean up.
    kill_orphan(&pidfile);
    // A waiter gets the key once the lease (1 s) runs out.
    expect_status(
        &mut lc(&r.url(), &["lock", "-w", "15", "k", "--", "true"]),
        0,
    );
}

#[test]
fn a_killed_waiter_leaves_the_line_after_the_queue_timeout() {
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    expect_status(&mut lc(&r.url(), &["lock", "k"]), 0);
    let doomed = spawn(&r, &["--queue-timeout", "1s", "lock", "k", "--", "true"]);
    assert!(wait_until(LIMIT, || r.queued("k") == 1));
    let script = format!("echo second >> {}", out.display());
    let second = spawn(&r, &["--queue-timeout", "1s", "lock", "k", "-c", &script]);
    assert!(wait_until(LIMIT, || r.queued("k") == 2));
    signal(doomed.pid(), Signal::SIGKILL);
    drop(doomed);
    // The living waiter's heartbeat clears the dead entry.
    assert!(
        wait_until(LIMIT, || r.queued("k") == 1),
        "the dead waiter never left the line"
    );
    let waiters: i64 = r.query(&["HLEN", "lc-cli:{k}:waiters"]);
    assert_eq!(waiters, 1);
    expect_status(&mut lc(&r.url(), &["unlock", "k"]), 0);
    second.expect_exit(0, LIMIT);
    assert_eq!(fs::read_to_string(&out).unwrap(), "second\n");
}

fn lost_when(change: &[&str]) {
    let r = RedisServer::start();
    let holder = spawn_holder(&r, "1s");
    assert!(wait_until(LIMIT, || r.holder("k").is_some()));
    let _: redis::Value = r.query(change);
    let started = Instant::now();
    let err = holder.expect_exit(75, LIMIT);
    assert!(err.contains("lost the lock 'k'"), "{err}");
    assert!(started.elapsed() < LIMIT);
}

#[test]
fn lock_key_deleted_from_outside_stops_the_command() {
    lost_when(&["DEL", "lc-cli:{k}:lock"]);
}

#[test]
fn lock_key_overwritten_from_outside_stops_the_command() {
    lost_when(&["SET", "lc-cli:{k}:lock", "someone-else"]);
}

/// Holds `k` on a volatile node with a lease of `ttl`; returns once the
/// command runs (the node counts only once it has been up for a lease).
fn hold_on_volatile(r: &RedisServer, ttl: &str, dir: &std::path::Path) -> Running {
    let started = dir.join("started");
    let script = format!("touch {}; sleep 30", started.display());
    let holder = hold_k(&r.url(), &[], ttl, &["-c", &script]);
    assert!(wait_until(LIMIT, || started.exists()), "never held");
    holder
}

#[test]
fn redis_restart_during_a_hold_is_detected() {
    let mut r = RedisServer::start_volatile();
    let dir = tempfile::tempdir().unwrap();
    let holder = hold_on_volatile(&r, "2s", dir.path());
    r.restart();
    let err = holder.expect_exit(75, LIMIT);
    assert!(err.contains("lost the lock 'k'"), "{err}");
}

#[test]
fn trylock_takes_only_a_free_key() {
    let r = RedisServer::start();
    expect_status(&mut lc(&r.url(), &["trylock", "k", "--", "true"]), 0);
    expect_status(&mut lc(&r.url(), &["lock", "k"]), 0);
    expect_status(&mut lc(&r.url(), &["trylock", "k", "--", "true"]), 1);
    expect_status(
        &mut lc(&r.url(), &["trylock", "-E", "9", "k", "--", "true"]),
        9,
    );
    assert_eq!(r.queued("k"), 0);
}

/// SIGINT while waiting: lc-cli leaves the line at once (no command runs, exit
/// 130) and the next waiter is the one granted.
#[test]
fn a_signal_while_waiting_leaves_the_line() {
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    expect_status(&mut lc(&r.url(), &["lock", "k"]), 0);
    let never = format!("echo interrupted-one-ran >> {}", out.display());
    let interrupted = spawn(&r, &["lock", "k", "-c", &never]);
    assert!(wait_until(LIMIT, || r.queued("k") == 1));
    let next = format!("echo next >> {}", out.display());
    let second = spawn(&r, &["lock", "k", "-c", &next]);
    assert!(wait_until(LIMIT, || r.queued("k") == 2));
    signal(interrupted.pid(), Signal::SIGINT);
    interrupted.expect_exit(130, LIMIT);
    // Gone from the line at once, not after the queue timeout.
    assert_eq!(r.queued("k"), 1);
    expect_status(&mut lc(&r.url(), &["unlock", "k"]), 0);
    second.expect_exit(0, LIMIT);
    assert_eq!(fs::read_to_string(&out).unwrap(), "next\n");
    assert_eq!(r.holder("k"), None);
}

#[test]
fn timeout_removes_the_queue_entry() {
    let r = RedisServer::start();
    expect_status(&mut lc(&r.url(), &["lock", "k"]), 0);
    let started = Instant::now();
    expect_status(
        &mut lc(&r.url(), &["lock", "-w", "0.5", "k", "--", "true"]),
        1,
    );
    assert!(started.elapsed() < LIMIT);
    assert_eq!(r.queued("k"), 0);
    let waiters: i64 = r.query(&["HLEN", "lc-cli:{k}:waiters"]);
    assert_eq!(waiters, 0);
}

#[test]
fn detached_hold_and_unlock() {
    let r = RedisServer::start();
    expect_status(&mut lc(&r.url(), &["--ttl", "1s", "lock", "k"]), 0);
    // A detached hold has no lease: it outlives its TTL.
    std::thread::sleep(Duration::from_millis(1500));
    expect_status(&mut lc(&r.url(), &["trylock", "k", "--", "true"]), 1);
    expect_status(&mut lc(&r.url(), &["unlock", "k"]), 0);
    expect_status(&mut lc(&r.url(), &["trylock", "k", "--", "true"]), 0);
    let out = expect_status(&mut lc(&r.url(), &["unlock", "k"]), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("was not held"));
}

/// A renewal puts the lock key back where it is missing and free (a node
/// restarted empty), but not after `reset`: the holder loses the key.
#[test]
fn reset_of_a_running_holder_nobody_waits_for_is_not_undone() {
    let r = RedisServer::start();
    let holder = spawn_holder(&r, "1s");
    assert!(wait_until(LIMIT, || r.holder("k").is_some()));
    expect_status(&mut lc(&r.url(), &["reset", "k"]), 0);
    holder.expect_exit(75, LIMIT);
    assert_eq!(r.holder("k"), None);
}

#[test]
fn unlock_refuses_a_running_hold() {
    let r = RedisServer::start();
    let holder = spawn(&r, &["lock", "k", "--", "sleep", "2"]);
    assert!(wait_until(LIMIT, || r.holder("k").is_some()));
    let out = expect_status(&mut lc(&r.url(), &["unlock", "k"]), 76);
    assert!(String::from_utf8_lossy(&out.stderr).contains("reset k"));
    holder.expect_exit(0, LIMIT);
}

#[test]
fn reset_key_frees_it_and_the_first_waiter_gets_it() {
    let r = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let holder = spawn_holder(&r, "1s");
    assert!(wait_until(LIMIT, || r.holder("k").is_some()));
    let script = format!("echo $LC_LOCK_TOKEN >> {}", out.display());
    let waiter = spawn(&r, &["lock", "k", "-c", &script]);
    assert!(wait_until(LIMIT, || r.queued("k") == 1));
    expect_status(&mut lc(&r.url(), &["reset", "k"]), 0);
    waiter.expect_exit(0, LIMIT);
    assert_eq!(fs::read_to_string(&out).unwrap(), "2\n");
    holder.expect_exit(75, LIMIT);
}

#[test]
fn reset_source_frees_its_keys_and_withdraws_its_waiters() {
    let r = RedisServer::start();
    expect_status(&mut lc(&r.url(), &["lock", "--source", "alpha", "a1"]), 0);
    expect_status(&mut lc(&r.url(), &["lock", "--source", "beta", "b1"]), 0);
    let waiter = spawn(&r, &["lock", "--source", "alpha", "b1", "--", "true"]);
    assert!(wait_until(LIMIT, || r.queued("b1") == 1));
    expect_status(&mut lc(&r.url(), &["reset", "--source", "alpha"]), 0);
    let err = waiter.expect_exit(76, LIMIT);
    assert!(err.contains("withdrawn"), "{err}");
    assert_eq!(r.queued("b1"), 0);
    expect_status(&mut lc(&r.url(), &["trylock", "a1", "--", "true"]), 0);
    expect_status(&mut lc(&r.url(), &["trylock", "b1", "--", "true"]), 1);
    let index: i64 = r.query(&["HLEN", "lc-cli:source:alpha"]);
    assert_eq!(index, 0);
}

#[test]
fn unreachable_server_fails_cleanly() {
    let port = common::redis::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let err = expect_error_line(
        &mut lc(
            &url,
            &["--connect-timeout", "2s", "lock", "k", "--", "true"],
        ),
        69,
    );
    // The key is named only when cmd/lock.rs adds it to connection errors.
    assert!(err.contains(&url) && err.contains("cannot reach"), "{err}");
}

/// A restart loses everything: the holder finds out (75), and a waiter puts
/// itself back in line and gets the key.
#[test]
fn a_waiter_survives_a_redis_restart() {
    let mut r = RedisServer::start_volatile();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let holder = hold_on_volatile(&r, "1s", dir.path());
    let script = format!("echo got >> {}", out.display());
    let waiter = spawn(&r, &["--ttl", "1s", "lock", "k", "-c", &script]);
    assert!(wait_until(LIMIT, || r.queued("k") == 1));
    r.restart();
    holder.expect_exit(75, LIMIT);
    waiter.expect_exit(0, LIMIT);
    assert_eq!(fs::read_to_string(&out).unwrap(), "got\n");
}

/// A server that accepts connections but never answers: lc-cli gives up
/// after --connect-timeout with the unreachable status.
#[test]
fn a_silent_server_fails_within_the_connect_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let out = expect_status(
        &mut lc(
            &url,
            &["--connect-timeout", "1s", "lock", "k", "--", "true"],
        ),
        69,
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    drop(silent);
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// `keys` while one key is held detached and one by a running command, with
/// waiters behind both: the table, the JSON lines, and the pattern.
#[test]
fn keys_lists_holders_sources_and_waiters() {
    let r = RedisServer::start();
    let url = r.url();
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    expect_status(
        &mut lc(&url, &["lock", "--source", "alpha", "deploy/prod"]),
        0,
    );
    let running = spawn(
        &r,
        &[
            "lock",
            "--source",
            "beta",
            "build/x",
            "-c",
            &until_exists(&gate),
        ],
    );
    assert!(wait_until(LIMIT, || r.holder("build/x").is_some()));
    let mut waiters = Vec::new();
    for i in 0..2 {
        waiters.push(spawn(
            &r,
            &["lock", "--source", "gamma", "deploy/prod", "--", "true"],
        ));
        assert!(wait_until(LIMIT, || r.queued("deploy/prod") == i + 1));
    }
    waiters.push(spawn(
        &r,
        &["lock", "--source", "delta", "build/x", "--", "true"],
    ));
    assert!(wait_until(LIMIT, || r.queued("build/x") == 1));
    // Both holds are at least this old when listed.
    std::thread::sleep(Duration::from_millis(1100));

    let table = keys_table(&url, &[], &[]);
    assert_eq!(table.len(), 3, "{table:?}");
    assert_eq!(
        table[0],
        row(&["KEY", "SOURCE", "PEER", "HELD", "HOLD", "WAITING"])
    );
    for (line, (key, source, hold, waiting)) in table[1..].iter().zip([
        ("build/x", "beta", "command", "1"),
        ("deploy/prod", "alpha", "kept", "2"),
    ]) {
        assert_eq!(line.len(), 6, "{table:?}");
        assert_eq!(
            [&line[0], &line[1], &line[2], &line[4], &line[5]],
            [key, source, "-", hold, waiting],
            "{table:?}"
        );
        assert!(line[3].ends_with('s') && line[3] != "0s", "{table:?}");
    }

    let listed = keys_json(&url, &[], &[]);
    assert_eq!(listed.len(), 2, "{listed:?}");
    for (v, (key, source, waiting, kept)) in listed.iter().zip([
        ("build/x", "beta", 1, false),
        ("deploy/prod", "alpha", 2, true),
    ]) {
        assert_eq!(v["key"], key, "{v}");
        assert_eq!(v["kept"], kept, "{v}");
        assert_eq!(v["source"], source, "{v}");
        assert_eq!(v["waiting"], waiting, "{v}");
        assert!(v["peer"].is_null(), "{v}");
        let held = v["held_ms"].as_u64().unwrap();
        assert!((1000..60_000).contains(&held), "{v}");
        let since = humantime::parse_rfc3339(v["since"].as_str().unwrap()).unwrap();
        let age = std::time::SystemTime::now().duration_since(since).unwrap();
        assert!(
            age >= Duration::from_secs(1) && age < Duration::from_secs(60),
            "{v}"
        );
    }

    let only: Vec<_> = keys_json(&url, &[], &["deploy/*"]);
    assert_eq!(only.len(), 1, "{only:?}");
    assert_eq!(only[0]["key"], "deploy/prod");
    let only = keys_table(&url, &[], &["build/?"]);
    assert_eq!(only.len(), 2, "{only:?}");
    assert_eq!(only[1][0], "build/x");
    assert!(keys_json(&url, &[], &["nothing*"]).is_empty());

    // Everything released: nothing is listed.
    expect_status(&mut lc(&url, &["unlock", "deploy/prod"]), 0);
    fs::write(&gate, "").unwrap();
    running.expect_exit(0, LIMIT);
    for w in waiters {
        w.expect_exit(0, LIMIT);
    }
    assert!(keys_json(&url, &[], &[]).is_empty());
    assert_eq!(keys_table(&url, &[], &[]).len(), 1);
}

/// A holder SIGKILLed leaves the list once its lease runs out; a SIGKILLed
/// waiter stops counting once its queue entry expires.
#[test]
fn keys_forgets_a_killed_holder_and_a_killed_waiter() {
    let r = RedisServer::start();
    let url = r.url();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let holder = spawn(
        &r,
        &[
            "--ttl", "1s", "lock", "--source", "doomed", "k", "-c", &script,
        ],
    );
    assert!(wait_until(LIMIT, || pidfile.exists() && r.holder("k").is_some()));
    expect_status(&mut lc(&url, &["lock", "--source", "alpha", "d"]), 0);
    let waiter = spawn(&r, &["--queue-timeout", "1s", "lock", "d", "--", "true"]);
    assert!(wait_until(LIMIT, || r.queued("d") == 1));

    let listed = keys_json(&url, &[], &[]);
    let names: Vec<&str> = listed.iter().map(|v| v["key"].as_str().unwrap()).collect();
    assert_eq!(names, ["d", "k"], "{listed:?}");
    assert_eq!(listed[0]["waiting"], 1);
    assert_eq!(listed[1]["source"], "doomed");

    for pid in [holder.pid(), waiter.pid()] {
        signal(pid, Signal::SIGKILL);
    }
    holder.expect_exit(128 + 9, LIMIT); // killed by SIGKILL
    drop(waiter);
    kill_orphan(&pidfile);
    let mut last = Vec::new();
    let gone = wait_until(LIMIT, || {
        last = keys_json(&url, &[], &[]);
        last.len() == 1 && last[0]["key"] == "d" && last[0]["waiting"] == 0
    });
    assert!(gone, "still listed: {last:?}");
    // The listing settled the dead hold: out of the index and its source's.
    let member: i64 = r.query(&["SISMEMBER", "lc-cli:keys", "k"]);
    assert_eq!(member, 0);
    let index: i64 = r.query(&["HLEN", "lc-cli:source:doomed"]);
    assert_eq!(index, 0);

    expect_status(&mut lc(&url, &["unlock", "d"]), 0);
    assert!(keys_json(&url, &[], &[]).is_empty());
    assert_eq!(r.queued("d"), 0);
}
