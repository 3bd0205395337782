//! `keys --watch --json`: what changed between two looks, one JSON object
//! per line, each with `event` and `at` (when it was seen):
//!
//! - `held`: a hold appeared (every hold of the first look, too), with the
//!   fields of a `keys --json` object;
//! - `released`: a hold is gone (released, reset, expired, lost), the
//!   object it had when last seen;
//! - `waiting`: the number waiting behind a held key changed (`key`,
//!   `waiting`);
//! - `waits` and `left` (with `--waiters`): a waiter joined a line, or left
//!   it (granted, gave up, superseded), with the fields of a waiter's object;
//! - `error`: the listing failed (`message`); the watch goes on and tries
//!   again at the next refresh; said once until the message changes.
//!
//! A hold is the same hold while its key, source, peer, since, token, mode,
//! identity and fields are: its age is not part of it. A `since` that moved
//! by less than [`JITTER`] is the same: a service that tells an age rather
//! than a moment (Redis: its clock's now less the grant) gives a `since`
//! on our clock that moves by the listing's own delay, a millisecond or
//! two, from one listing to the next.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde_json::Value;

use super::json::{as_json, waiter_json};
use crate::backend::{KeyInfo, WaiterInfo};

/// The last look, as the events see it.
#[derive(Default)]
pub(super) struct Diff {
    /// Each hold's identity, and its object.
    holds: BTreeMap<String, Value>,
    /// Each held key's count of waiters.
    waiting: BTreeMap<String, usize>,
    /// Each waiter's identity, and its object.
    waiters: BTreeMap<String, Value>,
    /// The last error said, until a look succeeds.
    error: Option<String>,
}

/// The time-varying members, left out of an object's identity.
const AGES: [&str; 5] = ["held_ms", "expires_in_ms", "waiting", "waited_ms", "place"];

/// How far a hold's `since` may move between two listings and still be the
/// same hold.
const JITTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A hold's identity without its `since`, and its `since`.
fn loosely(v: &Value) -> (String, Option<SystemTime>) {
    let since = v["since"]
        .as_str()
        .and_then(|s| humantime::parse_rfc3339(s).ok());
    let mut v = v.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("since");
    }
    (identity_of(&v), since)
}

/// Whether two `since`s are within [`JITTER`] of each other.
fn near(a: Option<SystemTime>, b: Option<SystemTime>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x.duration_since(y).unwrap_or_else(|e| e.duration()) < JITTER,
        _ => false,
    }
}

fn identity_of(v: &Value) -> String {
    let mut v = v.clone();
    if let Some(map) = v.as_object_mut() {
        for age in AGES {
            map.remove(age);
        }
    }
    v.to_string()
}

fn holds_of(keys: &[KeyInfo], now: SystemTime) -> BTreeMap<String, Value> {
    as_json(keys, now)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("our own JSON"))
        .map(|v| (identity_of(&v), v))
        .collect()
}

fn waiters_of(waiters: Option<&[WaiterInfo]>, now: SystemTime) -> BTreeMap<String, Value> {
    waiters
        .unwrap_or_default()
        .iter()
        .map(|w| {
            let mut v = waiter_json(w, now);
            v["key"] = Value::String(w.key.clone());
            (identity_of(&v), v)
        })
        .collect()
}

fn event(name: &str, at: &str, mut v: Value) -> String {
    if let Some(map) = v.as_object_mut() {
        map.insert("event".into(), Value::String(name.into()));
        map.insert("at".into(), Value::String(at.into()));
    }
    let mut line = v.to_string();
    line.push('\n');
    line
}

impl Diff {
    /// What changed since the last look, as event lines ("" for nothing).
    pub(super) fn next(
        &mut self,
        look: &Result<(Vec<KeyInfo>, Option<Vec<WaiterInfo>>), String>,
        now: SystemTime,
    ) -> String {
        let at = humantime::format_rfc3339_millis(now).to_string();
        let (keys, waiters) = match look {
            Err(message) => {
                if self.error.as_ref() == Some(message) {
                    return String::new();
                }
                self.error = Some(message.clone());
                return event("error", &at, serde_json::json!({ "message": message }));
            }
            Ok(look) => look,
        };
        self.error = None;
        let mut out = String::new();
        let mut holds = holds_of(keys, now);
        // The holds new to this listing, by their identity without `since`
        // (one pass: a listing of Redis's moves every `since` a little).
        let mut came: BTreeMap<String, Vec<(String, Option<SystemTime>)>> = BTreeMap::new();
        for (id, v) in &holds {
            if !self.holds.contains_key(id) {
                let (loose, since) = loosely(v);
                came.entry(loose).or_default().push((id.clone(), since));
            }
        }
        for (id, old) in &self.holds {
            if holds.contains_key(id) {
                continue;
            }
            // The same hold, its `since` moved a little: kept as it was.
            let (loose, since) = loosely(old);
            let same = came.get_mut(&loose).and_then(|c| {
                let i = c.iter().position(|(_, s)| near(*s, since))?;
                Some(c.swap_remove(i).0)
            });
            if let Some(new_id) = same {
                holds.remove(&new_id);
                holds.insert(id.clone(), old.clone());
                continue;
            }
            out.push_str(&event("released", &at, old.clone()));
        }
        let mut came: Vec<String> = came.into_values().flatten().map(|(id, _)| id).collect();
        came.sort();
        let mut newly_held = std::collections::BTreeSet::new();
        for id in &came {
            let v = &holds[id];
            newly_held.insert(v["key"].as_str().unwrap_or_default().to_owned());
            out.push_str(&event("held", &at, v.clone()));
        }
        let waiting: BTreeMap<String, usize> =
            keys.iter().map(|k| (k.key.clone(), k.waiting)).collect();
        for (key, n) in &waiting {
            match self.waiting.get(key) {
                // A new hold's object already says it.
                None => {}
                Some(_) if newly_held.contains(key) => {}
                Some(old) if old == n => {}
                Some(_) => out.push_str(&event(
                    "waiting",
                    &at,
                    serde_json::json!({ "key": key, "waiting": n }),
                )),
            }
        }
        let listed = waiters_of(waiters.as_deref(), now);
        for (id, v) in &self.waiters {
            if !listed.contains_key(id) {
                out.push_str(&event("left", &at, v.clone()));
            }
        }
        for (id, v) in &listed {
            if !self.waiters.contains_key(id) {
                out.push_str(&event("waits", &at, v.clone()));
            }
        }
        self.holds = holds;
        self.waiting = waiting;
        self.waiters = listed;
        out
    }

