//! A private single-member etcd on 127.0.0.1 for one test: its own temp
//! data dir, free client and peer ports, readiness by `etcdctl endpoint
//! health`, killed when dropped. `etcdctl` runs against it with API v3.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .unwrap()
        .port()
}

impl Etcd {
    pub fn start() -> Etcd {
        let dir = tempfile::tempdir().expect("temp dir for etcd");
        let (port, peer) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (apt-get install etcd-server)");
        let etcd = Etcd { port, dir, child };
        let start = Instant::now();
        loop {
            let ok = etcd
                .ctl(&["endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "etcd did not become healthy: {}",
                std::fs::read_to_string(etcd.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        etcd
    }

    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `etcdctl --endpoints 127.0.0.1:PORT ARGS...` (API v3).
    pub fn ctl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint()])
            .args(args);
        cmd
    }

    /// The keys under `prefix` (`get --prefix --keys-only`).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let out = self
            .ctl(&["get", "--prefix", "--keys-only", prefix])
            .output()
            .expect("etcdctl get");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// `lc-cli --server etcd://127.0.0.1:PORT[QUERY] ARGS...`
    pub fn lc(&self, query: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(super::BIN);
        cmd.arg("--server")
            .arg(format!("etcd://{}{query}", self.endpoint()))
            .args(args)
            .env_remove("LC_SERVER")
            .env_remove("LC_SOURCE");
        cmd
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
