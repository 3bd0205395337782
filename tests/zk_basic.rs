//! The ZooKeeper backend through the real binary: trylock, timeout,
//! detached hold and unlock, resets, bad keys, an unreachable ensemble.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::spans::Kids;
use common::zk::{curator_client, curator_lock_options, CuratorHold, Zk};
use common::*;

fn data(zk: &Zk, path: &str) -> String {
    String::from_utf8_lossy(&zk.node(path).expect("node exists").0).into_owned()
}

#[test]
fn trylock_timeout_detached_hold_and_unlock() {
    let zk = Zk::start();
    let dir = "/t/deploy/prod";
    // A detached hold: a persistent node that records its source.
    expect_status(
        &mut zk.lc("/t", &["lock", "deploy/prod", "--source", "ops1"]),
        0,
    );
    let q = zk.queue(dir);
    assert_eq!(q.len(), 1, "{q:?}");
    assert!(q[0].starts_with("_c_") && q[0].contains("-lock-"), "{q:?}");
    let (_, owner) = zk.node(&format!("{dir}/{}", q[0])).unwrap();
    assert_eq!(owner, 0, "a detached hold must not be ephemeral");
    let d = data(&zk, &format!("{dir}/{}", q[0]));
    assert!(
        d.contains("mode=detached") && d.ends_with("source=ops1"),
        "{d}"
    );

    // trylock conflicts and leaves no node behind.
    expect_status(
        &mut zk.lc("/t", &["trylock", "deploy/prod", "--", "true"]),
        1,
    );
    expect_status(
        &mut zk.lc(
            "/t",
            &["lock", "-n", "-E", "9", "deploy/prod", "--", "true"],
        ),
        9,
    );
    assert_eq!(zk.queue(dir), q);
    // A timed-out wait removes its node.
    let t = Instant::now();
    expect_status(
        &mut zk.lc("/t", &["lock", "-w", "0.5", "deploy/prod", "--", "true"]),
        1,
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(zk.queue(dir), q);

    // unlock clears it; a second unlock says it was not held.
    expect_status(&mut zk.lc("/t", &["unlock", "deploy/prod"]), 0);
    assert!(zk.queue(dir).is_empty());
    expect_status(&mut zk.lc("/t", &["unlock", "deploy/prod"]), 1);

    // Free now: the child gets the node's czxid as its fencing token.
    let token = || -> u64 {
        let out = expect_status(
            &mut zk.lc(
                "/t",
                &[
                    "trylock",
                    "deploy/prod",
                    "--",
                    "sh",
                    "-c",
                    "echo $LC_LOCK_TOKEN",
                ],
            ),
            0,
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let (token, token2) = (token(), token());
    assert!(token > 0);
    assert!(token2 > token, "tokens must grow: {token} then {token2}");
    assert!(zk.queue(dir).is_empty(), "release deletes the node");
    // `wait` takes and releases at once.
    expect_status(&mut zk.lc("/t", &["wait", "deploy/prod"]), 0);
    assert!(zk.queue(dir).is_empty());
}

#[test]
fn bad_keys_and_unreachable_ensemble() {
    let zk = Zk::start();
    for key in ["a//b", "a/./b", "a/..", "x/", "a/_c_0-lock-0000000001"] {
        let out = expect_status(&mut zk.lc("/t", &["trylock", key, "--", "true"]), 64);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{err}");
    }
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = Instant::now();
    let out = expect_status(
        std::process::Command::new(BIN)
            .args(["--server", &format!("zk://127.0.0.1:{port}/t")])
            .args(["--connect-timeout", "1s", "trylock", "k", "--", "true"]),
        69,
    );
    assert!(t.elapsed() < Duration::from_secs(15));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&port.to_string()), "{err}");
}

/// A waiter queued behind a detached hold keeps its place; unlock serves it.
#[test]
fn detached_hold_keeps_its_place_and_reset_key_keeps_waiters() {
    let zk = Zk::start();
    let dir = "/t/k";
    expect_status(&mut zk.lc("/t", &["lock", "k"]), 0);
    let mut kids = Kids(Vec::new());
    let flag = tempfile::tempdir().unwrap();
    let done = flag.path().join("done");
    kids.0.push(
        zk.lc("/t", &["lock", "k", "--", "touch"])
            .arg(&done)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(20), || zk.queue(dir).len() == 2));
    assert!(
        holds_for(QUIET, || !done.exists()),
        "the waiter ran while the key was held"
    );
    // reset KEY deletes the holder only: the waiter gets the key.
    expect_status(&mut zk.lc("/t", &["reset", "k"]), 0);
    let status = kids.0[0].wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(done.exists());
    assert!(wait_until(Duration::from_secs(10), || zk
        .queue(dir)
        .is_empty()));
    expect_status(&mut zk.lc("/t", &["reset", "k"]), 0);
}

