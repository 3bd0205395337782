//! `--hold-at-least` for cron on a fleet (issue 45, item 1;
//! docs/fleet-jobs.md): three "hosts" (lc-cli under libfaketime, clocks
//! -2 s, 0 and +2 s) each run `trylock --hold-at-least 5s job -- job.sh` (a
//! 1 s job) at each of 10 ticks 6 s apart, each host at the tick as its own
//! clock reads it (as cron on a skewed host does: the host 2 s ahead starts
//! 2 s early in real time). Exactly one run per tick, judged from the
//! jobs' own logs on the real clock; no two runs overlap; the winner says
//! (with -v) until when the key stays held. Then a kept hold of the window
//! is cleared by `unlock` before it ends. On Redis, etcd and ZooKeeper
//! with TTL nodes (the built-in server: tests/fleet_hold_builtin.rs;
//! PostgreSQL: tests/fleet_hold_pg.rs); refused with one line (76) on
//! ZooKeeper without TTL nodes at the command's end.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
const TICKS: u32 = 10;
const TICK: Duration = Duration::from_secs(6);
const WINDOW: &str = "5s";
/// Each host's clock offset (libfaketime's `FAKETIME`) and so how early in
/// real time its cron fires: a host ahead fires early.
const HOSTS: [(&str, &str, i64); 3] = [
    ("slow", "-2", 2000),
    ("exact", "+0", 0),
    ("fast", "+2", -2000),
];
/// How long a host's lc-cli may take in all (the job is 1 s).
const LIMIT: Duration = Duration::from_secs(30);

type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

/// The job: logs its start and end on the real clock (it leaves
/// libfaketime first), one line each.
fn job_script(dir: &Path) -> String {
    let log = dir.join("runs.log");
    let script = dir.join("job.sh");
    std::fs::write(
        &script,
        format!(
            "echo \"$HOST $TICK start $(date +%s%N)\" >> {log}\nsleep 1\necho \"$HOST $TICK end $(date +%s%N)\" >> {log}\n",
            log = log.display()
        ),
    )
    .unwrap();
    format!("unset LD_PRELOAD FAKETIME; exec sh {}", script.display())
}

fn host(lc: Lc, key: &str, name: &str, faketime: &str, tick: u32, job: &str) -> Child {
    let mut cmd = lc(&["-v", "trylock", "--hold-at-least", WINDOW, key, "-c", job]);
    cmd.env("LD_PRELOAD", FAKETIME_LIB)
        .env("FAKETIME", faketime)
        .env("HOST", name)
        .env("TICK", tick.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().expect("start lc-cli")
}

/// (host, tick, start ns, end ns) of every run, from the log.
fn runs(dir: &Path) -> Vec<(String, u32, i128, i128)> {
    let text = std::fs::read_to_string(dir.join("runs.log")).unwrap_or_default();
    let mut starts = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (h, t, what, ns) = (
            f[0].to_string(),
            f[1].parse().unwrap(),
            f[2],
            f[3].parse().unwrap(),
        );
        match what {
            "start" => starts.push((h, t, ns)),
            _ => {
                let i = starts
                    .iter()
                    .position(|s| s.0 == h && s.1 == t)
                    .expect(line);
                let (h, t, s) = starts.remove(i);
                out.push((h, t, s, ns));
            }
        }
    }
    assert!(starts.is_empty(), "runs that never ended:\n{text}");
    out
}

