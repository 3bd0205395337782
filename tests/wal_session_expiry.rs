//! A session hold (`lock KEY -- CMD`) whose release the log could not
//! record (a real full tmpfs): the server refuses the release and keeps the
//! key, lc-cli exits 74. Its holder is gone, so the hold must expire after
//! the reclaim grace, with or without a server restart in between, and
//! never be handed on before its expiry is in the log: while the disk stays
//! full the key stays held (a restart would bring the hold back), and the
//! next waiter gets it once the expiry could be recorded. Who ran when is
//! read from the commands' own logged times.

use crate::common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::disk::SmallDisk;
use common::serve::data_arg;
use common::spans::{self, Span};
use common::timeline::now_ns;
use common::{frame, holds_for, wait_until, Serve};

const GRACE: &str = "2s";
const GRACE_MS: f64 = 2000.0;
/// What the upper bounds allow beyond the grace (or beyond the disk's
/// freeing): the server's retry of an unrecorded expiry (1 s), a busy
/// machine.
const SLACK_MS: f64 = 2500.0;
const LIMIT: Duration = Duration::from_secs(20);

/// When the disk gets its space back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    /// At once, well before the grace ends.
    Early,
    /// Only a while after the grace has ended.
    Late,
}

/// The holder's command: logs its start, runs until `gate` is gone, logs
/// its end.
fn gated(log: &Path, gate: &Path) -> String {
    let log = log.display();
    format!(
        "echo start h $(date +%s%N) >> {log}; while [ -e '{}' ]; do sleep 0.02; done; echo end h $(date +%s%N) >> {log}",
        gate.display()
    )
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "lc-cli did not exit in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// One trial; returns how long after the holder's end (or the restart, or
/// the disk's freeing, whichever came last) the waiter started, in ms.
fn trial(restart: bool, space: Space) -> f64 {
    let disk = SmallDisk::mount("64k");
    let path = disk.mnt.join("locks.wal");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("spans");
    let gate = dir.path().join("gate");
    std::fs::write(&gate, "").unwrap();
    let serve = Serve::new().args(&[
        "--data",
        &data_arg(&path),
        "--reclaim-grace",
        GRACE,
        "--manager",
        "127.0.0.1:0",
    ]);
    let mut server = serve.clone().start();
    // A long key: its release record (~110 bytes) cannot fit in what a
    // refused short grant left of the log's last page.
    let key = "s".repeat(100);
    let mut holder = server
        .lc(&["lock", &key, "--", "sh", "-c", &gated(&log, &gate)])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    server.wait_for(&format!("grant '{key}'"), 1, LIMIT);
    let filler = disk.fill_to_the_page(&server);
    std::fs::remove_file(&gate).unwrap();
    let status = wait_exit(&mut holder, LIMIT);
    let err = std::io::read_to_string(holder.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(74), "{err}");
    server.wait_for("not recorded in the log, the key stays held", 1, LIMIT);

    let mut from = spans::read(&log)
        .iter()
        .find(|s| s.tag == "h")
        .map(|s| s.end)
        .expect("the holder's command logged its end");
    if restart {
        // Killed with the hold in place: the log still has its grant.
        server.kill();
        from = now_ns();
        server = serve.clone().listen(&server.addr.to_string()).restart();
        server.wait_for("(session hold, token", 1, LIMIT);
    }
    let mut kids = spans::Kids(vec![server
        .lc(&[
            "lock",
            &key,
            "--",
            "sh",
            "-c",
            &spans::script(&log, "w", 0.1),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()]);
    server.wait_for(&format!("queue '{key}'"), 1, LIMIT);
    let w_started = || spans::read(&log).iter().any(|s| s.tag == "w");
    if space == Space::Late {
        // The grace ends with the disk still full: the expiry cannot be
        // recorded, so the key must stay held.
        let quiet = Duration::from_millis(GRACE_MS as u64 + 1500);
        let waiter = &mut kids.0[0];
        assert!(
            holds_for(quiet, || !w_started()
                && waiter.try_wait().unwrap().is_none()),
            "the waiter got the key, or was refused, while the expiry could not be logged: {:?}\n{}",
            waiter.try_wait(),
            server.log()
        );
        server.wait_for("expiry of the session hold", 1, LIMIT);
        from = now_ns();
    }
    std::fs::remove_file(&filler).unwrap();
    let freed = now_ns();
    let ok = wait_until(LIMIT, w_started);
    assert!(ok, "the hold was never released:\n{}", server.log());
    let codes = kids.wait_all(LIMIT);
    assert_eq!(codes, vec![Some(0)], "{}", server.log());

    let all: Vec<Span> = spans::read(&log);
    let (h, w) = (spans::by_tag(&all, "h"), spans::by_tag(&all, "w"));
    assert!(h.end <= w.start, "the holder and the waiter overlapped");
    if space == Space::Late {
        assert!(w.start >= freed, "handed on before the disk had room");
    }
    let after = ms(w.start - from);
    let least = match (restart, space) {
        // Its last heartbeat is at most a quarter of the grace old.
        (false, Space::Early) => GRACE_MS * 0.75,
        // Restored "as heard now".
        (true, Space::Early) => GRACE_MS,
        (_, Space::Late) => 0.0,
    };
    assert!(
        after >= least,
        "handed on {after:.0} ms after, before the grace ({least:.0} ms)"
    );
    assert!(
        after <= least.max(GRACE_MS) + SLACK_MS,
        "handed on only {after:.0} ms after:\n{}",
        server.log()
    );

    // The expiry is in the log: a restart does not bring the hold back.
    server.kill();
    let server = serve.listen(&server.addr.to_string()).restart();
    assert_eq!(
        server.raw(&frame(5, key.as_bytes(), Some(b"x"))),
        Some(b'+'),
        "held again after a restart:\n{}",
        server.log()
    );
    after
}

fn trials(restart: bool, space: Space) {
    let times: Vec<String> = (0..3)
        .map(|_| format!("{:.0}", trial(restart, space)))
        .collect();
    eprintln!(
        "restart {restart}, disk freed {space:?}: the waiter started after (ms) {}",
        times.join(", ")
    );
}

#[test]
fn an_unreleased_session_hold_expires_after_the_grace() {
    trials(false, Space::Early);
}

#[test]
fn an_unreleased_session_hold_stays_held_while_its_expiry_cannot_be_logged() {
    trials(false, Space::Late);
}

#[test]
fn a_restored_unreleased_session_hold_expires_after_the_grace() {
    trials(true, Space::Early);
}

#[test]
fn a_restored_unreleased_session_hold_waits_for_the_disk() {
    trials(true, Space::Late);
}
