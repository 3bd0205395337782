//! `keys --watch` (issue 46 item 3) against every backend's real server:
//! under tmux, a lock taken by another process shows within 2 s of its
//! grant (its command's own logged start) and is gone within 2 s of its
//! release (the command's logged end), and Ctrl-C gives the screen back as
//! it was; with `--json`, the `held` and `released` events come within the
//! same bounds.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::etcd::Etcd;
use common::pg::PgServer;
use common::redis::RedisServer;
use common::serve::Server;
use common::zk::Zk;

/// How late a change may show: the refresh (1 s) plus a listing.
const WITHIN: Duration = Duration::from_secs(2);

/// The command line of `cmd` as one shell word list (its environment's
/// changes first, through `env`).
fn shell_line(cmd: &Command) -> String {
    let q = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"));
    let mut words = vec!["env".to_string()];
    for (name, value) in cmd.get_envs() {
        match value {
            Some(v) => words.push(format!("{}={}", name.to_string_lossy(), q(v))),
            None => words.push(format!("-u {}", name.to_string_lossy())),
        }
    }
    words.push(q(cmd.get_program()));
    words.extend(cmd.get_args().map(q));
    words.join(" ")
}

/// A tmux server of the test's own (its own socket), one 160x40 window.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(script: &Path) -> Tmux {
        let socket = format!("lc-watch-{}", std::process::id());
        let tmux = Tmux { socket };
        let ok = tmux
            .cmd(&["new-session", "-d", "-s", "w", "-x", "160", "-y", "40"])
            .arg(format!("bash {}", script.display()))
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        tmux
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &self.socket, "-f", "/dev/null"]).args(args);
        cmd
    }

    fn screen(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-p", "-t", "w"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls the screen (bounded: `limit`) until `cond`; when it held.
    fn wait_for(&self, limit: Duration, cond: impl Fn(&str) -> bool) -> Option<SystemTime> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if cond(&self.screen()) {
                return Some(SystemTime::now());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

fn read_time(path: &Path) -> SystemTime {
    let text = std::fs::read_to_string(path).unwrap();
    let secs: f64 = text.trim().parse().unwrap();
    UNIX_EPOCH + Duration::from_secs_f64(secs)
}

/// A holder of `key` for 3 s that logs its command's start and end.
fn hold(lc: &dyn Fn(&[&str]) -> Command, key: &str, dir: &Path) -> std::process::Child {
    let script = format!(
        "date +%s.%N > {d}/start; sleep 3; date +%s.%N > {d}/end",
        d = dir.display()
    );
    lc(&["lock", key, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn late(seen: SystemTime, at: SystemTime) -> Duration {
    seen.duration_since(at).unwrap_or_default()
}

/// The scenario under tmux, for a backend reached by `lc`.
fn under_tmux(lc: &dyn Fn(&[&str]) -> Command) {
    let dir = tempfile::tempdir().unwrap();
    let key = "watch-deploy-prod";
    let script = dir.path().join("watch.sh");
    let watch = shell_line(&lc(&["keys", "--watch"]));
    std::fs::write(
        &script,
        format!("echo BEFORE-THE-WATCH\n{watch}\necho \"WATCH-ENDED $?\"\nsleep 60\n"),
    )
    .unwrap();
    let tmux = Tmux::start(&script);
    let up = tmux.wait_for(Duration::from_secs(15), |s| {
        s.contains("lc-cli keys --watch on") && s.contains("no key is held")
    });
    assert!(up.is_some(), "the watch never drew:\n{}", tmux.screen());
    let mut holder = hold(lc, key, dir.path());
    let shown = tmux.wait_for(Duration::from_secs(15), |s| s.contains(key));
    let shown = shown.unwrap_or_else(|| panic!("{key} never shown:\n{}", tmux.screen()));
    let start = read_time(&dir.path().join("start"));
    eprintln!("shown {:?} after the grant", late(shown, start));
    assert!(
        late(shown, start) < WITHIN,
        "shown too late:\n{}",
        tmux.screen()
    );
    let gone = tmux.wait_for(Duration::from_secs(15), |s| !s.contains(key));
    let gone = gone.unwrap_or_else(|| panic!("{key} never gone:\n{}", tmux.screen()));
    assert!(holder.wait().unwrap().success());
    let end = read_time(&dir.path().join("end"));
    eprintln!("gone {:?} after the release", late(gone, end));
    assert!(late(gone, end) < WITHIN, "gone too late");
    assert!(tmux
        .cmd(&["send-keys", "-t", "w", "C-c"])
        .status()
        .unwrap()
        .success());
    let back = tmux.wait_for(Duration::from_secs(10), |s| s.contains("WATCH-ENDED"));
    let screen = tmux.screen();
    assert!(back.is_some(), "the watch did not end on Ctrl-C:\n{screen}");
    assert!(screen.contains("WATCH-ENDED 0"), "{screen}");
    assert!(
        screen.contains("BEFORE-THE-WATCH"),
        "screen not restored:\n{screen}"
    );
    assert!(
        !screen.contains("lc-cli keys --watch on"),
        "screen not restored:\n{screen}"
    );
}

/// The `--json` scenario: one `held` and one `released` event for the hold,
/// each within the bound, and nothing else about the key.
fn as_events(lc: &dyn Fn(&[&str]) -> Command) {
    let dir = tempfile::tempdir().unwrap();
    let key = "watch-events";
    let mut watch = lc(&["keys", "--watch", "--json", "--interval", "500ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if tx.send((SystemTime::now(), v)).is_err() {
                return;
            }
        }
    });
    // The watch is up once its first look is done: give it a second.
    std::thread::sleep(Duration::from_secs(1));
    let mut holder = hold(lc, key, dir.path());
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen
        .iter()
        .filter(|(_, v): &&(_, serde_json::Value)| v["key"] == key)
        .count()
        < 2
        && Instant::now() < deadline
    {
        if let Ok(e) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(e);
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(holder.wait().unwrap().success());
    let ours: Vec<_> = seen.iter().filter(|(_, v)| v["key"] == key).collect();
    let events: Vec<&str> = ours
        .iter()
        .map(|(_, v)| v["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["held", "released"], "{seen:?}");
    let start = read_time(&dir.path().join("start"));
    let end = read_time(&dir.path().join("end"));
    eprintln!(
        "held event {:?} after the grant, released {:?} after the release",
        late(ours[0].0, start),
        late(ours[1].0, end)
    );
    assert!(late(ours[0].0, start) < WITHIN);
    assert!(late(ours[1].0, end) < WITHIN);
    assert!(ours[0].1["at"].is_string() && ours[0].1["source"].is_string());
}

#[test]
fn builtin_under_tmux() {
    let server = Server::start();
    under_tmux(&|args| server.lc(args));
}

#[test]
fn builtin_as_events() {
    let server = Server::start();
    as_events(&|args| server.lc(args));
}

#[test]
fn redis_under_tmux() {
    let node = RedisServer::start();
    let url = node.url();
    under_tmux(&|args| common::lc_at(&url, args));
}

#[test]
fn redis_as_events() {
    let node = RedisServer::start();
    let url = node.url();
    as_events(&|args| common::lc_at(&url, args));
}

#[test]
fn etcd_under_tmux() {
    let etcd = Etcd::start();
    under_tmux(&|args| etcd.lc("", args));
}

#[test]
fn zookeeper_under_tmux() {
    let zk = Zk::start();
    under_tmux(&|args| zk.lc("/lc-watch", args));
}

#[test]
fn postgres_under_tmux() {
    let pg = PgServer::start();
    under_tmux(&|args| pg.lc(args));
}

#[test]
fn a_refresh_faster_than_100ms_is_refused() {
    let server = Server::start();
    let out = common::expect_status(
        server
            .lc(&["keys", "--watch", "--interval", "10ms"])
            .stdin(Stdio::null()),
        64,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("10ms is below 100ms"), "{err}");
}
