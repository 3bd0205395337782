//! Redis credentials and TLS against real redis-server processes: AUTH as
//! the default user (`--requirepass`) and as an ACL user on every node of a
//! quorum, the password from REDISCLI_AUTH, `rediss://` with a CA file and
//! a client certificate made by `openssl`. A wrong password (76, as on
//! PostgreSQL) and an untrusted certificate (69) each end in one line, at
//! once, and no output ever holds the password.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::redis::{free_port, RedisServer};
use common::tls::TestCa;
use common::BIN;

const PASSWORD: &str = "Sw0rdfish-4711";
const USER_PASSWORD: &str = "Locker-pw-0815";

fn lc(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--server", url])
        .args(args)
        .env_remove("LC_SERVER")
        .env_remove("REDISCLI_AUTH")
        .stdin(Stdio::null());
    cmd
}

/// Runs it, timed; the password must be in neither stream.
fn run(cmd: &mut Command) -> (i32, String, String, Duration) {
    let line = format!("{cmd:?}");
    let start = Instant::now();
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let took = start.elapsed();
    let (out, err) = (
        String::from_utf8_lossy(&stdout).to_string(),
        String::from_utf8_lossy(&stderr).to_string(),
    );
    for secret in [PASSWORD, USER_PASSWORD] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{line} printed a password:\n{out}\n{err}"
        );
    }
    (status.code().unwrap_or(-1), out, err, took)
}

fn quorum(password: &str) -> Vec<RedisServer> {
    (0..3)
        .map(|_| RedisServer::start_secured(true, &[], Some(password)))
        .collect()
}

fn hosts(nodes: &[RedisServer]) -> String {
    let addrs: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    addrs.join(",")
}

