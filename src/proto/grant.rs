//! The whole `=` answer (a grant of actions 8, 9, 12 to 15 and 18, and a
//! Reclaim's) with the fields a connection's features add after the
//! token and the timeout: `[len][secret]` (the feature `secret`), then
//! `[len][slot:u32be]` (the feature `slots`: 4 bytes for a `--limit N`
//! hold, none for the others). Bytes in, values out.

use std::time::Duration;

use super::answer::{parse_session_grant, SESSION_GRANT_LEN};
use super::SECRET_LEN;

/// Which fields follow the token and timeout of an `=` on a connection:
/// the features its Hello answer named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tail {
    pub secret: bool,
    pub slot: bool,
}

/// An `=` answer, read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrantAnswer {
    pub token: u64,
    pub timeout: Duration,
    /// A session hold's secret (the feature `secret`; none for the others).
    pub secret: Option<[u8; SECRET_LEN]>,
    /// A `--limit N` hold's slot (the feature `slots`).
    pub slot: Option<u32>,
}

/// Appends the slot field: `[4][slot:u32be]`, or `[0]` for a hold without
/// one.
pub(crate) fn push_slot(out: &mut Vec<u8>, slot: Option<u32>) {
    match slot {
        Some(s) => {
            out.push(4);
            out.extend_from_slice(&s.to_be_bytes());
        }
        None => out.push(0),
    }
}

/// How many bytes the whole `=` answer at the start of `bytes` is (None:
/// not yet known, more bytes are needed).
pub(crate) fn grant_len(bytes: &[u8], tail: Tail) -> Option<usize> {
    let mut len = SESSION_GRANT_LEN;
    for present in [tail.secret, tail.slot] {
        if present {
            len += 1 + *bytes.get(len)? as usize;
        }
    }
    Some(len)
}

/// The whole `=` answer `bytes` (exactly [`grant_len`] bytes), or None
/// if it is not one.
pub(crate) fn parse_grant(bytes: &[u8], tail: Tail) -> Option<GrantAnswer> {
    let (plain, mut rest) = bytes.split_at_checked(SESSION_GRANT_LEN)?;
    let (token, timeout) = parse_session_grant(plain)?;
    let mut field = |present: bool| -> Option<Option<&[u8]>> {
        if !present {
            return Some(None);
        }
        let (&len, after) = rest.split_first()?;
        let (value, after) = after.split_at_checked(len as usize)?;
        rest = after;
        Some(Some(value))
    };
    let secret = match field(tail.secret)? {
        None | Some([]) => None,
        Some(s) => Some(s.try_into().ok()?),
    };
    let slot = match field(tail.slot)? {
        None | Some([]) => None,
        Some(s) => Some(u32::from_be_bytes(s.try_into().ok()?)),
    };
    rest.is_empty().then_some(GrantAnswer {
        token,
        timeout,
        secret,
        slot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::answer::{session_grant, session_grant_with_secret};

    #[test]
    fn every_tail_round_trips_and_needs_every_byte() {
        let t = Duration::from_millis(2500);
        let secret = [7u8; SECRET_LEN];
        for tail in [
            Tail::default(),
            Tail {
                secret: true,
                slot: false,
            },
            Tail {
                secret: false,
                slot: true,
            },
            Tail {
                secret: true,
                slot: true,
            },
        ] {
            for (with_secret, slot) in [(true, Some(2)), (false, None), (false, Some(0))] {
                let mut bytes = match tail.secret {
                    true => {
                        session_grant_with_secret(9, t, if with_secret { &secret } else { &[] })
                    }
                    false => session_grant(9, t).to_vec(),
                };
                if tail.slot {
                    push_slot(&mut bytes, slot);
                }
                assert_eq!(grant_len(&bytes, tail), Some(bytes.len()));
                let got = parse_grant(&bytes, tail).unwrap();
                assert_eq!((got.token, got.timeout), (9, t));
                assert_eq!(got.secret.is_some(), tail.secret && with_secret);
                assert_eq!(got.slot, slot.filter(|_| tail.slot));
                for cut in 0..bytes.len() {
                    let known = grant_len(&bytes[..cut], tail);
                    assert!(known.is_none_or(|n| n > cut), "{cut}");
                    assert_eq!(parse_grant(&bytes[..cut], tail), None);
                }
            }
        }
        // A slot field of another length is not a grant.
        let mut odd = session_grant(1, t).to_vec();
        odd.extend_from_slice(&[2, 0, 1]);
        let slot_only = Tail {
            secret: false,
            slot: true,
        };
        assert_eq!(grant_len(&odd, slot_only), Some(odd.len()));
        assert_eq!(parse_grant(&odd, slot_only), None);
    }
}
