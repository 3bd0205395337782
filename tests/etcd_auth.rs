//! etcd with authentication on (`etcdctl user add root`, `auth enable`):
//! `etcd://USER:PASSWORD@HOSTS` or ETCDCTL_USER/ETCDCTL_PASSWORD take and
//! release locks; a wrong or missing password is refused at once (76, one
//! line), and never printed.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::BIN;

const PW: &str = "Etcd-root-pw-2718";

fn lc(url: &str, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String, Duration) {
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(["--server", url, "--connect-timeout", "20s"])
        .args(args)
        .env_remove("LC_SERVER")
        .env_remove("ETCDCTL_USER")
        .env_remove("ETCDCTL_PASSWORD")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(
        !o.contains(PW) && !e.contains(PW),
        "{args:?} printed it: {o}{e}"
    );
    (out.status.code().unwrap_or(-1), o, e, start.elapsed())
}

#[test]
fn user_and_password_from_the_address_or_etcdctl_variables() {
    let etcd = Etcd::start();
    for args in [
        &[
            "user",
            "add",
            "root",
            "--new-user-password",
            PW,
            "--interactive=false",
        ][..],
        &["role", "add", "root"],
        &["user", "grant-role", "root", "root"],
        &["auth", "enable"],
    ] {
        let out = etcd.ctl(args).output().unwrap();
        assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
    }
    let ep = etcd.endpoint();
    let good = format!("etcd://root:{PW}@{ep}");
    let (code, out, err, _) = lc(&good, &[], &["-v", "lock", "k", "--", "echo", "ran"]);
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
    assert!(err.contains("etcd://root:***@"), "{err}");
    let (code, _, err, _) = lc(&good, &[], &["lock", "kept"]);
    assert_eq!(code, 0, "{err}");
    let env = [("ETCDCTL_USER", "root"), ("ETCDCTL_PASSWORD", PW)];
    let plain = format!("etcd://{ep}");
    let (code, out, err, _) = lc(&plain, &env, &["keys"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kept"), "{out}");
    let joined = format!("root:{PW}");
    let (code, _, err, _) = lc(&plain, &[("ETCDCTL_USER", &joined)], &["reset", "kept"]);
    assert_eq!(code, 0, "{err}");

    for url in [format!("etcd://root:x{PW}@{ep}"), plain.clone()] {
        for args in [&["lock", "k", "--", "true"][..], &["keys"], &["reset", "k"]] {
            let (code, _, err, took) = lc(&url, &[], args);
            assert_eq!(code, 76, "{url} {args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                took < Duration::from_secs(5),
                "{url} {args:?} took {took:?}"
            );
        }
    }
}

/// etcd serving clients over TLS only, with the test CA's certificate,
/// asking clients for theirs; killed when dropped.
struct TlsEtcd {
    port: u16,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_etcd(ca: &common::tls::TestCa) -> TlsEtcd {
    let port = common::redis::free_port();
    let peer = common::redis::free_port();
    let dir = tempfile::tempdir().unwrap();
    let client_url = format!("https://127.0.0.1:{port}");
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
        .args(["--cert-file", &ca.file("server.pem")])
        .args(["--key-file", &ca.file("server.key")])
        .args([
            "--client-cert-auth",
            "--trusted-ca-file",
            &ca.file("ca.pem"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start etcd");
    let etcd = TlsEtcd {
        port,
        child,
        _dir: dir,
    };
    let start = Instant::now();
    loop {
        let ok = Command::new("etcdctl")
            .args(["--endpoints", &client_url])
            .args(["--cacert", &ca.file("ca.pem")])
            .args([
                "--cert",
                &ca.file("client.pem"),
                "--key",
                &ca.file("client.key"),
            ])
            .args(["endpoint", "health"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return etcd;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "etcd over TLS did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn tls_with_the_ca_file_and_a_client_certificate() {
    let ca = common::tls::TestCa::new();
    let etcd = tls_etcd(&ca);
    let base = format!("etcd://127.0.0.1:{}", etcd.port);
    let good = format!(
        "{base}?cacert={}&cert={}&key={}",
        ca.file("ca.pem"),
        ca.file("client.pem"),
        ca.file("client.key")
    );
    let (code, out, err, _) = lc(&good, &[], &["lock", "k", "--", "echo", "ran"]);
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
    let (code, _, err, _) = lc(&good, &[], &["lock", "kept"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err, _) = lc(&good, &[], &["keys"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kept"), "{out}");
    // Another CA's view of the server, or no client certificate: 69, one
    // line, within the connect timeout.
    let other = common::tls::TestCa::new();
    for url in [
        format!(
            "{base}?cacert={}&cert={}&key={}",
            other.file("ca.pem"),
            ca.file("client.pem"),
            ca.file("client.key")
        ),
        format!("{base}?cacert={}", ca.file("ca.pem")),
    ] {
        let out = Command::new(BIN)
            .args(["--server", &url, "--connect-timeout", "2s", "keys"])
            .env_remove("LC_SERVER")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
