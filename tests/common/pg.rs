//! Private PostgreSQL servers on 127.0.0.1 for the PostgreSQL backend
//! tests: `initdb` and `postgres` run as the `postgres` OS user (initdb
//! refuses root) in a temp dir it owns, with a free port and a socket dir of
//! their own, and are killed by process group when dropped.
//!
//! Host connections need a password (scram-sha-256): the superuser
//! `postgres` has [`PASSWORD`], so the tests can give a wrong one.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::redis::free_port;
use super::BIN;

pub(crate) const PASSWORD: &str = "s3cret-pw";

/// The newest installed PostgreSQL's bin directory.
pub(crate) fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL must be installed (apt-get install postgresql)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop().expect("no /usr/lib/postgresql/*/bin/initdb")
}

pub(crate) fn postgres_ids() -> (u32, u32) {
    let out = Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .unwrap();
    let uid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let out = Command::new("id")
        .args(["-g", "postgres"])
        .output()
        .unwrap();
    let gid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    (uid, gid)
}

pub(crate) struct PgServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PgServer {
    pub(crate) fn start() -> PgServer {
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let (uid, gid) = postgres_ids();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).unwrap();
        let out = Command::new(bin_dir().join("initdb"))
            .arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .args(["--no-sync", "-E", "UTF8"])
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut server = PgServer {
            port: 0,
            dir,
            child: None,
        };
        for _ in 0..5 {
            server.port = free_port();
            if server.try_start() {
                return server;
            }
        }
        panic!("could not start PostgreSQL on a free port");
    }

    fn try_start(&mut self) -> bool {
        let (uid, gid) = postgres_ids();
        let log = std::fs::File::create(self.dir.path().join("log")).unwrap();
        std::os::unix::fs::chown(self.dir.path().join("log"), Some(uid), Some(gid)).unwrap();
        let child = Command::new(bin_dir().join("postgres"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-k")
            .arg(self.dir.path())
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-c", "fsync=off", "-c", "max_connections=200"])
            .uid(uid)
            .gid(gid)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if self.psql_as("postgres", "select 1").status.success() {
                return true;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }

    /// SIGKILL to the postmaster and all its backends, as after a crash.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) takes only integers: no memory of ours is involved.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
            // The backends are gone once nobody uses the group.
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10)
                // SAFETY: kill(2) takes only integers: no memory of ours is involved.
                && unsafe { libc::kill(-(c.id() as i32), 0) } == 0
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts it again on the same port and data (crash recovery).
    pub(crate) fn restart(&mut self) {
        if !self.try_start() {
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            panic!("PostgreSQL did not start again:\n{log}");
        }
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres`
    pub(crate) fn url(&self) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// `lc-cli --server URL ARGS...`
    pub(crate) fn lc(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--server").arg(self.url()).args(args);
        cmd.env_remove("LC_SERVER")
            .env_remove("LC_SOURCE")
            .env_remove("PGPASSWORD");
        cmd
    }

    /// psql over TCP as the superuser, the password in PGPASSWORD.
    pub(crate) fn psql_cmd(&self, sql: &str) -> Command {
        let mut cmd = Command::new(bin_dir().join("psql"));
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args([
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-X",
                "-Atq",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .args(["-c", sql])
            .env("PGPASSWORD", PASSWORD)
            .env("PGCONNECT_TIMEOUT", "2");
        cmd
    }

    fn psql_as(&self, _user: &str, sql: &str) -> Output {
        self.psql_cmd(sql)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    }

    /// Runs SQL, panics on failure, returns the trimmed output.
    pub(crate) fn sql(&self, sql: &str) -> String {
        let out = self.psql_as("postgres", sql);
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// How many sessions wait for (not hold) the advisory lock of `key`.
    pub(crate) fn waiters(&self, key: &str) -> usize {
        self.sql(&format!(
            "select count(*) from pg_locks where locktype = 'advisory' and not granted \
             and objid = (hashtextextended('{key}', 0) & 4294967295)::oid"
        ))
        .parse()
        .unwrap_or(0)
    }

    /// Whether someone holds the advisory lock of `key`.
    pub(crate) fn held(&self, key: &str) -> bool {
        self.sql(&format!(
            "select count(*) from pg_locks where locktype = 'advisory' and granted \
             and objid = (hashtextextended('{key}', 0) & 4294967295)::oid"
        )) == "1"
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
    }
}