    /// A look's holds and waiters without their ages: two looks with the
    /// same identity show the same tables but for the ages.
    pub(super) fn identity(keys: &[KeyInfo], waiters: Option<&[WaiterInfo]>) -> String {
        let now = SystemTime::UNIX_EPOCH;
        let mut text: Vec<String> = holds_of(keys, now).into_keys().collect();
        text.extend(waiters_of(waiters, now).into_keys());
        for k in keys {
            text.push(format!("{}={}", k.key, k.waiting));
        }
        text.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::LockMode;

    fn hold(key: &str, token: u64, since: SystemTime, waiting: usize) -> KeyInfo {
        KeyInfo {
            key: key.into(),
            source: "host-a".into(),
            peer: None,
            since: Some(since),
            waiting,
            kept: Some(false),
            mode: LockMode::Exclusive,
            token: Some(token),
            expires: None,
            identity: None,
            fields: Default::default(),
            mark: None,
        }
    }

    fn events(text: &str) -> Vec<(String, String)> {
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| {
                let key = v["key"].as_str().unwrap_or_default().to_string();
                (v["event"].as_str().unwrap().to_string(), key)
            })
            .collect()
    }

    #[test]
    fn holds_come_and_go_and_ages_are_no_change() {
        let t0 = SystemTime::now();
        let mut diff = Diff::default();
        let first = diff.next(&Ok((vec![hold("a", 1, t0, 0)], None)), t0);
        assert_eq!(events(&first), [("held".into(), "a".into())]);
        // A second later: the same hold, older: nothing.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(diff.next(&Ok((vec![hold("a", 1, t0, 0)], None)), later), "");
        // One more waits; b is taken; then a is released and granted again.
        let third = diff.next(
            &Ok((vec![hold("a", 1, t0, 1), hold("b", 7, later, 0)], None)),
            later,
        );
        assert_eq!(
            events(&third),
            [("held".into(), "b".into()), ("waiting".into(), "a".into())]
        );
        let fourth = diff.next(
            &Ok((vec![hold("a", 2, later, 0), hold("b", 7, later, 0)], None)),
            later,
        );
        assert_eq!(
            events(&fourth),
            [("released".into(), "a".into()), ("held".into(), "a".into())]
        );
    }

    #[test]
    fn a_since_moved_by_a_few_milliseconds_is_the_same_hold() {
        let t0 = SystemTime::now();
        let mut diff = Diff::default();
        diff.next(&Ok((vec![hold("a", 1, t0, 0)], None)), t0);
        let moved = t0 + Duration::from_millis(2);
        assert_eq!(diff.next(&Ok((vec![hold("a", 1, moved, 0)], None)), t0), "");
        // A hold that began two seconds later is another.
        let later = t0 + Duration::from_secs(2);
        let next = diff.next(&Ok((vec![hold("a", 1, later, 0)], None)), later);
        assert_eq!(
            events(&next),
            [("released".into(), "a".into()), ("held".into(), "a".into())]
        );
    }

    #[test]
    fn a_thousand_holds_that_all_moved_a_little_are_no_change() {
        let t0 = SystemTime::now();
        let look = |shift: u64| {
            let since = t0 + Duration::from_millis(shift);
            let keys = (0..1000)
                .map(|i| hold(&format!("k{i}"), 1, since, 0))
                .collect();
            Ok((keys, None))
        };
        let mut diff = Diff::default();
        assert_eq!(events(&diff.next(&look(0), t0)).len(), 1000);
        assert_eq!(diff.next(&look(1), t0), "");
        assert_eq!(diff.next(&look(2), t0), "");
    }

    #[test]
    fn an_error_is_said_once() {
        let now = SystemTime::now();
        let mut diff = Diff::default();
        let e = || Err("cannot reach x".to_string());
        assert_eq!(
            events(&diff.next(&e(), now)),
            [("error".into(), String::new())]
        );
        assert_eq!(diff.next(&e(), now), "");
        assert_eq!(diff.next(&Ok((vec![], None)), now), "");
        assert_eq!(events(&diff.next(&e(), now)).len(), 1);
    }
}
