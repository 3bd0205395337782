//! Issue 45 item 2 on the built-in server (docs/fleet-slots.md): a
//! `--limit N` grant tells its command its slot in `LC_SLOT`, `--slots
//! a,b,c` the slot's name, through the real binary against a real `lc-cli
//! serve`. Judged from the commands' own logs (their start and end, their
//! `LC_SLOT` and `LC_LOCK_TOKEN`) and from `keys --json`:
//!
//! - 12 contenders on `--slots db1,db2,db3` (and on `--limit 3`): at most
//!   one holder per slot at any instant, every slot used, granted in the
//!   order they arrived (each seen queued or granted by the server before
//!   the next is started; the grant order is read from the fencing tokens,
//!   which grow with each grant);
//! - a SIGKILLed holder's slot is granted again, once its session is freed
//!   (the reclaim grace), while the other holder keeps its own;
//! - with `--data`, slots survive restarts: a kept hold keeps slot 0, the
//!   next holder gets 1, a running holder reclaims its slot after the
//!   restart and the next gets the slot left;
//! - a server that does not name the feature `slots` in its Hello answer
//!   (an `lc-cli serve` from before slots, played here by a fake one that
//!   grants) gets `--slots` refused in one line (76), the hold given back.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::slots::{check_slots, runs, script, Run};
use common::spans::Kids;
use common::*;

/// How long any one wait of these tests may take (a loaded machine).
const LIMIT: Duration = Duration::from_secs(30);

/// Whether the server has logged `source`'s request for `key`: queued,
/// or granted at once.
fn arrived(server: &Server, key: &str, source: &str) -> bool {
    let (k, s) = (format!("'{key}'"), format!("source '{source}'"));
    server.logged(&["queue ", &k, &s]) || server.logged(&["grant ", &k, &s])
}

