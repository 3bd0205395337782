//! The table's rules, without a network: hand-offs, modes, sessions.

use std::net::SocketAddr;

use super::listing::Gauges;
use super::*;
use crate::wal::HeldRef;

mod groups;
mod owners;

fn peer() -> SocketAddr {
    "127.0.0.1:1".parse().unwrap()
}

const WAITERS: super::What = super::What {
    waiters: true,
    fields: false,
};

fn ask(source: &[u8], session: bool) -> Ask {
    in_mode(source, session, LockMode::Exclusive)
}

fn in_mode(source: &[u8], session: bool, mode: LockMode) -> Ask {
    Ask {
        source: source.to_vec(),
        peer: peer(),
        session,
        mode,
        owner: None,
        waits: None,
        secret: false,
        expire: None,
        fields: None,
        ticket: None,
    }
}

#[test]
fn fifo_handoff() {
    let t = Table::new();
    let LockOutcome::Granted(Grant { id: first, .. }) = t.lock(b"k", &ask(b"a", false)) else {
        panic!()
    };
    let mut rxs = Vec::new();
    for _ in 0..3 {
        let LockOutcome::Queued(id, rx, _) = t.lock(b"k", &ask(b"b", false)) else {
            panic!()
        };
        rxs.push((id, rx));
    }
    assert_eq!(t.gauges().held, 1);
    assert_eq!(t.gauges().waiting, 3);
    assert!(t.release_grant(b"k", first));
    for (i, (id, mut rx)) in rxs.into_iter().enumerate() {
        assert!(
            matches!(rx.try_recv(), Ok(Notice::Granted(_))),
            "waiter {i}"
        );
        assert!(t.release_grant(b"k", id));
    }
    assert_eq!(t.counts(), (0, 0));
    assert_eq!(t.gauges(), Gauges::default());
    let grants = t
        .counters()
        .grants
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(grants, 4, "one direct grant and three hand-offs");
}

#[test]
fn a_stale_release_does_not_free_the_next_holder() {
    let t = Table::new();
    let LockOutcome::Granted(Grant { id: first, .. }) = t.lock(b"k", &ask(b"a", false)) else {
        panic!()
    };
    let LockOutcome::Queued(_, _rx, _) = t.lock(b"k", &ask(b"b", false)) else {
        panic!()
    };
    assert!(t.unlock(b"k").is_some());
    assert!(!t.release_grant(b"k", first));
    assert_eq!(t.counts(), (1, 0));
}

#[test]
fn dead_waiters_are_skipped() {
    let t = Table::new();
    assert!(matches!(
        t.lock(b"k", &ask(b"a", false)),
        LockOutcome::Granted(..)
    ));
    let LockOutcome::Queued(_, rx, _) = t.lock(b"k", &ask(b"b", false)) else {
        panic!()
    };
    drop(rx);
    let LockOutcome::Queued(_, mut rx2, _) = t.lock(b"k", &ask(b"c", false)) else {
        panic!()
    };
    let (_, next, _) = t.unlock(b"k").unwrap();
    assert_eq!(next[0].source, b"c");
    assert!(matches!(rx2.try_recv(), Ok(Notice::Granted(_))));
}

#[test]
fn withdrawal_after_grant_releases() {
    let t = Table::new();
    assert!(matches!(
        t.lock(b"k", &ask(b"a", false)),
        LockOutcome::Granted(..)
    ));
    let LockOutcome::Queued(id, _rx, _) = t.lock(b"k", &ask(b"b", false)) else {
        panic!()
    };
    t.unlock(b"k");
    assert_eq!(t.withdraw(b"k", id).0, Withdrawal::Released);
    assert_eq!(t.counts(), (0, 0));
}

#[test]
fn reset_source_withdraws_and_releases() {
    let t = Table::new();
    assert!(matches!(
        t.lock(b"k1", &ask(b"dead", false)),
        LockOutcome::Granted(..)
    ));
    assert!(matches!(
        t.lock(b"k2", &ask(b"live", false)),
        LockOutcome::Granted(..)
    ));
    let LockOutcome::Queued(_, mut dead_rx, _) = t.lock(b"k2", &ask(b"dead", false)) else {
        panic!()
    };
    let LockOutcome::Queued(_, mut live_rx, _) = t.lock(b"k1", &ask(b"live", false)) else {
        panic!()
    };
    let (released, withdrawn, _) = t.reset_source(b"dead", "t");
    assert_eq!(withdrawn, 1);
    assert_eq!(released.len(), 1);
    assert!(matches!(dead_rx.try_recv(), Ok(Notice::Withdrawn)));
    assert!(matches!(live_rx.try_recv(), Ok(Notice::Granted(_))));
}

