//! The request frames: every action, the reference layout, bad input.

use super::*;
use proptest::prelude::*;

fn roundtrip(req: Request) {
    let bytes = encode(&req).unwrap();
    assert_eq!(decode(&bytes), Ok(Decoded::Frame(req, bytes.len())));
    for cut in 0..bytes.len() {
        assert_eq!(
            decode(&bytes[..cut]),
            Ok(Decoded::Incomplete),
            "cut at {cut}"
        );
    }
}

fn lock(key: &[u8], source: &[u8], mode: LockMode, hold: Hold, wait: bool) -> Request {
    Request::Lock {
        key: key.to_vec(),
        source: source.to_vec(),
        mode,
        hold,
        wait,
    }
}

fn release(key: &[u8], kind: ReleaseKind) -> Request {
    Request::Release {
        key: key.to_vec(),
        kind,
        ended: None,
    }
}

const X: LockMode = LockMode::Exclusive;

#[test]
fn every_action_roundtrips() {
    roundtrip(lock(b"deploy/prod", b"ci-7", X, Hold::Classic, true));
    roundtrip(lock(b"k", b"", X, Hold::Classic, false));
    roundtrip(release(&[b'x'; 127], ReleaseKind::Unlock));
    roundtrip(Request::ResetByKey { key: b"k".to_vec() });
    roundtrip(Request::ResetBySource { source: vec![] });
    roundtrip(Request::Ping);
    roundtrip(release(b"k", ReleaseKind::Release));
    roundtrip(lock(b"k", b"s", X, Hold::Session, true));
    roundtrip(lock(b"k", b"", X, Hold::Session, false));
    roundtrip(Request::Reclaim {
        key: b"k".to_vec(),
        token: 1 << 60,
        secret: None,
    });
    roundtrip(Request::Reclaim {
        key: b"k".to_vec(),
        token: 1 << 60,
        secret: Some([0xa5; SECRET_LEN]),
    });
    // With its secret, the token field is 24 bytes; other lengths are bad.
    let with = encode(&Request::Reclaim {
        key: b"k".to_vec(),
        token: 3,
        secret: Some([1; SECRET_LEN]),
    })
    .unwrap();
    assert_eq!(with[3], 24);
    let mut bad = with.clone();
    bad[3] = 16;
    assert_eq!(decode(&bad), Err(FrameError::BadToken(16)));
    for cut in 0..with.len() {
        assert_eq!(decode(&with[..cut]), Ok(Decoded::Incomplete), "cut {cut}");
    }
    roundtrip(release(b"k", ReleaseKind::Token(7)));
}

#[test]
fn each_request_knows_its_action() {
    let actions: Vec<u8> = [
        lock(b"k", b"", X, Hold::Classic, true),
        release(b"k", ReleaseKind::Unlock),
        Request::ResetByKey { key: b"k".to_vec() },
        Request::ResetBySource { source: vec![] },
        lock(b"k", b"", X, Hold::Classic, false),
        release(b"k", ReleaseKind::Release),
        Request::Ping,
        lock(b"k", b"", X, Hold::Session, true),
        lock(b"k", b"", X, Hold::Session, false),
        Request::Reclaim {
            key: b"k".to_vec(),
            token: 1,
            secret: None,
        },
        release(b"k", ReleaseKind::Token(1)),
        lock(b"k", b"", LockMode::Shared, Hold::Session, true),
        lock(b"k", b"", LockMode::Shared, Hold::Session, false),
        lock(b"k", b"", X, Hold::Kept, true),
        lock(b"k", b"", X, Hold::Kept, false),
        Request::Hello {
            client: vec![],
            token: vec![],
        },
        Request::Keys {
            key: vec![],
            waiters: false,
            fields: false,
            prefix: false,
        },
    ]
    .iter()
    .map(|r| {
        assert_eq!(r.is_extension(), r.action() > 5, "{r:?}");
        assert_eq!(encode(r).unwrap()[0], r.action());
        r.action()
    })
    .collect();
    assert_eq!(actions, (1..=17).collect::<Vec<u8>>());
}

#[test]
fn session_frames() {
    let frame = encode(&release(b"ab", ReleaseKind::Token(0x0102))).unwrap();
    assert_eq!(frame, [11, 2, b'a', b'b', 8, 0, 0, 0, 0, 0, 0, 1, 2]);
    assert_eq!(decode(&[10, 1, b'k', 7]), Err(FrameError::BadToken(7)));
    assert_eq!(decode(&[11, 1, b'k', 7]), Err(FrameError::BadToken(7)));
    assert_eq!(
        decode(&[200, 1, b'k', 0]),
        Err(FrameError::UnknownAction(200))
    );
}

