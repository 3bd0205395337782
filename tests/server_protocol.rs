//! `lc-cli serve` spoken to byte by byte: FIFO, withdrawal, TryLock, resets,
//! bad input, many connections, signals.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::action::*;
use common::serve::*;
use common::*;

const LIMIT: Duration = Duration::from_secs(10);

fn answer(s: &mut TcpStream) -> Option<u8> {
    read_byte(s)
}

/// Queues a waiter and waits until the server has logged it as queued, so
/// arrival order is the order of these calls.
fn queue(server: &Server, key: &str, source: &str) -> TcpStream {
    let needle = format!("queue '{key}' source '{source}'");
    let before = server.count(&needle);
    let s = server.send_lock(key.as_bytes(), source.as_bytes());
    server.wait_for(&needle, before + 1, LIMIT);
    s
}

/// The server still answers a fresh client.
fn still_serves(server: &Server, probe: &str) {
    let key = format!("probe-{probe}");
    assert_eq!(
        server.raw(&frame(TRY, key.as_bytes(), Some(b"p"))),
        Some(b'+'),
        "server stopped serving after {probe}"
    );
    assert_eq!(server.raw(&frame(UNLOCK, key.as_bytes(), None)), Some(b'+'));
}

#[test]
fn waiters_are_granted_in_arrival_order() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(LOCK, b"k", Some(b"first"))), Some(b'+'));
    let mut waiters: Vec<TcpStream> = (0..10)
        .map(|i| queue(&server, "k", &format!("w{i}")))
        .collect();
    for i in 0..waiters.len() {
        assert_eq!(server.raw(&frame(UNLOCK, b"k", None)), Some(b'+'));
        assert_eq!(
            answer(&mut waiters[i]),
            Some(b'+'),
            "waiter {i} not granted"
        );
        // Nobody behind it was granted too.
        for (j, later) in waiters.iter_mut().enumerate().skip(i + 1).take(2) {
            assert!(
                silent(later, Duration::from_millis(30)),
                "waiter {j} granted out of turn"
            );
        }
        let needle = format!("grant 'k' source 'w{i}'");
        server.wait_for(&needle, 1, LIMIT);
        assert_eq!(server.count(&needle), 1, "{}", server.log());
    }
    assert_eq!(server.raw(&frame(UNLOCK, b"k", None)), Some(b'+'));
    assert_eq!(server.raw(&frame(TRY, b"k", Some(b"t"))), Some(b'+'));
}

#[test]
fn a_waiter_that_hangs_up_is_withdrawn() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(LOCK, b"k", Some(b"h"))), Some(b'+'));
    let mut w1 = queue(&server, "k", "w1");
    let w2 = queue(&server, "k", "w2");
    let mut w3 = queue(&server, "k", "w3");
    drop(w2);
    server.wait_for("withdraw 'k' source 'w2'", 1, LIMIT);
    assert_eq!(server.raw(&frame(UNLOCK, b"k", None)), Some(b'+'));
    assert_eq!(answer(&mut w1), Some(b'+'));
    assert_eq!(server.raw(&frame(UNLOCK, b"k", None)), Some(b'+'));
    assert_eq!(answer(&mut w3), Some(b'+'));
    assert_eq!(server.count("grant 'k' source 'w2'"), 0, "{}", server.log());
    assert_eq!(server.raw(&frame(UNLOCK, b"k", None)), Some(b'+'));
    // Nothing stuck: the key is free.
    assert_eq!(server.raw(&frame(TRY, b"k", Some(b"x"))), Some(b'+'));
}