fn granted(o: LockOutcome) -> Grant {
    match o {
        LockOutcome::Granted(g) => g,
        LockOutcome::Queued(..) => panic!("queued"),
        LockOutcome::Conflict(m) => panic!("refused: {m}"),
        LockOutcome::Superseded(_) | LockOutcome::Outdated(_) => panic!("a queue rule"),
        LockOutcome::OverWaits(n) => panic!("over waits={n}"),
    }
}

#[test]
fn tokens_grow_with_every_grant() {
    let t = Table::new();
    let a = granted(t.lock(b"k", &ask(b"a", true)));
    assert!(t.release_grant(b"k", a.id));
    let b = granted(t.lock(b"k", &ask(b"b", false)));
    assert!(b.token > a.token);
    t.raise_token_floor(u64::MAX / 2);
    assert!(t.release_grant(b"k", b.id));
    let c = granted(t.lock(b"k", &ask(b"c", true)));
    assert!(c.token > u64::MAX / 2);
}

#[test]
fn a_stale_token_frees_nothing_and_a_reset_wakes_the_session() {
    let t = Table::new();
    let mut a = granted(t.lock(b"k", &ask(b"a", true)));
    let mut link = a.link.take().unwrap();
    assert!(link
        .changed
        .try_recv()
        .is_err_and(|e| e == oneshot::error::TryRecvError::Empty));
    assert!(t.begin_release(b"k", Some(a.token + 1)).is_none());
    let _ = t.reset_key(b"k", "t").unwrap();
    assert_eq!(
        link.changed.try_recv(),
        Err(oneshot::error::TryRecvError::Closed)
    );
    assert_eq!(t.link_state(b"k", a.id, link.gen), LinkState::Gone);
    assert!(t.begin_release(b"k", Some(a.token)).is_none());
}

#[test]
fn a_reclaim_moves_the_hold_and_expiry_waits_for_the_timeout() {
    let t = Table::new();
    let mut a = granted(t.lock(b"k", &ask(b"a", true)));
    let mut old = a.link.take().unwrap();
    assert!(t.reclaim(b"k", a.token + 1).is_none());
    let new = t.reclaim(b"k", a.token).unwrap().link.unwrap();
    assert_eq!(
        old.changed.try_recv(),
        Err(oneshot::error::TryRecvError::Closed)
    );
    assert_eq!(t.link_state(b"k", a.id, old.gen), LinkState::Moved);
    assert!(matches!(
        t.expire(b"k", a.id, old.gen, Duration::ZERO),
        Expiry::Gone
    ));
    assert!(matches!(
        t.expire(b"k", a.id, new.gen, Duration::from_secs(60)),
        Expiry::NotYet(_)
    ));
    let LockOutcome::Queued(_, mut rx, _) = t.lock(b"k", &ask(b"b", false)) else {
        panic!()
    };
    let Expiry::Due(_recorded) = t.expire(b"k", a.id, new.gen, Duration::ZERO) else {
        panic!("not due")
    };
    // Still held, and nobody let in, until the expiry is durable.
    assert!(rx.try_recv().is_err());
    assert!(matches!(
        t.try_lock(b"k", &ask(b"c", false)),
        TryOutcome::Busy
    ));
    assert!(t.finish_release(b"k", a.id, End::released(None)).is_some());
    assert!(matches!(rx.try_recv(), Ok(Notice::Granted(_))));
}

fn queued(o: LockOutcome) -> (GrantId, oneshot::Receiver<Notice>) {
    match o {
        LockOutcome::Queued(id, rx, _) => (id, rx),
        LockOutcome::Granted(_) => panic!("granted"),
        LockOutcome::Conflict(m) => panic!("refused: {m}"),
        LockOutcome::Superseded(_) | LockOutcome::Outdated(_) => panic!("a queue rule"),
        LockOutcome::OverWaits(n) => panic!("over waits={n}"),
    }
}

fn was_granted(rx: &mut oneshot::Receiver<Notice>) -> bool {
    matches!(rx.try_recv(), Ok(Notice::Granted(_)))
}

const SHARED: LockMode = LockMode::Shared;
const EXCLUSIVE: LockMode = LockMode::Exclusive;

