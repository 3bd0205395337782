//! `lc-cli keys` against a real ZooKeeper: detached holds, a running hold
//! with waiters, a Curator-style holder, nested keys, patterns, handoffs and
//! releases.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use common::spans::Kids;
use common::zk::{curator_client, curator_lock_options, CuratorHold, Zk};
use common::*;
use serde_json::Value;
use zookeeper_client as zkc;

const ROOT: &str = "/k";

/// `keys --json [ARGS]` as key -> object, checking one object per line.
fn keys_json(zk: &Zk, args: &[&str]) -> BTreeMap<String, Value> {
    let mut all = vec!["keys", "--json"];
    all.extend_from_slice(args);
    let out = expect_status(&mut zk.lc(ROOT, &all), 0);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {text}"));
        let key = v["key"].as_str().expect("key is a string").to_string();
        assert!(map.insert(key, v).is_none(), "a key listed twice: {text}");
    }
    map
}

/// `keys [ARGS]` as a table: the header, then key -> (source, peer, waiting).
fn keys_table(zk: &Zk, args: &[&str]) -> BTreeMap<String, (String, String, usize)> {
    let mut all = vec!["keys"];
    all.extend_from_slice(args);
    let out = expect_status(&mut zk.lc(ROOT, &all), 0);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(
        header,
        ["KEY", "SOURCE", "PEER", "HELD", "HOLD", "WAITING"],
        "{text}"
    );
    let mut map = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert!(cells.len() >= 5, "short row: {text}");
        let waiting = cells.last().unwrap().parse().expect("WAITING is a number");
        map.insert(
            cells[0].to_string(),
            (cells[1].to_string(), cells[2].to_string(), waiting),
        );
    }
    map
}

fn since(v: &Value) -> SystemTime {
    humantime::parse_rfc3339(v["since"].as_str().expect("since is a string"))
        .expect("since is RFC 3339")
}

/// `sh -c` that waits until `flag` exists.
fn wait_for(flag: &Path) -> String {
    format!("while [ ! -e '{}' ]; do sleep 0.05; done", flag.display())
}

fn row(source: &str, waiting: usize) -> (String, String, usize) {
    (source.to_string(), "-".to_string(), waiting)
}

