//! Kept holds that expire (`lc-cli lock KEY --expire DURATION`), through the
//! real binary against real servers: on the built-in server, Redis,
//! ZooKeeper (with TTL nodes) and etcd the hold frees itself at its
//! deadline and the next waiter's command starts then, not before (from the
//! commands' own logged times); `keys` shows the deadline; `unlock` before
//! it works. The built-in server keeps the deadline across a SIGKILL and a
//! restart from its log, and frees at start-up a hold whose deadline passed
//! while it was down. Refused with one line where it cannot be done:
//! PostgreSQL, a reference server, ZooKeeper without extended types, and
//! with a command.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, UNIX_EPOCH};

use common::timeline::{now_ns, Timeline};
use common::*;

/// The hold's TTL in the scenario.
const TTL: Duration = Duration::from_secs(2);

/// How late after its deadline a freed key may reach the waiter: the
/// service's own check (Redis: the head waiter's poll, about 0.5 s; etcd:
/// its lease check, about 0.5 s, and whole seconds; ZooKeeper: the reaper,
/// every 100 ms here) plus a loaded machine. Only a bound on "it did
/// expire", not a speed check.
const LATE: Duration = Duration::from_secs(8);

/// A clock step between lc-cli's reading and the command's (both the
/// system's wall clock) is below this.
const CLOCK: Duration = Duration::from_millis(50);

/// How long a server's log line may take to reach the test.
const LOG: Duration = Duration::from_secs(10);

type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

fn ns(d: Duration) -> i128 {
    d.as_nanos() as i128
}

fn json_keys(lc: Lc) -> Vec<serde_json::Value> {
    let out = expect_status(&mut lc(&["keys", "--json"]), 0);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn entry(lc: Lc, key: &str) -> Option<serde_json::Value> {
    json_keys(lc).into_iter().find(|k| k["key"] == key)
}

/// `expires` of a `keys --json` entry, as ns since the epoch.
fn expires_ns(e: &serde_json::Value) -> i128 {
    let at =
        humantime::parse_rfc3339(e["expires"].as_str().unwrap_or_else(|| panic!("{e}"))).unwrap();
    at.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128
}

/// `lock KEY --expire TTL`: exit 0 and the line that says when it expires.
/// The moments just before and after it ran.
fn keep(lc: Lc, key: &str, ttl: &str) -> (i128, i128) {
    let before = now_ns();
    let out = expect_status(&mut lc(&["lock", key, "--expire", ttl]), 0);
    let after = now_ns();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("'{key}' is held until '"))
            && err.contains("or until it expires at ")
            && err.trim().lines().count() == 1,
        "{err}"
    );
    (before, after)
}

/// The whole scenario on one backend: the hold expires at its deadline and
/// the waiter behind it starts then; `keys` shows the deadline; `unlock`
/// before the deadline frees it.
fn expires_and_hands_on(lc: Lc) {
    let dir = tempfile::tempdir().unwrap();
    let tl = Timeline::new(dir.path());
    let (before, after) = keep(lc, "maint", "2s");
    let e = entry(lc, "maint").expect("the kept hold is listed");
    assert_eq!(e["kept"], true, "{e}");
    let at = expires_ns(&e);
    assert!(
        at >= before + ns(TTL) - ns(Duration::from_millis(1100))
            && at <= after + ns(TTL) + ns(Duration::from_millis(1100)),
        "expires {at}, lock ran {before}..{after}: {e}"
    );
    let left = e["expires_in_ms"].as_u64().unwrap();
    assert!(left <= 3_000, "{e}");
    // The EXPIRES column of the table, relative.
    let table = expect_status(&mut lc(&["keys"]), 0);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.lines().next().unwrap().contains("EXPIRES"), "{table}");
    // A waiter in line behind it: its command starts once the hold expired.
    let waiter = lc(&["lock", "maint", "-c", &tl.one_shot("w")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, err) = finish_within(TTL + LATE + Duration::from_secs(5), waiter);
    assert_eq!(code, Some(0), "{err}");
    let (started, _) = tl.start_of("w").expect("the waiter's command ran");
    assert!(
        started >= before + ns(TTL) - ns(CLOCK),
        "the waiter started {:.3} s after the kept lock was asked for, before its {TTL:?} ran out",
        (started - before) as f64 / 1e9
    );
    assert!(
        started <= after + ns(TTL + LATE),
        "the waiter started {:.3} s after the hold was taken",
        (started - after) as f64 / 1e9
    );
    eprintln!(
        "the waiter's command started {:.3} s after the kept lock was asked for ({:.3} s after it was granted), TTL {TTL:?}",
        (started - before) as f64 / 1e9,
        (started - after) as f64 / 1e9
    );
    // Freed: nobody holds it now.
    assert!(entry(lc, "maint").is_none());

    // `unlock` before the deadline frees it at once.
    keep(lc, "early", "30s");
    expect_status(&mut lc(&["unlock", "early"]), 0);
    assert!(entry(lc, "early").is_none());
    expect_status(&mut lc(&["trylock", "early", "--", "true"]), 0);

    // `trylock KEY --expire` keeps an expiring hold too.
    let out = expect_status(&mut lc(&["trylock", "try", "--expire", "30s"]), 0);
    assert!(String::from_utf8_lossy(&out.stderr).contains("or until it expires at"));
    let e = entry(lc, "try").expect("listed");
    assert!(e["expires_in_ms"].as_u64().unwrap() <= 30_000, "{e}");
    expect_status(&mut lc(&["trylock", "try", "--", "true"]), 1);
    expect_status(&mut lc(&["unlock", "try"]), 0);
}

