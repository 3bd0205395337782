//! What the built-in server's benchmarks (`bench_server`, `bench_sessions`)
//! share: the server process, connections, the file limit, memory and
//! medians. A folder without `main.rs`, so cargo does not take it for an
//! example of its own.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

/// A server process that prints `listening on ADDR` first on stdout;
/// killed when dropped.
pub struct Proc {
    pub addr: SocketAddr,
    pub child: Child,
    /// Its stderr, where the caller asked for it piped.
    pub stderr: Option<ChildStderr>,
}

impl Proc {
    /// Starts `cmd` (stderr as the caller set it) and reads its address.
    pub fn start(mut cmd: Command) -> Proc {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        let stderr = child.stderr.take();
        Proc {
            addr,
            child,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raises the open-file limit to `want`, or to the hard limit if lower.
pub fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = want.min(lim.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

/// A connection with Nagle off: one-byte requests go out at once.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    s
}

/// `n` connections that each send `request` (a lock that will wait), then
/// `settle` for every request to reach the server's queue.
pub fn queue_waiters(
    addr: SocketAddr,
    n: usize,
    request: &[u8],
    settle: Duration,
) -> Vec<TcpStream> {
    let conns = (0..n)
        .map(|_| {
            let mut s = connect(addr);
            s.write_all(request).unwrap();
            s
        })
        .collect();
    std::thread::sleep(settle);
    conns
}

/// Resident memory of a process, bytes (`VmRSS`).
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
