//! The built-in server's manager port: the reference Locking-Center manager
//! commands byte for byte, lc-cli's KEYX, and `lc-cli keys` / `reset`
//! against it, with keys held and waiters queued.

use crate::common;

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::manager::names;
use common::Serve;
use common::Server;
use common::{expect_status, read_byte};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn local(s: &TcpStream) -> String {
    s.local_addr().unwrap().to_string()
}

/// Walks an answer field by field; every byte must be accounted for.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let b = self
            .buf
            .get(self.pos..self.pos + n)
            .unwrap_or_else(|| panic!("answer too short at byte {}: {:?}", self.pos, self.buf));
        self.pos += n;
        b
    }
    fn short(&mut self) -> Vec<u8> {
        let len = self.take(1)[0] as usize;
        self.take(len).to_vec()
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn end(&mut self) {
        assert_eq!(self.take(1), b"+", "the final '+'");
        assert_eq!(self.pos, self.buf.len(), "bytes after the final '+'");
    }
}

/// `KEYS` as the reference writes it: u32 count, then per key (sorted)
/// u8 len + key, u8 len + source, u8 len + peer "ip:port", i64 unix
/// seconds; then '+'. (Before the fix the source was missing, and the
/// reference's manager CLI failed after the first key.)
fn check_keys(answer: &[u8], expected: &[(&str, &str, &str)], from_ms: i64, to_ms: i64) {
    let mut c = Cursor {
        buf: answer,
        pos: 0,
    };
    assert_eq!(c.u32() as usize, expected.len(), "{answer:?}");
    for (key, source, peer) in expected {
        assert_eq!(c.short(), key.as_bytes());
        assert_eq!(c.short(), source.as_bytes(), "source of {key}");
        assert_eq!(c.short(), peer.as_bytes(), "peer of {key}");
        let secs = c.i64();
        assert!(
            (from_ms / 1000..=to_ms / 1000).contains(&secs),
            "{key}: held since {secs}, expected within [{from_ms}, {to_ms}] ms"
        );
    }
    c.end();
}

/// One expected KEYX entry: key, source, peer, waiters.
type Keyx<'a> = (&'a str, &'a str, &'a str, u32);

fn check_keyx(answer: &[u8], expected: &[Keyx], from_ms: i64, to_ms: i64) {
    let mut c = Cursor {
        buf: answer,
        pos: 0,
    };
    // The high bit: entries with a fencing token and a hold kind; the next
    // one: and a mode.
    assert_eq!(c.u32() as usize, expected.len() | 0xC000_0000, "{answer:?}");
    for (key, source, peer, waiting) in expected {
        assert_eq!(c.short(), key.as_bytes());
        assert_eq!(c.short(), source.as_bytes(), "source of {key}");
        assert_eq!(c.short(), peer.as_bytes(), "peer of {key}");
        let ms = c.i64();
        assert!((from_ms..=to_ms).contains(&ms), "{key}: since {ms}");
        assert_eq!(c.u32(), *waiting, "waiters of {key}");
        let token = c.i64();
        assert!(token > 0, "token of {key}");
        // Raw classic Locks: kept holds, not sessions, exclusive.
        assert_eq!(c.take(1), [0], "kind of {key}");
        assert_eq!(c.u32(), 1, "mode of {key}");
    }
    c.end();
}