#[test]
fn mode_frames() {
    for (hold, wait, action) in [
        (Hold::Session, true, 12),
        (Hold::Session, false, 13),
        (Hold::Kept, true, 14),
        (Hold::Kept, false, 15),
    ] {
        let req = lock(b"k", b"s", LockMode::limit(3), hold, wait);
        assert_eq!(
            encode(&req).unwrap(),
            [action, 1, b'k', 1, b's', 4, 0, 0, 0, 3]
        );
        roundtrip(req);
    }
    roundtrip(lock(b"k", b"", LockMode::Shared, Hold::Session, true));
    for wait in [true, false] {
        let req = Request::ExpiringLock {
            key: b"k".to_vec(),
            source: b"s".to_vec(),
            mode: X,
            ttl_ms: 7_200_000,
            wait,
        };
        let mut want = vec![18, 1, b'k', 1, b's', 4, 0, 0, 0, 1, 8];
        want.extend_from_slice(&7_200_000u64.to_be_bytes());
        want.extend_from_slice(&[1, u8::from(wait)]);
        assert_eq!(encode(&req).unwrap(), want);
        roundtrip(req);
    }
    let mut bad = vec![18, 1, b'k', 0, 4, 0, 0, 0, 1, 8];
    bad.extend_from_slice(&5u64.to_be_bytes());
    assert_eq!(
        decode(&[&bad[..], &[1, 2]].concat()),
        Err(FrameError::BadExpiry(2))
    );
    assert_eq!(
        decode(&[&bad[..], &[2]].concat()),
        Err(FrameError::BadExpiry(2))
    );
    assert_eq!(
        decode(&[18, 1, b'k', 0, 4, 0, 0, 0, 1, 4]),
        Err(FrameError::BadExpiry(4))
    );
    // An exclusive kept hold has only the mode actions.
    roundtrip(lock(b"k", b"", X, Hold::Kept, false));
    assert_eq!(decode(&[12, 1, b'k', 0, 8]), Err(FrameError::BadMode(8)));
    // 12 in exclusive mode is the same request as 8.
    assert_eq!(
        decode(&[12, 1, b'k', 0, 4, 0, 0, 0, 1]),
        Ok(Decoded::Frame(lock(b"k", b"", X, Hold::Session, true), 9))
    );
    assert_eq!(
        encode(&lock(b"k", b"", LockMode::Shared, Hold::Classic, true)),
        Err(EncodeError::ClassicMode(LockMode::Shared))
    );
}

#[test]
fn frames_match_the_reference_layout() {
    let frame = encode(&lock(b"ab", b"s", X, Hold::Classic, true)).unwrap();
    assert_eq!(frame, [1, 2, b'a', b'b', 1, b's']);
    let unlock = encode(&release(b"ab", ReleaseKind::Unlock)).unwrap();
    assert_eq!(unlock, [2, 2, b'a', b'b']);
    let rbs = encode(&Request::ResetBySource {
        source: b"h".to_vec(),
    })
    .unwrap();
    assert_eq!(rbs, [4, 1, b'h']);
    let release6 = encode(&release(b"ab", ReleaseKind::Release)).unwrap();
    assert_eq!(release6, [6, 2, b'a', b'b']);
}

#[test]
fn hello_frames() {
    roundtrip(Request::Hello {
        client: b"0.9.0".to_vec(),
        token: Vec::new(),
    });
    roundtrip(Request::Hello {
        client: Vec::new(),
        token: b"t0k".to_vec(),
    });
    assert_eq!(
        encode(&Request::Hello {
            client: b"1".to_vec(),
            token: Vec::new()
        })
        .unwrap(),
        [16, 1, b'1', 0]
    );
    assert_eq!(decode(&[16, 0]), Ok(Decoded::Incomplete));
    assert_eq!(
        decode(&[16, 0, 0]),
        Ok(Decoded::Frame(
            Request::Hello {
                client: vec![],
                token: vec![]
            },
            3
        ))
    );
}

