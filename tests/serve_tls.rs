//! TLS on the built-in server (`serve --tls-cert/--tls-key
//! [--tls-client-ca]`) and its `lcs://` clients, on a non-loopback address
//! of this machine (the first of `hostname -I`): locks over a trusted
//! certificate; an untrusted one, and plain <-> TLS mismatches both ways,
//! end in one line and 69 within the connect timeout; with mTLS, a client
//! without a certificate is refused and one with a certificate of the CA
//! is served; a bad file stops the server at start-up (64).

use crate::common;

use std::time::{Duration, Instant};

use common::tls::TestCa;
use common::{expect_error_line, expect_status, host_ip, lc_at, Serve, Server, BIN};

fn tls_server(ca: &TestCa, mutual: bool) -> Server {
    let (cert, key, client_ca) = (
        ca.file("server.pem"),
        ca.file("server.key"),
        ca.file("ca.pem"),
    );
    let mut args = vec!["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
    if mutual {
        args.extend(["--tls-client-ca", client_ca.as_str()]);
    }
    Serve::new()
        .listen(&format!("{}:0", host_ip()))
        .args(&args)
        .start()
}

/// Runs `cmd`, which must fail with 69 in one line containing `needle`,
/// within the connect timeout (1 s) and some slack for a process start on
/// a busy machine; how long it took.
fn refused(cmd: &mut std::process::Command, needle: &str) -> Duration {
    let started = Instant::now();
    let line = expect_error_line(cmd, 69);
    let took = started.elapsed();
    assert!(line.contains(needle), "{line}");
    assert!(took < Duration::from_secs(3), "{took:?}: {line}");
    eprintln!("{took:?}: {}", line.trim());
    took
}

#[test]
fn locks_over_a_trusted_certificate() {
    let ca = TestCa::for_ips(&["127.0.0.1", &host_ip()]);
    let s = tls_server(&ca, false);
    let url = format!(
        "lcs://{}?cacert={}&manager={}",
        s.addr,
        ca.file("ca.pem"),
        s.manager
    );
    let out = expect_status(&mut lc_at(&url, &["ping"]), 0);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("TLS"), "{said}");
    expect_status(&mut lc_at(&url, &["lock", "k", "--", "true"]), 0);
    // Held over TLS (a session with heartbeats): trylock finds it held.
    let mut holder = lc_at(&url, &["lock", "held", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    assert!(common::wait_until(Duration::from_secs(5), || s
        .log()
        .contains("grant 'held'")));
    expect_status(&mut lc_at(&url, &["trylock", "held", "--", "true"]), 1);
    let keys = expect_status(&mut lc_at(&url, &["keys"]), 0);
    assert!(String::from_utf8_lossy(&keys.stdout).contains("held"));
    // A waiter over TLS gets it once the holder is done.
    expect_status(
        &mut lc_at(&url, &["lock", "-w", "10s", "held", "--", "true"]),
        0,
    );
    assert!(holder.wait().unwrap().success());
    expect_status(&mut lc_at(&url, &["lock", "kept"]), 0);
    expect_status(&mut lc_at(&url, &["unlock", "kept"]), 0);
    expect_status(&mut lc_at(&url, &["unlock", "kept"]), 1);
    // The test certificates last 2 days: the start warns that the server's
    // expires within the week, naming the file and the day.
    let log = s.log();
    assert!(
        log.contains(&format!(
            "warning: the certificate {} expires at ",
            ca.file("server.pem")
        )) && log.contains("replace it before then"),
        "{log}"
    );
}

#[test]
fn an_untrusted_certificate_is_refused() {
    let ca = TestCa::for_ips(&[&host_ip()]);
    let other = TestCa::new();
    let s = tls_server(&ca, false);
    let url = format!("lcs://{}?cacert={}", s.addr, other.file("ca.pem"));
    let mut cmd = lc_at(&url, &["--connect-timeout", "1s", "trylock", "k", "true"]);
    refused(
        &mut cmd,
        &format!("certificate is not trusted by {}", other.file("ca.pem")),
    );
}

#[test]
fn plain_and_tls_mismatches_answer_at_once_both_ways() {
    let ca = TestCa::for_ips(&[&host_ip()]);
    let s = tls_server(&ca, false);
    for args in [
        &["--connect-timeout", "1s", "lock", "k", "true"][..],
        &["--connect-timeout", "1s", "trylock", "k", "true"],
        &["--connect-timeout", "1s", "ping"],
    ] {
        refused(&mut lc_at(&format!("lc://{}", s.addr), args), "use lcs://");
    }
    let plain = Serve::new().listen(&format!("{}:0", host_ip())).start();
    let url = format!("lcs://{}?cacert={}", plain.addr, ca.file("ca.pem"));
    for args in [
        &["--connect-timeout", "1s", "lock", "k", "true"][..],
        &["--connect-timeout", "1s", "ping"],
    ] {
        refused(&mut lc_at(&url, args), "is it a plain server (lc://");
    }
}

#[test]
fn mutual_tls_wants_a_client_certificate_of_its_ca() {
    let ca = TestCa::for_ips(&[&host_ip()]);
    let other = TestCa::new();
    let s = tls_server(&ca, true);
    let base = format!("lcs://{}?cacert={}", s.addr, ca.file("ca.pem"));
    let args = ["--connect-timeout", "1s", "lock", "k", "--", "true"];
    refused(&mut lc_at(&base, &args), "wants a client certificate");
    let wrong = format!(
        "{base}&cert={}&key={}",
        other.file("client.pem"),
        other.file("client.key")
    );
    refused(
        &mut lc_at(&wrong, &args),
        "did not accept our client certificate",
    );
    let right = format!(
        "{base}&cert={}&key={}",
        ca.file("client.pem"),
        ca.file("client.key")
    );
    expect_status(&mut lc_at(&right, &args), 0);
}

#[test]
fn a_bad_tls_file_stops_the_server_at_start_up() {
    let ca = TestCa::new();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(ca.path("server.key"))
        .arg("--tls-key")
        .arg(ca.path("server.key"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("holds no PEM certificate"), "{err}");
}