/// Waits (at most 10 s) until KEYX reports these (key, waiters) pairs.
fn wait_for_waiters(server: &Server, expected: &[(&str, u32)]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = server.manage(b"KEYX");
        let mut c = Cursor {
            buf: &answer,
            pos: 0,
        };
        let n = c.u32() & !0xC000_0000;
        let mut got = Vec::new();
        for _ in 0..n {
            let key = String::from_utf8(c.short()).unwrap();
            c.short();
            c.short();
            c.i64();
            got.push((key, c.u32()));
            c.i64();
            c.take(1);
            c.u32();
        }
        let want: Vec<(String, u32)> = expected.iter().map(|(k, w)| (k.to_string(), *w)).collect();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waiters never became {want:?}: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn held(s: &mut TcpStream) {
    assert_eq!(read_byte(s), Some(b'+'), "the lock was not granted");
}

#[test]
fn reference_commands_byte_for_byte() {
    let server = Server::start_with(&["--read-timeout", "1s"]);
    assert_ne!(server.manager, server.addr);
    let from = now_ms();
    let mut h1 = server.send_lock(b"k1", b"s1");
    held(&mut h1);
    let mut h0 = server.send_lock(b"k0", b"s2");
    held(&mut h0);
    // One at a time, so their order in the queue is known.
    let mut w1 = server.send_lock(b"k1", b"w1");
    wait_for_waiters(&server, &[("k0", 0), ("k1", 1)]);
    let mut w2 = server.send_lock(b"k1", b"s2");
    wait_for_waiters(&server, &[("k0", 0), ("k1", 2)]);
    let mut w3 = server.send_lock(b"k0", b"s1");
    wait_for_waiters(&server, &[("k0", 1), ("k1", 2)]);
    let to = now_ms();

    // KEYS and KEYX, sorted by key.
    check_keys(
        &server.manage(b"KEYS"),
        &[("k0", "s2", &local(&h0)), ("k1", "s1", &local(&h1))],
        from,
        to,
    );
    check_keyx(
        &server.manage(b"KEYX"),
        &[("k0", "s2", &local(&h0), 1), ("k1", "s1", &local(&h1), 2)],
        from,
        to,
    );

    // RSET of one key: '+' for it, then the final '+'; the first waiter gets it.
    let mut request = b"RSET".to_vec();
    request.extend(names(&[b"k1"]));
    assert_eq!(server.manage(&request), b"++");
    held(&mut w1);
    let after_rset = now_ms();
    check_keyx(
        &server.manage(b"KEYX"),
        &[("k0", "s2", &local(&h0), 1), ("k1", "w1", &local(&w1), 1)],
        from,
        after_rset,
    );

    // RSET of nothing: just the final '+'.
    let mut request = b"RSET".to_vec();
    request.extend(names(&[]));
    assert_eq!(server.manage(&request), b"+");

    // RSBS of one source: its key passes to the next waiter, its waiter is
    // answered '-'.
    let mut request = b"RSBS".to_vec();
    request.extend(names(&[b"s2"]));
    assert_eq!(server.manage(&request), b"++");
    held(&mut w3);
    assert_eq!(read_byte(&mut w2), Some(b'-'), "s2's waiter withdrawn");
    check_keyx(
        &server.manage(b"KEYX"),
        &[("k0", "s1", &local(&w3), 0), ("k1", "w1", &local(&w1), 0)],
        from,
        now_ms(),
    );

    // RSBS with n = 0: the caller's IP is the source ('+', then the final '+').
    let mut by_ip = server.send_lock(b"k2", b"");
    held(&mut by_ip);
    let mut ip_waiter = server.send_lock(b"k1", b"");
    wait_for_waiters(&server, &[("k0", 0), ("k1", 1), ("k2", 0)]);
    check_keyx(
        &server.manage(b"KEYX"),
        &[
            ("k0", "s1", &local(&w3), 0),
            ("k1", "w1", &local(&w1), 1),
            ("k2", "127.0.0.1", &local(&by_ip), 0),
        ],
        from,
        now_ms(),
    );
    let mut request = b"RSBS".to_vec();
    request.extend(names(&[]));
    assert_eq!(server.manage(&request), b"++");
    assert_eq!(read_byte(&mut ip_waiter), Some(b'-'));
    check_keys(
        &server.manage(b"KEYS"),
        &[("k0", "s1", &local(&w3)), ("k1", "w1", &local(&w1))],
        from,
        now_ms(),
    );

    // Bad input: '-' (or a close), on that connection only.
    assert_eq!(server.manage(b"NOPE"), b"-");
    let mut s = common::serve::connect(server.manager);
    let mut request = b"RSET".to_vec();
    request.extend_from_slice(&2u32.to_le_bytes());
    request.extend_from_slice(b"\x02k9");
    s.write_all(&request).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut answer).unwrap();
    assert_eq!(answer, b"+-", "one key reset, then the list ended early");
    // A stalled command is closed without an answer after --read-timeout.
    let mut s = common::serve::connect(server.manager);
    s.write_all(b"RSE").unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut answer).unwrap();
    assert_eq!(answer, b"");
    assert!(started.elapsed() < Duration::from_secs(15));
    // A stalled list after a whole command gets '-'.
    let mut s = common::serve::connect(server.manager);
    s.write_all(b"RSBS\x01\x00").unwrap();
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut answer).unwrap();
    assert_eq!(answer, b"-");

    // The holders are untouched by all that.
    check_keys(
        &server.manage(b"KEYS"),
        &[("k0", "s1", &local(&w3)), ("k1", "w1", &local(&w1))],
        from,
        now_ms(),
    );
    drop((h0, h1));
}

