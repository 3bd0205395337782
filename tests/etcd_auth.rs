//! etcd with authentication on (`etcdctl user add root`, `auth enable`):
//! `etcd://USER:PASSWORD@HOSTS` or ETCDCTL_USER/ETCDCTL_PASSWORD take and
//! release locks; a wrong or missing password is refused at once (76, one
//! line), and never printed.

use crate::common;

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
    etcd.enable_auth(PW);
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

#[test]
fn tls_with_the_ca_file_and_a_client_certificate() {
    let ca = common::tls::TestCa::new();
    // Over TLS only, asking clients for a certificate.
    let etcd = Etcd::start_tls(&ca);
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
