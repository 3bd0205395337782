//! Deploy queues on ZooKeeper (issue 44): the scenarios of
//! `common::deploy` against a real ZooKeeper, restarts included (killed and
//! started again on its dataDir: the sessions and their ephemeral nodes
//! come back); the requests an uncontended lock with `--newest --order`
//! sends against a plain one, counted by `mntr`.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::curator::{self, Recipe};
use common::deploy;
use common::spans;
use common::zk::Zk;
use common::{expect_status, wait_until};

/// Sessions of 10 s (the server allows 2 to 20 ticks of 500 ms), so a
/// holder's command rides out a restart of the JVM on a busy machine: its
/// stop begins at two thirds of the session timeout without contact.
const TICK_MS: u64 = 500;
const SESSION: &str = "10s";

/// lc-cli against the server at `url` (`zk://127.0.0.1:PORT/ROOT`), as
/// `Zk::lc_session` starts it, without borrowing the server (a restart
/// needs it mutably).
fn at(url: &str) -> impl Fn(&[&str]) -> Command + '_ {
    with_query(url, "")
}

/// `at` with more query parameters (`&recipe=rwlock`).
fn with_query<'a>(url: &'a str, query: &'a str) -> impl Fn(&[&str]) -> Command + 'a {
    move |args: &[&str]| {
        let mut cmd = Command::new(common::BIN);
        cmd.arg("--server")
            .arg(format!("{url}?session-timeout={SESSION}{query}"))
            .args(["--connect-timeout", "10s"])
            .args(args);
        cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
        cmd
    }
}

fn start() -> (Zk, String) {
    let zk = Zk::start_with_tick(TICK_MS);
    let url = zk.url("/q");
    (zk, url)
}

fn restart(zk: &mut Zk) {
    zk.restart_after(Duration::from_millis(200));
}

#[test]
fn newest_wins() {
    let (_zk, url) = start();
    let delays = deploy::newest_wins(&at(&url), "deploy/prod");
    eprintln!("superseded after (ms): {delays:.1?}");
}

#[test]
fn orders_without_newest() {
    let (_zk, url) = start();
    deploy::orders(&at(&url), "deploy/prod", false, None);
}

#[test]
fn orders_with_newest() {
    let (_zk, url) = start();
    deploy::orders(&at(&url), "deploy/prod", true, None);
}

#[test]
fn orders_across_a_restart() {
    let (mut zk, url) = start();
    deploy::orders(
        &at(&url),
        "deploy/prod",
        false,
        Some(&mut || restart(&mut zk)),
    );
}

#[test]
fn orders_with_newest_across_a_restart() {
    let (mut zk, url) = start();
    deploy::orders(
        &at(&url),
        "deploy/prod",
        true,
        Some(&mut || restart(&mut zk)),
    );
}

#[test]
fn mark_rules() {
    let (mut zk, url) = start();
    deploy::mark_rules(&at(&url), "deploy/prod", Some(&mut || restart(&mut zk)));
}

#[test]
fn cancel_running() {
    let (_zk, url) = start();
    let gaps = deploy::cancel_running(&at(&url), "deploy/prod", 5);
    eprintln!("new command started after the old one's end (ms): {gaps:.1?}");
}

#[test]
fn no_cancel_without_the_flag() {
    let (_zk, url) = start();
    deploy::no_cancel_without_the_flag(&at(&url), "deploy/prod");
}

#[test]
fn pipelines_across_a_restart() {
    let (mut zk, url) = start();
    deploy::pipelines_across_a_restart(&at(&url), "deploy/prod", &mut || restart(&mut zk));
}