#[test]
fn readers_share_and_a_writer_waits_its_turn_then_blocks_later_readers() {
    let t = Table::new();
    let r1 = granted(t.lock(b"k", &in_mode(b"r1", true, SHARED)));
    let r2 = granted(t.lock(b"k", &in_mode(b"r2", true, SHARED)));
    let (_, mut w1) = queued(t.lock(b"k", &in_mode(b"w1", true, EXCLUSIVE)));
    // Behind a writer, a reader waits even though readers hold.
    let (_, mut r3) = queued(t.lock(b"k", &in_mode(b"r3", true, SHARED)));
    let (_, mut r4) = queued(t.lock(b"k", &in_mode(b"r4", true, SHARED)));
    assert!(matches!(
        t.try_lock(b"k", &in_mode(b"t", false, SHARED)),
        TryOutcome::Busy
    ));
    assert_eq!(t.counts(), (2, 3));
    assert!(t.release_grant(b"k", r1.id));
    assert!(!was_granted(&mut w1), "a reader still holds");
    assert!(t.release_grant(b"k", r2.id));
    assert!(was_granted(&mut w1));
    assert!(!was_granted(&mut r3));
    // The writer's release lets both readers behind it in, together.
    let (_, next, _) = t.unlock(b"k").unwrap();
    assert_eq!(next.len(), 2);
    assert!(was_granted(&mut r3) && was_granted(&mut r4));
    assert_eq!(t.counts(), (2, 0));
}