/// The key is held after the race exactly when the client was told `+`:
/// the waiter half-closes (the server sees its hang-up) at the same moment as
/// the unlock, and keeps reading to learn what it was told.
#[test]
fn a_grant_racing_with_a_hang_up_is_released() {
    let server = Server::start();
    let mut told = [0usize; 2];
    for round in 0..60 {
        let key = format!("race{round}");
        assert_eq!(
            server.raw(&frame(LOCK, key.as_bytes(), Some(b"h"))),
            Some(b'+')
        );
        let mut w = queue(&server, &key, "w");
        let unlocker = {
            let addr = server.addr;
            let f = frame(UNLOCK, key.as_bytes(), None);
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(&f).unwrap();
                let mut b = [0u8; 1];
                s.read_exact(&mut b).unwrap();
                b[0]
            })
        };
        if round % 3 != 0 {
            std::thread::sleep(Duration::from_micros(50 * (round % 7)));
        }
        w.shutdown(Shutdown::Write).unwrap();
        let got = answer(&mut w);
        assert_eq!(unlocker.join().unwrap(), b'+');
        let try_answer = server.raw(&frame(TRY, key.as_bytes(), Some(b"t")));
        match got {
            Some(b'+') => {
                told[0] += 1;
                assert_eq!(try_answer, Some(b'#'), "round {round}: told + but not held");
            }
            None | Some(b'-') => {
                told[1] += 1;
                assert_eq!(
                    try_answer,
                    Some(b'+'),
                    "round {round}: hung up without a grant, yet the key is held\n{}",
                    server.log()
                );
            }
            other => panic!("round {round}: answered {other:?}"),
        }
    }
    eprintln!(
        "granted before the hang-up: {}, withdrawn: {}",
        told[0], told[1]
    );
}

/// A waiter that closes without reading is never granted after its close
/// was seen: the key always ends up either free or held by nobody's socket.
#[test]
fn a_closed_waiter_is_never_granted() {
    let server = Server::start();
    for round in 0..20 {
        let key = format!("closed{round}");
        assert_eq!(
            server.raw(&frame(LOCK, key.as_bytes(), Some(b"h"))),
            Some(b'+')
        );
        let w = queue(&server, &key, "w");
        drop(w);
        server.wait_for(&format!("withdraw '{key}'"), 1, LIMIT);
        assert_eq!(server.raw(&frame(UNLOCK, key.as_bytes(), None)), Some(b'+'));
        assert_eq!(
            server.raw(&frame(TRY, key.as_bytes(), Some(b"t"))),
            Some(b'+')
        );
    }
}

#[test]
fn trylock_free_and_held() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(TRY, b"t", Some(b"a"))), Some(b'+'));
    assert_eq!(server.raw(&frame(TRY, b"t", Some(b"b"))), Some(b'#'));
    assert_eq!(server.raw(&frame(LOCK, b"other", Some(b"b"))), Some(b'+'));
    // A TryLock never queues: after the unlock nobody holds it.
    assert_eq!(server.raw(&frame(UNLOCK, b"t", None)), Some(b'+'));
    assert_eq!(server.raw(&frame(RELEASE, b"t", None)), Some(b'#'));
    assert_eq!(server.raw(&frame(TRY, b"t", Some(b"b"))), Some(b'+'));
}

/// The reference server's answers, which its clients (they retry Unlock
/// until `+`) depend on: Unlock of a key nobody holds is `+`.
#[test]
fn unlock_answers_plus_whether_or_not_the_key_was_held() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(UNLOCK, b"never", None)), Some(b'+'));
    // A source appended to an Unlock, as some clients send it, is ignored.
    assert_eq!(server.raw(&frame(LOCK, b"u", Some(b"s"))), Some(b'+'));
    assert_eq!(server.raw(&frame(UNLOCK, b"u", Some(b"s"))), Some(b'+'));
    assert_eq!(server.raw(&frame(TRY, b"u", Some(b"t"))), Some(b'+'));
    assert_eq!(server.raw(&frame(UNLOCK, b"u", Some(b"s"))), Some(b'+'));
    assert_eq!(server.raw(&frame(UNLOCK, b"u", Some(b"s"))), Some(b'+'));
    // After an operator reset, the holder's own Unlock is `+` too.
    assert_eq!(server.raw(&frame(LOCK, b"r", Some(b"s"))), Some(b'+'));
    assert_eq!(server.raw(&frame(RESET_KEY, b"r", None)), Some(b'+'));
    assert_eq!(server.raw(&frame(UNLOCK, b"r", None)), Some(b'+'));
}