fn keys_json(server: &Server, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["keys", "--json"];
    all.extend_from_slice(args);
    let out = expect_status(&mut server.lc(&all), 0);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn keys_and_reset_against_the_built_in_server() {
    let server = Serve::new().port_pair().start();
    let mut prod = server.send_lock(b"deploy/prod", b"ci-1");
    held(&mut prod);
    let mut stage = server.send_lock(b"deploy/stage", b"ci-2");
    held(&mut stage);
    let mut other = server.send_lock(b"other", b"ops");
    held(&mut other);
    let mut wa = server.send_lock(b"deploy/prod", b"w-a");
    wait_for_waiters(
        &server,
        &[("deploy/prod", 1), ("deploy/stage", 0), ("other", 0)],
    );
    let _wb = server.send_lock(b"deploy/prod", b"w-b");
    let _wc = server.send_lock(b"other", b"w-c");
    wait_for_waiters(
        &server,
        &[("deploy/prod", 2), ("deploy/stage", 0), ("other", 1)],
    );

    let all = keys_json(&server, &[]);
    let expected: [(&str, &str, String, u64); 3] = [
        ("deploy/prod", "ci-1", local(&prod), 2),
        ("deploy/stage", "ci-2", local(&stage), 0),
        ("other", "ops", local(&other), 1),
    ];
    assert_eq!(all.len(), 3, "{all:?}");
    for (v, (key, source, peer, waiting)) in all.iter().zip(&expected) {
        assert_eq!(v["key"], *key);
        assert_eq!(v["source"], *source);
        assert_eq!(v["peer"], peer.as_str());
        assert_eq!(v["waiting"], *waiting);
        assert!(v["held_ms"].as_u64().unwrap() < 60_000, "{v}");
        assert!(v["since"].as_str().unwrap().ends_with('Z'), "{v}");
    }

    let out = expect_status(&mut server.lc(&["keys"]), 0);
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].starts_with("KEY"), "{table}");
    for (line, (key, source, peer, waiting)) in lines[1..].iter().zip(&expected) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], *key, "{table}");
        assert_eq!(cols[1], *source, "{table}");
        assert_eq!(cols[2], peer, "{table}");
        assert_eq!(cols[4], "kept", "{table}");
        assert_eq!(cols[5], waiting.to_string(), "{table}");
        assert!(cols[6].parse::<u64>().is_ok(), "the TOKEN column: {table}");
    }

    let out = expect_status(&mut server.lc(&["keys", "deploy/*"]), 0);
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(!table.contains("other"), "{table}");
    let some = keys_json(&server, &["deploy/*"]);
    let keys: Vec<&str> = some.iter().map(|v| v["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["deploy/prod", "deploy/stage"]);

    // `reset` over the lock protocol still works: the first waiter gets it.
    expect_status(&mut server.lc(&["reset", "deploy/prod"]), 0);
    held(&mut wa);
    let prod_now = keys_json(&server, &["deploy/prod"]);
    assert_eq!(prod_now.len(), 1);
    assert_eq!(prod_now[0]["source"], "w-a");
    assert_eq!(prod_now[0]["peer"], local(&wa).as_str());
    assert_eq!(prod_now[0]["waiting"], 1);
}

#[test]
fn the_manager_defaults_to_the_next_port_and_can_be_moved() {
    let server = Serve::new().port_pair().start();
    assert_eq!(server.manager.port(), server.addr.port() + 1);
    assert_eq!(server.manage(b"KEYS"), b"\0\0\0\0+");
    let moved = Server::start_with(&["--manager", "127.0.0.1:0"]);
    let m: SocketAddr = moved.manager;
    assert!(m.ip().is_loopback());
    assert_eq!(moved.manage(b"KEYX"), b"\0\0\0\xc0+");
}
