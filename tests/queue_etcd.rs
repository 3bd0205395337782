//! Deploy queues on etcd (issue 44): the scenarios of `common::deploy`
//! against a real single-member etcd that keeps its data dir, restarted
//! (SIGTERM, the same command line) where a scenario asks; the state range
//! `NAME.lc-cli/` that etcdctl does not look at; and the requests an
//! uncontended lock with `--newest --order` sends against a plain one,
//! counted by etcd's own gRPC metrics.

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::deploy;
use common::etcd::Etcd;
use common::redis::free_port;
use common::wait_until;

/// A single member on fixed ports and its own data dir, that can be
/// stopped and started again as it was.
struct Member {
    port: u16,
    peer: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Member {
    fn start() -> Member {
        let mut m = Member {
            port: free_port(),
            peer: free_port(),
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        m.up();
        m
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn up(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(self.data())
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (apt-get install etcd-server)");
        self.child = Some(child);
        let healthy = wait_until(Duration::from_secs(20), || {
            self.ctl(&["endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        assert!(
            healthy,
            "etcd did not become healthy: {}",
            std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
        );
    }

    fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }

    /// Stopped with SIGTERM and started again on the same ports and data.
    fn restart(&mut self) {
        let t = Instant::now();
        self.down();
        self.up();
        eprintln!("etcd restarted in {:?}", t.elapsed());
    }

    fn ctl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .args(["--endpoints", &format!("127.0.0.1:{}", self.port)])
            .args(args);
        cmd
    }

    fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// lc-cli against `url`, as the scenarios call it.
fn at(url: &str) -> impl Fn(&[&str]) -> Command + '_ {
    move |args: &[&str]| common::lc_at(url, args)
}

const KEY: &str = "deploy-prod";

#[test]
fn newest_wins() {
    let e = Member::start();
    let url = e.url();
    let delays = deploy::newest_wins(&at(&url), KEY);
    eprintln!("superseded after (ms): {delays:.1?}");
}

#[test]
fn orders_without_newest() {
    let e = Member::start();
    deploy::orders(&at(&e.url()), KEY, false, None);
}

#[test]
fn orders_with_newest() {
    let e = Member::start();
    deploy::orders(&at(&e.url()), KEY, true, None);
}

#[test]
fn orders_across_a_restart() {
    let mut e = Member::start();
    let url = e.url();
    deploy::orders(&at(&url), KEY, false, Some(&mut || e.restart()));
}

#[test]
fn orders_with_newest_across_a_restart() {
    let mut e = Member::start();
    let url = e.url();
    deploy::orders(&at(&url), KEY, true, Some(&mut || e.restart()));
}

#[test]
fn mark_rules_across_a_restart() {
    let mut e = Member::start();
    let url = e.url();
    deploy::mark_rules(&at(&url), KEY, Some(&mut || e.restart()));
}

#[test]
fn cancel_running() {
    let e = Member::start();
    let gaps = deploy::cancel_running(&at(&e.url()), KEY, 5);
    eprintln!("newer start after the older end (ms): {gaps:.1?}");
}

#[test]
fn no_cancel_without_the_flag() {
    let e = Member::start();
    deploy::no_cancel_without_the_flag(&at(&e.url()), KEY);
}

#[test]
fn pipelines_across_a_restart() {
    let mut e = Member::start();
    let url = e.url();
    deploy::pipelines_across_a_restart(&at(&url), KEY, &mut || e.restart());
}

/// The mark and the notices live in `NAME.lc-cli/`, outside the range
/// `etcdctl lock NAME` waits on: etcdctl takes the key at once after an
/// lc-cli run left a mark, and lc-cli after etcdctl; `keys` shows the mark
/// and the holder's fields; `reset` leaves the mark.
#[test]
fn etcdctl_does_not_see_the_state() {
    let e = Etcd::start();
    let lc = |args: &[&str]| e.lc("", args);
    let ok = |mut c: Command| {
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        out
    };
    ok(lc(&["lock", "--order", "5", "--newest", KEY, "-c", "true"]));
    assert_eq!(
        e.keys(&format!("{KEY}.lc-cli/")),
        [format!("{KEY}.lc-cli/mark")]
    );
    // The hold's history entry is in the history's own range.
    assert_eq!(e.keys(&format!(".lc-cli-history/{KEY}/")).len(), 1);
    assert!(e.keys(&format!("{KEY}/")).is_empty());
    let t = Instant::now();
    let mut ctl = e.ctl(&["lock", KEY, "true"]);
    ctl.stdout(Stdio::null());
    let out = ctl.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "etcdctl waited");
    // The holder's fields are in its key's value.
    let mut holder = lc(&[
        "lock", "--order", "6", "--note", "v6", KEY, "-c", "sleep 30",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let value = || {
        let out = e
            .ctl(&["get", "--prefix", &format!("{KEY}/")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(
        wait_until(Duration::from_secs(10), || value()
            .contains(r#""fields":"note=v6\norder=6\n""#)),
        "{}",
        value()
    );
    ok(lc(&["reset", KEY]));
    let _ = holder.wait();
    let out = ok(lc(&["mark", KEY]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5");
    assert!(e.keys(&format!("{KEY}/")).is_empty());
}

/// Names that would reach into another lock's state range are refused.
#[test]
fn a_name_ending_in_the_state_suffix_is_refused() {
    let e = Etcd::start();
    let out = e
        .lc("", &["lock", "deploy.lc-cli", "-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

/// gRPC requests etcd counted for its client port (`/metrics`), by method.
fn requests(port: u16) -> std::collections::BTreeMap<String, u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("grpc_server_started_total{") else {
            continue;
        };
        let Some(method) = rest
            .split("grpc_method=\"")
            .nth(1)
            .and_then(|m| m.split('"').next())
        else {
            continue;
        };
        let n: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        *out.entry(method.to_string()).or_insert(0) += n;
    }
    out
}

/// The requests one lc-cli run sent, by method (the counters' growth).
fn sent_by(e: &Etcd, args: &[&str]) -> std::collections::BTreeMap<String, u64> {
    let before = requests(e.port);
    let out = e.lc("", args).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let after = requests(e.port);
    after
        .into_iter()
        .map(|(m, n)| {
            let d = n - before.get(&m).copied().unwrap_or(0);
            (m, d)
        })
        .filter(|(_, d)| *d > 0)
        .collect()
}

/// An uncontended `lock --newest --order N k -- true` sends the requests a
/// plain `lock k -- true` sends: the mark is read in the transaction that
/// puts the key, raised in the one that deletes it.
#[test]
fn round_trips_of_an_uncontended_lock() {
    let e = Etcd::start();
    // Warm up: the mark exists from here on.
    sent_by(&e, &["lock", "--newest", "--order", "1", KEY, "-c", "true"]);
    let plain = sent_by(&e, &["lock", KEY, "-c", "true"]);
    let queued = sent_by(&e, &["lock", "--newest", "--order", "2", KEY, "-c", "true"]);
    eprintln!("plain: {plain:?}\nnewest+order: {queued:?}");
    let unary = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter()
            .filter(|(k, _)| !matches!(k.as_str(), "LeaseKeepAlive" | "Watch"))
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    assert_eq!(
        unary(&queued),
        unary(&plain),
        "plain {plain:?}, queued {queued:?}"
    );
    let out = e.lc("", &["mark", KEY]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2");
}

/// A superseded waiter leaves the line even when its lc-cli is frozen: the
/// newer request deletes its key, so it is never granted; woken, it exits
/// superseded (79), naming the newer one, without running its command.
#[test]
fn a_frozen_superseded_waiter_never_runs() {
    use nix::sys::signal::{kill, Signal};
    let e = Etcd::start();
    let lc = |args: &[&str]| e.lc("", args);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let holder = deploy::deploy(&lc, &log, KEY, "holder", 1.5, 0, &["--newest"]);
    assert!(wait_until(Duration::from_secs(10), || deploy::started(
        &log, "holder"
    )));
    let stderr = dir.path().join("w.stderr");
    let script = common::spans::script(&log, "w", 0.1);
    let mut w = lc(&["lock", "--newest", KEY, "--source", "w", "-c", &script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || deploy::is_waiting(
        &lc, KEY, "w"
    )));
    let pid = nix::unistd::Pid::from_raw(w.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let n = deploy::deploy(&lc, &log, KEY, "n", 0.1, 0, &["--newest"]);
    assert_eq!(holder.status(), Some(0), "{}", holder.stderr());
    assert_eq!(n.status(), Some(0), "{}", n.stderr());
    kill(pid, Signal::SIGCONT).unwrap();
    let status = w.wait().unwrap().code();
    let said = std::fs::read_to_string(&stderr).unwrap();
    assert_eq!(status, Some(deploy::SUPERSEDED), "{said}");
    assert!(said.contains("'n'"), "{said}");
    let spans = deploy::alone(&log);
    assert_eq!(common::spans::tags(&spans), ["holder", "n"]);
}

/// A `--newest` waiter whose key is deleted by `reset --source` (no
/// notice) is told apart from a superseded one: it exits 76, not 79.
#[test]
fn a_reset_waiter_is_not_superseded() {
    let e = Etcd::start();
    let lc = |args: &[&str]| e.lc("", args);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let holder = deploy::deploy(&lc, &log, KEY, "holder", 1.5, 0, &["--newest"]);
    assert!(wait_until(Duration::from_secs(10), || deploy::started(
        &log, "holder"
    )));
    let w = deploy::deploy(&lc, &log, KEY, "w", 0.1, 0, &["--newest"]);
    deploy::until_waiting(&lc, &log, KEY, &w);
    let out = lc(&["reset", "--source", "w"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let (status, _) = w.wait(Duration::from_secs(10));
    assert_eq!(status, Some(76), "{}", w.stderr());
    assert!(!w.stderr().contains("superseded"), "{}", w.stderr());
    assert_eq!(holder.status(), Some(0), "{}", holder.stderr());
    assert!(!deploy::started(&log, "w"));
}

/// The partition test of plain locks (`etcd_loss`), with `--newest
/// --order`: the holder's path to etcd goes silent; its command is gone
/// before the next request (a newer order, straight to etcd) starts its
/// own, whatever the command does with SIGTERM.
#[test]
fn a_frozen_network_stops_a_newest_holder_before_the_next_runs() {
    use common::partition::{trial, trials};
    use common::proxy::Proxy;
    use common::timeline::OnTerm;
    let e = Etcd::start();
    let direct = format!("etcd://{}", e.endpoint());
    let kinds = [OnTerm::LogAndExit, OnTerm::SlowExit, OnTerm::Ignore];
    trials("etcd ttl 4s, --newest --order", &kinds, |n, kind| {
        let key = format!("part{n}");
        let proxy = Proxy::start(e.port);
        let through_proxy = format!("etcd://{}?ttl=4s", proxy.addr());
        trial(
            &proxy,
            kind,
            |script| {
                common::lc_at(
                    &through_proxy,
                    &["lock", "--newest", "--order", "1", &key, "-c", script],
                )
            },
            |script| {
                common::lc_at(
                    &direct,
                    &["lock", "--newest", "--order", "2", &key, "-c", script],
                )
            },
            || e.keys(&format!("{key}/")).len() == 2,
        )
    });
}