#[test]
fn builtin_server() {
    let server = Serve::new().port_pair().start();
    let url = server.url();
    let lc = |args: &[&str]| lc_at(&url, args);
    expires_and_hands_on(&lc);
    server.wait_for("kept hold of 'maint'", 1, LOG);
    assert!(
        server.logged(&["kept hold of 'maint'", "expired at its deadline"]),
        "{}",
        server.log()
    );
}

/// The deadline is in the log with the grant: a server SIGKILLed and
/// restarted before it still holds the key and frees it at the same
/// deadline; one restarted after it frees it before it opens its port.
#[test]
fn builtin_server_keeps_the_deadline_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("locks.wal");
    let data = data.to_str().unwrap().to_string();
    let serve = Serve::new().args(&["--data", &data]);
    let mut server = serve.clone().port_pair().start();
    let listen = server.addr.to_string();
    let url = server.url();
    let lc = |args: &[&str]| lc_at(&url, args);

    // Before the deadline.
    let (before, _) = keep(&lc, "k", "3s");
    let at = expires_ns(&entry(&lc, "k").unwrap());
    server.kill();
    server = serve.clone().listen(&listen).restart();
    // Its log lines come on stderr, maybe after the banner was read.
    server.wait_for("restored 'k' ", 1, LOG);
    assert!(
        server.logged(&["restored 'k' ", "expires at"]),
        "{}",
        server.log()
    );
    let e = entry(&lc, "k").expect("still held after the restart");
    assert_eq!(e["kept"], true, "{e}");
    // The same deadline, to the millisecond (the log keeps it in ms).
    assert!(
        (expires_ns(&e) - at).abs() <= ns(Duration::from_millis(1)),
        "{e}"
    );
    let tl = Timeline::new(dir.path());
    let waiter = lc(&["lock", "k", "-c", &tl.one_shot("w")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, err) = finish_within(Duration::from_secs(20), waiter);
    assert_eq!(code, Some(0), "{err}");
    let (started, _) = tl.start_of("w").unwrap();
    assert!(
        started >= at - ns(CLOCK) && started >= before + ns(Duration::from_secs(3)) - ns(CLOCK),
        "the waiter started {:.3} s before the deadline",
        (at - started) as f64 / 1e9
    );

    // After the deadline: freed at start-up, before the port is announced.
    keep(&lc, "k2", "1s");
    let at = expires_ns(&entry(&lc, "k2").unwrap());
    server.kill();
    while now_ns() < at + ns(Duration::from_millis(300)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    server = serve.listen(&listen).restart();
    server.wait_for("while the server was down", 1, LOG);
    assert!(
        server.logged(&["restored 'k2'", "past, released now"]),
        "{}",
        server.log()
    );
    // Logged before the banner: before anyone was served.
    assert!(
        server.logged(&[
            "kept hold of 'k2'",
            "expired at its deadline, while the server was down"
        ]),
        "{}",
        server.log()
    );
    assert!(entry(&lc, "k2").is_none());
    expect_status(&mut lc(&["trylock", "k2", "--", "true"]), 0);
}

/// A reference Locking-Center server does not know action 18: refused with
/// one line (76), never held as a hold that does not expire.
#[test]
fn a_reference_server_refuses_it() {
    let server = Serve::new()
        .env("LC_CLI_SERVE_AS_REFERENCE", "1")
        .port_pair()
        .start();
    let err = expect_error_line(&mut server.lc(&["lock", "k", "--expire", "2s"]), 76);
    assert!(
        err.contains("cannot keep holds that expire") && err.contains("reference"),
        "{err}"
    );
    expect_status(&mut server.lc(&["trylock", "k", "--", "true"]), 0);
}

#[test]
fn with_a_command_it_is_a_usage_error() {
    let server = Server::start();
    let err = expect_error_line(
        &mut server.lc(&["lock", "k", "--expire", "2s", "--", "true"]),
        64,
    );
    assert!(
        err.contains("--expire") && err.contains("without a command"),
        "{err}"
    );
    let err = expect_error_line(&mut server.lc(&["lock", "k", "--expire", "0"]), 64);
    assert!(err.contains("--expire"), "{err}");
}

#[test]
fn redis() {
    let r = common::redis::RedisServer::start();
    let url = r.url();
    let lc = |args: &[&str]| lc_at(&url, args);
    expires_and_hands_on(&lc);
}

#[test]
fn zookeeper_with_ttl_nodes() {
    let zk = common::zk::Zk::start_extended();
    let lc = |args: &[&str]| zk.lc("/expire", args);
    expires_and_hands_on(&lc);
}

/// The TTL node keeps the lock node's name and layout: a client of
/// Curator's lock recipe sees the key held, waits, and gets it once the
/// node expired.
#[test]
fn zookeeper_ttl_node_is_a_lock_node_to_curator() {
    use common::zk::{curator_client, curator_lock_options, CuratorHold};
    use zookeeper_client as zkc;
    let zk = common::zk::Zk::start_extended();
    let (before, _) = keep(&|args: &[&str]| zk.lc("/c", args), "k", "2s");
    let queue = zk.queue("/c/k");
    assert_eq!(queue.len(), 1, "{queue:?}");
    assert!(
        queue[0].starts_with("_c_") && queue[0].contains("-lock-"),
        "{queue:?}"
    );
    // Not ephemeral (ZooKeeper shows a TTL node's owner as 0), with the
    // deadline in lc-cli's data.
    let (data, owner) = zk.node(&format!("/c/k/{}", queue[0])).unwrap();
    assert_eq!(owner, 0);
    assert!(
        String::from_utf8_lossy(&data).contains("\nexpires="),
        "{data:?}"
    );
    let (rt, client) = curator_client(&zk);
    let guard = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(20),
            client.lock(
                zkc::LockPrefix::new_curator("/c/k", "lock-").unwrap(),
                b"10.0.0.1",
                curator_lock_options(),
            ),
        )
        .await
        .expect("Curator's client got the key once the TTL node expired")
        .unwrap()
        .into_owned()
    });
    let got = now_ns();
    let guard = CuratorHold::new(&rt, guard);
    assert!(
        got >= before + ns(TTL) - ns(CLOCK),
        "Curator's client got the key {:.3} s after the kept lock, before its {TTL:?}",
        (got - before) as f64 / 1e9
    );
    drop(guard);
}

