use super::*;
use proptest::prelude::*;

fn grant() -> Record {
    Record::Grant {
        key: b"deploy/prod".to_vec(),
        source: b"ci-7".to_vec(),
        peer: b"127.0.0.1:5000".to_vec(),
        since_ms: 1_700_000_000_123,
        token: 1_700_000_000_123_456,
        session: true,
        mode: LockMode::limit(3),
        expires_ms: None,
        ownership: Ownership::default(),
    }
}

/// An owned session hold with a secret (tag 8), kept and expiring
/// at `at_ms` if given.
fn owned(at_ms: Option<u64>) -> Record {
    let mut r = grant();
    if let Record::Grant {
        session,
        expires_ms,
        ownership,
        ..
    } = &mut r
    {
        (*session, *expires_ms) = (at_ms.is_none(), at_ms);
        *ownership = Ownership {
            fingerprint: 0x0123_4567_89ab_cdef,
            name: b"alice".to_vec(),
            secret: at_ms.is_none().then_some([7; SECRET_DIGEST]),
            fields: Vec::new(),
            slot: None,
        };
    }
    r
}

/// A kept hold that expires at `at_ms` (tag 7).
/// A grant with a field list (tag 9), owned (`fingerprint` not 0) or not.
fn with_fields(fields: &[u8], fingerprint: u64) -> Record {
    let mut r = grant();
    if let Record::Grant { ownership, .. } = &mut r {
        ownership.fingerprint = fingerprint;
        ownership.fields = fields.to_vec();
    }
    r
}

/// A `--limit N` hold with its slot (tag 12), with fields or without.
fn with_slot(slot: u32, fields: &[u8]) -> Record {
    let mut r = with_fields(fields, 0);
    if let Record::Grant { ownership, .. } = &mut r {
        ownership.slot = Some(slot);
    }
    r
}

fn expiring(at_ms: u64) -> Record {
    let mut r = grant();
    if let Record::Grant {
        session,
        expires_ms,
        ..
    } = &mut r
    {
        (*session, *expires_ms) = (false, Some(at_ms));
    }
    r
}

#[test]
fn a_version_1_grant_reads_as_a_kept_hold_without_token() {
    let mut payload = vec![TAG_GRANT_V1, 1, b'k', 1, b's', 1, b'p'];
    payload.extend_from_slice(&5u64.to_le_bytes());
    let framed = framed(&payload);
    let want = Record::Grant {
        key: b"k".to_vec(),
        source: b"s".to_vec(),
        peer: b"p".to_vec(),
        since_ms: 5,
        token: 0,
        session: false,
        mode: LockMode::Exclusive,
        expires_ms: None,
        ownership: Ownership::default(),
    };
    assert_eq!(decode(&framed), Next::Record(want, framed.len()));
}

#[test]
fn a_version_2_grant_reads_as_exclusive_and_release_all_as_every_hold() {
    let mut payload = vec![TAG_GRANT_V2, 1, b'k', 1, b's', 1, b'p'];
    payload.extend_from_slice(&5u64.to_le_bytes());
    payload.extend_from_slice(&7u64.to_le_bytes());
    payload.push(1);
    let Next::Record(
        Record::Grant {
            token,
            session,
            mode,
            ..
        },
        _,
    ) = decode(&framed(&payload))
    else {
        panic!("not read")
    };
    assert_eq!((token, session, mode), (7, true, LockMode::Exclusive));
    let release = decode(&framed(&[TAG_RELEASE_ALL, 1, b'k']));
    assert_eq!(
        release,
        Next::Record(
            Record::Release {
                key: b"k".to_vec(),
                token: None
            },
            HEADER + 3
        )
    );
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut framed = (payload.len() as u32).to_le_bytes().to_vec();
    let crc = checksum(&framed, payload);
    framed.extend_from_slice(&crc.to_le_bytes());
    framed.extend_from_slice(payload);
    framed
}

/// A slot is written as tag 12, the field list of length 0 when it has
/// none, and read back; a tag 12 without its slot's 4 bytes is not read.
#[test]
fn a_slot_is_tag_12() {
    let bytes = with_slot(3, b"").encode();
    assert_eq!(bytes[HEADER], 12);
    assert_eq!(bytes[bytes.len() - 4..], 3u32.to_le_bytes());
    let mut short = bytes[HEADER..bytes.len() - 4].to_vec();
    assert_eq!(decode(&framed(&short)), Next::Corrupt("unreadable payload"));
    // A tag 9 may not have an empty field list; tag 12 may.
    short[0] = 9;
    assert_eq!(decode(&framed(&short)), Next::Corrupt("unreadable payload"));
}

#[test]
fn roundtrip_and_every_cut_is_incomplete() {
    let expiring = expiring(1_700_000_007_200_000);
    for r in [
        grant(),
        expiring,
        owned(None),
        owned(Some(1_700_000_007_200_000)),
        Record::Release {
            key: b"k".to_vec(),
            token: Some(42),
        },
        Record::Release {
            key: b"k".to_vec(),
            token: None,
        },
        Record::Floor { token: 99 },
        with_fields(b"order=7\nnewest=1\n", 0),
        with_fields(b"cancel=1\n", 0x0123),
        with_slot(0, b""),
        with_slot(2, b"note=x\n"),
        Record::Mark {
            key: b"k".to_vec(),
            mark: Some(7),
        },
        Record::Mark {
            key: b"k".to_vec(),
            mark: None,
        },
    ] {
        let bytes = r.encode();
        assert_eq!(decode(&bytes), Next::Record(r.clone(), bytes.len()));
        let release_all = matches!(r, Record::Release { token: None, .. });
        assert_eq!(is_current(&bytes), !release_all, "{r:?}");
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), Next::Incomplete, "cut {cut}");
        }
    }
}

#[test]
fn every_flipped_byte_is_caught() {
    let expiring = expiring(9);
    for bytes in [
        grant().encode(),
        expiring.encode(),
        owned(None).encode(),
        with_slot(1, b"note=x\n").encode(),
    ] {
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            // Followed by plenty of bytes, so a grown length is still whole.
            b.extend_from_slice(&[0x55; 2 * MAX_PAYLOAD]);
            assert!(matches!(decode(&b), Next::Corrupt(_)), "flip at {i}");
        }
    }
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode(&bytes);
    }
}
