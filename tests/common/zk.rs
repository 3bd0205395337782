//! A private standalone ZooKeeper on 127.0.0.1 for one test: temp dataDir,
//! a free port, a low tickTime so short sessions are allowed, readiness by
//! `ruok`, stopped by PID when dropped. Also used by `examples/bench_zk.rs`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zookeeper_client as zkc;

pub(crate) const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
const SLF4J_JAR: &str = "/usr/share/java/slf4j-simple.jar";

pub(crate) struct Zk {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Java system properties the server starts with (`-Dname=value`).
    props: Vec<String>,
}

impl Zk {
    /// tickTime 200 ms: sessions from 400 ms to 4 s.
    pub(crate) fn start() -> Zk {
        Zk::start_with_tick(200)
    }

    pub(crate) fn start_with_tick(tick_ms: u64) -> Zk {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().unwrap().port()
        };
        Zk::start_at(port, tick_ms)
    }

    /// With TTL nodes (`zookeeper.extendedTypesEnabled=true`, which `lock
    /// KEY --expire` needs), and the container and TTL reaper run every
    /// 100 ms instead of every minute, so an expired node goes soon.
    pub(crate) fn start_extended() -> Zk {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().unwrap().port()
        };
        Zk::start_with_props(
            port,
            200,
            &[
                "-Dzookeeper.extendedTypesEnabled=true",
                "-Dznode.container.checkIntervalMs=100",
            ],
        )
    }

    /// On a port chosen beforehand (clients may already be trying it).
    pub(crate) fn start_at(port: u16, tick_ms: u64) -> Zk {
        Zk::start_with_props(port, tick_ms, &[])
    }

    fn start_with_props(port: u16, tick_ms: u64, props: &[&str]) -> Zk {
        let dir = tempfile::tempdir().expect("temp dir for ZooKeeper");
        let cfg = format!(
            "tickTime={tick_ms}\ndataDir={}\nclientPortAddress=127.0.0.1\nclientPort={port}\n\
             maxClientCnxns=0\nadmin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchs,wchc,wchp,crst,srst\n",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("zoo.cfg"), cfg).unwrap();
        let mut zk = Zk {
            port,
            dir,
            child: None,
            props: props.iter().map(|p| p.to_string()).collect(),
        };
        zk.spawn();
        zk
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("zookeeper.log")
    }

    fn spawn(&mut self) {
        assert!(
            std::path::Path::new(ZK_JAR).exists(),
            "ZooKeeper is not installed ({ZK_JAR} missing): apt-get install zookeeper"
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            ])
            .args(&self.props)
            .args([
                "-cp",
                &format!("{ZK_JAR}:{SLF4J_JAR}"),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
            ])
            .arg(self.dir.path().join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start java for ZooKeeper");
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if self.try_four("ruok").as_deref() == Some("imok") {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "ZooKeeper exited with {status} before answering ruok:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("ZooKeeper did not answer ruok within 60 s:\n{}", self.log());
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Kills the server (SIGKILL, by PID) and waits for it.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same dataDir.
    pub(crate) fn restart_after(&mut self, down: Duration) {
        self.stop();
        std::thread::sleep(down);
        self.spawn();
    }

    /// Starts it again after `stop` (same port, same dataDir: the sessions
    /// and ephemeral nodes it had persisted come back); returns once it
    /// answers `ruok`.
    pub(crate) fn start_again(&mut self) {
        assert!(self.child.is_none(), "ZooKeeper is still running");
        self.spawn();
    }

    pub(crate) fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `zk://127.0.0.1:PORT/ROOT`
    pub(crate) fn url(&self, root: &str) -> String {
        format!("zk://{}{root}", self.hosts())
    }

    /// `lc-cli --server zk://.../ROOT?session-timeout=2s ARGS...`
    pub(crate) fn lc(&self, root: &str, args: &[&str]) -> Command {
        self.lc_session(root, "2s", args)
    }

    /// `lc` with another session timeout.
    pub(crate) fn lc_session(&self, root: &str, session_timeout: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(super::BIN);
        cmd.arg("--server")
            .arg(format!(
                "{}?session-timeout={session_timeout}",
                self.url(root)
            ))
            .args(["--connect-timeout", "10s"])
            .args(args);
        cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
        cmd
    }

    fn try_four(&self, word: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(word.as_bytes()).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    }

    /// A four-letter word's answer.
    pub(crate) fn four(&self, word: &str) -> String {
        self.try_four(word)
            .unwrap_or_else(|| panic!("no answer to {word} from ZooKeeper"))
    }

    /// `mntr` as name -> number (non-numeric values are left out).
    pub(crate) fn mntr(&self) -> HashMap<String, f64> {
        self.four("mntr")
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once('\t')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// Runs one request on a fresh session of its own.
    pub(crate) fn with_client<T>(
        &self,
        f: impl for<'a> FnOnce(
            &'a zkc::Client,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>,
    ) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = zkc::Client::connector()
                .with_session_timeout(Duration::from_secs(4))
                .connect(&self.hosts())
                .await
                .expect("test client connects");
            let out = f(&client).await;
            drop(client);
            // Give the close a moment to reach the server.
            tokio::time::sleep(Duration::from_millis(20)).await;
            out
        })
    }

    /// The children of `path` (empty if it does not exist).
    pub(crate) fn children(&self, path: &str) -> Vec<String> {
        let path = path.to_string();
        self.with_client(move |c| {
            Box::pin(async move {
                match c.list_children(&path).await {
                    Ok(children) => children,
                    Err(zkc::Error::NoNode) => Vec::new(),
                    Err(e) => panic!("list {path}: {e}"),
                }
            })
        })
    }

    /// The queue under `path` in sequence order.
    pub(crate) fn queue(&self, path: &str) -> Vec<String> {
        let mut kids: Vec<(String, String)> = self
            .children(path)
            .into_iter()
            .filter_map(|c| {
                let at = c.rfind("lock-")?;
                Some((c[at + 5..].to_string(), c))
            })
            .collect();
        kids.sort();
        kids.into_iter().map(|(_, c)| c).collect()
    }

    /// Waits up to 20 s for the lock queue under `path` to hold `n` nodes.
    pub(crate) fn wait_queue_len(&self, path: &str, n: usize) {
        // Polled here: examples/bench_zk.rs includes this file without the
        // rest of tests/common.
        let start = Instant::now();
        while self.queue(path).len() != n {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "queue {path}: {:?}, not {n} long",
                self.queue(path)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Data and ephemeral owner of a node.
    pub(crate) fn node(&self, path: &str) -> Option<(Vec<u8>, i64)> {
        let path = path.to_string();
        self.with_client(move |c| {
            Box::pin(async move {
                match c.get_data(&path).await {
                    Ok((data, stat)) => Some((data, stat.ephemeral_owner)),
                    Err(zkc::Error::NoNode) => None,
                    Err(e) => panic!("get {path}: {e}"),
                }
            })
        })
    }

    pub(crate) fn delete(&self, path: &str) {
        let path = path.to_string();
        self.with_client(move |c| {
            Box::pin(async move { c.delete(&path, None).await.expect("delete node") })
        })
    }
}

/// A zookeeper-client session (4 s) to `zk` on a runtime of its own, for
/// the Curator-compatible lock recipe.
pub(crate) fn curator_client(zk: &Zk) -> (tokio::runtime::Runtime, zkc::Client) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        zkc::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .connect(&zk.hosts())
            .await
            .unwrap()
    });
    (rt, client)
}

