//! A ZooKeeper connection reset under a request in flight (a server that
//! dies with the socket open sends an RST, and the client library fails
//! every request in flight with the I/O error "Connection reset by peer")
//! is a loss of connection within the session: lc-cli sends the request
//! again once the library has reconnected, as after an end of stream. It
//! once came out as 76 ("answered something unexpected") from a read of
//! the lock node during a restart.
//!
//! Deterministic: a proxy in front of the server reads the client's
//! frames, forwards the one request it is told to catch (by opcode and
//! path), drops the server's answer to it and resets the client's
//! connection (SO_LINGER 0, then close: an RST, not a FIN). Later
//! connections (the library's reconnection) are forwarded untouched.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::zk::Zk;
use common::{expect_status, wait_until};

/// ZooKeeper's opcodes that the caught requests use.
const GET_DATA: i32 = 4;
const CREATE: [i32; 4] = [1, 15, 19, 21];

/// The request to catch: one of these opcodes on a path containing `path`.
#[derive(Clone)]
struct Catch {
    ops: Vec<i32>,
    path: String,
}

struct ResetProxy {
    port: u16,
    armed: Arc<Mutex<Option<Catch>>>,
    /// How many requests were caught (and their connections reset).
    caught: Arc<Mutex<u32>>,
    stop: Arc<AtomicBool>,
}

impl ResetProxy {
    fn start(target: u16) -> ResetProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(Mutex::new(None));
        let caught = Arc::new(Mutex::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, c, s) = (armed.clone(), caught.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                            continue;
                        };
                        let (a, c, s) = (a.clone(), c.clone(), s.clone());
                        std::thread::spawn(move || relay(client, server, a, c, s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        ResetProxy {
            port,
            armed,
            caught,
            stop,
        }
    }

    fn arm(&self, catch: Catch) {
        *self.armed.lock().unwrap() = Some(catch);
    }

    fn caught(&self) -> u32 {
        *self.caught.lock().unwrap()
    }
}

impl Drop for ResetProxy {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
    }
}

/// Whole frames (`[len:u32be][body]`) at the front of `buf`, taken out.
fn frames(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        if buf.len() < 4 {
            return out;
        }
        let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        if buf.len() < 4 + len {
            return out;
        }
        out.push(buf.drain(..4 + len).collect());
    }
}

fn int(frame: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(frame.get(at..at + 4)?.try_into().ok()?))
}

/// A request frame's xid, if it is the one to catch: `[len][xid][op]
/// [path len][path]...`.
fn matches(frame: &[u8], catch: &Catch) -> Option<i32> {
    let (xid, op, len) = (int(frame, 4)?, int(frame, 8)?, int(frame, 12)?);
    let path = frame.get(16..16 + usize::try_from(len).ok()?)?;
    (catch.ops.contains(&op) && String::from_utf8_lossy(path).contains(&catch.path)).then_some(xid)
}

/// Resets `s`: SO_LINGER 0, so the close that follows sends an RST.
fn set_reset_on_close(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid open socket descriptor (borrowed from `s`, which
    // lives across the call) and a pointer to a properly sized `linger`
    // that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt SO_LINGER");
}

/// One connection, both ways, in one thread (it owns both sockets, so
/// dropping them closes them). The first frame each way is the session's
/// handshake; after it, requests are matched against the armed catch.
fn relay(
    mut client: TcpStream,
    mut server: TcpStream,
    armed: Arc<Mutex<Option<Catch>>>,
    caught: Arc<Mutex<u32>>,
    stop: Arc<AtomicBool>,
) {
    client.set_nonblocking(true).unwrap();
    server.set_nonblocking(true).unwrap();
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let (mut up_seen, mut down_seen) = (0usize, 0usize);
    let mut doomed: Option<i32> = None;
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(SeqCst) {
        let mut idle = true;
        match client.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                idle = false;
                up.extend_from_slice(&buf[..n]);
                for frame in frames(&mut up) {
                    up_seen += 1;
                    if up_seen > 1 && doomed.is_none() {
                        let mut a = armed.lock().unwrap();
                        if let Some(xid) = a.as_ref().and_then(|c| matches(&frame, c)) {
                            *a = None;
                            doomed = Some(xid);
                        }
                    }
                    if server.write_all(&frame).is_err() {
                        return;
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
        match server.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                idle = false;
                down.extend_from_slice(&buf[..n]);
                for frame in frames(&mut down) {
                    down_seen += 1;
                    if down_seen > 1 && doomed.is_some() && int(&frame, 4) == doomed {
                        // The answer is dropped; the client gets an RST.
                        *caught.lock().unwrap() += 1;
                        set_reset_on_close(&client);
                        return;
                    }
                    if client.write_all(&frame).is_err() {
                        return;
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
        if idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn lc_via(proxy: &ResetProxy, args: &[&str]) -> Command {
    let mut cmd = Command::new(common::BIN);
    cmd.arg("--server")
        .arg(format!(
            "zk://127.0.0.1:{}/r?session-timeout=4s",
            proxy.port
        ))
        .args(["--connect-timeout", "10s"])
        .args(args);
    cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
    cmd
}

/// `keys` whose read of the holder's node is answered by a reset: the
/// read is sent again after the reconnection, and the holder is listed.
#[test]
fn reset_under_a_read_is_retried() {
    let zk = Zk::start();
    let proxy = ResetProxy::start(zk.port);
    let mut holder = zk
        .lc_session(
            "/r",
            "4s",
            &["lock", "k", "--source", "h1", "--", "sleep", "30"],
        )
        .spawn()
        .unwrap();
    zk.wait_queue_len("/r/k", 1);
    proxy.arm(Catch {
        ops: vec![GET_DATA],
        path: "/r/k/".into(),
    });
    let out = expect_status(&mut lc_via(&proxy, &["keys"]), 0);
    assert_eq!(proxy.caught(), 1, "the read was not caught");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("h1"), "{text}");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// A lock request whose create is done by the server but answered by a
/// reset: lc-cli finds its node by its unique prefix after the
/// reconnection (no second node), holds, runs the command and leaves the
/// queue empty.
#[test]
fn reset_under_a_create_finds_the_node() {
    let zk = Zk::start();
    let proxy = ResetProxy::start(zk.port);
    proxy.arm(Catch {
        ops: CREATE.to_vec(),
        path: "/r/k/_c_".into(),
    });
    let out = expect_status(&mut lc_via(&proxy, &["lock", "k", "--", "echo", "ran"]), 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert_eq!(proxy.caught(), 1, "the create was not caught");
    assert!(
        wait_until(Duration::from_secs(10), || zk.queue("/r/k").is_empty()),
        "left in the queue: {:?}",
        zk.queue("/r/k")
    );
}