/// Without `zookeeper.extendedTypesEnabled` the server cannot make TTL
/// nodes: one line naming the setting, and the key is free again.
#[test]
fn zookeeper_without_extended_types_refuses_it() {
    let zk = common::zk::Zk::start();
    let err = expect_error_line(&mut zk.lc("/expire", &["lock", "k", "--expire", "2s"]), 76);
    assert!(err.contains("zookeeper.extendedTypesEnabled=true"), "{err}");
    expect_status(&mut zk.lc("/expire", &["trylock", "k", "--", "true"]), 0);
}

#[test]
fn etcd() {
    let e = common::etcd::Etcd::start();
    let lc = |args: &[&str]| e.lc("", args);
    expires_and_hands_on(&lc);
}

/// PostgreSQL keeps it as a row of `lc_cli.kept` with its deadline on the
/// server's clock (docs/backends/postgresql.md).
#[test]
fn postgresql() {
    let pg = common::pg::PgServer::start();
    let lc = |args: &[&str]| pg.lc(args);
    expires_and_hands_on(&lc);
}

/// The log in-process: a kept hold's deadline (a tag 7 Grant) comes back
/// from a reopen and from a compaction to the millisecond, a log of
/// version 3 is upgraded in place with its holders, and an old lc-cli's
/// holds (tag 5) still read as holds that do not expire.
#[test]
fn the_log_keeps_the_deadline_through_a_reopen_and_a_compaction() {
    use lc_cli::mode::LockMode;
    use lc_cli::wal::{Options, Record, Wal};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.wal");
    let grant = |key: &str, token: u64, expires_ms: Option<u64>| Record::Grant {
        key: key.as_bytes().to_vec(),
        source: b"ops".to_vec(),
        peer: b"127.0.0.1:1".to_vec(),
        since_ms: 1_700_000_000_000,
        token,
        session: false,
        mode: LockMode::Exclusive,
        expires_ms,
        ownership: Default::default(),
    };
    let deadline = 1_700_000_007_200_123u64;
    // A version 3 log (no expiring holds) is upgraded, its hold kept.
    let mut v3 = b"LCCLIWAL".to_vec();
    v3.extend_from_slice(&3u32.to_le_bytes());
    v3.extend(grant("old", 1, None).encode());
    std::fs::write(&path, &v3).unwrap();
    let (wal, held, recovery) = Wal::open(&path, Options::default()).unwrap();
    assert_eq!(recovery.upgraded, Some(3));
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].expires, None);
    let _ = wal.append(&grant("maint", 2, Some(deadline)));
    wal.sync().unwrap();
    drop(wal);
    let want = Some(UNIX_EPOCH + Duration::from_millis(deadline));
    let (wal, held, _) = Wal::open(&path, Options::default()).unwrap();
    let maint = held.iter().find(|h| h.key == b"maint").unwrap();
    assert_eq!(maint.expires, want);
    // Many cycles on another key force compactions: the hold survives them.
    let options = Options {
        compact_min: 512,
        ..Options::default()
    };
    drop(wal);
    let (wal, _, _) = Wal::open(&path, options.clone()).unwrap();
    for t in 10..400u64 {
        let _ = wal.append(&grant("busy", t, None));
        let _ = wal.append(&Record::Release {
            key: b"busy".to_vec(),
            token: Some(t),
        });
    }
    wal.sync().unwrap();
    assert!(wal.stats().compactions > 0, "{:?}", wal.stats());
    drop(wal);
    let (_wal, held, _) = Wal::open(&path, options).unwrap();
    let keys: Vec<&[u8]> = held.iter().map(|h| h.key.as_slice()).collect();
    assert_eq!(keys, [&b"maint"[..], b"old"]);
    assert_eq!(held[0].expires, want);
    assert_eq!(held[1].expires, None);
}

/// Action 18 on the wire: `=` with the token and a grace of 0 (a kept
/// hold), and the key is free again about its TTL later; a bad wait byte
/// is bad input (`-`).
#[test]
fn the_frame_on_the_wire() {
    use std::io::{Read, Write};
    let server = Server::start();
    let mut f = vec![18, 1, b'w', 1, b's', 4, 0, 0, 0, 1, 8];
    f.extend_from_slice(&1_000u64.to_be_bytes());
    let mut s = server.connect();
    s.write_all(&[&f[..], &[1, 1]].concat()).unwrap();
    let mut answer = [0u8; 13];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[0], b'=');
    assert_eq!(&answer[9..], &[0, 0, 0, 0], "a kept hold's grace is 0");
    drop(s);
    // Held now (a try finds it taken), free once it expired.
    assert_eq!(
        server.raw(&frame(action::TRY, b"w", Some(b"t"))),
        Some(b'#')
    );
    assert!(wait_until(Duration::from_secs(10), || {
        server.raw(&frame(action::TRY, b"w", Some(b"t"))) == Some(b'+')
    }));
    assert_eq!(server.raw(&[&f[..], &[1, 2]].concat()), Some(b'-'));
}