/// lc-cli's Release (action 6) tells "released" from "was not held", and
/// hands the key to the next waiter as Unlock does.
#[test]
fn release_says_whether_the_key_was_held() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(RELEASE, b"never", None)), Some(b'#'));
    assert_eq!(server.raw(&frame(LOCK, b"k", Some(b"a"))), Some(b'+'));
    let mut w = queue(&server, "k", "b");
    assert_eq!(server.raw(&frame(RELEASE, b"k", None)), Some(b'+'));
    assert_eq!(answer(&mut w), Some(b'+'));
    assert_eq!(server.raw(&frame(TRY, b"k", Some(b"c"))), Some(b'#'));
    assert_eq!(server.raw(&frame(RELEASE, b"k", None)), Some(b'+'));
    assert_eq!(server.raw(&frame(RELEASE, b"k", None)), Some(b'#'));
    assert_eq!(server.raw(&frame(TRY, b"k", Some(b"c"))), Some(b'+'));
    // An empty key is refused as with every action.
    assert_eq!(server.raw(&[RELEASE, 0]), Some(b'-'));
    // lc-cli unlock: exit 0 for a held key, 1 for one that was not held.
    expect_status(&mut lc_on(&server, &["unlock", "k"]), 0);
    let out = expect_status(&mut lc_on(&server, &["unlock", "k"]), 1);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("it was not held"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `lc-cli --server ADDR ARGS...` against a logged server.
fn lc_on(server: &Server, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--server").arg(server.addr.to_string()).args(args);
    cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
    cmd
}

#[test]
fn reset_by_key_grants_one_waiter_at_a_time() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(LOCK, b"r", Some(b"h"))), Some(b'+'));
    let mut ws: Vec<TcpStream> = (0..4)
        .map(|i| queue(&server, "r", &format!("w{i}")))
        .collect();
    for i in 0..ws.len() {
        assert_eq!(server.raw(&frame(RESET_KEY, b"r", None)), Some(b'+'));
        assert_eq!(answer(&mut ws[i]), Some(b'+'), "waiter {i}");
        for (j, later) in ws.iter_mut().enumerate().skip(i + 1) {
            assert!(
                silent(later, Duration::from_millis(30)),
                "reset granted waiter {j} too"
            );
        }
    }
    assert_eq!(server.raw(&frame(RESET_KEY, b"r", None)), Some(b'+'));
    // A reset of a free key also answers `+`.
    assert_eq!(server.raw(&frame(RESET_KEY, b"r", None)), Some(b'+'));
    assert_eq!(server.raw(&frame(TRY, b"r", Some(b"x"))), Some(b'+'));
    server.wait_for("reset key 'r'", 6, LIMIT);
}

#[test]
fn reset_by_source_releases_and_withdraws() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(LOCK, b"k1", Some(b"dead"))), Some(b'+'));
    assert_eq!(server.raw(&frame(LOCK, b"k3", Some(b"dead"))), Some(b'+'));
    assert_eq!(server.raw(&frame(LOCK, b"k2", Some(b"live"))), Some(b'+'));
    let mut live_on_k1 = queue(&server, "k1", "live");
    let mut live2_on_k1 = queue(&server, "k1", "live2");
    let mut dead_on_k2 = queue(&server, "k2", "dead");
    assert_eq!(server.raw(&frame(RESET_SOURCE, b"dead", None)), Some(b'+'));
    assert_eq!(answer(&mut live_on_k1), Some(b'+'));
    assert_eq!(answer(&mut dead_on_k2), Some(b'-'));
    assert!(silent(&mut live2_on_k1, Duration::from_millis(30)));
    assert_eq!(server.raw(&frame(TRY, b"k2", Some(b"x"))), Some(b'#'));
    assert_eq!(server.raw(&frame(TRY, b"k3", Some(b"x"))), Some(b'+'));
    assert_eq!(server.raw(&frame(UNLOCK, b"k1", None)), Some(b'+'));
    assert_eq!(answer(&mut live2_on_k1), Some(b'+'));
    server.wait_for("reset source 'dead'", 1, LIMIT);
}

#[test]
fn an_empty_source_means_the_callers_address() {
    let server = Server::start();
    assert_eq!(server.raw(&frame(LOCK, b"e", Some(b""))), Some(b'+'));
    server.wait_for("grant 'e' source '127.0.0.1'", 1, LIMIT);
    assert_eq!(server.raw(&frame(RESET_SOURCE, b"", None)), Some(b'+'));
    assert_eq!(server.raw(&frame(TRY, b"e", Some(b"x"))), Some(b'+'));
}

