//! What the built-in server's benchmarks (`bench_server`, `bench_sessions`)
//! share: the server process, connections, the file limit, memory and
//! medians. A folder without `main.rs`, so cargo does not take it for an
//! example of its own.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

/// A classic frame: `[action][key len][key]([source len][source])`.
pub(crate) fn frame(action: u8, key: &[u8], source: Option<&[u8]>) -> Vec<u8> {
    let mut f = vec![action, key.len() as u8];
    f.extend_from_slice(key);
    if let Some(s) = source {
        f.push(s.len() as u8);
        f.extend_from_slice(s);
    }
    f
}

/// A server process that prints `listening on ADDR` first on stdout;
/// killed when dropped.
pub(crate) struct Proc {
    pub addr: SocketAddr,
    pub child: Child,
    /// Its stderr, where the caller asked for it piped.
    pub stderr: Option<ChildStderr>,
}

impl Proc {
    /// Starts `cmd` (stderr as the caller set it) and reads its address.
    pub(crate) fn start(mut cmd: Command) -> Proc {
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

    pub(crate) fn pid(&self) -> u32 {
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
pub(crate) fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit, written by getrlimit and read by setrlimit during the calls only.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = want.min(lim.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

/// A connection with Nagle off: one-byte requests go out at once. It
/// closes with a reset (`SO_LINGER` 0), so the client keeps no TIME_WAIT:
/// otherwise a run's ~30,000 closed connections hold most of the 28,000
/// ephemeral ports and cap the 32-client floor below the servers it is
/// meant to bound. Every server and every floor use this same client.
pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    use std::os::fd::AsRawFd;
    let s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    let reset = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a `linger` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&reset as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER");
    s
}

/// `n` connections that each send `request` (a lock that will wait), then
/// `settle` for every request to reach the server's queue.
pub(crate) fn queue_waiters(
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
pub(crate) fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The release `lc-cli` built beside this bench program (so a
/// `CARGO_TARGET_DIR` elsewhere is followed): `.../release/examples/bench_x`
/// -> `.../release/lc-cli`.
pub(crate) fn lc_cli_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let bin = exe
        .parent()
        .and_then(|examples| examples.parent())
        .expect("target/release/examples")
        .join("lc-cli");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --release` first",
        bin.display()
    );
    bin
}

/// The floor every ratio is measured against, re-run from this program
/// (`--floor-server`): see [`floor_server`].
pub(crate) fn floor() -> Proc {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg("--floor-server").stderr(Stdio::null());
    Proc::start(cmd)
}

/// A one-thread epoll server on 127.0.0.1:0 that answers every byte it
/// reads with one byte and closes a connection when its client does: what
/// a lock server could at best do per request here (no runtime, no table,
/// no wake-up of another thread). Never returns.
pub(crate) fn floor_server() {
    use std::os::fd::AsRawFd;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    println!("listening on {}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    let lfd = listener.as_raw_fd();
    // SAFETY: plain epoll and socket calls on descriptors this loop owns;
    // the buffers passed are live and as long as said.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        assert!(ep >= 0, "epoll_create1");
        let watch = |fd: i32| {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
        };
        watch(lfd);
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut buf = [0u8; 64];
        loop {
            let n = libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1);
            for ev in &events[..n.max(0) as usize] {
                let fd = ev.u64 as i32;
                if fd == lfd {
                    loop {
                        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
                        let c =
                            libc::accept4(lfd, std::ptr::null_mut(), std::ptr::null_mut(), flags);
                        if c < 0 {
                            break;
                        }
                        let on: libc::c_int = 1;
                        libc::setsockopt(
                            c,
                            libc::IPPROTO_TCP,
                            libc::TCP_NODELAY,
                            (&on as *const libc::c_int).cast(),
                            std::mem::size_of::<libc::c_int>() as u32,
                        );
                        watch(c);
                    }
                    continue;
                }
                let r = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                if r > 0 {
                    libc::write(fd, buf.as_ptr().cast(), r as usize);
                } else if r == 0 || *libc::__errno_location() != libc::EAGAIN {
                    libc::close(fd); // also leaves the epoll set
                }
            }
        }
    }
}

/// The reference Locking-Center server (Go), if `LC_REFERENCE_BIN` names
/// its binary: started on a free port of loopback (and the next one, its
/// manager port), ready once it accepts.
pub(crate) fn reference() -> Option<Proc> {
    let bin = std::env::var_os("LC_REFERENCE_BIN")?;
    let addr = free_port_pair();
    let mut child = Command::new(&bin)
        .env("BIND_ADDRESS", addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin:?}: {e}"));
    let ready = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        if std::time::Instant::now() > ready || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("the reference server {bin:?} did not start on {addr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Proc {
        addr,
        child,
        stderr: None,
    })
}

/// What the benches print where the reference is not measured.
pub(crate) const NO_REFERENCE: &str = "Go reference: not given (set LC_REFERENCE_BIN)";

/// A loopback port that is free, and whose successor is too.
fn free_port_pair() -> SocketAddr {
    loop {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = a.local_addr().unwrap();
        let next = SocketAddr::new(addr.ip(), addr.port().wrapping_add(1));
        if addr.port() < u16::MAX && std::net::TcpListener::bind(next).is_ok() {
            return addr;
        }
    }
}
