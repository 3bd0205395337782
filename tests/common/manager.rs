//! `lc-cli serve` with its manager port (and metrics endpoint) known, plus
//! tiny raw clients for the manager protocol and for HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::BIN;

/// A `lc-cli serve` process whose addresses were read from its stdout;
/// killed when dropped.
pub struct ManagedServer {
    pub addr: SocketAddr,
    pub manager: SocketAddr,
    pub metrics: Option<SocketAddr>,
    pub child: Child,
}

impl ManagedServer {
    /// Starts `lc-cli serve --listen 127.0.0.1:0 EXTRA...` (the manager on a
    /// port of its own).
    pub fn start(extra: &[&str]) -> ManagedServer {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Self::spawn(&args).expect("lc-cli serve did not start")
    }

    /// Starts a server whose manager is on the lock port + 1 (the default),
    /// as `lc-cli keys` expects: looks for a free pair of ports, at most 20
    /// tries.
    pub fn start_on_port_pair(extra: &[&str]) -> ManagedServer {
        for _ in 0..20 {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = probe.local_addr().unwrap().port();
            drop(probe);
            if port == u16::MAX || TcpListener::bind(("127.0.0.1", port + 1)).is_err() {
                continue;
            }
            let listen = format!("127.0.0.1:{port}");
            let mut args = vec!["--listen", listen.as_str()];
            args.extend_from_slice(extra);
            if let Some(s) = Self::spawn(&args) {
                assert_eq!(s.manager.port(), port + 1);
                return s;
            }
        }
        panic!("no free pair of ports for lc-cli serve in 20 tries");
    }

    /// None if the server exited before printing its addresses.
    fn spawn(args: &[&str]) -> Option<ManagedServer> {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(args)
            .env_remove("DATA_PATH")
            .env_remove("BIND_ADDRESS")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lc-cli serve");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut read = |prefix: &str| {
            let mut line = String::new();
            out.read_line(&mut line).ok()?;
            line.trim().strip_prefix(prefix)?.parse::<SocketAddr>().ok()
        };
        let addr = read("listening on ");
        let manager = read("manager on ");
        let metrics = if args.contains(&"--metrics") {
            read("metrics on ")
        } else {
            None
        };
        match (addr, manager) {
            (Some(addr), Some(manager)) => Some(ManagedServer {
                addr,
                manager,
                metrics,
                child,
            }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }

    pub fn connect(&self) -> TcpStream {
        connect(self.addr)
    }

    /// Sends a Lock request on a fresh connection, without reading the answer.
    pub fn send_lock(&self, key: &[u8], source: &[u8]) -> TcpStream {
        let mut s = self.connect();
        s.write_all(&super::frame(1, key, Some(source))).unwrap();
        s
    }

    /// Sends `request` to the manager port and reads everything it answers
    /// until it closes.
    pub fn manage(&self, request: &[u8]) -> Vec<u8> {
        let mut s = connect(self.manager);
        s.write_all(request).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        answer
    }

    /// `GET /metrics`: the body of a 200 answer.
    pub fn scrape(&self) -> String {
        let (status, body) = http_get(self.metrics.expect("started with --metrics"), "/metrics");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}\n{body}");
        body
    }

    /// `lc-cli --server ADDR ARGS...`, ready to run.
    pub fn lc(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--server").arg(self.addr.to_string()).args(args);
        cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
        cmd
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// A plain HTTP/1.1 GET: the status line and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = connect(addr);
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// `u32 n` then n × (`u8 len`, bytes): the body of RSET and RSBS.
pub fn names(names: &[&[u8]]) -> Vec<u8> {
    let mut out = (names.len() as u32).to_le_bytes().to_vec();
    for n in names {
        out.push(n.len() as u8);
        out.extend_from_slice(n);
    }
    out
}

/// The value of an unlabelled sample in Prometheus text.
pub fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}
