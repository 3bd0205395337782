//! A frozen lc-cli must not let its command run on (issue 27, item 3):
//! the holder's lc-cli (not its command) is stopped with SIGSTOP for twice
//! its lease while a second lc-cli waits for the key; the guardian outside
//! lc-cli's process stops the command before the service can hand the key
//! on, so the holder's command has logged its end before the next one
//! starts, every trial, on every leased backend. And a paused machine
//! (lc-cli, its command and the guardian stopped together, continued after
//! the lease): the command is gone soon after the continue.
//! Who ran when is read from the commands' own logged times.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::redis::RedisServer;
use common::timeline::{alive, gone_at, now_ns, OnTerm, Timeline};
use common::zk::Zk;
use common::{lc_at, wait_until, Serve};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

const TRIALS: usize = 3;
/// The lease every backend runs with here.
const LEASE: Duration = Duration::from_secs(2);
const LIMIT: Duration = Duration::from_secs(30);

type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lc-cli")
}

fn finish(child: Child) -> (Option<i32>, String) {
    common::finish_within(LIMIT, child)
}

/// The holder's command: logs its start, runs until SIGTERM, logs its end.
fn start_holder(lc: Lc, key: &str, tl: &Timeline) -> (Child, i32) {
    let a = spawn(lc(&[
        "lock",
        key,
        "-c",
        &tl.holder("a", OnTerm::LogAndExit),
    ]));
    assert!(
        wait_until(LIMIT, || tl.start_of("a").is_some()),
        "the holder never started:\n{}",
        tl.text()
    );
    let (_, pid) = tl.start_of("a").unwrap();
    (a, pid)
}

/// SIGSTOP of the holder's lc-cli for twice the lease, a waiter in line:
/// the margins (ms) between the holder command's end and the waiter's start.
fn frozen_holder(lc: Lc) -> Vec<f64> {
    let mut margins = Vec::new();
    for trial in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let tl = Timeline::new(dir.path());
        let key = format!("frozen{trial}");
        let (a, a_pid) = start_holder(lc, &key, &tl);
        let b_script = format!("{}; sleep 0.2", tl.one_shot("b"));
        let b = spawn(lc(&["lock", &key, "-c", &b_script]));
        // In line behind the holder.
        std::thread::sleep(Duration::from_millis(500));
        let lc_a = Pid::from_raw(a.id() as i32);
        kill(lc_a, Signal::SIGSTOP).unwrap();
        std::thread::sleep(LEASE * 2);
        kill(lc_a, Signal::SIGCONT).unwrap();
        let (a_code, a_err) = finish(a);
        let (b_code, b_err) = finish(b);
        let text = tl.text();
        let a_end = tl
            .end_of("a")
            .unwrap_or_else(|| panic!("trial {trial}: the holder's command never ended:\n{text}"));
        let (b_start, _) = tl
            .start_of("b")
            .unwrap_or_else(|| panic!("trial {trial}: the waiter never ran: {b_err}\n{text}"));
        assert!(
            a_end < b_start,
            "trial {trial}: the waiter started {:.1} ms before the frozen holder's command ended:\n{text}",
            (a_end - b_start) as f64 / 1e6
        );
        assert!(
            !alive(a_pid),
            "trial {trial}: the holder's command lives on"
        );
        assert_eq!(a_code, Some(75), "trial {trial}: {a_err}");
        assert_eq!(
            a_err.lines().filter(|l| l.starts_with("lc-cli:")).count(),
            1,
            "{a_err}"
        );
        assert!(a_err.contains("lost the lock"), "{a_err}");
        assert_eq!(b_code, Some(0), "trial {trial}: {b_err}");
        margins.push((b_start - a_end) as f64 / 1e6);
    }
    margins
}

/// The guardian of the lc-cli `parent`, found by its name (comm).
fn guardian_of(parent: u32) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if comm == b"lc-cli-guardian\n" && ppid == Some(parent) {
            return Some(pid);
        }
    }
    None
}