#[test]
fn bad_frames_are_errors() {
    assert_eq!(decode(&[200]), Err(FrameError::UnknownAction(200)));
    assert_eq!(decode(&[0]), Err(FrameError::UnknownAction(0)));
    assert_eq!(decode(&[1, 0]), Err(FrameError::EmptyKey));
    assert_eq!(decode(&[2, 0x80]), Err(FrameError::NegativeSize(0x80)));
    assert_eq!(
        decode(&[1, 1, b'k', 0xff]),
        Err(FrameError::NegativeSize(0xff))
    );
}

#[test]
fn trailing_bytes_are_left_alone() {
    // Some clients append a source to Unlock.
    assert_eq!(
        decode(&[2, 1, b'k', 1, b's']),
        Ok(Decoded::Frame(release(b"k", ReleaseKind::Unlock), 3))
    );
}

#[test]
fn encode_refuses_what_the_server_would() {
    assert_eq!(
        encode(&release(b"", ReleaseKind::Unlock)),
        Err(EncodeError::EmptyKey)
    );
    assert!(encode(&lock(&[1; 128], b"", X, Hold::Classic, true)).is_err());
    assert!(encode(&lock(&[1], &[1; 128], X, Hold::Classic, true)).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(Decoded::Frame(req, used)) = decode(&bytes) {
            prop_assert!(used <= bytes.len());
            let again = encode(&req).unwrap();
            prop_assert_eq!(decode(&again), Ok(Decoded::Frame(req.clone(), again.len())));
            // Any key and source make a ping, 12, 13 in exclusive mode
            // are 8, 9, and Keys' flags come back without unknown bits;
            // the others encode back exactly.
            let as_eight = bytes[0] >= ACTION_MODE_SESSION_LOCK && matches!(
                req,
                Request::Lock { hold: Hold::Session, mode: LockMode::Exclusive, .. }
            );
            let keys = matches!(req, Request::Keys { .. });
            if req != Request::Ping && !as_eight && !keys {
                prop_assert_eq!(again, bytes[..used].to_vec());
            }
        }
    }
}

#[test]
fn keys_frames() {
    let all = Request::Keys {
        key: vec![],
        waiters: false,
        fields: false,
        prefix: false,
    };
    assert_eq!(encode(&all).unwrap(), [17, 0, 0]);
    let one = Request::Keys {
        key: b"k".to_vec(),
        waiters: true,
        fields: false,
        prefix: false,
    };
    assert_eq!(encode(&one).unwrap(), [17, 1, b'k', 1, 1]);
    roundtrip(all);
    roundtrip(one.clone());
    // Unknown flag bits and bytes are ignored; a missing flags field waits.
    assert_eq!(
        decode(&[17, 1, b'k', 2, 0xf9, 9]),
        Ok(Decoded::Frame(one, 6))
    );
    assert_eq!(decode(&[17, 1, b'k']), Ok(Decoded::Incomplete));
    // A prefix: bit 2.
    let under = Request::Keys {
        key: b"deploy/".to_vec(),
        waiters: false,
        fields: true,
        prefix: true,
    };
    assert_eq!(encode(&under).unwrap()[9..], [1, 6]);
    roundtrip(under);
    assert_eq!(decode(&[17, 0x80]), Err(FrameError::NegativeSize(0x80)));
    assert!(encode(&Request::Keys {
        key: vec![b'k'; 128],
        waiters: false,
        fields: false,
        prefix: false,
    })
    .is_err());
}

/// A SessionRelease with how its command ended (20 bytes of token field)
/// and with `--hold-at-least`'s keep (28, the feature `keep`) round trips;
/// a 24-byte field is refused.
#[test]
fn session_release_with_keep_roundtrips() {
    for keep_ms in [None, Some(1), Some(3_000_000)] {
        roundtrip(Request::Release {
            key: b"job".to_vec(),
            kind: ReleaseKind::Token(1 << 50),
            ended: Some(Ended {
                status: 3,
                order: None,
                keep_ms,
            }),
        });
    }
    let mut bytes = encode(&Request::Release {
        key: b"k".to_vec(),
        kind: ReleaseKind::Token(7),
        ended: Some(Ended {
            status: 0,
            order: Some(2),
            keep_ms: Some(5),
        }),
    })
    .unwrap();
    // Cut the keep's last 4 bytes and say 24: refused.
    bytes.truncate(bytes.len() - 4);
    let at = bytes.len() - 25;
    bytes[at] = 24;
    assert!(decode(&bytes).is_err(), "{bytes:?}");
}
