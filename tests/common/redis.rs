//! Private redis-server instances on 127.0.0.1 for the Redis backend tests,
//! stopped by PID when dropped. By default a node keeps every write (AOF,
//! `appendfsync always`, in a temp dir), so lc-cli trusts it at once; a
//! volatile node (no persistence) is what a restart empties, and lc-cli
//! counts it only once it has been up for a lease.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// The AOF's directory; None: volatile.
    dir: Option<tempfile::TempDir>,
    /// More redis-server options (a password, TLS).
    extra: Vec<String>,
    /// The default user's password, for the test's own connections.
    password: Option<String>,
}

/// A port nobody listens on right now, below the ephemeral range
/// ([`super::free_ports_in_a_row`]).
pub(crate) fn free_port() -> u16 {
    super::free_ports_in_a_row(1)
}

/// On tmpfs where there is one: the AOF survives a restart of the server
/// (all the tests do), and `fsync` costs nothing.
fn aof_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a dir for the AOF")
}

impl RedisServer {
    /// A node that keeps its data across a restart.
    pub(crate) fn start() -> RedisServer {
        RedisServer::start_mode(true)
    }

    /// A node without persistence: a restart empties it.
    pub(crate) fn start_volatile() -> RedisServer {
        RedisServer::start_mode(false)
    }

    /// A durable node on a port chosen beforehand (clients may already be
    /// trying it).
    pub(crate) fn start_at(port: u16) -> RedisServer {
        let mut server = RedisServer {
            port,
            child: None,
            dir: Some(aof_dir()),
            extra: Vec::new(),
            password: None,
        };
        assert!(server.try_start(), "redis-server did not start on {port}");
        server
    }

    fn start_mode(durable: bool) -> RedisServer {
        RedisServer::start_secured(durable, &[], None)
    }

    /// A node with more options (`--tls-port`, ...) whose default user needs
    /// `password`, when given (`--requirepass` is added here).
    pub(crate) fn start_secured(
        durable: bool,
        extra: &[String],
        password: Option<&str>,
    ) -> RedisServer {
        let mut extra = extra.to_vec();
        if let Some(p) = password {
            extra.extend(["--requirepass".to_string(), p.to_string()]);
        }
        // Redis cannot bind port 0, so pick a free port and retry on a race.
        for _ in 0..5 {
            let mut server = RedisServer {
                port: free_port(),
                child: None,
                dir: durable.then(aof_dir),
                extra: extra.clone(),
                password: password.map(str::to_string),
            };
            if server.try_start() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port");
    }

    fn try_start(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--daemonize", "no"]);
        match &self.dir {
            Some(dir) => cmd
                .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
                .arg(dir.path()),
            None => cmd.args(["--appendonly", "no"]),
        };
        cmd.args(&self.extra);
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if self.ping() {
                return true;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop();
        false
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url_plain()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut con).is_ok()
    }

    /// Kills the server (SIGKILL: nothing survives, as after a crash).
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same port: empty unless durable.
    pub(crate) fn restart(&mut self) {
        self.stop();
        assert!(
            self.try_start(),
            "redis-server did not come back on {}",
            self.port
        );
    }

    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url_plain(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@{}/", self.addr()),
            None => format!("redis://{}/", self.addr()),
        }
    }

    /// The `--server` value for this one node.
    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    pub(crate) fn con(&self) -> redis::Connection {
        let client = redis::Client::open(self.url_plain()).unwrap();
        client
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }

    /// Runs one command, panicking on error.
    pub(crate) fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut self.con())
            .unwrap_or_else(|e| panic!("{args:?} on {}: {e}", self.addr()))
    }

    /// How many waiters are queued for `key`.
    pub(crate) fn queued(&self, key: &str) -> i64 {
        self.query(&["ZCARD", &format!("lc-cli:{{{key}}}:queue")])
    }

    pub(crate) fn lock_key(key: &str) -> String {
        format!("lc-cli:{{{key}}}:lock")
    }

    pub(crate) fn holder(&self, key: &str) -> Option<String> {
        self.query(&["GET", &Self::lock_key(key)])
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) use super::lc_at as lc;