/// A flood of bad frames from one address logs a bounded number of lines
/// (20 a minute and a count), not one each: the log cannot fill the disk.
#[test]
fn a_flood_of_bad_frames_logs_a_bounded_number_of_lines() {
    let server = Server::start();
    for _ in 0..300 {
        assert!(matches!(server.raw(&[0xff]), Some(b'-') | None));
    }
    still_serves(&server, "the flood");
    // The log is read by a thread: all 20 lines, then a pause for any more.
    server.wait_for("bad request", 20, Duration::from_secs(10));
    std::thread::sleep(common::QUIET);
    let lines = server.count("bad request");
    assert_eq!(lines, 20, "{}", server.log());
    assert!(
        server.logged(&[
            "bad request",
            "further bad request lines from 127.0.0.1 are left out for 60s"
        ]),
        "{}",
        server.log()
    );
}

#[test]
fn bad_input_affects_only_its_connection() {
    let server = Server::start_with(&["--read-timeout", "1s"]);
    // A holder and a queued waiter that must come through all of it unharmed.
    assert_eq!(server.raw(&frame(LOCK, b"calm", Some(b"h"))), Some(b'+'));
    let mut waiter = queue(&server, "calm", "w");

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty key (lock)", vec![LOCK, 0, 0]),
        ("empty key (unlock)", vec![UNLOCK, 0]),
        ("empty key (trylock)", vec![TRY, 0, 1, b's']),
        ("key size 0x80", vec![LOCK, 0x80, b'k']),
        ("key size 0xff", vec![UNLOCK, 0xff]),
        ("source size 0x80", vec![LOCK, 1, b'k', 0x80]),
        (
            "source size 0xfe (reset by source)",
            vec![RESET_SOURCE, 0xfe],
        ),
        ("unknown action 0", vec![0, 1, b'k']),
        (
            "mode lock, a mode of 2 bytes",
            vec![12, 1, b'k', 0, 2, 0, 1],
        ),
        ("unknown action 200", vec![200, 1, b'k', 0]),
        ("unknown action 0xff", vec![0xff]),
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
    ];
    let errors_before = server.count("error:");
    for (i, (name, bytes)) in cases.iter().enumerate() {
        let got = server.raw(bytes);
        assert!(matches!(got, Some(b'-') | None), "{name}: answered {got:?}");
        server.wait_for("error:", errors_before + i + 1, LIMIT);
        still_serves(&server, name);
    }

    // Pseudo-random garbage, several seeds.
    let mut x: u32 = 0x9e37_79b9;
    for round in 0..20 {
        let bytes: Vec<u8> = (0..300)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8
            })
            .collect();
        let mut s = server.connect();
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(Shutdown::Write);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        // One byte back at most, but for the two actions whose answer has a
        // body (Hello, 16: the version; Keys, 17: the listing).
        if matches!(bytes[0], 16 | 17) {
            assert!(
                matches!(rest.first(), Some(b'+' | b'-') | None),
                "round {round}: {rest:?}"
            );
        } else {
            assert!(rest.len() <= 1, "round {round}: {rest:?}");
        }
        still_serves(&server, &format!("garbage round {round}"));
    }

    // Truncated: half a frame, then the client closes its side.
    let mut s = server.connect();
    s.write_all(&[LOCK, 5, b'a', b'b']).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let got = answer(&mut s);
    assert!(matches!(got, Some(b'-') | None), "truncated: {got:?}");
    still_serves(&server, "truncated frame");

    // Stalled: half a frame and nothing more; the read deadline closes it.
    let mut s = server.connect();
    s.write_all(&[LOCK, 5, b'a']).unwrap();
    let start = Instant::now();
    let got = answer(&mut s);
    assert!(matches!(got, Some(b'-') | None), "stalled: {got:?}");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "stalled client kept for {:?}",
        start.elapsed()
    );
    server.wait_for("no whole request within", 1, LIMIT);
    still_serves(&server, "stalled frame");

    // The waiter that was queued all along is still in line and gets the key.
    assert_eq!(server.raw(&frame(UNLOCK, b"calm", None)), Some(b'+'));
    assert_eq!(answer(&mut waiter), Some(b'+'));
}