/// reset --source deletes that source's holds and waiters anywhere under
/// the root, and nothing else.
#[test]
fn reset_by_source() {
    let zk = Zk::start();
    expect_status(&mut zk.lc("/t", &["lock", "a/x", "--source", "bad"]), 0);
    expect_status(&mut zk.lc("/t", &["lock", "b", "--source", "good"]), 0);
    let mut kids = Kids(Vec::new());
    // A waiter of source "bad" behind the good hold...
    kids.0.push(
        zk.lc("/t", &["lock", "b", "--source", "bad", "--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/t/b")
        .len()
        == 2));
    expect_status(&mut zk.lc("/t", &["reset", "--source", "bad"]), 0);
    assert!(zk.queue("/t/a/x").is_empty());
    assert_eq!(zk.queue("/t/b").len(), 1, "the good hold stays");
    // The withdrawn waiter gives up with one line, not the conflict status.
    let start = Instant::now();
    let out = loop {
        if let Some(_s) = kids.0[0].try_wait().unwrap() {
            break kids.0.remove(0).wait_with_output().unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "waiter did not give up"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "stderr: {err}");
    assert!(
        err.contains("'b'") && err.contains("deleted"),
        "stderr: {err}"
    );
    expect_status(&mut zk.lc("/t", &["unlock", "b"]), 0);
}

/// A client using the Curator-compatible recipe of zookeeper-client
/// (`LockPrefix::new_curator(dir, "lock-")`, as Curator's InterProcessMutex)
/// and lc-cli exclude each other, in both directions, detached holds
/// included.
#[test]
fn curator_recipe_and_lc_cli_exclude_each_other() {
    use zookeeper_client as zkc;
    let zk = Zk::start();
    let (rt, client) = curator_client(&zk);
    let options = curator_lock_options;
    // The Curator-style client holds: lc-cli conflicts, then waits its turn.
    // Dropping the guard deletes the node (in the background).
    let guard = CuratorHold::new(
        &rt,
        rt.block_on(async {
            client
                .lock(
                    zkc::LockPrefix::new_curator("/c/k", "lock-").unwrap(),
                    b"10.0.0.1",
                    options(),
                )
                .await
                .unwrap()
                .into_owned()
        }),
    );
    let name = guard.lock_path().rsplit('/').next().unwrap().to_string();
    assert!(name.starts_with("_c_") && name.contains("-lock-"), "{name}");
    expect_status(&mut zk.lc("/c", &["trylock", "k", "--", "true"]), 1);
    let tmp = tempfile::tempdir().unwrap();
    let ran = tmp.path().join("ran");
    let mut kids = Kids(vec![zk
        .lc("/c", &["lock", "k", "--", "touch"])
        .arg(&ran)
        .spawn()
        .unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/c/k")
        .len()
        == 2));
    assert!(holds_for(QUIET, || !ran.exists()));
    drop(guard);
    assert_eq!(kids.0[0].wait().unwrap().code(), Some(0));
    assert!(ran.exists());

    // lc-cli holds (a detached hold): the Curator-style client waits for unlock.
    expect_status(&mut zk.lc("/c", &["lock", "k"]), 0);
    let blocked = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(700),
            client.lock(
                zkc::LockPrefix::new_curator("/c/k", "lock-").unwrap(),
                b"",
                options(),
            ),
        )
        .await
        .is_err()
    });
    assert!(blocked, "the Curator-style client got a key lc-cli holds");
    let waiter = {
        let client = client.clone();
        rt.spawn(async move {
            let lock = client
                .lock(
                    zkc::LockPrefix::new_curator("/c/k", "lock-").unwrap(),
                    b"",
                    options(),
                )
                .await
                .unwrap();
            let path = lock.lock_path().to_string();
            client.delete(&path, None).await.unwrap();
        })
    };
    // The new waiter queues behind the hold (beside nodes cancelled lock()
    // calls may leave for a moment) and must stay there.
    assert!(holds_for(QUIET, || !waiter.is_finished()));
    expect_status(&mut zk.lc("/c", &["unlock", "k"]), 0);
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), waiter).await })
        .expect("the Curator-style client got the key after unlock")
        .unwrap();
    drop(client);
}

