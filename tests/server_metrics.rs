//! `lc-cli serve --metrics ADDR`: the counters and gauges after real
//! traffic, `promtool check metrics` on the live output, and the alert
//! rules' metric names present in it.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::manager::{http_get, names, sample};
use common::Server;
use common::{frame, read_byte};

/// Waits (at most 10 s) until the scraped `name` equals `value`.
fn wait_for_sample(server: &Server, name: &str, value: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = server.scrape();
        if sample(&text, name) == value {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never became {value}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `promtool check metrics` on `text`: must pass without a word.
fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool (Debian package prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics complained ({:?}):\n{}{}\non:\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Traffic with known counts; returns the scrape after it.
fn traffic(server: &Server) -> String {
    let held = |s: &mut std::net::TcpStream| assert_eq!(read_byte(s), Some(b'+'));
    // Grant 1: a.
    let mut a = server.send_lock(b"a", b"one");
    held(&mut a);
    // A waiter that hangs up: withdrawal 1.
    let gone = server.send_lock(b"a", b"quitter");
    wait_for_sample(server, "lc_waiters_queued", 1.0);
    drop(gone);
    wait_for_sample(server, "lc_withdrawals_total", 1.0);
    // Unlock hands a to the next waiter: release 1, grant 2.
    let mut next = server.send_lock(b"a", b"two");
    wait_for_sample(server, "lc_waiters_queued", 1.0);
    let mut unlock = server.connect();
    unlock.write_all(&frame(2, b"a", None)).unwrap();
    assert_eq!(read_byte(&mut unlock), Some(b'+'));
    held(&mut next);
    // Reset by key over the lock protocol: reset 1.
    let mut reset = server.connect();
    reset.write_all(&frame(3, b"a", None)).unwrap();
    assert_eq!(read_byte(&mut reset), Some(b'+'));
    // Grant 3: c; a waiter of source s9 withdrawn by a reset by source:
    // reset 2, withdrawal 2.
    let mut c = server.send_lock(b"c", b"keeper");
    held(&mut c);
    let mut s9 = server.send_lock(b"c", b"s9");
    wait_for_sample(server, "lc_waiters_queued", 1.0);
    let mut reset = server.connect();
    reset.write_all(&frame(4, b"s9", None)).unwrap();
    assert_eq!(read_byte(&mut reset), Some(b'+'));
    assert_eq!(read_byte(&mut s9), Some(b'-'));
    // Two resets through the manager: resets 3 and 4.
    let mut request = b"RSET".to_vec();
    request.extend(names(&[b"nothing", b"held"]));
    assert_eq!(server.manage(&request), b"+++");
    // Refused: a bad frame on the lock port, a bad manager command.
    let mut bad = server.connect();
    bad.write_all(&[common::action::UNKNOWN, 1, b'k']).unwrap();
    assert_eq!(read_byte(&mut bad), Some(b'-'));
    assert_eq!(server.manage(b"NOPE"), b"-");
    let text = wait_for_sample(server, "lc_refused_requests_total", 2.0);
    drop((a, c));
    text
}

fn check_counts(text: &str) {
    assert_eq!(sample(text, "lc_grants_total"), 3.0, "{text}");
    assert_eq!(sample(text, "lc_releases_total"), 1.0, "{text}");
    assert_eq!(sample(text, "lc_resets_total"), 4.0, "{text}");
    assert_eq!(sample(text, "lc_withdrawals_total"), 2.0, "{text}");
    assert_eq!(sample(text, "lc_refused_requests_total"), 2.0, "{text}");
    assert_eq!(sample(text, "lc_keys_held"), 1.0, "{text}");
    assert_eq!(sample(text, "lc_waiters_queued"), 0.0, "{text}");
    let age = sample(text, "lc_oldest_hold_age_seconds");
    assert!((0.0..60.0).contains(&age), "{text}");
}

#[test]
fn metrics_in_memory() {
    let server = Server::start_with(&["--metrics", "127.0.0.1:0", "--read-timeout", "1s"]);
    let idle = server.scrape();
    assert_eq!(sample(&idle, "lc_keys_held"), 0.0);
    assert_eq!(sample(&idle, "lc_oldest_hold_age_seconds"), 0.0);
    assert!(!idle.contains("lc_wal_"), "no log, no log metrics:\n{idle}");
    promtool_check(&idle);
    let text = traffic(&server);
    check_counts(&text);
    promtool_check(&text);
    // A stalled frame is refused once the read timeout passes.
    let mut stalled = server.connect();
    stalled.write_all(&[1, 5, b'a']).unwrap();
    wait_for_sample(&server, "lc_refused_requests_total", 3.0);
    // Anything but GET /metrics is not served.
    let (status, _) = http_get(server.metrics.unwrap(), "/other");
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
}

#[test]
fn metrics_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lc.wal");
    let server =
        Server::start_with(&["--metrics", "127.0.0.1:0", "--data", path.to_str().unwrap()]);
    let text = traffic(&server);
    check_counts(&text);
    promtool_check(&text);
    let bytes = sample(&text, "lc_wal_bytes");
    assert_eq!(bytes, std::fs::metadata(&path).unwrap().len() as f64);
    assert!(bytes > 0.0);
    let syncs = sample(&text, "lc_wal_fsync_seconds_count");
    assert!(syncs >= 1.0, "{text}");
    assert_eq!(
        sample(&text, "lc_wal_fsync_seconds_bucket{le=\"+Inf\"}"),
        syncs
    );
}

#[test]
fn no_metrics_port_without_the_option() {
    let server = Server::start();
    assert!(server.metrics.is_none());
}

#[test]
fn the_alert_rules_use_live_metric_names() {
    let server = Server::start_with(&["--metrics", "127.0.0.1:0"]);
    let text = server.scrape();
    let rules = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus-alerts.yml"),
    )
    .unwrap();
    let mut checked = 0;
    for expr in rules.lines().filter_map(|l| l.trim().strip_prefix("expr:")) {
        // Metric names: identifiers outside label braces, not numbers or
        // operators.
        let mut outside = String::new();
        let mut depth = 0;
        for ch in expr.chars() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ if depth == 0 => outside.push(ch),
                _ => {}
            }
        }
        for word in outside.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
            if word.is_empty() || word.starts_with(|c: char| c.is_ascii_digit()) {
                continue;
            }
            checked += 1;
            if word == "up" {
                // Made by Prometheus for every scrape target: the rule must
                // name the job lc-cli.
                assert!(expr.contains("up{job=\"lc-cli\"}"), "{expr}");
                continue;
            }
            let typed = format!("# TYPE {word} ");
            assert!(
                text.contains(&typed),
                "{word} (from {expr:?}) is not served:\n{text}"
            );
        }
    }
    assert_eq!(checked, 2, "both rules' metrics were checked");
}