#[test]
fn password_and_acl_user_reach_every_node_of_a_quorum() {
    let nodes = quorum(PASSWORD);
    for n in &nodes {
        let _: String = n.query(&[
            "ACL",
            "SETUSER",
            "locker",
            "on",
            &format!(">{USER_PASSWORD}"),
            "~lc-cli:*",
            "+@all",
        ]);
    }
    let h = hosts(&nodes);
    // The legacy password-only form, an ACL user, and the password from
    // the environment (redis-cli's variable) with the user in the address.
    let forms: Vec<(String, Option<&str>)> = vec![
        (format!("redis://:{PASSWORD}@{h}"), None),
        (format!("redis://locker:{USER_PASSWORD}@{h}"), None),
        (format!("redis://{h}"), Some(PASSWORD)),
        (format!("redis://locker@{h}"), Some(USER_PASSWORD)),
    ];
    for (url, env) in forms {
        let mut cmd = lc(&url, &["-v", "lock", "k", "--", "echo", "ran"]);
        if let Some(p) = env {
            cmd.env("REDISCLI_AUTH", p);
        }
        let (code, out, err, _) = run(&mut cmd);
        assert_eq!((code, out.as_str()), (0, "ran\n"), "{url}: {err}");
        assert!(err.contains("took"), "{err}");
        let (code, out, err, _) = run(lc(&url, &["keys"]).envs(env.map(|p| ("REDISCLI_AUTH", p))));
        assert_eq!(code, 0, "{err}");
        assert!(!out.contains("k "), "{out}");
    }
    // Every node got the AUTH: each one saw the lock key of a hold.
    let url = format!("redis://:{PASSWORD}@{h}");
    let (code, _, err, _) = run(&mut lc(&url, &["lock", "held"]));
    assert_eq!(code, 0, "{err}");
    for n in &nodes {
        assert!(n.holder("held").is_some(), "node {} has no hold", n.addr());
    }
    let (code, _, err, _) = run(&mut lc(&url, &["unlock", "held"]));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_wrong_or_missing_password_is_one_line_and_76_at_once() {
    let nodes = quorum(PASSWORD);
    let one = &nodes[0];
    let cases = [
        format!("redis://:wrong-{PASSWORD}@{}", one.addr()),
        format!("redis://{}", one.addr()),
        format!("redis://locker:{USER_PASSWORD}@{}", one.addr()),
        format!("redis://:wrong-{PASSWORD}@{}", hosts(&nodes)),
    ];
    for url in cases {
        for args in [
            &["lock", "k", "--", "true"][..],
            &["keys"],
            &["unlock", "k"],
            &["reset", "k"],
        ] {
            let mut cmd = lc(&url, &["--connect-timeout", "20s"]);
            cmd.args(args);
            let (code, _, err, took) = run(&mut cmd);
            assert_eq!(code, 76, "{url} {args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains("refused") && err.contains("uthenticat"),
                "{err}"
            );
            // Refused, not retried for the 20 s connect timeout.
            assert!(
                took < Duration::from_secs(5),
                "{url} {args:?} took {took:?}"
            );
        }
    }
}

/// A TLS-only node (`--port 0`) with the test CA's server certificate.
fn tls_node(ca: &TestCa, clients_must_present: bool) -> (RedisServer, u16) {
    // The plain port is for the test's own checks; lc-cli uses TLS.
    let tls_port = free_port();
    let extra: Vec<String> = [
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &ca.file("server.pem"),
        "--tls-key-file",
        &ca.file("server.key"),
        "--tls-ca-cert-file",
        &ca.file("ca.pem"),
        "--tls-auth-clients",
        if clients_must_present { "yes" } else { "no" },
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    (
        RedisServer::start_secured(true, &extra, Some(PASSWORD)),
        tls_port,
    )
}

#[test]
fn rediss_verifies_the_server_against_the_ca_file() {
    let ca = TestCa::new();
    let (node, port) = tls_node(&ca, false);
    let base = format!("rediss://:{PASSWORD}@127.0.0.1:{port}");
    let good = format!("{base}?cacert={}", ca.file("ca.pem"));
    let (code, out, err, _) = run(&mut lc(&good, &["-v", "lock", "k", "--", "echo", "ran"]));
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
    assert!(err.contains("rediss://:***@"), "{err}");
    let (code, _, err, _) = run(&mut lc(&good, &["lock", "kept"]));
    assert_eq!(code, 0, "{err}");
    assert!(node.holder("kept").is_some());
    let (code, _, err, _) = run(&mut lc(&good, &["reset", "kept"]));
    assert_eq!(code, 0, "{err}");

    // The system roots do not know the test CA; a CA that did not sign the
    // server's certificate is no better.
    let other = TestCa::new();
    for url in [
        base.clone(),
        format!("{base}?cacert={}", other.file("ca.pem")),
    ] {
        let mut cmd = lc(
            &url,
            &["--connect-timeout", "20s", "lock", "k", "--", "true"],
        );
        let (code, _, err, took) = run(&mut cmd);
        assert_eq!(code, 69, "{url}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("certificate"), "{err}");
        assert!(took < Duration::from_secs(5), "{url} took {took:?}");
    }
    // Plain Redis on the TLS port: never a hang.
    let plain = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
    let mut cmd = lc(
        &plain,
        &["--connect-timeout", "2s", "lock", "k", "--", "true"],
    );
    let (code, _, err, took) = run(&mut cmd);
    assert_eq!(code, 69, "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // A missing CA file is one line.
    let missing = format!("{base}?cacert=/nonexistent/ca.pem");
    let (code, _, err, _) = run(&mut lc(&missing, &["keys"]));
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
}

#[test]
fn rediss_presents_a_client_certificate_when_the_server_asks() {
    let ca = TestCa::new();
    let (_node, port) = tls_node(&ca, true);
    let base = format!(
        "rediss://:{PASSWORD}@127.0.0.1:{port}?cacert={}",
        ca.file("ca.pem")
    );
    let with_cert = format!(
        "{base}&cert={}&key={}",
        ca.file("client.pem"),
        ca.file("client.key")
    );
    let (code, out, err, _) = run(&mut lc(&with_cert, &["lock", "k", "--", "echo", "ran"]));
    assert_eq!((code, out.as_str()), (0, "ran\n"), "{err}");
    let mut cmd = lc(
        &base,
        &["--connect-timeout", "2s", "lock", "k", "--", "true"],
    );
    let (code, _, err, took) = run(&mut cmd);
    assert_eq!(code, 69, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let half = format!("{base}&cert={}", ca.file("client.pem"));
    let (code, _, err, _) = run(&mut lc(&half, &["keys"]));
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("cert= and key="), "{err}");
}
