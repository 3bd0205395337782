//! Whose a hold is: a token releases and reclaims only its own, a reclaim
//! shows the hold's secret, and both survive a restart from the log.

use super::*;

/// The identity of a token of fingerprint `n`.
fn o(n: u64) -> Owner {
    std::sync::Arc::new(Identity {
        fingerprint: Fingerprint::new(n).unwrap(),
        name: format!("id-{n}").into(),
    })
}

fn only(n: u64) -> Whose {
    Whose::Only(Fingerprint::new(n).unwrap())
}

#[test]
fn a_token_releases_only_its_own_holds() {
    let t = Table::new();
    let mine = Ask {
        owner: Some(o(7)),
        ..ask(b"a", false)
    };
    let theirs = Ask {
        owner: Some(o(8)),
        ..ask(b"b", false)
    };
    let LockOutcome::Granted(a) = t.lock(b"k", &mine) else {
        panic!()
    };
    let LockOutcome::Granted(b) = t.lock(b"j", &theirs) else {
        panic!()
    };
    assert_eq!(
        t.begin_release_by(b"j", None, only(7), None).err(),
        Some(NotYours)
    );
    assert_eq!(
        t.begin_release_by(b"j", Some(b.token), only(7), None).err(),
        Some(NotYours)
    );
    assert!(t
        .begin_release_by(b"free", None, only(7), None)
        .unwrap()
        .is_none());
    let (id, _) = t
        .begin_release_by(b"k", None, only(7), None)
        .unwrap()
        .unwrap();
    assert_eq!(id, a.id);
    assert!(t
        .begin_release_by(b"j", None, Whose::Any, None)
        .unwrap()
        .is_some());
    // A session hold restored without an owner is its reclaimer's after.
    let LockOutcome::Granted(s) = t.lock(b"s", &ask(b"c", true)) else {
        panic!()
    };
    assert!(t
        .reclaim_by(b"s", s.token, None, only(7), Some(o(7)))
        .unwrap()
        .is_some());
    assert_eq!(
        t.reclaim_by(b"s", s.token, None, only(8), Some(o(8))).err(),
        Some(ReclaimRefused::NotYours)
    );
    assert!(t
        .reclaim_by(b"s", s.token, None, Whose::Any, Some(o(9)))
        .unwrap()
        .is_some());
    // ...and stays its first reclaimer's.
    assert_eq!(t.owner_of(b"s", s.id).unwrap().fingerprint.get(), 7);
}

/// A session hold granted with a secret is reclaimed only with it, by its
/// owner's token; the table keeps its digest, never the secret.
#[test]
fn a_reclaim_needs_the_holds_secret() {
    let t = Table::new();
    let with_secret = Ask {
        owner: Some(o(7)),
        secret: true,
        ..ask(b"a", true)
    };
    let LockOutcome::Granted(g) = t.lock(b"k", &with_secret) else {
        panic!()
    };
    let secret = g.secret.expect("a secret for its holder");
    assert_eq!(g.owner.as_ref().unwrap().name.as_ref(), "id-7");
    let mut wrong = secret;
    wrong[0] ^= 1;
    for shown in [None, Some(&wrong)] {
        assert_eq!(
            t.reclaim_by(b"k", g.token, shown, Whose::Any, None).err(),
            Some(ReclaimRefused::Secret)
        );
    }
    assert_eq!(
        t.reclaim_by(b"k", g.token, Some(&secret), only(8), None)
            .err(),
        Some(ReclaimRefused::NotYours)
    );
    let again = t
        .reclaim_by(b"k", g.token, Some(&secret), only(7), Some(o(7)))
        .unwrap()
        .unwrap();
    assert!(
        again.secret.is_none(),
        "the secret is sent with the grant only"
    );
    let kept = t.held();
    assert_eq!(kept.len(), 1);
    // Without one asked for, a session grant has none (an older client).
    let LockOutcome::Granted(plain) = t.lock(b"p", &ask(b"b", true)) else {
        panic!()
    };
    assert!(plain.secret.is_none());
    assert!(t
        .reclaim_by(b"p", plain.token, None, Whose::Any, None)
        .unwrap()
        .is_some());
    // A kept hold never has one.
    let kept = Ask {
        secret: true,
        ..ask(b"c", false)
    };
    let LockOutcome::Granted(k) = t.lock(b"kept", &kept) else {
        panic!()
    };
    assert!(k.secret.is_none());
}

