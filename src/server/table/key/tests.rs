use super::*;

/// A held key costs its map entry, its name, its `KeyState` and the
/// hold in it: keep the two small (a million held keys is ~100 MB
/// here). The hold was 160 bytes in a `Vec` of room for 4 (640).
#[test]
fn a_hold_stays_small() {
    assert!(
        std::mem::size_of::<Hold>() <= 80,
        "{}",
        std::mem::size_of::<Hold>()
    );
    assert!(std::mem::size_of::<Peer>() <= 16);
    let state = std::mem::size_of::<KeyState>();
    assert!(state <= 96, "a key's state is {state} bytes");
}

/// Each queued waiter is one entry of its key's line (with room for
/// up to as many again), beside its connection's task.
#[test]
fn a_waiter_stays_small() {
    let waiter = std::mem::size_of::<Waiter>();
    assert!(waiter <= 88, "a waiter is {waiter} bytes");
}

#[test]
fn holds_grow_and_shrink_through_one_inline() {
    let holder = |id| Holder {
        id,
        token: id,
        source: Vec::new(),
        peer: "[::1]:7".parse().unwrap(),
        since: SystemTime::now(),
        session: false,
        mode: LockMode::Shared,
        owner: None,
        expires: None,
        secret: None,
        fields: None,
        slot: None,
    };
    let hold = |id| Hold::new(&holder(id), Arc::from(&b"s"[..]), None);
    let mut holds = Holds::default();
    assert!(holds.is_empty());
    holds.push(hold(1));
    assert!(matches!(holds, Holds::One(_)));
    holds.push(hold(2));
    holds.push(hold(3));
    assert_eq!(holds.iter().map(|h| h.id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(holds.remove(1).id, 2);
    holds.retain(|h| h.id != 1);
    assert_eq!(holds.len(), 1);
    let h = holds.remove(0);
    assert!(holds.is_empty());
    // What went in comes out: the start to the ns, the peer with v6.
    let want = holder(9);
    let got = Hold::new(&want, Arc::from(&b"s"[..]), None).holder();
    assert_eq!((got.since, got.peer), (want.since, want.peer));
    assert_eq!(h.peer(), want.peer);
    let mut single = Holds::default();
    single.push(hold(5));
    single.retain(|_| false);
    assert!(single.is_empty());
}
