//! `lc-cli serve` on an address that is not loopback: one warning line at
//! start-up naming the README's Security section, and the manager port
//! (which can reset every key) kept on loopback unless `--manager` names
//! an address. The servers bind port 0 on 0.0.0.0; the test connects only
//! to 127.0.0.1.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{expect_status, BIN};

struct Serve {
    child: Child,
    listen: SocketAddr,
    manager: SocketAddr,
    /// Everything on stderr up to and including the start-up line.
    stderr: Vec<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Serve {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .env_remove("BIND_ADDRESS")
        .env_remove("DATA_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut field = |prefix: &str| -> SocketAddr {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        line.trim()
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("not '{prefix}...': {line:?}"))
            .parse()
            .unwrap()
    };
    let listen = field("listening on ");
    let manager = field("manager on ");
    // The start-up line ends what serve says before it serves.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut stderr = Vec::new();
    for _ in 0..5 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let started = line.contains(" listening on ");
        stderr.push(line.trim_end().to_string());
        if started {
            break;
        }
    }
    Serve {
        child,
        listen,
        manager,
        stderr,
    }
}

fn local(a: SocketAddr) -> String {
    format!("127.0.0.1:{}", a.port())
}

#[test]
fn a_non_loopback_listener_warns_and_keeps_the_manager_on_loopback() {
    let s = serve(&["--listen", "0.0.0.0:0"]);
    assert!(s.listen.ip().is_unspecified(), "{}", s.listen);
    assert_eq!(s.manager.ip().to_string(), "127.0.0.1", "{}", s.manager);
    let warnings: Vec<&String> = s.stderr.iter().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{:?}", s.stderr);
    assert!(
        warnings[0].contains("no authentication") && warnings[0].contains("Security"),
        "{}",
        warnings[0]
    );
    // Both ports work from this machine; clients are told where the manager is.
    let server = format!("lc://{}?manager={}", local(s.listen), local(s.manager));
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
    let start_up = s.stderr.last().unwrap();
    assert!(
        start_up.contains(&format!("manager={}", s.manager)),
        "{start_up}"
    );
}

#[test]
fn an_explicit_manager_address_is_kept_and_loopback_says_nothing() {
    let s = serve(&["--listen", "0.0.0.0:0", "--manager", "0.0.0.0:0"]);
    assert!(s.manager.ip().is_unspecified(), "{}", s.manager);
    assert_eq!(
        s.stderr.iter().filter(|l| l.contains("warning")).count(),
        1,
        "{:?}",
        s.stderr
    );
    let quiet = serve(&["--listen", "127.0.0.1:0"]);
    assert_eq!(quiet.manager.ip().to_string(), "127.0.0.1");
    assert!(
        !quiet.stderr.iter().any(|l| l.contains("warning")),
        "{:?}",
        quiet.stderr
    );
    std::thread::sleep(Duration::from_millis(10));
}
