//! `lc-cli ping` against real servers of every backend: the one line and
//! `--json` (the version, ready, exit 0), the built-in server and one in
//! the reference mode, nothing listening (69 at once), a Redis node
//! without persistence (69 and the seconds left) and with it (0), a wrong
//! Redis password (76), and a Redis quorum with one node of three down.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::pg::PgServer;
use common::redis::{free_port, quorum_url, RedisServer};
use common::zk::Zk;
use common::{expect_error_line, expect_status, lc_at, Serve, Server};

/// `ping` and `ping --json` must both exit 0; the line and the object.
fn ready(server: &str) -> (String, serde_json::Value) {
    let out = expect_status(&mut lc_at(server, &["ping"]), 0);
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.trim_end().ends_with(", ready"), "{line}");
    let out = expect_status(&mut lc_at(server, &["ping", "--json"]), 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["ready"], true, "{json}");
    assert!(json["round_trip_ms"].as_f64().unwrap() > 0.0, "{json}");
    assert_eq!(json["waits"], serde_json::json!([]), "{json}");
    (line, json)
}

fn version_of(json: &serde_json::Value) -> String {
    json["version"]
        .as_str()
        .unwrap_or_else(|| panic!("no version: {json}"))
        .to_string()
}

#[test]
fn the_built_in_server_says_its_version() {
    let server = Server::start();
    let (line, json) = ready(&server.url());
    assert_eq!(json["service"], "lc-cli serve");
    assert_eq!(version_of(&json), env!("CARGO_PKG_VERSION"));
    assert!(
        line.starts_with(&format!("lc-cli serve {} at ", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    assert_eq!(json["tls"], false);
    // What the Dockerfile's HEALTHCHECK and the StatefulSet's probes run,
    // pointed at this server instead of 127.0.0.1:22119.
    let root = env!("CARGO_MANIFEST_DIR");
    for file in ["Dockerfile", "deploy/kubernetes/statefulset.yaml"] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        let probes: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(r#""/usr/local/bin/lc-cli", "ping""#))
            .collect();
        assert!(!probes.is_empty(), "no lc-cli ping in {file}");
        for probe in probes {
            let args: Vec<String> = probe
                .split('"')
                .skip(3)
                .step_by(2)
                .map(|a| a.replace("127.0.0.1:22119", &server.addr.to_string()))
                .collect();
            let out = Command::new(common::BIN)
                .args(&args)
                .env_remove("LC_SERVER")
                .output()
                .unwrap();
            assert!(out.status.success(), "{file}: {args:?}: {out:?}");
        }
    }
}

#[test]
fn a_reference_server_is_named_without_a_version() {
    let server = Serve::new().env("LC_CLI_SERVE_AS_REFERENCE", "1").start();
    let (line, json) = ready(&server.url());
    assert_eq!(json["service"], "Locking-Center server");
    assert_eq!(json["version"], serde_json::Value::Null);
    assert!(line.contains("not lc-cli serve"), "{line}");
    // The HELLO was never sent to it: only the PING was answered `-`.
    assert!(!server.logged(&["unknown action 16"]), "{}", server.log());
}

#[test]
fn nothing_listening_is_69_at_once() {
    let addr = format!("127.0.0.1:{}", free_port());
    // One attempt, not retries for the whole --connect-timeout: a health
    // check says how things are now.
    let started = Instant::now();
    let err = expect_error_line(&mut lc_at(&addr, &["ping", "--connect-timeout", "20s"]), 69);
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    assert!(err.starts_with("lc-cli: cannot reach"), "{err}");
    let out = expect_status(&mut lc_at(&addr, &["ping", "--json"]), 69);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["ready"], false);
    assert!(json["error"].as_str().unwrap().contains("cannot reach"));
    // A Redis address with nothing behind it: 69 too.
    let url = format!("redis://127.0.0.1:{}", free_port());
    expect_error_line(
        &mut lc_at(&url, &["--connect-timeout", "300ms", "ping"]),
        69,
    );
}

#[test]
fn a_peer_of_another_protocol_is_76() {
    let redis = RedisServer::start();
    let err = expect_error_line(&mut lc_at(&redis.addr(), &["ping"]), 76);
    assert!(err.contains("not the Locking-Center protocol"), "{err}");
}

#[test]
fn redis_durable_volatile_and_refused() {
    let durable = RedisServer::start();
    let (line, json) = ready(&durable.url());
    assert_eq!(json["service"], "Redis");
    assert!(version_of(&json).starts_with('7'), "{json}");
    assert!(line.starts_with("Redis 7"), "{line}");

    let volatile = RedisServer::start_volatile();
    let err = expect_error_line(&mut lc_at(&volatile.url(), &["ping"]), 69);
    assert!(err.contains("without persistence"), "{err}");
    let secs: u64 = err
        .split(", in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no seconds in: {err}"));
    assert!((1..=30).contains(&secs), "{err}");
    let out = expect_status(&mut lc_at(&volatile.url(), &["ping", "--json"]), 69);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["ready"], false);
    assert_eq!(json["nodes"][0]["counts"], false);
    // With a lease of 1 s it counts once it has been up for that long.
    let short = format!("{}?ttl=1s", volatile.url());
    std::thread::sleep(Duration::from_millis(2100));
    ready(&short);

    let secured = RedisServer::start_secured(true, &[], Some("right-one"));
    let wrong = format!("redis://:wrong-one@{}", secured.addr());
    let err = expect_error_line(&mut lc_at(&wrong, &["ping"]), 76);
    assert!(!err.contains("wrong-one"), "{err}");
    let right = format!("redis://:right-one@{}", secured.addr());
    let (line, json) = ready(&right);
    assert_eq!(json["authenticated"], true);
    assert!(
        line.contains("credentials accepted") && !line.contains("right-one"),
        "{line}"
    );
}