/// The `--server` value for several nodes.
pub(crate) fn quorum_url(nodes: &[RedisServer]) -> String {
    let addrs: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    format!("redis://{}", addrs.join(","))
}

/// A spawned lc-cli, killed (with its process group's leader) if still running when dropped.
pub(crate) struct Running(pub Child);

impl Running {
    pub(crate) fn spawn(cmd: &mut Command) -> Running {
        Running(
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn lc-cli"),
        )
    }

    /// Waits at most `limit` for the exit; returns (status, stderr).
    pub(crate) fn finish(mut self, limit: Duration) -> (i32, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read;
                if let Some(mut e) = self.0.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                use std::os::unix::process::ExitStatusExt;
                let code = status.code().or(status.signal().map(|s| 128 + s));
                return (code.unwrap_or(-1), err);
            }
            if start.elapsed() > limit {
                let _ = self.0.kill();
                let _ = self.0.wait();
                let mut err = String::new();
                if let Some(mut e) = self.0.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                panic!(
                    "lc-cli (pid {}) still running after {limit:?}; stderr: {err}",
                    self.0.id()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits at most `limit` for the exit, which must be `code`; returns
    /// stderr.
    pub(crate) fn expect_exit(self, code: i32, limit: Duration) -> String {
        let (got, err) = self.finish(limit);
        assert_eq!(got, code, "{err}");
        err
    }

    pub(crate) fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

/// `lc-cli [OPTS...] --ttl TTL lock k --kill-after 1s COMMAND...` at
/// `url`, started: a loss of `k` stops its command within a second.
pub(crate) fn hold_k(url: &str, opts: &[&str], ttl: &str, command: &[&str]) -> Running {
    let mut args = opts.to_vec();
    args.extend_from_slice(&["--ttl", ttl, "lock", "k", "--kill-after", "1s"]);
    args.extend_from_slice(command);
    Running::spawn(&mut lc(url, &args))
}

/// Holds `k` detached at `url`, starts `n` waiters `waiter(i)` one after
/// another, each once `queued(i + 1)` says the ones before it and it are in
/// line, then unlocks `k`: every waiter ends with 0 within `limit`.
pub(crate) fn serve_a_line(
    url: &str,
    n: usize,
    mut waiter: impl FnMut(usize) -> Command,
    queued: impl Fn(i64) -> bool,
    limit: Duration,
) {
    super::expect_status(&mut lc(url, &["lock", "k"]), 0);
    let mut waiters = Vec::new();
    for i in 0..n {
        waiters.push(Running::spawn(&mut waiter(i)));
        assert!(
            super::wait_until(limit, || queued(i as i64 + 1)),
            "waiter {i} never queued"
        );
    }
    super::expect_status(&mut lc(url, &["unlock", "k"]), 0);
    for w in waiters {
        w.expect_exit(0, limit);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lc-cli --server URL [OPTS...] keys --json [ARGS...]`: one JSON object per line.
pub(crate) fn keys_json(url: &str, opts: &[&str], args: &[&str]) -> Vec<serde_json::Value> {
    let mut cmd = lc(url, opts);
    cmd.args(["keys", "--json"]).args(args);
    let out = super::expect_status(&mut cmd, 0);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// `lc-cli --server URL [OPTS...] keys [ARGS...]`: the table's rows (header
/// first), split into cells.
pub(crate) fn keys_table(url: &str, opts: &[&str], args: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = lc(url, opts);
    cmd.arg("keys").args(args);
    let out = super::expect_status(&mut cmd, 0);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// A shell command that waits (at most 20 s) until `gate` exists, then exits 0.
pub(crate) fn until_exists(gate: &std::path::Path) -> String {
    format!(
        "for i in $(seq 400); do [ -e {g} ] && exit 0; sleep 0.05; done; exit 1",
        g = gate.display()
    )
}