/// 12 contenders, each started once the server has the one before it in
/// line, each holding 1 s: their logs.
fn contend(server: &Server, key: &str, mode: &[&str]) -> Vec<Run> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log_s = log.to_str().unwrap().to_string();
    let mut kids = Kids(Vec::new());
    for i in 0..12 {
        let source = format!("{key}-c{i}");
        let mut args = vec!["lock", "--source", &source];
        args.extend_from_slice(mode);
        let sc = script(&log_s, i);
        args.extend_from_slice(&[key, "-c", &sc]);
        kids.0.push(
            server
                .lc(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        assert!(
            wait_until(LIMIT, || arrived(server, key, &source)),
            "{source} never arrived:\n{}",
            server.log()
        );
    }
    assert!(
        wait_until(LIMIT, || runs(&log).len() == 12),
        "{:?}",
        runs(&log)
    );
    for k in kids.0.iter_mut() {
        assert!(k.wait().unwrap().success());
    }
    runs(&log)
}

/// At most one holder per slot at any instant, every slot used, and the
/// grants in arrival order.
fn check(runs: &[Run], slots: &[&str]) {
    assert_eq!(runs.len(), 12, "{runs:?}");
    check_slots(runs, slots);
    let mut by_token: Vec<&Run> = runs.iter().collect();
    by_token.sort_by_key(|r| r.token);
    let order: Vec<usize> = by_token.iter().map(|r| r.i).collect();
    assert_eq!(order, (0..12).collect::<Vec<_>>(), "arrival order lost");
    // The first three found every slot free: 0, 1, 2 in turn.
    let first: Vec<&str> = by_token[..3].iter().map(|r| r.slot.as_str()).collect();
    assert_eq!(first, slots, "{runs:?}");
}

#[test]
fn named_slots_one_holder_each() {
    let server = Server::start();
    let runs = contend(&server, "pool", &["--slots", "db1,db2,db3"]);
    check(&runs, &["db1", "db2", "db3"]);
    // history names each ended hold's slot (the index the server gave:
    // the pool's names stay with the client).
    let out = expect_status(&mut server.lc(&["history", "pool", "--json"]), 0);
    let mut told: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|e| e["slot"].as_str().unwrap_or("none").to_string())
        .collect();
    assert_eq!(told.len(), runs.len(), "{told:?}");
    told.sort();
    told.dedup();
    assert_eq!(told, ["0", "1", "2"]);
    let table = expect_status(&mut server.lc(&["history", "pool"]), 0);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("GRANTED\tSOURCE\tSLOT\t"), "{table}");
    // So does keys, for a hold kept in a pool.
    expect_status(&mut server.lc(&["lock", "--slots", "db1,db2", "kept"]), 0);
    let out = expect_status(&mut server.lc(&["keys", "kept", "--json"]), 0);
    let k: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&k["slot"], &k["fields"]["slot"]),
        (&"0".into(), &"0".into()),
        "{k}"
    );
    let runs = contend(&server, "pool3", &["--limit", "3"]);
    check(&runs, &["0", "1", "2"]);
    // --limit that disagrees with --slots: a usage error (64).
    let out = server
        .lc(&["lock", "--slots", "a,b", "--limit", "3", "k", "-c", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    // A pool of one name is an exclusive lock: its holder has that slot.
    let out = expect_status(
        &mut server.lc(&["lock", "--slots", "solo", "one", "-c", "echo $LC_SLOT"]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "solo");
}

/// Each hold of `key` that `keys --json` lists: (source, slot).
fn slots_of(lc: &dyn Fn(&[&str]) -> Command, key: &str) -> Vec<(String, Option<u64>)> {
    let out = expect_status(&mut lc(&["keys", "--json"]), 0);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|k| k["key"] == key)
        .map(|k| {
            let slot = k["fields"]["slot"].as_str().map(|s| s.parse().unwrap());
            (k["source"].as_str().unwrap().to_string(), slot)
        })
        .collect()
}

/// A holder of `key` (`--limit 2`, source `source`) that writes its
/// LC_SLOT to `out` and then sleeps.
fn sleeper(lc: &dyn Fn(&[&str]) -> Command, key: &str, source: &str, out: &str) -> Child {
    let sc = format!("echo $LC_SLOT > {out}; sleep 60");
    let mut cmd = lc(&["lock", "--limit", "2", "--source", source, key, "-c", &sc]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd.spawn().unwrap()
}

fn read_slot(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.ends_with('\n').then(|| text.trim().to_string())
}

#[test]
fn a_killed_holders_slot_is_granted_again() {
    let server = Serve::new().args(&["--reclaim-grace", "1s"]).start();
    let lc = |args: &[&str]| server.lc(args);
    let dir = tempfile::tempdir().unwrap();
    let file = |n: &str| dir.path().join(n);
    let path = |n: &str| file(n).to_str().unwrap().to_string();
    let mut kids = Kids(vec![sleeper(&lc, "k2", "a", &path("a"))]);
    assert!(wait_until(LIMIT, || read_slot(&file("a")).is_some()));
    kids.0.push(sleeper(&lc, "k2", "b", &path("b")));
    assert!(wait_until(LIMIT, || read_slot(&file("b")).is_some()));
    assert_eq!(read_slot(&file("a")).as_deref(), Some("0"));
    assert_eq!(read_slot(&file("b")).as_deref(), Some("1"));
    let mut held = slots_of(&lc, "k2");
    held.sort();
    assert_eq!(
        held,
        [("a".to_string(), Some(0)), ("b".to_string(), Some(1))]
    );
    // A third waits; the first holder's lc-cli is SIGKILLed: its session
    // is freed after the grace, and its slot goes to the third.
    kids.0.push(sleeper(&lc, "k2", "c", &path("c")));
    server.wait_queued("k2", "c");
    kids.0[0].kill().unwrap();
    kids.0[0].wait().unwrap();
    assert!(wait_until(LIMIT, || read_slot(&file("c")).is_some()));
    assert_eq!(read_slot(&file("c")).as_deref(), Some("0"));
    let mut held = slots_of(&lc, "k2");
    held.sort();
    assert_eq!(
        held,
        [("b".to_string(), Some(1)), ("c".to_string(), Some(0))]
    );
}

/// A server with `--data` in a directory of its own, restarted with the
/// same command line.
struct Restartable {
    serve: Serve,
    server: Server,
    _dir: tempfile::TempDir,
}

impl Restartable {
    fn start() -> Restartable {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("lc.log");
        let serve = Serve::new().args(&["--data", data.to_str().unwrap()]);
        let server = serve.clone().port_pair().start();
        let serve = serve.listen(&server.addr.to_string());
        Restartable {
            serve,
            server,
            _dir: dir,
        }
    }

    fn lc(&self, args: &[&str]) -> Command {
        let mut cmd = lc_at(&self.server.addr.to_string(), &["--connect-timeout", "10s"]);
        cmd.args(args);
        cmd
    }

    /// SIGTERM, then the same command line again.
    fn restart(&mut self) {
        let status = self.server.stop_with(libc::SIGTERM, LIMIT);
        assert!(status.is_some(), "serve did not stop on SIGTERM");
        self.server = self.serve.clone().restart();
    }
}

#[test]
fn slots_survive_a_restart_with_data() {
    let mut s = Restartable::start();
    // A kept hold without a command: slot 0, in the log.
    expect_status(
        &mut s.lc(&["lock", "--limit", "3", "--source", "kept", "-q", "r3"]),
        0,
    );
    assert_eq!(slots_of(&|a| s.lc(a), "r3"), [("kept".into(), Some(0))]);
    s.restart();
    assert_eq!(slots_of(&|a| s.lc(a), "r3"), [("kept".into(), Some(0))]);
    // The next holder gets slot 1.
    let out = expect_status(
        &mut s.lc(&["lock", "--limit", "3", "r3", "-c", "echo $LC_SLOT"]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    // A running holder (slot 1) across a restart: it reclaims its hold,
    // keeps its slot, and the next gets slot 2.
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let sc = format!("echo $LC_SLOT > {}; sleep 60", run.display());
    let mut kids = Kids(vec![s
        .lc(&["lock", "--limit", "3", "--source", "run", "r3", "-c", &sc])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()]);
    assert!(wait_until(LIMIT, || read_slot(&run).is_some()));
    assert_eq!(read_slot(&run).as_deref(), Some("1"));
    s.restart();
    let mut held = slots_of(&|a| s.lc(a), "r3");
    held.sort();
    assert_eq!(held, [("kept".into(), Some(0)), ("run".into(), Some(1))]);
    let out = expect_status(
        &mut s.lc(&["lock", "--limit", "3", "r3", "-c", "echo $LC_SLOT"]),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2");
    // The running holder is still there, under its own session.
    assert!(kids.0[0].try_wait().unwrap().is_none(), "the holder ended");
    // (Its reclaim may be logged a moment after the grant above.)
    s.server
        .wait_for("reclaimed the session hold of 'r3'", 1, LIMIT);
    expect_status(&mut s.lc(&["unlock", "r3"]), 0);
}

/// A fake `lc-cli serve` from before slots: its Hello answer names
/// `secret queues`, it grants a kept hold (`=`, a token, grace 0, an empty
/// secret field) and answers `+` to anything after (the release), which
/// it notes.
struct OldServer {
    addr: String,
    released: Arc<Mutex<Vec<u8>>>,
}

impl OldServer {
    fn start() -> OldServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let released = Arc::new(Mutex::new(Vec::new()));
        let seen = released.clone();
        std::thread::spawn(move || {
            // At most a few connections per test: a bounded loop.
            for conn in listener.incoming().take(16) {
                let Ok(mut conn) = conn else { return };
                let seen = seen.clone();
                std::thread::spawn(move || serve_old(&mut conn, &seen));
            }
        });
        OldServer { addr, released }
    }
}

/// One connection of [`OldServer`]: the Hello, then one request.
fn serve_old(conn: &mut TcpStream, released: &Mutex<Vec<u8>>) {
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    // Hello: [16][len][client][len][token], then the request's action byte.
    let hello_len = |g: &[u8]| -> Option<usize> {
        let a = *g.get(1)? as usize;
        let b = *g.get(2 + a)? as usize;
        Some(3 + a + b)
    };
    let request_at = loop {
        if let Some(n) = hello_len(&got).filter(|&n| got.len() > n) {
            break n;
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    };
    let version = b"0.1.0 secret queues";
    let mut hello = vec![b'+', version.len() as u8];
    hello.extend_from_slice(version);
    let _ = conn.write_all(&hello);
    let action = got[request_at];
    released.lock().unwrap().push(action);
    match action {
        // A kept mode lock (14): granted, token 77, grace 0, no secret.
        14 => {
            let _ = conn.write_all(&old_grant(0, &[]));
        }
        // A session mode lock (12): granted, token 78, grace 10 s, a
        // secret; then heartbeats echoed until the release (11), `+`.
        12 => {
            let _ = conn.write_all(&old_grant(10_000, &[9; 16]));
            loop {
                let n = match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if buf[..n].contains(&11) {
                    released.lock().unwrap().push(11);
                    let _ = conn.write_all(b"+");
                    break;
                }
                let dots = buf[..n].iter().filter(|&&b| b == b'.').count();
                let _ = conn.write_all(&b".".repeat(dots));
            }
        }
        _ => {
            let _ = conn.write_all(b"+");
        }
    }
    // Whatever else comes, until the client closes.
    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
}

/// A grant as a server before slots sends it on a connection that took
/// `secret`: `=`, a token, the grace (ms), the secret field.
fn old_grant(grace_ms: u32, secret: &[u8]) -> Vec<u8> {
    let mut grant = vec![b'='];
    grant.extend_from_slice(&(77 + u64::from(grace_ms > 0)).to_be_bytes());
    grant.extend_from_slice(&grace_ms.to_be_bytes());
    grant.push(secret.len() as u8);
    grant.extend_from_slice(secret);
    grant
}

#[test]
fn a_server_before_slots_has_them_refused() {
    let old = OldServer::start();
    let line = expect_error_line(
        &mut lc_at(&old.addr, &["lock", "--slots", "db1,db2", "pool"]),
        76,
    );
    assert!(
        line.contains("cannot take --slots: the service did not say which slot it granted"),
        "{line}"
    );
    // The grant (14) was given back: a SessionRelease (11) under its token.
    let actions = old.released.lock().unwrap().clone();
    assert_eq!(actions, [14, 11], "{actions:?}");
    // --limit N alone still runs there, without LC_SLOT, and releases.
    let out = expect_status(
        &mut lc_at(
            &old.addr,
            &[
                "lock",
                "--limit",
                "2",
                "pool",
                "-c",
                "echo ${LC_SLOT:-none}",
            ],
        ),
        0,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "none");
    let actions = old.released.lock().unwrap().clone();
    assert_eq!(actions, [14, 11, 12, 11], "{actions:?}");
}
