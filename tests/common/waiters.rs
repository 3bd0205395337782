//! `keys --waiters` on any backend: three waiters queued one at a time must
//! be listed in arrival order, in the JSON and in the table.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::cli::Guard;
use super::{expect_status, wait_until};

const LIMIT: Duration = Duration::from_secs(20);

/// Holds `key` (kept, by source `holder`), then queues `w1`, `w2`, `w3`,
/// each once `queued()` counts it among the key's waiters; checks `keys
/// --waiters` lists them in that order, then lets them through. Returns
/// the key's `waiters` array of the JSON.
pub(crate) fn three_in_order(
    lc: impl Fn(&[&str]) -> Command,
    key: &str,
    queued: impl Fn() -> usize,
) -> Vec<Value> {
    expect_status(&mut lc(&["lock", "-q", "--source", "holder", key]), 0);
    let waiters = listed_in_order(&lc, key, &queued);
    expect_status(&mut lc(&["unlock", key]), 0);
    waiters.1.finish();
    waiters.0
}

/// As [`three_in_order`] where no hold outlives its process (PostgreSQL):
/// the holder runs a command until it is stopped; `held()` tells it holds.
pub(crate) fn three_in_order_behind_a_command(
    lc: impl Fn(&[&str]) -> Command,
    key: &str,
    held: impl Fn() -> bool,
    queued: impl Fn() -> usize,
) -> Vec<Value> {
    let holder = lc(&["lock", "--source", "holder", key, "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut holder = Guard(holder);
    assert!(wait_until(LIMIT, &held), "the holder never held '{key}'");
    let waiters = listed_in_order(&lc, key, &queued);
    super::cli::signal(holder.pid(), libc::SIGTERM);
    assert!(holder.wait_for(LIMIT).is_some(), "the holder did not stop");
    waiters.1.finish();
    waiters.0
}

/// The three waiters, to be let through.
struct Line(Vec<Guard>);

impl Line {
    /// Each runs its command in turn once the key is free.
    fn finish(self) {
        for (i, mut kid) in self.0.into_iter().enumerate() {
            assert_eq!(kid.wait_for(LIMIT), Some(0), "w{} did not run", i + 1);
        }
    }
}

fn listed_in_order(
    lc: &impl Fn(&[&str]) -> Command,
    key: &str,
    queued: &impl Fn() -> usize,
) -> (Vec<Value>, Line) {
    let mut kids = Vec::new();
    for i in 1..=3 {
        let source = format!("w{i}");
        let child = lc(&["lock", "--source", &source, key, "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        kids.push(Guard(child));
        assert!(wait_until(LIMIT, || queued() >= i), "{source} never queued");
    }
    let out = expect_status(&mut lc(&["keys", "--waiters", "--json"]), 0);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let obj: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {text}")))
        .find(|v| v["key"] == key)
        .unwrap_or_else(|| panic!("'{key}' not listed: {text}"));
    assert_eq!(obj["source"], "holder", "{text}");
    assert_eq!(obj["waiting"], 3, "{text}");
    let waiters = obj["waiters"]
        .as_array()
        .unwrap_or_else(|| panic!("no waiters array: {text}"))
        .clone();
    let sources: Vec<&str> = waiters
        .iter()
        .map(|w| w["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["w1", "w2", "w3"], "{text}");
    let places: Vec<u64> = waiters
        .iter()
        .map(|w| w["place"].as_u64().unwrap())
        .collect();
    assert_eq!(places, [0, 1, 2], "{text}");
    for w in &waiters {
        assert_eq!(w["mode"], "exclusive", "{text}");
        assert!(w["since"].is_string(), "no since: {text}");
        assert!(w["waited_ms"].as_u64().is_some(), "{text}");
    }
    let since: Vec<&str> = waiters
        .iter()
        .map(|w| w["since"].as_str().unwrap())
        .collect();
    assert!(
        since.windows(2).all(|p| p[0] <= p[1]),
        "not in arrival order: {text}"
    );
    // The table: the holds, a blank line, then one row per waiter.
    let out = expect_status(&mut lc(&["keys", "--waiters"]), 0);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let (_, rows) = table
        .split_once("\n\n")
        .unwrap_or_else(|| panic!("no waiters table: {table}"));
    let mut lines = rows.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["WAITER", "OF", "PLACE"], "{table}");
    let rows: Vec<Vec<&str>> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c[0] == key)
        .collect();
    let order: Vec<(&str, &str)> = rows.iter().map(|c| (c[1], c[2])).collect();
    assert_eq!(order, [("0", "w1"), ("1", "w2"), ("2", "w3")], "{table}");
    (waiters, Line(kids))
}