/// What the queue rules add beside a key's queue (the mark, a superseded
/// and a cancel marker) is no contender for Curator: a Curator
/// `InterProcessReadWriteLock` writer queued between two lc-cli writers
/// (`recipe=rwlock`, `--newest --order`) takes its turn between them, none
/// at once with another; the mark rises to the last order.
#[test]
fn curator_writer_ignores_the_mark_and_the_markers() {
    let zk = Zk::start_with_tick(TICK_MS);
    let url = zk.url("/q");
    let lc = with_query(&url, "&recipe=rwlock");
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    expect_status(&mut lc(&["lock", "--order", "5", "k", "--", "true"]), 0);
    assert!(zk.children("/q/k").contains(&"_c_lc-mark".to_string()));
    // Markers as a newer request leaves them (their targets long gone).
    let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
    for marker in [
        format!("/q/k/_c_lc-superseded-{uuid}-0000000090"),
        format!("/q/k/_c_lc-cancel-{uuid}-0000000091"),
    ] {
        zk.with_client(move |c| {
            Box::pin(async move {
                let options = zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all());
                c.create(&marker, b"lc-cli 1\nsource=x", &options)
                    .await
                    .expect("create a marker");
            })
        });
    }
    let script = |tag: &str, secs: f64| spans::script(&log, tag, secs);
    let first = lc(&[
        "lock",
        "--newest",
        "--order",
        "6",
        "k",
        "--source",
        "a",
        "-c",
        &script("a", 4.0),
    ])
    .spawn()
    .unwrap();
    let mut kids = spans::Kids(vec![first]);
    assert!(wait_until(Duration::from_secs(20), || deploy::started(
        &log, "a"
    )));
    let mut java = curator::peer(&zk.hosts(), "/q/k", Recipe::Write, 300, &log, "j");
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(java.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "waiting");
    }
    kids.0.push(java);
    // Queued behind `a` (or, on a slow machine, past it already).
    assert!(
        wait_until(Duration::from_secs(30), || zk
            .children("/q/k")
            .iter()
            .filter(|c| c.contains("__WRIT__"))
            .count()
            == 2
            || deploy::started(&log, "j")),
        "the Curator writer did not queue: {:?}",
        zk.children("/q/k")
    );
    kids.0.push(
        lc(&[
            "lock",
            "--newest",
            "--order",
            "7",
            "k",
            "--source",
            "b",
            "-c",
            &script("b", 0.2),
        ])
        .spawn()
        .unwrap(),
    );
    kids.all_succeed(Duration::from_secs(60));
    let spans = deploy::alone(&log);
    assert_eq!(spans::tags(&spans), ["a", "j", "b"], "{spans:#?}");
    assert_eq!(deploy::mark(&lc, "k"), Some(7));
}

/// The requests ZooKeeper receives (`mntr`'s `zk_packets_received`) for an
/// uncontended `lock --newest --order N k -- true` and a plain `lock k --
/// true`, the fewest of 5 rounds each: the queue rules add the two reads
/// of the mark, each sent with a listing the lock makes anyway (so no
/// round trip is added), and nothing else.
#[test]
fn round_trips_of_an_uncontended_lock() {
    let (zk, url) = start();
    let lc = at(&url);
    let received = || zk.mntr()["zk_packets_received"];
    assert!(wait_until(Duration::from_secs(20), || zk
        .mntr()
        .contains_key("zk_packets_received")));
    let count = |args: &[&str]| {
        let before = received();
        expect_status(&mut lc(args), 0);
        received() - before
    };
    count(&["lock", "k", "--", "true"]);
    let (mut plain, mut queued, mut cancel) = (f64::MAX, f64::MAX, f64::MAX);
    for n in 1..=5 {
        plain = plain.min(count(&["lock", "k", "--", "true"]));
        let order = n.to_string();
        let args = ["lock", "--newest", "--order", &order, "k", "--", "true"];
        queued = queued.min(count(&args));
        let args = [
            "lock",
            "--cancel-running",
            "--newest",
            "--order",
            &order,
            "k",
            "--",
            "true",
        ];
        cancel = cancel.min(count(&args));
    }
    eprintln!("requests: plain {plain}, --newest --order {queued}, with --cancel-running {cancel}");
    assert_eq!(queued - plain, 2.0, "plain {plain}, queued {queued}");
    assert_eq!(
        cancel - plain,
        3.0,
        "plain {plain}, with --cancel-running {cancel}"
    );
}

/// The queue node of `tag` under `dir` (lc-cli's data names its source).
fn node_of(zk: &Zk, dir: &str, tag: &str) -> Option<String> {
    zk.queue(dir).into_iter().find(|n| {
        zk.node(&format!("{dir}/{n}")).is_some_and(|(data, _)| {
            String::from_utf8_lossy(&data).ends_with(&format!("source={tag}"))
        })
    })
}