/// lc-cli, its command's group and the guardian stopped together for the
/// lease and a half, continued together (the command first): how long (ms)
/// after the continue the command was gone.
fn paused_machine(lc: Lc) -> Vec<f64> {
    let mut delays = Vec::new();
    for trial in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let tl = Timeline::new(dir.path());
        let key = format!("paused{trial}");
        let (a, a_pid) = start_holder(lc, &key, &tl);
        let mut guardian = None;
        assert!(
            wait_until(LIMIT, || {
                guardian = guardian_of(a.id());
                guardian.is_some()
            }),
            "no guardian for lc-cli {}",
            a.id()
        );
        let guardian = Pid::from_raw(guardian.unwrap());
        let lc_a = Pid::from_raw(a.id() as i32);
        let group = Pid::from_raw(a_pid);
        kill(lc_a, Signal::SIGSTOP).unwrap();
        killpg(group, Signal::SIGSTOP).unwrap();
        kill(guardian, Signal::SIGSTOP).unwrap();
        std::thread::sleep(LEASE * 3 / 2);
        let woken = Instant::now();
        let woken_ns = now_ns();
        killpg(group, Signal::SIGCONT).unwrap();
        kill(guardian, Signal::SIGCONT).unwrap();
        kill(lc_a, Signal::SIGCONT).unwrap();
        let gone = gone_at(a_pid, Duration::from_secs(10));
        let (a_code, a_err) = finish(a);
        let gone = gone.unwrap_or_else(|| panic!("trial {trial}: the command lives on"));
        let delay = (gone - woken_ns) as f64 / 1e6;
        assert!(
            delay < 1000.0,
            "trial {trial}: the command was gone only {delay:.1} ms after the continue ({:?} in all)",
            woken.elapsed()
        );
        assert_eq!(a_code, Some(75), "trial {trial}: {a_err}");
        delays.push(delay);
    }
    delays
}

/// `lc` with the deploy-queue rules on every `lock` (issue 44: the fault
/// tests repeated with `--newest --order`): the holder and the waiter both
/// `--newest --order 1`, so the waiter waits (a holder is never
/// superseded) and must still start only after the frozen holder's end.
fn queued<'a>(lc: Lc<'a>) -> impl Fn(&[&str]) -> Command + 'a {
    move |args: &[&str]| match args.split_first() {
        Some((&"lock", rest)) => {
            let mut all = vec!["lock", "--newest", "--order", "1"];
            all.extend_from_slice(rest);
            lc(&all)
        }
        _ => lc(args),
    }
}

fn report(what: &str, figures: &[f64]) {
    let shown: Vec<String> = figures.iter().map(|m| format!("{m:.1}")).collect();
    eprintln!("{what}: {} ms", shown.join(", "));
}

fn builtin() -> common::Server {
    Serve::new().args(&["--reclaim-grace", "2s"]).start()
}

#[test]
fn builtin_server_frozen_holder() {
    let server = builtin();
    let lc = |args: &[&str]| server.lc(args);
    report(
        "built-in server, waiter's start after the frozen holder's end",
        &frozen_holder(&lc),
    );
}

#[test]
fn builtin_server_frozen_holder_queued() {
    let server = builtin();
    let lc = |args: &[&str]| server.lc(args);
    report(
        "built-in server, --newest --order, waiter's start after the frozen holder's end",
        &frozen_holder(&queued(&lc)),
    );
}

#[test]
fn builtin_server_paused_machine() {
    let server = builtin();
    let lc = |args: &[&str]| server.lc(args);
    report(
        "built-in server, command gone after the continue",
        &paused_machine(&lc),
    );
}

#[test]
fn redis_frozen_holder() {
    let redis = RedisServer::start();
    let url = format!("{}?ttl=2s", redis.url());
    let lc = |args: &[&str]| lc_at(&url, args);
    report(
        "Redis, waiter's start after the frozen holder's end",
        &frozen_holder(&lc),
    );
}