#[test]
fn five_hundred_concurrent_connections_on_distinct_keys() {
    let limit = raise_fd_limit(8192);
    assert!(limit >= 2200, "soft fd limit only {limit}");
    // 1,000 at once from 127.0.0.1: over the default 256 per address.
    let server = Server::start_with(&["--max-connections-per-peer", "0"]);
    let n = 500;
    // Open all connections first, then send, so all 500 are open at once.
    let mut holders: Vec<TcpStream> = (0..n).map(|_| server.connect()).collect();
    for (i, s) in holders.iter_mut().enumerate() {
        s.write_all(&frame(LOCK, format!("key{i}").as_bytes(), Some(b"h")))
            .unwrap();
    }
    for (i, s) in holders.iter_mut().enumerate() {
        assert_eq!(answer(s), Some(b'+'), "holder {i}");
    }
    // 500 waiters, one per key, all queued at the same time.
    let mut waiters: Vec<TcpStream> = (0..n)
        .map(|i| server.send_lock(format!("key{i}").as_bytes(), b"w"))
        .collect();
    server.wait_for("queue 'key", n, Duration::from_secs(30));
    for i in 0..n {
        assert_eq!(
            server.raw(&frame(UNLOCK, format!("key{i}").as_bytes(), None)),
            Some(b'+')
        );
    }
    for (i, s) in waiters.iter_mut().enumerate() {
        assert_eq!(answer(s), Some(b'+'), "waiter {i}");
    }
    drop(holders);
    drop(waiters);
    for i in (0..n).step_by(50) {
        assert_eq!(
            server.raw(&frame(TRY, format!("key{i}").as_bytes(), Some(b"x"))),
            Some(b'#')
        );
    }
}

#[test]
fn sigterm_and_sigint_stop_it_cleanly() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut server = Server::start();
        assert_eq!(server.raw(&frame(LOCK, b"k", Some(b"s"))), Some(b'+'));
        let _waiter = queue(&server, "k", "w");
        let status = server
            .stop_with(signal, LIMIT)
            .unwrap_or_else(|| panic!("signal {signal}: still running"));
        assert_eq!(status.code(), Some(0), "signal {signal}: {status:?}");
        server.wait_for("shutting down: 1 key(s) held, 1 waiter(s) queued", 1, LIMIT);
    }
    // Right after start-up too.
    let mut server = Server::start();
    let status = server
        .stop_with(libc::SIGTERM, LIMIT)
        .expect("still running");
    assert_eq!(status.code(), Some(0));
}

/// A server that speaks only the reference's actions, answering Unlock with
/// `unlock_answer`: serves `connections` connections, returns the actions.
fn reference_like(
    unlock_answer: u8,
    connections: usize,
) -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let mut actions = Vec::new();
        for _ in 0..connections {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(LIMIT)).unwrap();
            let mut head = [0u8; 2];
            s.read_exact(&mut head).unwrap();
            let mut key = vec![0u8; head[1] as usize];
            s.read_exact(&mut key).unwrap();
            actions.push(head[0]);
            // The reference answers `-` to an action it does not know.
            let answer = if head[0] == UNLOCK {
                unlock_answer
            } else {
                b'-'
            };
            s.write_all(&[answer]).unwrap();
        }
        actions
    });
    (addr, handle)
}

/// Against a server without the Release action, `unlock` falls back to the
/// classic frame: its `+` is "released" (not held cannot be told apart), its
/// `-` is "not released" (exit 74 with the reset line).
#[test]
fn unlock_falls_back_to_the_classic_frame() {
    // The Hello that opens lc-cli's first connection is answered `-` too:
    // the Release is asked again without it, then the classic Unlock.
    const HELLO: u8 = 16;
    let (addr, server) = reference_like(b'+', 3);
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["--server", &addr.to_string(), "unlock", "k"]);
    expect_status(&mut cmd, 0);
    assert_eq!(server.join().unwrap(), [HELLO, RELEASE, UNLOCK]);

    let (addr, server) = reference_like(b'-', 3);
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["--server", &addr.to_string(), "unlock", "k"]);
    let out = expect_status(&mut cmd, 74);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reset k"), "{err}");
    assert_eq!(server.join().unwrap(), [HELLO, RELEASE, UNLOCK]);
}

