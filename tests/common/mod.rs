//! Starting the real binary and real servers on 127.0.0.1 for the tests.

pub(crate) mod serve;

use std::io::Read;
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_lc-cli");

#[allow(unused_imports)]
pub(crate) use serve::{Serve, Server};

/// `lc-cli --server SERVER ARGS...`, ready to run, free of the caller's
/// `LC_SERVER` and `LC_SOURCE`.
pub(crate) fn lc_at(server: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--server").arg(server).args(args);
    cmd.env_remove("LC_SERVER").env_remove("LC_SOURCE");
    cmd
}

/// `lc-cli -v --server SERVER --connect-timeout WAIT ARGS` with `LC_TOKEN`
/// set to `token` (none: unset), `LC_TOKEN_FILE` unset.
pub(crate) fn lc_with_token(
    server: &str,
    wait: &str,
    token: Option<&str>,
    args: &[&str],
) -> Command {
    let mut cmd = lc_at(server, &["-v", "--connect-timeout", wait]);
    cmd.args(args)
        .env_remove("LC_TOKEN")
        .env_remove("LC_TOKEN_FILE");
    if let Some(t) = token {
        cmd.env("LC_TOKEN", t);
    }
    cmd
}

/// The one-byte protocol's action bytes, for tests that speak it raw.
pub(crate) mod action {
    pub(crate) const LOCK: u8 = 1;
    pub(crate) const UNLOCK: u8 = 2;
    pub(crate) const RESET_KEY: u8 = 3;
    pub(crate) const RESET_SOURCE: u8 = 4;
    pub(crate) const TRY: u8 = 5;
    pub(crate) const RELEASE: u8 = 6;
    /// An action number no server knows (lc-cli's own end at 17, Keys; 18
    /// and up are kept for the next ones).
    pub(crate) const UNKNOWN: u8 = 200;
}

pub(crate) fn read_byte(s: &mut TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(1) => Some(b[0]),
        _ => None,
    }
}

pub(crate) fn frame(action: u8, key: &[u8], source: Option<&[u8]>) -> Vec<u8> {
    let mut f = vec![action, key.len() as u8];
    f.extend_from_slice(key);
    if let Some(s) = source {
        f.push(s.len() as u8);
        f.extend_from_slice(s);
    }
    f
}

/// The first non-loopback IPv4 address of this machine, as `hostname -I`
/// lists them; none is a failure (the tests need one), not a skip.
pub(crate) fn host_ip() -> String {
    let out = Command::new("hostname")
        .arg("-I")
        .output()
        .expect("hostname -I");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split_whitespace()
        .find(|a| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| !ip.is_loopback())
        })
        .unwrap_or_else(|| panic!("no IPv4 address in `hostname -I`: {text:?}"))
        .to_string()
}

/// Fails if `text` (what `what` printed or logged) holds any of `secrets`.
pub(crate) fn assert_hides(what: &str, text: &str, secrets: &[&str]) {
    for t in secrets {
        assert!(!text.contains(t), "{what} shows a secret:\n{text}");
    }
}

/// [`expect_status`], then its output (standard output, then error) as
/// text, which must hold none of `secrets`.
pub(crate) fn run_hiding(cmd: &mut Command, expected: i32, secrets: &[&str]) -> String {
    let out = expect_status(cmd, expected);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_hides(&format!("{cmd:?}"), &text, secrets);
    text
}

/// Runs a command and shows the exact command line and its output if the
/// status is not the expected one.
pub(crate) fn expect_status(cmd: &mut Command, expected: i32) -> Output {
    let line = format!("{cmd:?}");
    let out = cmd.output().expect("run lc-cli");
    // Killed by signal N (lc-cli re-raises its command's) reads as 128+N, as
    // a shell's `$?`.
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .or(out.status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    assert_eq!(
        code,
        expected,
        "\ncommand: {line}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command that must fail with `expected` and say why in one line
/// on stderr; that line.
pub(crate) fn expect_error_line(cmd: &mut Command, expected: i32) -> String {
    let out = expect_status(cmd, expected);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Polls `cond` every 10 ms until it holds or `limit` passes.
/// Waits at most `limit` for a child to end (killing it past that, and
/// failing): its status and its stderr.
pub(crate) fn finish_within(
    limit: Duration,
    mut child: std::process::Child,
) -> (Option<i32>, String) {
    let ok = wait_until(limit, || child.try_wait().unwrap().is_some());
    if !ok {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(ok, "lc-cli did not end within {limit:?}: {err}");
    (out.status.code(), err)
}

/// A port on 127.0.0.1 free with the next one free too (the built-in
/// server's lock port and manager port), from below the kernel's
/// ephemeral range (32768 and up here) and above the ports the tests name
/// (22119 to 22220): there a pair is never taken by the
/// local ends of the suite's own connections, which three tests at a time
/// open by the thousand (a pair after port 0 failed 50 tries in a row so).
/// Free when checked: a caller that loses the race tries again.
pub(crate) fn free_port_pair() -> u16 {
    free_ports_in_a_row(2)
}

/// `n` ports in a row on 127.0.0.1, free when checked, from the range of
/// [`free_port_pair`]. For one port it is also what `redis::free_port`
/// gives the servers the tests stop and start again on the same port
/// (PostgreSQL, Redis, etcd): a port the kernel handed out could be the
/// local end of another test's connection by the time of the restart (a
/// PostgreSQL restart failed in CI so).
pub(crate) fn free_ports_in_a_row(n: u16) -> u16 {
    use std::net::TcpListener;
    // A start of its own per test process, so that tests at once seldom meet.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut at = (std::process::id().wrapping_mul(2_654_435_761) ^ nanos) % 9_000;
    for _ in 0..500 {
        let port = 23_000 + at as u16;
        at = (at + 7) % 9_000;
        let bound: Vec<_> = (0..n)
            .map_while(|i| TcpListener::bind(("127.0.0.1", port + i)).ok())
            .collect();
        if bound.len() == n as usize {
            return port;
        }
    }
    panic!("no {n} free ports in a row in 23000-32000 after 500 tries");
}

pub(crate) fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}
pub(crate) mod cli;
pub(crate) mod curator;
pub(crate) mod deploy;
pub(crate) mod disk;
pub(crate) mod etcd;
pub(crate) mod hold;
pub(crate) mod manager;
pub(crate) mod partition;
pub(crate) mod pg;
pub(crate) mod proxy;
pub(crate) mod redis;
pub(crate) mod slots;
pub(crate) mod spans;
pub(crate) mod timeline;
pub(crate) mod tls;
pub(crate) mod waiters;
pub(crate) mod wal;
pub(crate) mod zk;

/// How long a negative check watches for something that must not happen
/// (a waiter running while the key is held, a stopped command going on).
/// Such a check cannot end early on success; this bounds what it costs.
pub(crate) const QUIET: Duration = Duration::from_millis(300);

/// Polls `ok` every 10 ms for `period`: false as soon as it fails, true if
/// it held throughout. For "nothing happens for T", where a fixed sleep and
/// one look would miss a violation that comes and goes.
pub(crate) fn holds_for(period: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < period {
        if !ok() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ok()
}
