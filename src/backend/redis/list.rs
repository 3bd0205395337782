//! `lc-cli keys` on Redis: every node lists its held keys in one script
//! ([`scripts`](super::scripts) `LIST`); a key is reported when a majority of
//! nodes hold it with the same owner token, with the facts of the first of
//! those nodes.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::node::NodeResult;
use super::quorum::Quorum;
use super::scripts::Scripts;
use crate::backend::fields::FieldList;
use crate::backend::{KeyInfo, LockMode, Result, WaiterInfo};

/// One held key as one node sees it: (name, owner token, source, since in
/// server ms or -1, live waiters, detached: 1 kept, 0 running, -1 unknown).
/// Then the holder's mode, `x`, `s` or N; a kept hold's deadline in
/// server ms (`--expire`), or -1; last, the holder's field list and the
/// key's mark (each '' when none).
type NodeKey = (
    String,
    String,
    String,
    i64,
    i64,
    i64,
    String,
    i64,
    String,
    String,
);

/// One node's answer: its clock (ms) and its held keys.
type NodeListing = (i64, Vec<NodeKey>);

pub(super) async fn keys(sh: &Quorum) -> Result<Vec<KeyInfo>> {
    let (answers, received) = ask_all::<NodeListing>(sh, |s| &s.list).await?;
    let listings: Vec<&NodeListing> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    Ok(agreed(&listings, sh.majority(), received))
}

/// Runs one of the listing scripts on every node: their answers (a quorum
/// of them, or the error) and when they were in, on our clock.
async fn ask_all<T: redis::FromRedisValue + Send + 'static>(
    sh: &Quorum,
    script: fn(&Scripts) -> &redis::Script,
) -> Result<(Vec<NodeResult<T>>, SystemTime)> {
    let answers: Vec<NodeResult<T>> = sh
        .all(|node| async move {
            let inv = script(Scripts::get()).prepare_invoke();
            node.run(&inv).await
        })
        .await;
    let received = SystemTime::now();
    sh.need_quorum(&answers)?;
    Ok((answers, received))
}

/// One live waiter as one node sees it: (name, waiter id, source, queued
/// in server ms or -1, mode `x`/`s`/`l`, N, field list or '').
type NodeWaiter = (String, String, String, i64, String, String, String);

/// One node's answer: its clock (ms) and its waiters, key by key in line order.
type NodeWaiters = (i64, Vec<NodeWaiter>);

pub(super) async fn waiters(sh: &Quorum) -> Result<Vec<WaiterInfo>> {
    let (answers, received) = ask_all::<NodeWaiters>(sh, |s| &s.list_waiters).await?;
    let listings: Vec<&NodeWaiters> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    Ok(agreed_waiters(&listings, sh.majority(), received))
}

/// The waiters a majority of nodes have in line, in the order of the first
/// of those nodes, with its facts (`since` on our clock, as for holds).
fn agreed_waiters(
    listings: &[&NodeWaiters],
    majority: usize,
    received: SystemTime,
) -> Vec<WaiterInfo> {
    let mut votes: BTreeMap<(&str, &str), (usize, usize, i64, &NodeWaiter)> = BTreeMap::new();
    for (now_ms, line) in listings {
        for (pos, w) in line.iter().enumerate() {
            votes
                .entry((w.0.as_str(), w.1.as_str()))
                .or_insert((0, pos, *now_ms, w))
                .0 += 1;
        }
    }
    let mut kept: Vec<(&str, usize, i64, &NodeWaiter)> = votes
        .into_iter()
        .filter(|(_, (n, ..))| *n >= majority)
        .map(|((name, _), (_, pos, now_ms, w))| (name, pos, now_ms, w))
        .collect();
    kept.sort_by_key(|&(name, pos, ..)| (name, pos));
    let mut out: Vec<WaiterInfo> = Vec::with_capacity(kept.len());
    for (name, _, now_ms, (_, _, source, since_ms, mode, n, fields)) in kept {
        let place = match out.last() {
            Some(prev) if prev.key == name => prev.place + 1,
            _ => 0,
        };
        out.push(WaiterInfo {
            key: name.to_string(),
            source: if source.is_empty() {
                "-".into()
            } else {
                source.clone()
            },
            peer: None,
            since: (*since_ms >= 0).then(|| {
                let age = Duration::from_millis((now_ms - since_ms).max(0) as u64);
                received.checked_sub(age).unwrap_or(received)
            }),
            mode: match mode.as_str() {
                "s" => LockMode::Shared,
                "l" => LockMode::limit(n.parse().unwrap_or(2)),
                _ => LockMode::Exclusive,
            },
            place,
            kept: None,
            identity: None,
            fields: field_list(fields),
        });
    }
    out
}

