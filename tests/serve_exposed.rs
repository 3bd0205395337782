//! `lc-cli serve` on an address that is not loopback: one warning line at
//! start-up naming the README's Security section, and the manager port
//! (which can reset every key) kept on loopback unless `--manager` names
//! an address. The servers bind port 0 on 0.0.0.0; the test connects only
//! to 127.0.0.1.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::{expect_status, Serve, Server, BIN};

/// A server on `listen` (with `extra`), and what it said on stderr up to
/// and including its start-up line.
fn serve(listen: &str, extra: &[&str]) -> (Server, Vec<String>) {
    let s = Serve::new().listen(listen).args(extra).start();
    s.wait_for(" listening on ", 1, Duration::from_secs(10));
    let log = s.log();
    let lines: Vec<String> = log.lines().map(str::to_string).collect();
    let end = lines
        .iter()
        .position(|l| l.contains(" listening on "))
        .unwrap();
    let start_up = lines[..=end].to_vec();
    (s, start_up)
}

fn local(a: SocketAddr) -> String {
    format!("127.0.0.1:{}", a.port())
}

#[test]
fn a_non_loopback_listener_warns_and_keeps_the_manager_on_loopback() {
    let (s, stderr) = serve("0.0.0.0:0", &[]);
    assert!(s.addr.ip().is_unspecified(), "{}", s.addr);
    assert_eq!(s.manager.ip().to_string(), "127.0.0.1", "{}", s.manager);
    let warnings: Vec<&String> = stderr.iter().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stderr:?}");
    assert!(
        warnings[0].contains("no authentication") && warnings[0].contains("Security"),
        "{}",
        warnings[0]
    );
    // Both ports work from this machine; clients are told where the manager is.
    let server = format!("lc://{}?manager={}", local(s.addr), local(s.manager));
    expect_status(
        Command::new(BIN)
            .args(["--server", &server, "lock", "k"])
            .env_remove("LC_SERVER"),
        0,
    );
    let out = expect_status(
        Command::new(BIN)
            .args(["--server", &server, "keys"])
            .env_remove("LC_SERVER"),
        0,
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("k "));
    // Remote clients are not told to use their own loopback.
    let start_up = stderr.last().unwrap();
    assert!(!start_up.contains("manager=127.0.0.1"), "{start_up}");
    assert!(
        start_up.contains(&format!("from this host only (manager on {})", s.manager)),
        "{start_up}"
    );
}

#[test]
fn an_explicit_manager_address_is_kept_and_loopback_says_nothing() {
    let (s, stderr) = serve("0.0.0.0:0", &["--manager", "0.0.0.0:0"]);
    assert!(s.manager.ip().is_unspecified(), "{}", s.manager);
    assert_eq!(
        stderr.iter().filter(|l| l.contains("warning")).count(),
        1,
        "{stderr:?}"
    );
    let (quiet, stderr) = serve("127.0.0.1:0", &[]);
    assert_eq!(quiet.manager.ip().to_string(), "127.0.0.1");
    assert!(!stderr.iter().any(|l| l.contains("warning")), "{stderr:?}");
}