#[test]
fn a_failed_log_write_counts_as_refused() {
    let disk = common::disk::SmallDisk::mount("64k");
    let path = disk.mnt.join("locks.wal");
    let server =
        Server::start_with(&["--metrics", "127.0.0.1:0", "--data", path.to_str().unwrap()]);
    // A long key: its Release record (137 bytes) cannot fit where a short
    // key's Grant (47 bytes) no longer did.
    let held_key = [b'h'; 127];
    let mut held = server.send_lock(&held_key, b"s");
    assert_eq!(read_byte(&mut held), Some(b'+'));
    let filler = disk.fill();
    let ask = |bytes: &[u8]| {
        let mut s = server.connect();
        s.write_all(bytes).unwrap();
        read_byte(&mut s)
    };
    // Appends fit in the log's last page until they cross into a new one.
    let mut grants = 1.0;
    let mut held_keys = 1.0;
    let mut refused = false;
    for i in 0..2000 {
        let key = format!("k{i}");
        grants += 1.0;
        match ask(&frame(1, key.as_bytes(), Some(b"s"))) {
            Some(b'+') => match ask(&frame(2, key.as_bytes(), None)) {
                Some(b'+') => {}
                // Its release crossed into the next page first: refused,
                // and the key stays held.
                Some(b'-') => {
                    held_keys += 1.0;
                    refused = true;
                    break;
                }
                other => panic!("unlock {key}: {other:?}"),
            },
            Some(b'-') => {
                refused = true;
                break;
            }
            other => panic!("lock {key}: {other:?}"),
        }
    }
    assert!(refused, "the full disk never refused a grant or a release");
    let text = server.scrape();
    assert_eq!(sample(&text, "lc_refused_requests_total"), 1.0, "{text}");
    assert_eq!(sample(&text, "lc_grants_total"), grants, "{text}");
    assert_eq!(sample(&text, "lc_keys_held"), held_keys, "{text}");
    promtool_check(&text);
    // A reset through the manager whose release cannot be logged: '-'
    // instead of its '+', as a protocol reset answers.
    let mut request = b"RSET".to_vec();
    request.extend(names(&[&held_key]));
    assert_eq!(server.manage(&request), b"-");
    let text = server.scrape();
    assert_eq!(sample(&text, "lc_refused_requests_total"), 2.0, "{text}");
    assert_eq!(sample(&text, "lc_resets_total"), 1.0, "{text}");
    std::fs::remove_file(&filler).unwrap();
}

/// The metrics port has a budget of its own (16 connections): idle
/// connections beyond it are closed at once, and the lock port serves on;
/// bound off loopback, the start warns.
#[test]
fn the_metrics_port_has_a_budget_of_its_own() {
    use std::io::Read;
    let ip = common::host_ip();
    let server = Server::start_with(&["--metrics", &format!("{ip}:0")]);
    let metrics = server.metrics.unwrap();
    // The warning goes to standard error, the banner Server waits for to
    // standard output: wait for it too.
    server.wait_for("warning: the metrics port", 1, Duration::from_secs(5));
    assert!(
        server.logged(&["warning: the metrics port", "is not a loopback address"]),
        "{}",
        server.log()
    );
    let idle: Vec<std::net::TcpStream> = (0..16)
        .map(|_| std::net::TcpStream::connect(metrics).unwrap())
        .collect();
    // Beyond the budget: closed before a byte is read.
    let mut closed = 0;
    for _ in 0..50 {
        let mut extra = std::net::TcpStream::connect(metrics).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 1];
        // A close is an end of file or a reset; a time-out is not one.
        match extra.read(&mut buf) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, 50);
    let out = server.lc(&["lock", "k", "--", "true"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // The budget comes back as the idle connections go.
    drop(idle);
    assert!(common::wait_until(Duration::from_secs(5), || {
        let Ok(mut s) = std::net::TcpStream::connect(metrics) else {
            return false;
        };
        let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.starts_with("HTTP/1.1 200")
    }));
}
