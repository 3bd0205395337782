use super::*;

fn hold(key: &str) -> KeyReport {
    KeyReport {
        key: key.as_bytes().to_vec(),
        source: b"ci-7".to_vec(),
        peer: b"192.0.2.2:5000".to_vec(),
        since: from_unix_ms(1_700_000_000_123),
        waiting: 2,
        token: Some(1_700_000_000_123_456),
        session: Some(true),
        mode: Some(LockMode::limit(3)),
        expires: None,
        identity: Some(b"alice".to_vec()),
        fields: None,
        mark: None,
        slot: None,
    }
}

fn waiter(key: &str, source: &str) -> WaiterReport {
    WaiterReport {
        key: key.as_bytes().to_vec(),
        source: source.as_bytes().to_vec(),
        peer: b"192.0.2.9:6000".to_vec(),
        since: from_unix_ms(1_700_000_001_000),
        mode: LockMode::Shared,
        session: false,
        identity: None,
        fields: None,
    }
}

#[test]
fn round_trip() {
    let holds = vec![
        hold("a"),
        KeyReport {
            session: Some(false),
            mode: Some(LockMode::Exclusive),
            token: None,
            expires: Some(from_unix_ms(1_700_000_060_000)),
            identity: None,
            ..hold("b")
        },
    ];
    let named = WaiterReport {
        identity: Some(b"token:00ff00ff00ff00ff".to_vec()),
        ..waiter("a", "w2")
    };
    let waiters = vec![waiter("a", "w1"), named, waiter("b", "")];
    let bytes = encode(&holds, &waiters);
    assert_eq!(bytes[0], b'+');
    assert_eq!(&bytes[bytes.len() - 3..], b".\0\0");
    let got = decode(&bytes).unwrap().unwrap();
    assert_eq!(got.holds, holds);
    assert_eq!(got.waiters, waiters);
    assert_eq!(decode(&encode(&[], &[])).unwrap(), Some(Listing::default()));
}

/// A peer address is written as its `Display` text.
#[test]
fn a_peer_is_its_display_text() {
    for peer in [
        "0.0.0.0:0",
        "127.0.0.1:9",
        "10.200.3.45:65535",
        "255.255.255.255:10000",
        "[::1]:80",
        "[fe80::1%2]:4000",
    ] {
        let addr: SocketAddr = peer.parse().unwrap();
        let mut out = Vec::new();
        push_peer(&mut out, PeerText::Addr(addr));
        assert_eq!(out[0] as usize, out.len() - 1);
        assert_eq!(&out[1..], addr.to_string().as_bytes(), "{peer}");
    }
}

#[test]
fn truncated_input_is_incomplete_at_every_cut() {
    let bytes = encode(&[hold("a")], &[waiter("a", "w1")]);
    for cut in 0..bytes.len() {
        assert_eq!(decode(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
    // Fed a byte at a time, it reads the same as in one piece.
    let mut r = ListingReader::new();
    for b in &bytes {
        r.feed(std::slice::from_ref(b)).unwrap();
    }
    assert!(r.done);
    assert_eq!(r.listing, decode(&bytes).unwrap().unwrap());
}

#[test]
fn hostile_lengths_are_errors_not_panics() {
    // A short field longer than its record's body.
    let mut bytes = vec![b'+', HOLD, 0, 2, 200, b'k'];
    push_end(&mut bytes);
    assert_eq!(
        decode(&bytes),
        Err(ListingError::Malformed { kind: HOLD, len: 2 })
    );
    // A body too short for the fixed fields.
    let mut bytes = vec![b'+', WAITER, 0, 3, 0, 0, 0];
    push_end(&mut bytes);
    assert!(matches!(
        decode(&bytes),
        Err(ListingError::Malformed { kind: WAITER, .. })
    ));
    // A record claiming 65535 bytes that never come: incomplete, and
    // nothing is allocated for it up front.
    assert_eq!(decode(&[b'+', HOLD, 0xff, 0xff, 1, 2, 3]), Ok(None));
    // A bad session byte.
    let mut bytes = encode(&[], &[waiter("k", "s")]);
    let flag = bytes.len() - 5;
    bytes[flag] = 7;
    assert!(decode(&bytes).is_err());
    assert_eq!(decode(b"-"), Err(ListingError::NotAListing(b'-')));
    assert_eq!(decode(b"+.\0\x01x"), Err(ListingError::BadEnd(1)));
}

#[test]
fn unknown_kinds_and_longer_bodies_are_skipped() {
    let mut bytes = vec![b'+', b'Z', 0, 2, 9, 9];
    let mut w = Vec::new();
    push_waiter(&mut w, &waiter("k", "s"));
    // Two more bytes in the body, from a later server.
    let len = u16::from_be_bytes([w[1], w[2]]) + 2;
    w[1..3].copy_from_slice(&len.to_be_bytes());
    w.extend_from_slice(&[1, 2]);
    bytes.extend_from_slice(&w);
    push_end(&mut bytes);
    let got = decode(&bytes).unwrap().unwrap();
    assert_eq!(got.waiters, vec![waiter("k", "s")]);
}

/// A listing of version 2 carries the field lists and the key's mark; a
/// reader of version 1 skips them, and a listing without them reads as
/// none.
#[test]
fn fields_and_marks_round_trip() {
    let holds = vec![
        KeyReport {
            fields: Some(b"order=7\nnewest=1\n".to_vec()),
            mark: Some(6),
            ..hold("a")
        },
        // Slots (issue 45): with the fields, a hold's slot.
        KeyReport {
            fields: Some(Vec::new()),
            slot: Some(2),
            ..hold("b")
        },
    ];
    let waiters = vec![WaiterReport {
        fields: Some(b"note=x\n".to_vec()),
        ..waiter("a", "w1")
    }];
    let bytes = encode(&holds, &waiters);
    let got = decode(&bytes).unwrap().unwrap();
    assert_eq!(got.holds, holds);
    assert_eq!(got.waiters, waiters);
    let plain = encode(&[hold("a")], &[waiter("a", "w1")]);
    let got = decode(&plain).unwrap().unwrap();
    assert_eq!(
        (got.holds[0].fields.clone(), got.holds[0].mark),
        (None, None)
    );
    assert_eq!(got.waiters[0].fields, None);
}

/// A listing by prefix opens with its `P` record; a reader before it
/// skips the record (an unknown kind), a listing without one has none.
#[test]
fn a_prefix_record_names_the_prefix() {
    let mut bytes = vec![LISTING];
    push_prefix(&mut bytes, b"deploy/");
    bytes.extend_from_slice(&encode(&[hold("deploy/a")], &[])[1..]);
    let got = decode(&bytes).unwrap().unwrap();
    assert_eq!(got.prefix.as_deref(), Some(&b"deploy/"[..]));
    assert_eq!(got.holds, vec![hold("deploy/a")]);
    assert_eq!(decode(&encode(&[], &[])).unwrap().unwrap().prefix, None);
    let mut empty = vec![LISTING];
    push_prefix(&mut empty, b"");
    push_end(&mut empty);
    assert_eq!(decode(&empty).unwrap().unwrap().prefix, Some(Vec::new()));
}