pub(crate) fn once_per_tick(lc: Lc) {
    assert!(
        Path::new(FAKETIME_LIB).exists(),
        "{FAKETIME_LIB} missing: install libfaketime"
    );
    let dir = tempfile::tempdir().unwrap();
    let job = job_script(dir.path());
    let base = Instant::now() + Duration::from_secs(3);
    let mut children: Vec<(u32, &str, Child)> = Vec::new();
    // Every start in real-time order.
    let mut starts: Vec<(Instant, u32, usize)> = (0..TICKS)
        .flat_map(|t| (0..HOSTS.len()).map(move |h| (t, h)))
        .map(|(t, h)| {
            let at = base + TICK * t;
            let skew = HOSTS[h].2;
            let at = if skew >= 0 {
                at + Duration::from_millis(skew as u64)
            } else {
                at - Duration::from_millis((-skew) as u64)
            };
            (at, t, h)
        })
        .collect();
    starts.sort_by_key(|s| s.0);
    for (at, tick, h) in starts {
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        let (name, faketime, _) = HOSTS[h];
        children.push((tick, name, host(lc, "job", name, faketime, tick, &job)));
    }
    let mut report = String::new();
    let mut winners = vec![0; TICKS as usize];
    for (tick, name, child) in children {
        let deadline = Instant::now() + LIMIT;
        let mut child = child;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "{name} at tick {tick}: lc-cli never ended"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        report.push_str(&format!("tick {tick} {name}: {status}\n{err}"));
        match status.code() {
            Some(0) => {
                winners[tick as usize] += 1;
                assert!(
                    err.contains("stays held until") && err.contains("--hold-at-least 5s"),
                    "{name} at tick {tick}: no line for the window:\n{err}"
                );
            }
            Some(1) => {}
            other => panic!("{name} at tick {tick}: status {other:?}:\n{err}"),
        }
    }
    let runs = runs(dir.path());
    let log = std::fs::read_to_string(dir.path().join("runs.log")).unwrap_or_default();
    for tick in 0..TICKS {
        let n = runs.iter().filter(|r| r.1 == tick).count();
        assert_eq!(n, 1, "tick {tick}: {n} runs\n{log}\n{report}");
        assert_eq!(winners[tick as usize], 1, "tick {tick}\n{report}");
    }
    let mut sorted = runs.clone();
    sorted.sort_by_key(|r| r.2);
    for w in sorted.windows(2) {
        assert!(w[0].3 <= w[1].2, "overlapping runs {w:?}\n{log}");
    }
    let hosts: Vec<&str> = sorted.iter().map(|r| r.0.as_str()).collect();
    eprintln!("winners by tick: {hosts:?}");

    // A kept window is cleared by `unlock` before it ends.
    expect_status(
        &mut lc(&["trylock", "--hold-at-least", "60s", "cleared", "--", "true"]),
        0,
    );
    expect_status(&mut lc(&["trylock", "cleared", "--", "true"]), 1);
    expect_status(&mut lc(&["unlock", "cleared"]), 0);
    expect_status(&mut lc(&["trylock", "cleared", "--", "true"]), 0);
}

#[test]
fn redis() {
    let r = common::redis::RedisServer::start();
    let url = r.url();
    once_per_tick(&|args: &[&str]| lc_at(&url, args));
}

#[test]
fn etcd() {
    let e = common::etcd::Etcd::start();
    once_per_tick(&|args: &[&str]| e.lc("", args));
}

#[test]
fn zookeeper_with_ttl_nodes() {
    let zk = common::zk::Zk::start_extended();
    once_per_tick(&|args: &[&str]| zk.lc("/fleet", args));
}

/// Without TTL nodes the server refuses the kept hold at the command's
/// end: one line, 76, and the key is free again.
#[test]
fn zookeeper_without_ttl_nodes_refuses_at_the_end() {
    let zk = common::zk::Zk::start();
    let err = expect_error_line(
        &mut zk.lc(
            "/fleet",
            &["trylock", "--hold-at-least", "5s", "k", "--", "true"],
        ),
        76,
    );
    assert!(err.contains("TTL nodes"), "{err}");
    expect_status(&mut zk.lc("/fleet", &["trylock", "k", "--", "true"]), 0);
}

/// The built-in server now takes it (tests/fleet_hold_builtin.rs has the
/// fleet run): the window is kept after a command that ended early.
#[test]
fn builtin_server_takes_it() {
    let server = Serve::new().start();
    expect_status(
        &mut server.lc(&["trylock", "--hold-at-least", "30s", "k", "--", "true"]),
        0,
    );
    expect_status(&mut server.lc(&["trylock", "k", "--", "true"]), 1);
    expect_status(&mut server.lc(&["unlock", "k"]), 0);
}

#[test]
fn usage_errors() {
    let server = Serve::new().start();
    for (args, what) in [
        (
            &["lock", "--hold-at-least", "5s", "k"][..],
            "needs a command",
        ),
        (
            &["lock", "--hold-at-least", "0", "k", "--", "true"][..],
            "at least 1ms",
        ),
        (
            &[
                "lock",
                "--hold-at-least",
                "5s",
                "--order",
                "3",
                "k",
                "--",
                "true",
            ][..],
            "--order",
        ),
    ] {
        let err = expect_error_line(&mut server.lc(args), 64);
        assert!(err.contains(what), "{err}");
    }
}
