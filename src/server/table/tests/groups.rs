//! Several keys granted in one step (`group.rs`): all or none, passing,
//! reservation, no deadlock, a broken group.

use std::sync::Arc;

use tokio::sync::oneshot::Receiver;

use super::*;

/// A request of group `id` of `n` keys (what lc-cli sends for `--and`).
fn member(source: &[u8], id: u64, n: u16) -> Ask {
    let mut a = ask(source, true);
    a.fields = Some(Arc::from(format!("group={id:x}/{n}\n").into_bytes()));
    a
}

fn queued(t: &Table, key: &[u8], a: &Ask) -> (GrantId, Receiver<Notice>) {
    match t.lock(key, a) {
        LockOutcome::Queued(id, rx, _) => (id, rx),
        _ => panic!("{} not queued", String::from_utf8_lossy(key)),
    }
}

fn granted(t: &Table, key: &[u8], a: &Ask) -> GrantId {
    match t.lock(key, a) {
        LockOutcome::Granted(g) => g.id,
        _ => panic!("{} not granted", String::from_utf8_lossy(key)),
    }
}

/// The grant's id, if `rx` was told it got the key.
fn grant_of(rx: &mut Receiver<Notice>) -> Option<GrantId> {
    match rx.try_recv() {
        Ok(Notice::Granted(g)) => Some(g.id),
        _ => None,
    }
}

fn got(rx: &mut Receiver<Notice>) -> bool {
    grant_of(rx).is_some()
}

#[test]
fn a_group_takes_all_its_keys_in_one_step_and_none_alone() {
    let t = Table::new();
    let (_, mut a) = queued(&t, b"a", &member(b"g", 1, 2));
    assert!(
        !got(&mut a),
        "granted alone, with the other key not asked yet"
    );
    assert_eq!(t.counts(), (0, 1));
    let (_, mut b) = queued(&t, b"b", &member(b"g", 1, 2));
    assert!(
        got(&mut a) && got(&mut b),
        "both granted once both are asked"
    );
    assert_eq!(t.counts(), (2, 0));
}

#[test]
fn a_group_at_the_head_of_every_line_reserves_them() {
    let t = Table::new();
    let x = granted(&t, b"b", &ask(b"x", true));
    let (_, mut ga) = queued(&t, b"a", &member(b"g", 1, 2));
    let (_, mut gb) = queued(&t, b"b", &member(b"g", 1, 2));
    // The group stands at the head of both lines: it reserves them, and
    // waits for b's holder; a stays free but nobody passes it now.
    let (_, mut sa) = queued(&t, b"a", &ask(b"s", true));
    assert!(!got(&mut ga) && !got(&mut sa));
    assert!(t.release_grant(b"b", x));
    let a = grant_of(&mut ga).expect("granted a once b is free");
    assert!(got(&mut gb), "and b with it");
    assert!(!got(&mut sa), "s waits behind the group that reserved a");
    assert!(t.release_grant(b"a", a));
    assert!(got(&mut sa), "then s");
}

#[test]
fn requests_behind_a_group_that_has_not_reserved_pass_it() {
    let t = Table::new();
    // c is held and waited for: the group does not stand at c's head.
    let x = granted(&t, b"c", &ask(b"x", true));
    let (_, mut yc) = queued(&t, b"c", &ask(b"y", true));
    let (_, mut ga) = queued(&t, b"a", &member(b"g", 2, 2));
    let (_, mut gc) = queued(&t, b"c", &member(b"g", 2, 2));
    // a is free and its only waiter is a group that cannot reserve: a
    // request for a passes it, at once; so does a trylock.
    let s = granted(&t, b"a", &ask(b"s", true));
    assert!(matches!(
        t.try_lock(b"a", &ask(b"u", true)),
        TryOutcome::Busy
    ));
    assert!(t.release_grant(b"a", s));
    assert!(matches!(
        t.try_lock(b"a", &ask(b"u", true)),
        TryOutcome::Granted(_)
    ));
    assert!(t.unlock(b"a").is_some());
    // x ends: y is next at c; then the group stands at the head of both.
    assert!(t.release_grant(b"c", x));
    let y = grant_of(&mut yc).expect("y is next at c");
    assert!(!got(&mut ga) && !got(&mut gc));
    let (_, mut sa) = queued(&t, b"a", &ask(b"s2", true));
    assert!(!got(&mut sa), "the group reserved a once at the head of c");
    assert!(t.release_grant(b"c", y));
    assert!(got(&mut ga) && got(&mut gc));
    assert!(!got(&mut sa));
}

#[test]
fn two_groups_asking_in_opposite_orders_do_not_deadlock() {
    let t = Table::new();
    let (_, mut r1a) = queued(&t, b"a", &member(b"g1", 1, 2));
    let (_, mut r2b) = queued(&t, b"b", &member(b"g2", 2, 2));
    let (_, mut r2a) = queued(&t, b"a", &member(b"g2", 2, 2));
    // g2 now stands at the head of b and (passing g1, not reserved) of a.
    let a = grant_of(&mut r2a).expect("g2 has a");
    let b = grant_of(&mut r2b).expect("g2 has b");
    let (_, mut r1b) = queued(&t, b"b", &member(b"g1", 1, 2));
    assert!(!got(&mut r1a) && !got(&mut r1b));
    assert!(t.release_grant(b"a", a));
    assert!(!got(&mut r1a), "g1 takes nothing while b is held");
    assert!(t.release_grant(b"b", b));
    assert!(got(&mut r1a) && got(&mut r1b), "then g1 has both");
}

#[test]
fn a_group_that_loses_a_request_opens_its_lines() {
    let t = Table::new();
    let x = granted(&t, b"a", &ask(b"x", true));
    let y = granted(&t, b"b", &ask(b"y", true));
    let (ga, _ra) = queued(&t, b"a", &member(b"g", 3, 2));
    let (_, mut rb) = queued(&t, b"b", &member(b"g", 3, 2));
    let (_, mut sb) = queued(&t, b"b", &ask(b"s", true));
    // Reserved: y's release would go to the group. Its client hangs up on
    // a: the group is broken, and s may pass its request for b.
    assert_eq!(t.withdraw(b"a", ga).0, Withdrawal::Dequeued);
    assert!(t.release_grant(b"b", y));
    assert!(got(&mut sb), "s gets b");
    assert!(!got(&mut rb), "a broken group is never granted");
    assert!(t.release_grant(b"a", x));
    assert_eq!(t.counts(), (1, 1));
}

#[test]
fn a_request_named_twice_breaks_its_group() {
    let t = Table::new();
    let (_, mut r1) = queued(&t, b"a", &member(b"g", 4, 2));
    let (_, mut r2) = queued(&t, b"a", &member(b"g", 4, 2));
    assert!(!got(&mut r1) && !got(&mut r2));
    let s = granted(&t, b"a", &ask(b"s", true));
    assert!(t.release_grant(b"a", s));
}
