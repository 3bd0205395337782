//! The one way the tests start `lc-cli serve`: [`Serve`] collects the
//! options, [`Server`] is the running process. It always runs with `-v`; its
//! addresses are read from the banner on stdout and its log lines (stderr)
//! are kept so a test can wait for what the server has done (a waiter
//! queued, a withdrawal) instead of sleeping. Killed (SIGKILL) when dropped;
//! if the test is failing, its log is printed then.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{lc_at, wait_until, BIN};

/// The options of a server to start.
#[derive(Default, Clone)]
pub(crate) struct Serve {
    args: Vec<String>,
    env: Vec<(String, String)>,
    listen: Option<String>,
    port_pair: bool,
    /// The server's soft and hard limit of open files (`ulimit -n`).
    file_limit: Option<u64>,
}

/// A running `lc-cli serve`.
pub(crate) struct Server {
    pub addr: SocketAddr,
    /// 0.0.0.0:0 when it is off (`--token-file` without `--manager`).
    pub manager: SocketAddr,
    /// Set when started with `--metrics`.
    pub metrics: Option<SocketAddr>,
    pub child: Child,
    lines: Arc<(Mutex<Vec<String>>, Condvar)>,
}

impl Serve {
    pub(crate) fn new() -> Serve {
        Serve::default()
    }

    /// More `serve` arguments (`--data`, `--read-timeout`, `--metrics`...).
    pub(crate) fn args(mut self, extra: &[&str]) -> Serve {
        self.args.extend(extra.iter().map(|s| s.to_string()));
        self
    }

    pub(crate) fn env(mut self, name: &str, value: &str) -> Serve {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Starts the server with at most `n` open files (`ulimit -n N`).
    pub(crate) fn file_limit(mut self, n: u64) -> Serve {
        self.file_limit = Some(n);
        self
    }

    /// Listens on `addr` instead of `127.0.0.1:0`.
    pub(crate) fn listen(mut self, addr: &str) -> Serve {
        self.listen = Some(addr.to_string());
        self
    }

    /// Puts the manager on the lock port + 1, where `keys` and `reset` look
    /// for it by default: tries free pairs of ports, at most 20.
    pub(crate) fn port_pair(mut self) -> Serve {
        self.port_pair = true;
        self
    }

    /// Starts it again on a port a server just had (it may not be free
    /// at once after a SIGKILL): tries for at most 20 s.
    pub(crate) fn restart(self) -> Server {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.clone().try_start() {
                Ok(s) => return s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err((status, log)) => panic!("no restart ({status:?}):\n{log}"),
            }
        }
    }

    pub(crate) fn start(self) -> Server {
        if !self.port_pair {
            return self.try_start().unwrap_or_else(|(status, log)| {
                panic!("lc-cli serve did not start ({status:?}):\n{log}")
            });
        }
        for _ in 0..20 {
            let port = super::free_port_pair();
            // Another process may take the pair meanwhile: try the next one.
            if let Ok(server) = self
                .clone()
                .listen(&format!("127.0.0.1:{port}"))
                .try_start()
            {
                assert_eq!(server.manager.port(), port + 1);
                return server;
            }
        }
        panic!("no free pair of ports for lc-cli serve in 20 tries");
    }

    /// Starts the server; if it exits before printing its addresses, returns
    /// its exit status and log instead.
    pub(crate) fn try_start(self) -> Result<Server, (ExitStatus, String)> {
        let listen = self.listen.as_deref().unwrap_or("127.0.0.1:0");
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "-v", "--listen", listen])
            .args(&self.args)
            .env_remove("DATA_PATH")
            .env_remove("BIND_ADDRESS")
            .env_remove("LC_SERVER")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(n) = self.file_limit {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure calls only setrlimit, async-signal-safe,
            // on a struct of its own stack, and allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    match libc::setrlimit(libc::RLIMIT_NOFILE, &lim) {
                        0 => Ok(()),
                        _ => Err(std::io::Error::last_os_error()),
                    }
                });
            }
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
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut read = |prefix: &str| {
            let mut line = String::new();
            out.read_line(&mut line).ok()?;
            line.trim().strip_prefix(prefix)?.parse::<SocketAddr>().ok()
        };
        let addr = read("listening on ");
        let manager = read("manager on ").or_else(|| {
            (!self.args.iter().any(|a| a == "--manager")
                && self.args.iter().any(|a| a == "--token-file"))
            .then(|| SocketAddr::from(([0, 0, 0, 0], 0)))
        });
        let metrics = if self.args.iter().any(|a| a == "--metrics") {
            read("metrics on ")
        } else {
            None
        };
        let (Some(addr), Some(manager)) = (addr, manager) else {
            let _ = child.kill();
            let status = child.wait().unwrap();
            // The reader thread ends at EOF; give it that long, bounded.
            std::thread::sleep(Duration::from_millis(100));
            let log = lines.0.lock().unwrap().join("\n");
            return Err((status, log));
        };
        Ok(Server {
            addr,
            manager,
            metrics,
            child,
            lines,
        })
    }
}