#[test]
fn a_limit_grants_n_and_each_release_exactly_the_next() {
    let t = Table::new();
    let three = LockMode::limit(3);
    let holds: Vec<Grant> = (0..3)
        .map(|i| granted(t.lock(b"k", &in_mode(format!("h{i}").as_bytes(), true, three))))
        .collect();
    let mut line: Vec<_> = (0..3)
        .map(|i| queued(t.lock(b"k", &in_mode(format!("w{i}").as_bytes(), true, three))))
        .collect();
    for (i, h) in holds.iter().enumerate() {
        assert!(t.release_grant(b"k", h.id));
        for (j, (_, rx)) in line.iter_mut().enumerate().skip(i) {
            assert_eq!(was_granted(rx), j == i, "after release {i}, waiter {j}");
        }
    }
    assert_eq!(t.counts(), (3, 0));
    let tokens: Vec<Token> = holds.iter().map(|g| g.token).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn a_mode_the_key_is_not_used_in_is_refused_until_it_is_idle() {
    let t = Table::new();
    let two = LockMode::limit(2);
    let a = granted(t.lock(b"k", &in_mode(b"a", true, two)));
    for other in [EXCLUSIVE, SHARED, LockMode::limit(3)] {
        assert!(matches!(
            t.lock(b"k", &in_mode(b"b", true, other)),
            LockOutcome::Conflict(m) if m == two
        ));
        assert!(matches!(
            t.try_lock(b"k", &in_mode(b"b", true, other)),
            TryOutcome::Conflict(m) if m == two
        ));
    }
    assert!(t.release_grant(b"k", a.id));
    granted(t.lock(b"k", &in_mode(b"b", true, SHARED)));
    granted(t.lock(b"k", &in_mode(b"c", true, SHARED)));
    assert_eq!(t.held().len(), 2);
}

#[test]
fn a_writer_leaving_the_head_lets_the_readers_behind_it_in() {
    let t = Table::new();
    granted(t.lock(b"k", &in_mode(b"r1", true, SHARED)));
    let (w, _w_rx) = queued(t.lock(b"k", &in_mode(b"w", true, EXCLUSIVE)));
    let (_, mut r2) = queued(t.lock(b"k", &in_mode(b"r2", true, SHARED)));
    let (withdrawal, next) = t.withdraw(b"k", w);
    assert_eq!((withdrawal, next.len()), (Withdrawal::Dequeued, 1));
    assert!(was_granted(&mut r2));
}

#[test]
fn resets_end_every_hold_of_the_key_or_only_the_sources() {
    let t = Table::new();
    for s in [b"a", b"b", b"a"] {
        granted(t.lock(b"k", &in_mode(s, false, SHARED)));
    }
    let (_, mut w) = queued(t.lock(b"k", &in_mode(b"w", false, EXCLUSIVE)));
    let (released, _, _) = t.reset_source(b"a", "t");
    assert_eq!(released[0].holders.len(), 2);
    assert!(!was_granted(&mut w), "b still holds");
    let (r, _) = t.reset_key(b"k", "t").unwrap();
    assert_eq!((r.holders.len(), r.next.len()), (1, 1));
    assert!(was_granted(&mut w));
}

#[test]
fn a_plain_unlock_ends_the_oldest_kept_hold_first() {
    let t = Table::new();
    granted(t.lock(b"k", &in_mode(b"session", true, SHARED)));
    granted(t.lock(b"k", &in_mode(b"kept", false, SHARED)));
    let (h, _, _) = t.unlock(b"k").unwrap();
    assert_eq!(h.source, b"kept");
    let (h, _, _) = t.unlock(b"k").unwrap();
    assert_eq!(h.source, b"session");
    assert!(t.unlock(b"k").is_none());
}

/// A kept hold that expires (`--expire`): its deadline is set at its grant
/// (a waiter's at its hand-off, not at its arrival), listed, and its expiry
/// is due only then; the release hands the key to the next in line.
#[test]
fn an_expiring_kept_hold_is_due_at_its_deadline_and_hands_on() {
    let t = Table::new();
    let mut first = ask(b"a", false);
    first.expire = std::num::NonZeroU32::new(1);
    let LockOutcome::Granted(Grant { id, .. }) = t.lock(b"k", &first) else {
        panic!()
    };
    let at = t.expires(b"k", id).expect("an expiring hold");
    let left = at.duration_since(SystemTime::now()).unwrap();
    assert!(left <= Duration::from_secs(1) && left > Duration::from_millis(500));
    assert_eq!(t.held()[0].expires, Some(at));
    assert!(matches!(t.expire_kept(b"k", id), Expiry::NotYet(_)));
    let mut second = ask(b"b", false);
    second.expire = std::num::NonZeroU32::new(60);
    let LockOutcome::Queued(next, mut rx, _) = t.lock(b"k", &second) else {
        panic!()
    };
    std::thread::sleep(left + Duration::from_millis(20));
    let Expiry::Due(_) = t.expire_kept(b"k", id) else {
        panic!("not due at its deadline")
    };
    let (holder, handed) = t.finish_release(b"k", id, End::released(None)).unwrap();
    assert_eq!(holder.source, b"a");
    assert_eq!(handed[0].source, b"b");
    assert!(matches!(rx.try_recv(), Ok(Notice::Granted(_))));
    // The waiter's deadline counts from its own grant.
    let at2 = t.expires(b"k", next).unwrap();
    assert!(at2.duration_since(SystemTime::now()).unwrap() > Duration::from_secs(59));
    assert!(matches!(t.expire_kept(b"k", id), Expiry::Gone));
    // A hold without --expire has no deadline and no expiry.
    let t = Table::new();
    let LockOutcome::Granted(Grant { id, .. }) = t.lock(b"x", &ask(b"a", false)) else {
        panic!()
    };
    assert_eq!(t.expires(b"x", id), None);
    assert!(matches!(t.expire_kept(b"x", id), Expiry::Gone));
}

/// Holds restored from a log all land, in key order and each key's oldest
/// first, given out of order too (one by one then).
#[test]
fn restored_holds_are_all_kept_in_key_order() {
    let since = SystemTime::now();
    let held = |key: &'static str, token: u64, mode: LockMode| HeldRef {
        key: key.as_bytes(),
        source: b"s",
        peer: b"127.0.0.1:2",
        since,
        token,
        session: false,
        mode,
        expires: None,
        ownership: Default::default(),
    };
    let t = Table::new();
    let shared = LockMode::Shared;
    let given = [
        held("b", 1, shared),
        held("b", 2, shared),
        held("d", 3, LockMode::Exclusive),
        held("a", 4, LockMode::Exclusive),
        held("c", 5, shared),
        held("b", 6, shared),
    ];
    let mut ids = Vec::new();
    let mut restorer = t.restorer();
    for h in &given {
        let (id, link) = restorer.add(h, peer());
        assert!(link.is_none());
        ids.push(id);
    }
    drop(restorer);
    ids.dedup();
    assert_eq!(ids.len(), 6);
    let listed: Vec<(Vec<u8>, Option<u64>)> =
        t.held().into_iter().map(|r| (r.key, r.token)).collect();
    let want: Vec<(Vec<u8>, Option<u64>)> =
        [("a", 4), ("b", 1), ("b", 2), ("b", 6), ("c", 5), ("d", 3)]
            .iter()
            .map(|(k, t)| (k.as_bytes().to_vec(), Some(*t)))
            .collect();
    assert_eq!(listed, want);
    // A restored key is held: a TryLock of it must wait.
    assert!(matches!(
        t.try_lock(b"a", &ask(b"x", false)),
        TryOutcome::Busy
    ));
}

