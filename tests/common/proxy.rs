//! A TCP proxy on 127.0.0.1 in front of one server, for partition tests:
//! `freeze` stops forwarding in both directions while every connection
//! stays open (no bytes, no FIN, no RST), as a network path that goes
//! silent does; new connections are accepted and frozen too. Threads only,
//! stopped when the proxy is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Proxy {
    pub port: u16,
    frozen: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

/// How often a pump looks at the flags while idle or frozen.
const POLL: Duration = Duration::from_millis(5);

impl Proxy {
    pub(crate) fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s) = (frozen.clone(), stop.clone());
        std::thread::spawn(move || accept_loop(listener, target_port, f, s));
        Proxy { port, frozen, stop }
    }

    /// `127.0.0.1:PORT`
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// From now on nothing is forwarded either way; connections stay open.
    pub(crate) fn freeze(&self) {
        self.frozen.store(true, SeqCst);
    }

    /// Forwarding resumes, with whatever was held back.
    pub(crate) fn thaw(&self) {
        self.frozen.store(false, SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
    }
}

fn accept_loop(listener: TcpListener, target: u16, frozen: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    while !stop.load(SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let (f, s) = (frozen.clone(), stop.clone());
                    std::thread::spawn(move || pump(from, to, f, s));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// Copies `from` to `to` until either side closes or the proxy stops. While
/// frozen it reads nothing, and holds back what it had already read.
fn pump(mut from: TcpStream, mut to: TcpStream, frozen: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    from.set_read_timeout(Some(POLL * 4)).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let wait_thawed = || {
        while frozen.load(SeqCst) {
            if stop.load(SeqCst) {
                return false;
            }
            std::thread::sleep(POLL);
        }
        !stop.load(SeqCst)
    };
    loop {
        if !wait_thawed() {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if !wait_thawed() || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