#[test]
fn keys_lists_holders_sources_and_waiters() {
    let zk = Zk::start();
    let slack = Duration::from_millis(20);

    // Nothing under the root yet: the header only; no lines as JSON.
    let out = expect_status(&mut zk.lc(ROOT, &["keys"]), 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(keys_table(&zk, &[]).is_empty());
    let out = expect_status(&mut zk.lc(ROOT, &["keys", "--json"]), 0);
    assert!(out.stdout.is_empty(), "{out:?}");

    // Two detached holds, one key inside the other's lock node.
    let before_prod = SystemTime::now();
    expect_status(
        &mut zk.lc(ROOT, &["lock", "deploy/prod", "--source", "ops1"]),
        0,
    );
    let after_prod = SystemTime::now();
    expect_status(&mut zk.lc(ROOT, &["lock", "deploy", "--source", "ops2"]), 0);
    std::thread::sleep(Duration::from_millis(1100));

    // A hold with a running command and two waiters queued behind it.
    let tmp = tempfile::tempdir().unwrap();
    let flags: Vec<_> = ["go0", "go1", "go2"]
        .iter()
        .map(|f| tmp.path().join(f))
        .collect();
    let mut kids = Kids(Vec::new());
    let before_run = SystemTime::now();
    for (i, source) in ["runner", "w1", "w2"].into_iter().enumerate() {
        kids.0.push(
            zk.lc(
                ROOT,
                &["lock", "build/x", "--source", source, "--", "sh", "-c"],
            )
            .arg(wait_for(&flags[i]))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        );
        assert!(
            wait_until(Duration::from_secs(20), || zk.queue("/k/build/x").len()
                == i + 1),
            "{source} did not queue"
        );
    }
    let after_run_queued = SystemTime::now();

    // A Curator-style holder (zookeeper-client's Curator-compatible recipe),
    // whose data is an IP address as Curator writes it, and an lc-cli
    // waiter behind it.
    let (rt, client) = curator_client(&zk);
    let lock = rt.block_on(async {
        client
            .lock(
                zkc::LockPrefix::new_curator("/k/c/k", "lock-").unwrap(),
                b"10.0.0.1",
                curator_lock_options(),
            )
            .await
            .unwrap()
            .into_owned()
    });
    let guard = CuratorHold::new(&rt, lock);
    kids.0.push(
        zk.lc(
            ROOT,
            &["lock", "c/k", "--source", "after-curator", "--", "true"],
        )
        .spawn()
        .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(20), || zk
        .queue("/k/c/k")
        .len()
        == 2));

    // The table: each held key once, its holder's source, its waiters.
    let table = keys_table(&zk, &[]);
    let expected: BTreeMap<String, (String, String, usize)> = [
        ("build/x", row("runner", 2)),
        ("c/k", row("10.0.0.1", 1)),
        ("deploy", row("ops2", 0)),
        ("deploy/prod", row("ops1", 0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(table, expected);
    let out = expect_status(&mut zk.lc(ROOT, &["keys"]), 0);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let col = lines[0].find("SOURCE").unwrap();
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.len() > col && &l[col - 2..col] == "  "),
        "columns not aligned:\n{text}"
    );

    // JSON: the same facts, with since and held_ms.
    let json = keys_json(&zk, &[]);
    // Nothing here was held before the first lock command.
    let longest = before_prod.elapsed().unwrap() + slack;
    assert_eq!(
        json.keys().collect::<Vec<_>>(),
        ["build/x", "c/k", "deploy", "deploy/prod"]
    );
    for (key, v) in &json {
        let (source, _, waiting) = &expected[key];
        assert_eq!(v["source"], source.as_str(), "{key}: {v}");
        assert_eq!(v["waiting"], *waiting as u64, "{key}: {v}");
        assert!(v["peer"].is_null(), "{key}: {v}");
        let held = v["held_ms"].as_u64().expect("held_ms is a number");
        assert!(Duration::from_millis(held) <= longest, "{key}: {v}");
    }
    assert_eq!(json["deploy/prod"]["kept"], true);
    assert_eq!(json["build/x"]["kept"], false);
    // The detached hold: since when it was taken.
    let prod = since(&json["deploy/prod"]);
    assert!(
        prod + slack >= before_prod && prod <= after_prod + slack,
        "deploy/prod since {prod:?}, taken between {before_prod:?} and {after_prod:?}"
    );
    assert!(json["deploy/prod"]["held_ms"].as_u64().unwrap() >= 1000);
    // The running hold: since its node was created, after the detached ones.
    let run = since(&json["build/x"]);
    assert!(
        run + slack >= before_run && run <= after_run_queued + slack,
        "build/x since {run:?}"
    );
    assert!(run >= prod + Duration::from_millis(1000));

    // A pattern filters, in both forms.
    assert_eq!(
        keys_table(&zk, &["build/*"])
            .into_keys()
            .collect::<Vec<_>>(),
        ["build/x"]
    );
    assert_eq!(
        keys_json(&zk, &["deploy*"]).into_keys().collect::<Vec<_>>(),
        ["deploy", "deploy/prod"]
    );
    assert!(keys_table(&zk, &["nothing*"]).is_empty());
    assert!(keys_json(&zk, &["nothing*"]).is_empty());

    // Handoffs: the next waiter is the holder, with one fewer behind it.
    std::fs::write(&flags[0], "").unwrap();
    assert_eq!(kids.0[0].wait().unwrap().code(), Some(0));
    assert!(
        wait_until(Duration::from_secs(20), || keys_table(&zk, &["build/x"])
            .get("build/x")
            == Some(&row("w1", 1))),
        "{:?}",
        keys_table(&zk, &[])
    );
    std::fs::write(&flags[1], "").unwrap();
    assert_eq!(kids.0[1].wait().unwrap().code(), Some(0));
    let w2 = loop {
        let json = keys_json(&zk, &["build/x"]);
        if json["build/x"]["source"] == "w2" {
            break json["build/x"].clone();
        }
        assert!(
            before_run.elapsed().unwrap() < Duration::from_secs(60),
            "w2 never held: {json:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(w2["waiting"], 0);
    // Released: no longer listed.
    std::fs::write(&flags[2], "").unwrap();
    assert_eq!(kids.0[2].wait().unwrap().code(), Some(0));
    assert!(!keys_table(&zk, &[]).contains_key("build/x"));

    // The Curator-style holder leaves: the lc-cli waiter runs and leaves.
    drop(guard);
    assert_eq!(kids.0[3].wait().unwrap().code(), Some(0));
    assert!(wait_until(Duration::from_secs(10), || !keys_table(
        &zk,
        &[]
    )
    .contains_key("c/k")));
    drop(client);

    // unlock: the inner key goes, the outer stays; then nothing is held
    // (the empty lock nodes left behind list nothing).
    expect_status(&mut zk.lc(ROOT, &["unlock", "deploy/prod"]), 0);
    assert_eq!(
        keys_table(&zk, &[]),
        [("deploy".to_string(), row("ops2", 0))]
            .into_iter()
            .collect()
    );
    expect_status(&mut zk.lc(ROOT, &["unlock", "deploy"]), 0);
    let out = expect_status(&mut zk.lc(ROOT, &["keys"]), 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(keys_json(&zk, &[]).is_empty());
}

/// An unreachable ensemble: one line naming the server, status 69.
#[test]
fn keys_unreachable_ensemble() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = expect_status(
        std::process::Command::new(BIN)
            .args(["--server", &format!("zk://127.0.0.1:{port}/k")])
            .args(["--connect-timeout", "1s", "keys"]),
        69,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&port.to_string()), "{err}");
    assert!(out.stdout.is_empty());
}

/// Many keys, more than one batch of pipelined requests, at two depths:
/// every key listed once with its holder's data and its waiters, and the
/// walk asks one getChildren per znode that is not a queue node and one
/// getData per holder, nothing per waiter.
#[test]
fn many_keys_one_request_per_znode_and_per_holder() {
    const N: usize = 300;
    let zk = Zk::start();
    // Curator-style persistent nodes made directly: key many/NNN (and
    // deep/NNN/x for a tenth) held by "10.0.0.NNN", every third with two
    // waiters behind it.
    let keys: Vec<String> = (0..N)
        .map(|i| {
            if i % 10 == 0 {
                format!("deep/{i:03}/x")
            } else {
                format!("many/{i:03}")
            }
        })
        .collect();
    let made = keys.clone();
    zk.with_client(move |c| {
        Box::pin(async move {
            let dir = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
            let node = zkc::CreateMode::PersistentSequential.with_acls(zkc::Acls::anyone_all());
            for (i, key) in made.iter().enumerate() {
                let path = format!("{ROOT}/{key}");
                c.mkdir(&path, &dir).await.unwrap();
                let nodes = if i % 3 == 0 { 3 } else { 1 };
                for n in 0..nodes {
                    let data = format!("10.0.{n}.{i}");
                    c.create(&format!("{path}/_c_{n}-lock-"), data.as_bytes(), &node)
                        .await
                        .unwrap();
                }
            }
        })
    });
    // The znodes the walk must list: the root, many, deep, deep/NNN and
    // every lock node.
    let listed = 3 + N / 10 + N;
    // A 4 s session (the most this server allows): few pings meanwhile.
    let before = zk.mntr();
    let out = expect_status(&mut zk.lc_session(ROOT, "4s", &["keys", "--json"]), 0);
    let after = zk.mntr();
    let json: BTreeMap<String, Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["key"].as_str().unwrap().to_string(), v)
        })
        .collect();
    assert_eq!(json.len(), N);
    for (i, key) in keys.iter().enumerate() {
        let v = &json[key];
        assert_eq!(v["source"], format!("10.0.0.{i}"), "{key}: {v}");
        assert_eq!(v["waiting"], if i % 3 == 0 { 2 } else { 0 }, "{key}: {v}");
    }
    // Requests, beyond the session's own (connect, a ping every 1.3 s, close).
    let requests = after["zk_packets_received"] - before["zk_packets_received"];
    let asked = (listed + N) as f64;
    assert!(
        requests >= asked && requests <= asked + 10.0,
        "{requests} requests for {listed} listings and {N} holders"
    );
    assert_eq!(keys_json(&zk, &["deep/*"]).len(), N / 10);
}

#[test]
fn keys_waiters_lists_the_queue_nodes_in_line_order() {
    let zk = Zk::start();
    let queued = || zk.queue(&format!("{ROOT}/q")).len().saturating_sub(1);
    let waiters = common::waiters::three_in_order(|args| zk.lc(ROOT, args), "q", queued);
    // ZooKeeper knows no peer address.
    assert!(waiters.iter().all(|w| w["peer"].is_null()), "{waiters:?}");
}