#[test]
fn a_redis_quorum_with_one_node_down_is_ready_with_two_of_three() {
    let mut nodes = vec![
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let url = quorum_url(&nodes);
    let (line, _) = ready(&url);
    assert!(line.contains("3 of 3 nodes"), "{line}");
    nodes[1].stop();
    let (line, json) = ready(&url);
    assert!(line.contains("2 of 3 nodes"), "{line}");
    assert_eq!(json["nodes"][1]["up"], false, "{json}");
    nodes[2].stop();
    let err = expect_error_line(
        &mut lc_at(&url, &["--connect-timeout", "300ms", "ping"]),
        69,
    );
    assert!(err.starts_with("lc-cli: "), "{err}");
}

#[test]
fn zookeeper_says_its_version() {
    let zk = Zk::start();
    let (line, json) = ready(&zk.url("/lc"));
    assert_eq!(json["service"], "ZooKeeper");
    assert!(version_of(&json).starts_with("3."), "{json}");
    assert!(line.starts_with("ZooKeeper 3."), "{line}");
}

#[test]
fn etcd_says_its_version() {
    let etcd = Etcd::start();
    let (line, json) = ready(&format!("etcd://{}", etcd.endpoint()));
    assert_eq!(json["service"], "etcd");
    assert!(version_of(&json).starts_with("3."), "{json}");
    assert!(line.starts_with("etcd 3."), "{line}");
    assert_eq!(json["nodes"][0]["up"], true, "{json}");
}

#[test]
fn postgres_says_its_version() {
    let pg = PgServer::start();
    let (line, json) = ready(&pg.url());
    assert_eq!(json["service"], "PostgreSQL");
    assert!(version_of(&json).starts_with("15"), "{json}");
    assert!(line.starts_with("PostgreSQL 15"), "{line}");
    assert_eq!(json["authenticated"], true);
    assert_eq!(json["tls"], false);
}