/// Issue 22 item 8: the protocol with `--token-file` on. Every frame after
/// a Hello with the token is served as without tokens; bad input after it
/// affects only its connection; a frame without the Hello gets `-`; the
/// queue keeps its order through all of it.
#[test]
fn with_tokens_bad_input_after_a_hello_affects_only_its_connection() {
    const TOKEN: &[u8] = b"protocol-test-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, [TOKEN, b" lock\n"].concat()).unwrap();
    let server = Serve::new()
        .args(&[
            "--token-file",
            file.to_str().unwrap(),
            "--read-timeout",
            "1s",
        ])
        .start();
    let version = env!("CARGO_PKG_VERSION").as_bytes();
    let welcome = [&[b'*', version.len() as u8][..], version, b"\x04lock"].concat();
    let with_hello = |bytes: &[u8]| {
        let mut f = vec![16, 2, b'\r', b'\n', TOKEN.len() as u8];
        f.extend_from_slice(TOKEN);
        f.extend_from_slice(bytes);
        f
    };
    // What the server answers after the Hello's `*...`, until it closes
    // (`done`: the client half-closes first, as bad input may never end;
    // not for a request it wants the answer of, which that withdraws).
    let answered = |bytes: &[u8], done: bool| {
        let mut s = server.connect();
        let _ = s.write_all(&with_hello(bytes));
        if done {
            let _ = s.shutdown(Shutdown::Write);
        }
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        assert!(
            all.starts_with(&welcome),
            "{:?}",
            String::from_utf8_lossy(&all)
        );
        all[welcome.len()..].to_vec()
    };
    let after_hello = |bytes: &[u8]| answered(bytes, false);
    let serves = |probe: &str| {
        let key = format!("probe-{probe}");
        assert_eq!(
            after_hello(&frame(TRY, key.as_bytes(), Some(b"p"))),
            b"+",
            "after {probe}"
        );
        assert_eq!(
            after_hello(&frame(RELEASE, key.as_bytes(), None)),
            b"+",
            "after {probe}"
        );
    };
    // A Lock's client that half-closes withdraws: the holder stays open.
    let mut holder = server.connect();
    holder
        .write_all(&with_hello(&frame(LOCK, b"calm", Some(b"h"))))
        .unwrap();
    let mut got = vec![0u8; welcome.len() + 1];
    holder.read_exact(&mut got).unwrap();
    assert_eq!(got, [&welcome[..], b"+"].concat());
    let mut waiter = server.connect();
    waiter
        .write_all(&with_hello(&frame(LOCK, b"calm", Some(b"w"))))
        .unwrap();
    server.wait_for("queue 'calm' source 'w'", 1, LIMIT);
    // Without the Hello: `-`, whatever the frame.
    for f in [
        frame(TRY, b"k", Some(b"s")),
        frame(UNLOCK, b"calm", None),
        vec![17, 1, b'k', 0],
    ] {
        assert_eq!(server.raw(&f), Some(b'-'), "{f:?}");
    }
    for (name, bytes) in [
        ("empty key", vec![LOCK, 0, 0]),
        ("key size 0x80", vec![LOCK, 0x80, b'k']),
        ("unknown action 200", vec![200, 1, b'k', 0]),
        ("a mode of 2 bytes", vec![12, 1, b'k', 0, 2, 0, 1]),
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        ("truncated", vec![LOCK, 5, b'a']),
    ] {
        let rest = answered(&bytes, true);
        assert!(rest == b"-" || rest.is_empty(), "{name}: {rest:?}");
        serves(name);
    }
    let mut x: u32 = 0x2545_f491;
    for round in 0..20 {
        let bytes: Vec<u8> = (0..300)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8
            })
            .collect();
        let rest = answered(&bytes, true);
        // As above: Hello and Keys answer with a body.
        if matches!(bytes[0], 16 | 17) {
            assert!(
                matches!(rest.first(), Some(b'+' | b'-' | b'%' | b'*') | None),
                "round {round}: {rest:?}"
            );
        } else {
            assert!(rest.len() <= 1, "round {round}: {rest:?}");
        }
        serves(&format!("garbage round {round}"));
    }
    // The holder's own token releases it; the waiter, in line all along,
    // gets it (after its Hello's answer).
    assert_eq!(after_hello(&frame(RELEASE, b"calm", None)), b"+");
    let mut got = vec![0u8; welcome.len() + 1];
    waiter.read_exact(&mut got).unwrap();
    assert_eq!(got, [&welcome[..], b"+"].concat());
    assert_eq!(
        server.count("before a Hello with a token"),
        1,
        "{}",
        server.log()
    );
}