/// A proxy in front of ZooKeeper that forwards the first Create2 request
/// (the queue node) and then cuts the connection before the answer: the
/// client sees a connection loss for a create that succeeded.
struct CutProxy {
    port: u16,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CutProxy {
    fn start(target: u16) -> CutProxy {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(true));
        let armed2 = armed.clone();
        // The threads end when the test process does; the sockets close
        // with the server.
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { return };
                let Ok(mut server) = TcpStream::connect(("127.0.0.1", target)) else {
                    return;
                };
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let mute = Arc::new(AtomicBool::new(false));
                let mute2 = mute.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = s2.read(&mut buf) {
                        if n == 0
                            || (!mute2.load(Ordering::SeqCst) && c2.write_all(&buf[..n]).is_err())
                        {
                            break;
                        }
                    }
                    let _ = c2.shutdown(Shutdown::Both);
                });
                let armed = armed2.clone();
                std::thread::spawn(move || {
                    let mut first = true;
                    loop {
                        let mut len = [0u8; 4];
                        if client.read_exact(&mut len).is_err() {
                            break;
                        }
                        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                        if client.read_exact(&mut body).is_err() {
                            break;
                        }
                        let op = (!first && body.len() >= 8)
                            .then(|| i32::from_be_bytes(body[4..8].try_into().unwrap()));
                        first = false;
                        let cut = op == Some(15) && armed.swap(false, Ordering::SeqCst);
                        if cut {
                            // The client never hears the answer...
                            mute.store(true, Ordering::SeqCst);
                        }
                        if server.write_all(&len).is_err() || server.write_all(&body).is_err() {
                            break;
                        }
                        if cut {
                            // ...though the server runs the request; then
                            // the connection drops.
                            std::thread::sleep(Duration::from_millis(300));
                            let _ = client.shutdown(Shutdown::Both);
                            let _ = server.shutdown(Shutdown::Both);
                            break;
                        }
                    }
                    let _ = server.shutdown(Shutdown::Both);
                });
            }
        });
        CutProxy { port, armed }
    }
}

/// A queue node created just before a connection loss is found again by
/// its unique prefix, not created twice (a second one would sit behind
/// the first and wait for itself until the session ended).
#[test]
fn node_created_before_a_connection_loss_is_found_not_duplicated() {
    let zk = Zk::start();
    expect_status(&mut zk.lc("/x", &["lock", "k"]), 0);
    let proxy = CutProxy::start(zk.port);
    let tmp = tempfile::tempdir().unwrap();
    let ran = tmp.path().join("ran");
    let mut kids = Kids(vec![std::process::Command::new(BIN)
        .args([
            "--server",
            &format!("zk://127.0.0.1:{}/x?session-timeout=4s", proxy.port),
        ])
        .args(["lock", "k", "--", "touch"])
        .arg(&ran)
        .spawn()
        .unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/x/k")
        .len()
        == 2));
    assert!(wait_until(Duration::from_secs(10), || !proxy
        .armed
        .load(std::sync::atomic::Ordering::SeqCst)));
    // Long enough for the reconnect and a (wrong) second create, which the
    // client does not report: only its absence can be checked.
    let reconnect = Duration::from_millis(1500);
    assert!(
        holds_for(reconnect, || zk.queue("/x/k").len() == 2),
        "{:?}",
        zk.queue("/x/k")
    );
    expect_status(&mut zk.lc("/x", &["unlock", "k"]), 0);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = kids.0[0].try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the waiter never got the key"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    assert!(ran.exists());
    assert!(wait_until(Duration::from_secs(5), || zk
        .queue("/x/k")
        .is_empty()));
}

/// A detached hold taken in turn, with a waiter already queued behind it:
/// the persistent node takes the ephemeral one's place, the waiter keeps
/// waiting until unlock.
#[test]
fn detached_hold_taken_in_turn_keeps_the_waiters_behind() {
    let zk = Zk::start();
    let tmp = tempfile::tempdir().unwrap();
    let go = tmp.path().join("go");
    let ran = tmp.path().join("ran");
    let holder = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let mut kids = Kids(Vec::new());
    kids.0
        .push(zk.lc("/d", &["lock", "k", "-c", &holder]).spawn().unwrap());
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/d/k")
        .len()
        == 1));
    kids.0.push(zk.lc("/d", &["lock", "k"]).spawn().unwrap());
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/d/k")
        .len()
        == 2));
    kids.0.push(
        zk.lc("/d", &["lock", "k", "--", "touch"])
            .arg(&ran)
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/d/k")
        .len()
        == 3));
    let detacher_seq = zk.queue("/d/k")[1].rsplit('-').next().unwrap().to_string();
    std::fs::write(&go, "").unwrap();
    assert_eq!(kids.0[0].wait().unwrap().code(), Some(0));
    assert_eq!(
        kids.0[1].wait().unwrap().code(),
        Some(0),
        "the detached lock"
    );
    assert!(
        holds_for(QUIET, || !ran.exists()),
        "the waiter ran while the key was held (detached)"
    );
    let q = zk.queue("/d/k");
    assert_eq!(q.len(), 2, "{q:?}");
    assert!(
        q[0].ends_with(&detacher_seq),
        "the hold kept its place: {q:?}"
    );
    assert_eq!(
        zk.node(&format!("/d/k/{}", q[0])).unwrap().1,
        0,
        "persistent"
    );
    expect_status(&mut zk.lc("/d", &["unlock", "k"]), 0);
    assert_eq!(kids.0[2].wait().unwrap().code(), Some(0));
    assert!(ran.exists());
}