/// The lock options Curator uses: open ACLs, container parents.
pub(crate) fn curator_lock_options() -> zkc::LockOptions<'static> {
    zkc::LockOptions::new(zkc::Acls::anyone_all())
        .with_ancestor_options(zkc::CreateMode::Container.with_acls(zkc::Acls::anyone_all()))
        .unwrap()
}

/// A lock of zookeeper-client's Curator-compatible recipe, dropped inside
/// its runtime (its drop spawns the deletion), also when a test fails:
/// dropped outside one it panics, and a panic while unwinding aborts the
/// test without stopping its servers and children.
pub(crate) struct CuratorHold {
    guard: Option<zkc::OwnedLockClient>,
    rt: tokio::runtime::Handle,
}

impl CuratorHold {
    pub(crate) fn new(rt: &tokio::runtime::Runtime, guard: zkc::OwnedLockClient) -> CuratorHold {
        CuratorHold {
            guard: Some(guard),
            rt: rt.handle().clone(),
        }
    }

    pub(crate) fn lock_path(&self) -> &str {
        self.guard.as_ref().expect("held until dropped").lock_path()
    }
}

impl Drop for CuratorHold {
    fn drop(&mut self) {
        let _in_runtime = self.rt.enter();
        drop(self.guard.take());
    }
}

impl Drop for Zk {
    fn drop(&mut self) {
        self.stop();
    }
}
