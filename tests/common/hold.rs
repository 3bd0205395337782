//! What the `--hold-at-least` tests of every backend read and run: a
//! key's `keys --json` entry and its expiry, a run with a window, and a
//! key taken again once its window is over.

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::expect_status;

pub(crate) type Lc<'a> = &'a dyn Fn(&[&str]) -> Command;

/// How long a kept window may take to free itself after its deadline is
/// looked at, at most (polled, bounded).
pub(crate) const FREED_WITHIN: Duration = Duration::from_secs(20);

pub(crate) fn entry(lc: Lc, key: &str) -> Option<serde_json::Value> {
    let out = expect_status(&mut lc(&["keys", "--json"]), 0);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|k| k["key"] == key)
}

/// `expires` of a `keys --json` entry, as ms since the epoch.
pub(crate) fn expires_ms(e: &serde_json::Value) -> i128 {
    let at =
        humantime::parse_rfc3339(e["expires"].as_str().unwrap_or_else(|| panic!("{e}"))).unwrap();
    at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i128
}

pub(crate) fn now_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i128
}

/// A 1-command run with `--hold-at-least WINDOW` that exits 0.
pub(crate) fn run_with_window(lc: Lc, key: &str, window: &str) {
    expect_status(
        &mut lc(&["trylock", "--hold-at-least", window, key, "--", "true"]),
        0,
    );
}

/// Polls `trylock KEY -- true` until it takes the key (bounded).
pub(crate) fn taken_within(lc: Lc, key: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    for _ in 0..1000 {
        let out = lc(&["trylock", key, "--", "true"]).output().unwrap();
        match out.status.code() {
            Some(0) => return,
            Some(1) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => panic!(
                "'{key}' not taken ({other:?}): {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
    panic!("'{key}' not taken in 1000 tries");
}
