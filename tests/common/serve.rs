//! `lc-cli serve` with its log captured, for tests that must know what the
//! server has done (a waiter queued, a withdrawal) before going on.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::BIN;

/// A `lc-cli serve -v` process on 127.0.0.1:0 whose stderr lines are kept;
/// killed (SIGKILL) when dropped.
pub struct LoggedServer {
    pub addr: SocketAddr,
    pub child: Child,
    lines: Arc<(Mutex<Vec<String>>, Condvar)>,
}

impl LoggedServer {
    pub fn start(extra: &[&str]) -> LoggedServer {
        LoggedServer::start_env(extra, &[]).unwrap_or_else(|(status, log)| {
            panic!("lc-cli serve did not start ({status:?}):\n{log}")
        })
    }

    /// Starts the server; if it exits before printing its address, returns
    /// its exit status and log instead.
    pub fn start_env(
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<LoggedServer, (ExitStatus, String)> {
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "-v"]);
        // A given address (a restart on the same port) replaces the default.
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(extra)
            .env_remove("DATA_PATH")
            .env_remove("BIND_ADDRESS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start lc-cli serve");
        let lines = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let (lock, cvar) = &*sink;
                lock.lock().unwrap().push(line);
                cvar.notify_all();
            }
        });
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            let status = child.wait().unwrap();
            // Give the reader thread a moment to collect the last lines.
            std::thread::sleep(Duration::from_millis(100));
            let log = lines.0.lock().unwrap().join("\n");
            return Err((status, log));
        };
        Ok(LoggedServer {
            addr: addr.parse().unwrap(),
            child,
            lines,
        })
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Sends a frame on a fresh connection and returns the one-byte answer.
    pub fn raw(&self, frame: &[u8]) -> Option<u8> {
        let mut s = self.connect();
        s.write_all(frame).unwrap();
        super::read_byte(&mut s)
    }

    /// How many log lines so far contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        let lines = self.lines.0.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    /// Waits (at most `limit`) until at least `n` log lines contain `needle`.
    pub fn wait_for(&self, needle: &str, n: usize, limit: Duration) {
        let (lock, cvar) = &*self.lines;
        let deadline = Instant::now() + limit;
        let mut lines = lock.lock().unwrap();
        loop {
            if lines.iter().filter(|l| l.contains(needle)).count() >= n {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "no {n} log line(s) with {needle:?} within {limit:?}; log:\n{}",
                    lines.join("\n")
                );
            }
            lines = cvar.wait_timeout(lines, deadline - now).unwrap().0;
        }
    }

    pub fn log(&self) -> String {
        self.lines.0.lock().unwrap().join("\n")
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` and waits (at most `limit`) for the exit.
    pub fn stop_with(&mut self, signal: i32, limit: Duration) -> Option<ExitStatus> {
        unsafe { libc::kill(self.pid(), signal) };
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for LoggedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raises this process's soft limit on open files to `want` (at most the
/// hard limit); children inherit it.
pub fn raise_fd_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let target: libc::rlim_t = want.min(lim.rlim_max);
    if lim.rlim_cur < target {
        lim.rlim_cur = target;
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    lim.rlim_cur
}

/// A Lock request on a fresh connection, without waiting for the answer.
pub fn send_lock(server: &LoggedServer, key: &[u8], source: &[u8]) -> TcpStream {
    let mut s = server.connect();
    s.write_all(&super::frame(1, key, Some(source))).unwrap();
    s
}

/// True if nothing is readable on `s` within `wait` (still waiting).
pub fn silent(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 1];
    let quiet = match std::io::Read::read(s, &mut b) {
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        Ok(_) => false,
    };
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    quiet
}

pub fn data_arg(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}