/// A hold restored from the log keeps its owner and its secret's digest:
/// after a restart another token can neither reclaim nor release it.
#[test]
fn a_restored_hold_keeps_its_owner_and_secret() {
    let secret = [9u8; SECRET_LEN];
    let digest = secret_digest(&secret);
    let held = HeldRef {
        key: b"victim",
        source: b"s",
        peer: b"127.0.0.1:2",
        since: SystemTime::now(),
        token: 77,
        session: true,
        mode: LockMode::Exclusive,
        expires: None,
        ownership: crate::wal::OwnershipRef {
            fingerprint: 7,
            name: b"alice",
            secret: Some(digest),
            fields: b"",
            slot: None,
        },
    };
    let t = Table::new();
    let mut restorer = t.restorer();
    let (id, link) = restorer.add(&held, peer());
    assert!(link.is_some());
    drop(restorer);
    let owner = t.owner_of(b"victim", id).unwrap();
    assert_eq!((owner.fingerprint.get(), owner.name.as_ref()), (7, "alice"));
    assert_eq!(
        t.reclaim_by(b"victim", 77, None, only(8), Some(o(8))).err(),
        Some(ReclaimRefused::NotYours)
    );
    assert_eq!(
        t.reclaim_by(b"victim", 77, None, only(7), Some(o(7))).err(),
        Some(ReclaimRefused::Secret)
    );
    assert_eq!(
        t.begin_release_by(b"victim", Some(77), only(8), None).err(),
        Some(NotYours)
    );
    assert!(t
        .reclaim_by(b"victim", 77, Some(&secret), only(7), Some(o(7)))
        .unwrap()
        .is_some());
    assert!(t
        .begin_release_by(b"victim", None, only(7), None)
        .unwrap()
        .is_some());
}

/// `waits=`: a token's requests in line are counted from when each joins
/// to when it leaves, whichever way (a hand-off, a withdrawal); beyond the
/// cap a request that would wait is refused, one granted at once is not;
/// another token and a request without a cap are not counted with it.
#[test]
fn waits_count_a_tokens_requests_in_line() {
    let t = Table::new();
    let capped = |src: &[u8]| Ask {
        owner: Some(o(7)),
        waits: Some(2),
        ..ask(src, true)
    };
    let queued = |o: LockOutcome| match o {
        LockOutcome::Queued(id, rx, _) => (id, rx),
        _ => panic!("not queued"),
    };
    let _hk = granted(t.lock(b"k", &ask(b"holder", true)));
    let hj = granted(t.lock(b"j", &ask(b"holder", true)));
    let (w1, _rx1) = queued(t.lock(b"k", &capped(b"w1")));
    let (_w2, mut rx2) = queued(t.lock(b"j", &capped(b"w2")));
    assert!(matches!(
        t.lock(b"k", &capped(b"w3")),
        LockOutcome::OverWaits(2)
    ));
    // Granted at once: not a wait.
    let _free = granted(t.lock(b"free", &capped(b"f")));
    // Another token, and no cap: not counted with it.
    let other = Ask {
        owner: Some(o(8)),
        waits: Some(2),
        ..ask(b"other", true)
    };
    let _o = queued(t.lock(b"k", &other));
    let _p = queued(t.lock(b"k", &ask(b"plain", true)));
    // A withdrawal gives its place back.
    t.withdraw(b"k", w1);
    let _w4 = queued(t.lock(b"k", &capped(b"w4")));
    assert!(matches!(
        t.lock(b"k", &capped(b"w5")),
        LockOutcome::OverWaits(2)
    ));
    // So does a hand-off: j's holder releases, w2 holds it.
    assert!(t.release_grant(b"j", hj.id));
    assert!(matches!(rx2.try_recv(), Ok(Notice::Granted(_))));
    let _w6 = queued(t.lock(b"k", &capped(b"w6")));
    assert!(matches!(
        t.lock(b"k", &capped(b"w7")),
        LockOutcome::OverWaits(2)
    ));
}
