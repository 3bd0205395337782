//! Nodes whose word does not count yet (up for less than a lease, without
//! `appendfsync always`: `Quorum::counts`), and why a lock waits for them,
//! said the same way by `ping`, the status line, `-v` and `trylock`.

use std::time::Duration;

use super::node::Uncounted;
use super::quorum::Quorum;

/// Why node `i` does not count yet, how long until it does and the remedy;
/// None when it counts.
pub(super) fn node_wait(q: &Quorum, i: usize) -> Option<String> {
    if q.counts(i) {
        return None;
    }
    let node = &q.nodes[i];
    // Not known yet (no connection made): as if just started.
    let u = node.uncounted(q.ttl).unwrap_or(Uncounted {
        up: Duration::ZERO,
        left: q.ttl,
        aof: false,
    });
    Some(describe(&node.addr, q.ttl, u))
}

fn describe(addr: &str, ttl: Duration, u: Uncounted) -> String {
    let how = if u.aof {
        "with appendonly but not appendfsync always"
    } else {
        "without persistence"
    };
    format!(
        "{addr} up {} s {how}: its grants count after one ttl ({ttl:?}), in {} s \
(appendonly yes + appendfsync always: at once)",
        u.up.as_secs(),
        u.left.as_secs_f64().ceil() as u64
    )
}

/// Why a lock must wait for nodes that do not count yet, given which nodes
/// `answered`: the count first on a quorum, then each such node; empty
/// when a majority of the nodes count.
pub(super) fn waits(q: &Quorum, answered: &[bool]) -> Vec<String> {
    let counting = (0..q.nodes.len())
        .filter(|&i| answered[i] && q.counts(i))
        .count();
    if counting >= q.majority() {
        return Vec::new();
    }
    let mut waits: Vec<String> = (0..q.nodes.len())
        .filter(|&i| answered[i])
        .filter_map(|i| node_wait(q, i))
        .collect();
    if q.is_multi_node() {
        let up = answered.iter().filter(|a| **a).count();
        waits.insert(
            0,
            format!(
                "{counting} of {} nodes count ({up} answer), a lock needs {}",
                q.nodes.len(),
                q.majority()
            ),
        );
    }
    waits
}

/// The one line of why a wait lasts, when what holds it up is nodes that
/// do not count yet: a majority `answered`, fewer of them count. None
/// otherwise (a holder, or an outage, which are said elsewhere).
pub(super) fn reason(q: &Quorum, answered: &[bool]) -> Option<String> {
    if answered.iter().filter(|a| **a).count() < q.majority() {
        return None;
    }
    let waits = waits(q, answered);
    (!waits.is_empty()).then(|| waits.join("; "))
}

/// How long until enough of the nodes that `answered` count for a
/// majority; None when they already do, or never will (too few answered).
pub(super) fn counts_in(q: &Quorum, answered: &[bool]) -> Option<Duration> {
    let counting = (0..q.nodes.len())
        .filter(|&i| answered[i] && q.counts(i))
        .count();
    let short = q.majority().checked_sub(counting).filter(|n| *n > 0)?;
    let mut left: Vec<Duration> = (0..q.nodes.len())
        .filter(|&i| answered[i] && !q.counts(i))
        .map(|i| q.nodes[i].uncounted(q.ttl).map_or(q.ttl, |u| u.left))
        .collect();
    left.sort();
    left.get(short - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::super::quorum::tests::quorum_of;
    use super::*;

    #[test]
    fn a_fresh_node_says_its_uptime_the_seconds_left_and_the_remedy() {
        let why = describe(
            "r:1",
            Duration::from_secs(30),
            Uncounted {
                up: Duration::from_millis(3_900),
                left: Duration::from_millis(26_100),
                aof: false,
            },
        );
        assert_eq!(
            why,
            "r:1 up 3 s without persistence: its grants count after one ttl (30s), in 27 s \
(appendonly yes + appendfsync always: at once)"
        );
        let aof = describe(
            "r:1",
            Duration::from_secs(30),
            Uncounted {
                up: Duration::ZERO,
                left: Duration::from_secs(30),
                aof: true,
            },
        );
        assert!(
            aof.contains("with appendonly but not appendfsync always"),
            "{aof}"
        );
    }

    #[test]
    fn nodes_never_reached_count_for_nothing_and_give_no_reason() {
        // No connection made yet: no node counts.
        let q = quorum_of(3, 30_000, 60_000);
        let all = [true, true, true];
        let waits = waits(&q, &all);
        assert_eq!(waits[0], "0 of 3 nodes count (3 answer), a lock needs 2");
        assert_eq!(waits.len(), 4, "{waits:?}");
        assert!(reason(&q, &all).unwrap().contains("in 30 s"));
        assert_eq!(counts_in(&q, &all), Some(Duration::from_secs(30)));
        // Fewer than a majority answer: an outage, not a fresh node.
        assert_eq!(reason(&q, &[true, false, false]), None);
        assert_eq!(counts_in(&q, &[true, false, false]), None);
        let one = quorum_of(1, 3_000, 60_000);
        let why = reason(&one, &[true]).unwrap();
        assert!(
            why.starts_with("127.0.0.1:1000 up 0 s without persistence"),
            "{why}"
        );
    }
}