/// The keys a majority of nodes hold with the same owner token. `since` is
/// put on our clock: the age of the hold by the node's clock, before the
/// moment the answers arrived, so a node whose clock is off does not skew
/// how long the key has been held.
fn agreed(listings: &[&NodeListing], majority: usize, received: SystemTime) -> Vec<KeyInfo> {
    let mut votes: BTreeMap<(&str, &str), (usize, i64, &NodeKey)> = BTreeMap::new();
    for (now_ms, held) in listings {
        for k in held {
            votes
                .entry((k.0.as_str(), k.1.as_str()))
                .or_insert((0, *now_ms, k))
                .0 += 1;
        }
    }
    votes
        .into_values()
        .filter(|(n, _, _)| *n >= majority)
        .map(
            |(
                _,
                now_ms,
                (name, _, source, since_ms, waiting, detached, mode, expires_ms, fields, mark),
            )| {
                KeyInfo {
                    identity: None,
                    mode: match mode.as_str() {
                        "s" => LockMode::Shared,
                        n => LockMode::limit(n.parse().unwrap_or(1)),
                    },
                    key: name.clone(),
                    source: if source.is_empty() {
                        "-".into()
                    } else {
                        source.clone()
                    },
                    peer: None,
                    since: (*since_ms >= 0).then(|| {
                        let age = Duration::from_millis((now_ms - since_ms).max(0) as u64);
                        received.checked_sub(age).unwrap_or(received)
                    }),
                    waiting: (*waiting).max(0) as usize,
                    kept: (*detached >= 0).then_some(*detached == 1),
                    token: None,
                    // On our clock too: what is left by the node's clock.
                    expires: (*expires_ms >= 0).then(|| {
                        received + Duration::from_millis((expires_ms - now_ms).max(0) as u64)
                    }),
                    fields: field_list(fields),
                    mark: mark.parse().ok(),
                }
            },
        )
        .collect()
}

/// A field list as a script read it back ('' when none); one that does
/// not parse shows as none.
fn field_list(raw: &str) -> FieldList {
    FieldList::parse(raw.as_bytes()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, token: &str, since_ms: i64, waiting: i64) -> NodeKey {
        (
            name.into(),
            token.into(),
            "host-a".into(),
            since_ms,
            waiting,
            0,
            "x".into(),
            -1,
            String::new(),
            String::new(),
        )
    }

    #[test]
    fn one_node_reports_what_it_holds_with_the_age_on_our_clock() {
        let now = SystemTime::now();
        let node: NodeListing = (
            10_000,
            vec![key("a", "t1", 7_500, 2), key("b", "t2", -1, 0)],
        );
        let keys = agreed(&[&node], 1, now);
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].key, "a");
        assert_eq!(keys[0].source, "host-a");
        assert_eq!(keys[0].waiting, 2);
        assert_eq!(keys[0].peer, None);
        assert_eq!(keys[0].since, Some(now - Duration::from_millis(2_500)));
        assert_eq!(keys[1].since, None);
        assert_eq!(keys[0].kept, Some(false));
        assert_eq!(keys[0].expires, None);
        let mut kept = key("e", "t3", 9_000, 0);
        (kept.5, kept.7) = (1, 12_000);
        let keys = agreed(&[&(10_000, vec![kept])], 1, now);
        assert_eq!(keys[0].expires, Some(now + Duration::from_millis(2_000)));
    }

    #[test]
    fn a_quorum_reports_only_what_a_majority_agrees_on() {
        let now = SystemTime::now();
        let n0: NodeListing = (1_000, vec![key("a", "t1", 900, 1), key("m", "x", 0, 0)]);
        let n1: NodeListing = (2_000, vec![key("a", "t1", 1_800, 3), key("c", "t3", 0, 0)]);
        let n2: NodeListing = (3_000, vec![key("c", "t4", 0, 0)]);
        let keys = agreed(&[&n0, &n1, &n2], 2, now);
        // "m" is held on one node only, "c" by different owners.
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!(keys[0].key, "a");
        // The facts of the first agreeing node, aged by its own clock.
        assert_eq!(keys[0].waiting, 1);
        assert_eq!(keys[0].since, Some(now - Duration::from_millis(100)));
    }

    #[test]
    fn waiters_keep_their_line_and_need_a_majority() {
        let now = SystemTime::now();
        let w = |name: &str, id: &str, since: i64| -> NodeWaiter {
            (
                name.into(),
                id.into(),
                format!("s-{id}"),
                since,
                "l".into(),
                "3".into(),
                String::new(),
            )
        };
        let n0: NodeWaiters = (
            1_000,
            vec![w("b", "2", 400), w("b", "1", 500), w("a", "9", -1)],
        );
        let n1: NodeWaiters = (1_000, vec![w("b", "2", 400), w("b", "1", 500)]);
        let got = agreed_waiters(&[&n0, &n1], 2, now);
        let line: Vec<(&str, &str, usize)> = got
            .iter()
            .map(|w| (w.key.as_str(), w.source.as_str(), w.place))
            .collect();
        assert_eq!(line, [("b", "s-2", 0), ("b", "s-1", 1)]);
        assert_eq!(got[0].since, Some(now - Duration::from_millis(600)));
        assert_eq!(got[0].mode, LockMode::limit(3));
        let one = agreed_waiters(&[&n0], 1, now);
        assert_eq!(one[0].key, "a");
        assert_eq!(one[0].since, None);
    }

    #[test]
    fn an_unknown_owner_shows_as_a_dash() {
        let node: NodeListing = (
            0,
            vec![(
                "k".into(),
                "t".into(),
                String::new(),
                -1,
                0,
                -1,
                "x".into(),
                -1,
                "order=7\nnewest=1\n".into(),
                "7".into(),
            )],
        );
        let keys = agreed(&[&node], 1, SystemTime::now());
        assert_eq!(keys[0].source, "-");
        assert_eq!(keys[0].kept, None);
        assert_eq!(keys[0].fields.get("order"), Some("7"));
        assert_eq!(keys[0].mark, Some(7));
    }
}