#[test]
fn redis_frozen_holder_queued() {
    let redis = RedisServer::start();
    let url = format!("{}?ttl=2s", redis.url());
    let lc = |args: &[&str]| lc_at(&url, args);
    report(
        "Redis, --newest --order, waiter's start after the frozen holder's end",
        &frozen_holder(&queued(&lc)),
    );
}

#[test]
fn redis_paused_machine() {
    let redis = RedisServer::start();
    let url = format!("{}?ttl=2s", redis.url());
    let lc = |args: &[&str]| lc_at(&url, args);
    report(
        "Redis, command gone after the continue",
        &paused_machine(&lc),
    );
}

#[test]
fn zookeeper_frozen_holder() {
    // A tick of 250 ms lets the server take a 2 s session.
    let zk = Zk::start_with_tick(250);
    let lc = |args: &[&str]| zk.lc_session("/frozen", "2s", args);
    report(
        "ZooKeeper, waiter's start after the frozen holder's end",
        &frozen_holder(&lc),
    );
}

#[test]
fn zookeeper_frozen_holder_queued() {
    let zk = Zk::start_with_tick(250);
    let lc = |args: &[&str]| zk.lc_session("/frozenq", "2s", args);
    report(
        "ZooKeeper, --newest --order, waiter's start after the frozen holder's end",
        &frozen_holder(&queued(&lc)),
    );
}

#[test]
fn zookeeper_paused_machine() {
    let zk = Zk::start_with_tick(250);
    let lc = |args: &[&str]| zk.lc_session("/paused", "2s", args);
    report(
        "ZooKeeper, command gone after the continue",
        &paused_machine(&lc),
    );
}

#[test]
fn etcd_paused_machine() {
    let etcd = Etcd::start();
    let lc = |args: &[&str]| etcd.lc("?ttl=2s", args);
    report(
        "etcd, command gone after the continue",
        &paused_machine(&lc),
    );
}

#[test]
fn etcd_frozen_holder() {
    let etcd = Etcd::start();
    let lc = |args: &[&str]| etcd.lc("?ttl=2s", args);
    report(
        "etcd, waiter's start after the frozen holder's end",
        &frozen_holder(&lc),
    );
}

#[test]
fn etcd_frozen_holder_queued() {
    let etcd = Etcd::start();
    let lc = |args: &[&str]| etcd.lc("?ttl=2s", args);
    report(
        "etcd, --newest --order, waiter's start after the frozen holder's end",
        &frozen_holder(&queued(&lc)),
    );
}

/// lc-cli continued just after its guardian sent the SIGTERM of a stop:
/// the command gets that one SIGTERM, not a second one from lc-cli (a
/// shell would run its cleanup trap again, and be killed in the middle).
#[test]
fn a_guardian_s_sigterm_is_the_only_one() {
    let server = builtin();
    for trial in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        let script = format!(
            "trap 'echo term >> {l}; sleep 0.3; echo cleaned >> {l}; exit 0' TERM; \
             echo started >> {l}; while :; do sleep 0.05; done",
            l = log.display()
        );
        let a = spawn(server.lc(&["lock", &format!("once{trial}"), "-c", &script]));
        assert!(
            wait_until(LIMIT, || read().contains("started")),
            "trial {trial}: never started"
        );
        let lc_a = Pid::from_raw(a.id() as i32);
        kill(lc_a, Signal::SIGSTOP).unwrap();
        let termed = wait_until(LIMIT, || read().contains("term"));
        kill(lc_a, Signal::SIGCONT).unwrap();
        assert!(termed, "trial {trial}: the guardian sent no SIGTERM");
        let (code, err) = finish(a);
        assert_eq!(code, Some(75), "trial {trial}: {err}");
        assert!(
            err.contains("lc-cli was stopped or starved"),
            "trial {trial}: {err}"
        );
        let text = read();
        assert_eq!(text.matches("term").count(), 1, "trial {trial}: {text}");
        assert!(
            text.contains("cleaned"),
            "trial {trial}: the cleanup was cut: {text}"
        );
    }
}
