//! Starting the real binary and real servers on 127.0.0.1 for the tests.
#![allow(dead_code)]

pub mod serve;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_lc-cli");

/// A `lc-cli serve` process on 127.0.0.1:0, killed when dropped.
pub struct Server {
    pub addr: SocketAddr,
    pub child: Child,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lc-cli serve");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the bound address");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from serve: {line:?}"))
            .parse()
            .unwrap();
        Server { addr, child }
    }

    /// `lc-cli --server ADDR ARGS...`, ready to run.
    pub fn lc(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--server").arg(self.addr.to_string()).args(args);
        cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
        cmd
    }

    /// Sends raw bytes, returns the one-byte answer (None if closed without one).
    pub fn raw(&self, frame: &[u8]) -> Option<u8> {
        let mut s = self.connect();
        s.write_all(frame).unwrap();
        read_byte(&mut s)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn read_byte(s: &mut TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(1) => Some(b[0]),
        _ => None,
    }
}

pub fn frame(action: u8, key: &[u8], source: Option<&[u8]>) -> Vec<u8> {
    let mut f = vec![action, key.len() as u8];
    f.extend_from_slice(key);
    if let Some(s) = source {
        f.push(s.len() as u8);
        f.extend_from_slice(s);
    }
    f
}

/// Runs a command and shows the exact command line and its output if the
/// status is not the expected one.
pub fn expect_status(cmd: &mut Command, expected: i32) -> Output {
    let line = format!("{cmd:?}");
    let out = cmd.output().expect("run lc-cli");
    // Killed by signal N (lc-cli re-raises its command's) reads as 128+N, as
    // a shell's `$?`.
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .or(out.status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    assert_eq!(
        code,
        expected,
        "\ncommand: {line}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Polls `cond` every 10 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}
pub mod cli;
pub mod curator;
pub mod etcd;
pub mod manager;
pub mod pg;
pub mod proxy;
pub mod redis;
pub mod spans;
pub mod timeline;
pub mod zk;
