//! A private single-member etcd on 127.0.0.1 for one test: its own temp
//! data dir, free client and peer ports, readiness by `etcdctl endpoint
//! health`, killed when dropped. `etcdctl` runs against it with API v3.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct Etcd {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Child,
    /// The arguments it was started with (`restart`).
    args: Vec<String>,
    /// What `etcdctl` is given: the endpoint, and for TLS the CA file and
    /// a client certificate.
    ctl_args: Vec<String>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .unwrap()
        .port()
}

impl Etcd {
    pub(crate) fn start() -> Etcd {
        Etcd::start_with("http", &[], |port| {
            vec!["--endpoints".into(), format!("127.0.0.1:{port}")]
        })
    }

    /// Serving clients over TLS only, with `ca`'s server certificate, and
    /// asking clients for theirs.
    pub(crate) fn start_tls(ca: &super::tls::TestCa) -> Etcd {
        let server = [
            "--cert-file".into(),
            ca.file("server.pem"),
            "--key-file".into(),
            ca.file("server.key"),
            "--client-cert-auth".into(),
            "--trusted-ca-file".into(),
            ca.file("ca.pem"),
        ];
        Etcd::start_with("https", &server, |port| {
            vec![
                "--endpoints".into(),
                format!("https://127.0.0.1:{port}"),
                "--cacert".into(),
                ca.file("ca.pem"),
                "--cert".into(),
                ca.file("client.pem"),
                "--key".into(),
                ca.file("client.key"),
            ]
        })
    }

    /// Starts etcd with clients on `scheme://127.0.0.1:PORT` and `extra`
    /// flags; ready once `etcdctl ctl_args(PORT) endpoint health` says so.
    fn start_with(
        scheme: &str,
        extra: &[String],
        ctl_args: impl FnOnce(u16) -> Vec<String>,
    ) -> Etcd {
        let dir = tempfile::tempdir().expect("temp dir for etcd");
        let (port, peer) = (free_port(), free_port());
        let client_url = format!("{scheme}://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut args: Vec<String> = ["--name", "t", "--data-dir"].map(String::from).to_vec();
        args.push(dir.path().join("data").to_string_lossy().into_owned());
        for (flag, value) in [
            ("--listen-client-urls", &client_url),
            ("--advertise-client-urls", &client_url),
            ("--listen-peer-urls", &peer_url),
            ("--initial-advertise-peer-urls", &peer_url),
            ("--initial-cluster", &format!("t={peer_url}")),
        ] {
            args.extend([flag.to_string(), value.clone()]);
        }
        args.extend(extra.iter().cloned());
        let child = spawn(dir.path(), &args);
        let etcd = Etcd {
            port,
            dir,
            child,
            args,
            ctl_args: ctl_args(port),
        };
        etcd.wait_healthy();
        etcd
    }

    /// Kills the member (SIGKILL, by PID) and starts it again on the same
    /// ports and data dir; returns once it is healthy.
    pub(crate) fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.dir.path(), &self.args);
        self.wait_healthy();
    }

    fn wait_healthy(&self) {
        let etcd = self;
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
    }

    /// The server's process id (benchmarks read its memory).
    #[allow(dead_code)] // the benchmarks' (examples/), not the suite's
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where the member keeps its data.
    #[allow(dead_code)] // the benchmarks' (examples/), not the suite's
    pub(crate) fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// Adds the user `root` with `password` and the role `root`, and turns
    /// authentication on: `ctl` without credentials is refused from then on.
    pub(crate) fn enable_auth(&self, password: &str) {
        for args in [
            &[
                "user",
                "add",
                "root",
                "--new-user-password",
                password,
                "--interactive=false",
            ][..],
            &["role", "add", "root"],
            &["user", "grant-role", "root", "root"],
            &["auth", "enable"],
        ] {
            let out = self.ctl(args).output().unwrap();
            assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
        }
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `etcdctl --endpoints 127.0.0.1:PORT ARGS...` (API v3), with the TLS
    /// flags of a `start_tls` etcd.
    pub(crate) fn ctl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3").args(&self.ctl_args).args(args);
        cmd
    }

    /// The keys under `prefix` (`get --prefix --keys-only`).
    pub(crate) fn keys(&self, prefix: &str) -> Vec<String> {
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
    pub(crate) fn lc(&self, query: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(super::BIN);
        cmd.arg("--server")
            .arg(format!("etcd://{}{query}", self.endpoint()))
            .args(args)
            .env_remove("LC_SERVER")
            .env_remove("LC_SOURCE");
        cmd
    }
}

/// etcd with `args`, its log appended to `dir/etcd.log`.
fn spawn(dir: &std::path::Path, args: &[String]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("etcd.log"))
        .unwrap();
    Command::new("etcd")
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start etcd (apt-get install etcd-server)")
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three members on 127.0.0.1, each with its own data dir and ports.
pub(crate) struct EtcdCluster {
    pub ports: Vec<u16>,
    /// Kept for its drop: the members' data and logs.
    _dir: tempfile::TempDir,
    children: Vec<Option<Child>>,
}

impl EtcdCluster {
    pub(crate) fn start() -> EtcdCluster {
        let dir = tempfile::tempdir().expect("temp dir for etcd");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, p))| format!("m{i}=http://127.0.0.1:{p}"))
            .collect();
        let cluster = cluster.join(",");
        let mut children = Vec::new();
        for (i, (port, peer)) in ports.iter().enumerate() {
            let client_url = format!("http://127.0.0.1:{port}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(dir.path().join(format!("etcd{i}.log"))).unwrap();
            let child = Command::new("etcd")
                .args(["--name", &format!("m{i}"), "--data-dir"])
                .arg(dir.path().join(format!("data{i}")))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &cluster])
                .args(["--initial-cluster-state", "new"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start etcd");
            children.push(Some(child));
        }
        let c = EtcdCluster {
            ports: ports.iter().map(|(p, _)| *p).collect(),
            _dir: dir,
            children,
        };
        let start = Instant::now();
        while c.leader().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no etcd leader elected"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        c
    }

    pub(crate) fn endpoints(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the member that says it leads.
    pub(crate) fn leader(&self) -> Option<usize> {
        for (i, p) in self.ports.iter().enumerate() {
            if self.children[i].is_none() {
                continue;
            }
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &format!("127.0.0.1:{p}")])
                .args(["--command-timeout", "1s", "endpoint", "status"])
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            // `ENDPOINT, ID, VERSION, DB SIZE, IS LEADER, ...`
            let leads = text.split(", ").nth(4).is_some_and(|f| f.trim() == "true");
            if leads {
                return Some(i);
            }
        }
        None
    }

    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}