/// A superseded waiter whose lc-cli is frozen (SIGSTOP) leaves the line
/// all the same: its node is deleted by the newer request, which runs after
/// the holder; thawed once that one has ended, it exits superseded without
/// running, and deletes its marker. A `--newest` waiter whose node is deleted from outside
/// (reset by source) says so and does not call itself superseded.
#[test]
fn frozen_and_reset_waiters() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let (zk, url) = start();
    let lc = at(&url);
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let newest = ["--newest"];
    let holder = deploy::deploy(&lc, &log, "k", "holder", 1.5, 0, &newest);
    assert!(wait_until(Duration::from_secs(20), || deploy::started(
        &log, "holder"
    )));
    let frozen = deploy::deploy(&lc, &log, "k", "frozen", 0.1, 0, &newest);
    deploy::until_waiting(&lc, &log, "k", &frozen);
    let pid = Pid::from_raw(frozen_pid(&zk, "frozen"));
    kill(pid, Signal::SIGSTOP).unwrap();
    let newer = deploy::deploy(&lc, &log, "k", "newer", 1.0, 0, &newest);
    assert!(
        wait_until(Duration::from_secs(20), || node_of(&zk, "/q/k", "frozen")
            .is_none()),
        "the frozen waiter's node is still in line"
    );
    assert_eq!(holder.status(), Some(0), "{}", holder.stderr());
    assert_eq!(newer.status(), Some(0), "{}", newer.stderr());
    // Thawed after the newer request ended (within its own session
    // timeout): the marker is still there to say who.
    kill(pid, Signal::SIGCONT).unwrap();
    assert_eq!(
        frozen.status(),
        Some(deploy::SUPERSEDED),
        "{}",
        frozen.stderr()
    );
    assert!(frozen.stderr().contains("'newer'"), "{}", frozen.stderr());
    assert!(
        !zk.children("/q/k")
            .iter()
            .any(|c| c.starts_with("_c_lc-superseded-")),
        "the superseded waiter left its marker: {:?}",
        zk.children("/q/k")
    );
    assert_eq!(spans::tags(&deploy::alone(&log)), ["holder", "newer"]);

    // Reset by source: not superseded.
    let holder = deploy::deploy(&lc, &log, "k", "holder2", 1.5, 0, &newest);
    assert!(wait_until(Duration::from_secs(20), || deploy::started(
        &log, "holder2"
    )));
    let waiter = deploy::deploy(&lc, &log, "k", "gone", 0.1, 0, &newest);
    deploy::until_waiting(&lc, &log, "k", &waiter);
    expect_status(&mut lc(&["reset", "--source", "gone"]), 0);
    let status = waiter.status();
    assert_ne!(status, Some(deploy::SUPERSEDED), "{}", waiter.stderr());
    assert_ne!(status, Some(0), "{}", waiter.stderr());
    assert!(
        waiter.stderr().contains("was deleted"),
        "{}",
        waiter.stderr()
    );
    assert!(!deploy::started(&log, "gone"));
    assert_eq!(holder.status(), Some(0), "{}", holder.stderr());
}

/// The pid lc-cli wrote into the node of `tag` (its data's `pid=` line).
fn frozen_pid(zk: &Zk, tag: &str) -> i32 {
    let node = node_of(zk, "/q/k", tag).expect("the waiter's node");
    let (data, _) = zk.node(&format!("/q/k/{node}")).unwrap();
    String::from_utf8_lossy(&data)
        .lines()
        .find_map(|l| l.strip_prefix("pid=").map(|p| p.parse().unwrap()))
        .expect("a pid line")
}

/// `zk_partition`'s trials with `--newest --order` on both sides (the
/// holder order 1, the waiter order 2): the holder cut off from ZooKeeper
/// stops its command before its session can expire and the waiter's
/// starts; never two at once.
#[test]
fn partitioned_holder_with_newest_and_order() {
    use common::partition::{trial, trials};
    use common::proxy::Proxy;
    use common::timeline::OnTerm;
    // tickTime 300 ms: sessions of 0.6 s to 6 s.
    let zk = Zk::start_with_tick(300);
    let session = "4s";
    let kinds = [OnTerm::LogAndExit, OnTerm::Ignore];
    let rules = ["--newest", "--order"];
    trials("--newest --order, session 4s", &kinds, |n, kind| {
        let root = format!("/p{n}");
        let proxy = Proxy::start(zk.port);
        let through_proxy = format!("zk://{}{root}?session-timeout={session}", proxy.addr());
        trial(
            &proxy,
            kind,
            |script| {
                let mut cmd = common::lc_at(&through_proxy, &["--connect-timeout", "10s"]);
                cmd.arg("lock").args(rules).args(["1", "k", "-c", script]);
                cmd
            },
            |script| {
                let mut args = vec!["lock"];
                args.extend(rules);
                args.extend(["2", "k", "-c", script]);
                zk.lc_session(&root, session, &args)
            },
            || zk.queue(&format!("{root}/k")).len() == 2,
        )
    });
}