impl Server {
    pub(crate) fn start() -> Server {
        Serve::new().start()
    }

    pub(crate) fn start_with(extra: &[&str]) -> Server {
        Serve::new().args(extra).start()
    }

    /// `lc-cli --server ADDR ARGS...`, ready to run.
    pub(crate) fn lc(&self, args: &[&str]) -> Command {
        lc_at(&self.addr.to_string(), args)
    }

    /// The address that reaches both ports: `lc://LOCK?manager=MANAGER`.
    pub(crate) fn url(&self) -> String {
        format!("lc://{}?manager={}", self.addr, self.manager)
    }

    pub(crate) fn connect(&self) -> TcpStream {
        connect(self.addr)
    }

    /// Sends raw bytes, returns the one-byte answer (None if closed without one).
    pub(crate) fn raw(&self, frame: &[u8]) -> Option<u8> {
        let mut s = self.connect();
        s.write_all(frame).unwrap();
        super::read_byte(&mut s)
    }

    /// Sends a Lock request on a fresh connection, without reading the answer.
    pub(crate) fn send_lock(&self, key: &[u8], source: &[u8]) -> TcpStream {
        let mut s = self.connect();
        s.write_all(&super::frame(1, key, Some(source))).unwrap();
        s
    }

    /// Sends `request` to the manager port and reads everything it answers
    /// until it closes.
    pub(crate) fn manage(&self, request: &[u8]) -> Vec<u8> {
        let mut s = connect(self.manager);
        s.write_all(request).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        answer
    }

    /// `GET /metrics`: the body of a 200 answer.
    pub(crate) fn scrape(&self) -> String {
        let metrics = self.metrics.expect("started with --metrics");
        let (status, body) = super::manager::http_get(metrics, "/metrics");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}\n{body}");
        body
    }

    pub(crate) fn log(&self) -> String {
        self.lines.0.lock().unwrap().join("\n")
    }

    /// How many log lines so far contain `needle`.
    pub(crate) fn count(&self, needle: &str) -> usize {
        let lines = self.lines.0.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    /// Whether a log line contains every one of `parts`.
    pub(crate) fn logged(&self, parts: &[&str]) -> bool {
        let lines = self.lines.0.lock().unwrap();
        lines.iter().any(|l| parts.iter().all(|p| l.contains(p)))
    }

    /// Waits (at most `limit`) until at least `n` log lines contain `needle`.
    pub(crate) fn wait_for(&self, needle: &str, n: usize, limit: Duration) {
        let (lock, cvar) = &*self.lines;
        let deadline = Instant::now() + limit;
        let mut lines = lock.lock().unwrap();
        loop {
            if lines.iter().filter(|l| l.contains(needle)).count() >= n {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                let log = lines.join("\n");
                // Not while holding the lock: a poisoned one would fail
                // the drop's log too.
                drop(lines);
                panic!("no {n} log line(s) with {needle:?} within {limit:?}; log:\n{log}");
            }
            lines = cvar.wait_timeout(lines, deadline - now).unwrap().0;
        }
    }

    /// Waits (up to 10 s) until the server logs that `source` is queued on `key`.
    pub(crate) fn wait_queued(&self, key: &str, source: &str) {
        let what = [
            "queue ".to_string(),
            format!("'{key}'"),
            format!("source '{source}'"),
        ];
        let parts: Vec<&str> = what.iter().map(String::as_str).collect();
        assert!(
            wait_until(Duration::from_secs(10), || self.logged(&parts)),
            "'{source}' was never queued on '{key}'; server log:\n{}",
            self.log()
        );
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGKILL, and reaps it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` and waits (at most `limit`) for the exit.
    pub(crate) fn stop_with(&mut self, signal: i32, limit: Duration) -> Option<ExitStatus> {
        // SAFETY: kill(2) takes only integers: no memory of ours is involved.
        unsafe { libc::kill(self.pid(), signal) };
        let mut status = None;
        wait_until(limit, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- lc-cli serve log ({}) ---\n{}", self.addr, self.log());
        }
    }
}

/// A TCP connection with Nagle off and a 20 s read timeout.
pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Raises this process's soft limit on open files to `want` (at most the
/// hard limit); children inherit it.
pub(crate) fn raise_fd_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit that the call fills.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let target: libc::rlim_t = want.min(lim.rlim_max);
    if lim.rlim_cur < target {
        lim.rlim_cur = target;
        // SAFETY: `lim` is a valid rlimit, read during the call only.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
    // SAFETY: `lim` is a valid, writable rlimit that the call fills.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    lim.rlim_cur
}

/// True if nothing is readable on `s` within `wait` (still waiting).
pub(crate) fn silent(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 1];
    let quiet = match s.read(&mut b) {
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        Ok(_) => false,
    };
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    quiet
}

pub(crate) fn data_arg(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}