/// The listing of every key made in parts is the one made in one pass.
#[test]
fn a_listing_in_parts_is_the_whole_listing() {
    let t = Table::new();
    for i in 0..50 {
        let key = format!("k{i:02}");
        assert!(matches!(
            t.lock(key.as_bytes(), &in_mode(b"a", false, LockMode::Shared)),
            LockOutcome::Granted(_)
        ));
        if i % 3 == 0 {
            let _ = t.lock(key.as_bytes(), &in_mode(b"b", false, LockMode::Shared));
        }
    }
    let mut whole = Vec::new();
    t.listing_into(None, WAITERS, Whose::Any, &mut whole);
    for budget in [1, 100, 1000, 1 << 20] {
        let (mut parts, mut after, mut n) = (Vec::new(), None, 0);
        loop {
            let mut part = Vec::new();
            after = t.listing_part(
                (b"", after.as_deref()),
                WAITERS,
                Whose::Any,
                &mut part,
                budget,
            );
            assert!(!part.is_empty() || after.is_none());
            parts.extend_from_slice(&part);
            n += 1;
            if after.is_none() {
                break;
            }
        }
        assert_eq!(parts, whole, "budget {budget}");
        if budget == 1 {
            assert_eq!(n, 50, "one key a part");
        }
    }
    let mut none = Vec::new();
    assert!(Table::new()
        .listing_part((b"", None), WAITERS, Whose::Any, &mut none, 10)
        .is_none());
    assert!(none.is_empty());
}

/// A listing by prefix is the part of the whole listing whose keys start
/// with it, whatever the budget of a part.
#[test]
fn a_listing_by_prefix_is_its_range_of_keys() {
    let t = Table::new();
    for key in [
        "a", "deploy", "deploy/a", "deploy/b", "deploy0", "deployed", "z",
    ] {
        let _ = granted(t.lock(key.as_bytes(), &ask(b"s", false)));
    }
    let list = |prefix: &[u8], budget: usize| {
        let (mut all, mut after) = (Vec::new(), None);
        for _ in 0..100 {
            let mut part = Vec::new();
            after = t.listing_part(
                (prefix, after.as_deref()),
                WAITERS,
                Whose::Any,
                &mut part,
                budget,
            );
            all.extend_from_slice(&part);
            if after.is_none() {
                break;
            }
        }
        let mut bytes = vec![crate::proto::listing::LISTING];
        bytes.extend_from_slice(&all);
        crate::proto::listing::push_end(&mut bytes);
        let got = crate::proto::listing::decode(&bytes).unwrap().unwrap();
        got.holds
            .into_iter()
            .map(|h| String::from_utf8(h.key).unwrap())
            .collect::<Vec<_>>()
    };
    for budget in [1, 1 << 20] {
        assert_eq!(list(b"deploy/", budget), ["deploy/a", "deploy/b"]);
        assert_eq!(
            list(b"deploy", budget),
            ["deploy", "deploy/a", "deploy/b", "deploy0", "deployed"]
        );
        assert_eq!(list(b"x", budget), Vec::<String>::new());
        assert_eq!(list(b"", budget).len(), 7);
    }
}

#[test]
fn the_history_keeps_the_last_n_endings_newest_first() {
    let t = Table::new();
    t.keep_history(3);
    for _ in 0..5 {
        let g = granted(t.lock(b"k", &ask(b"a", false)));
        t.finish_release(b"k", g.id, End::released(Some(2)));
    }
    let g = granted(t.lock(b"k", &ask(b"a", false)));
    let _ = t.reset_key(b"k", "ops").unwrap();
    assert_eq!(t.history_len(b"k"), 3);
    let mut out = Vec::new();
    t.history_into(b"k", 10, Whose::Any, &mut out);
    out.extend_from_slice(&crate::proto::history::END);
    let entries = crate::proto::history::decode_answer(&out).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0].fields.get("ended"), Some("reset"));
    assert_eq!(entries[0].by(), Some("ops"));
    assert_eq!(entries[0].token, Some(g.token));
    assert_eq!(entries[1].status(), Some(2));
    // A grant never delivered is no ending; none is kept with a cap of 0.
    let g = granted(t.lock(b"k", &ask(b"a", false)));
    assert!(t.release_grant(b"k", g.id));
    assert_eq!(t.history_len(b"k"), 3);
    let off = Table::new();
    off.keep_history(0);
    let g = granted(off.lock(b"k", &ask(b"a", false)));
    off.finish_release(b"k", g.id, End::released(None));
    assert_eq!(off.history_len(b"k"), 0);
}
