//! The manager protocol of the reference Locking-Center server, served on the
//! lock port + 1: a 4-byte ASCII command, little-endian binary fields, and a
//! final `+` (or `-` on failure). Bytes in, values out; no I/O.
//!
//! | command | request after the command | answer before the final `+` |
//! |---------|---------------------------|------------------------------|
//! | `KEYS`  | -                         | `u32 n`, then n × (`u8 len` key, `u8 len` source, `u8 len` peer `ip:port`, `i64` unix seconds) |
//! | `RSET`  | `u32 n`, n × (`u8 len` key)    | one `+` per key reset |
//! | `RSBS`  | `u32 n`, n × (`u8 len` source) | one `+` per source reset; n = 0 resets the caller's IP and answers one `+` |
//! | `KEYX`  | -                         | `u32 n \| 0xC000_0000`, then n × (`u8 len` key, `u8 len` source, `u8 len` peer, `i64` unix ms held since, `u32` waiters, `u64` fencing token, `u8` 1 = session hold / 0 = kept, `u32` mode: 0 shared, 1 exclusive, N a limit of N); with bit `0x2000_0000` of the count also set, each entry ends with `i64` unix ms when the hold expires (0: never) |
//!
//! `KEYX` is lc-cli's own: what `lc-cli keys` shows beyond the reference
//! `KEYS`, one entry per hold (a shared or limited key has several). The
//! high bit of its count marks entries with a token and a hold kind, the
//! next bit entries with a mode, the third entries with an expiry (set
//! only when some hold expires, `lock KEY --expire`, so the answer of a
//! server without such holds is as before); lc-cli also reads the answers of earlier
//! servers, without them (an earlier lc-cli finds this one malformed and
//! says so).
//! `KEYS` stays as the reference writes it: no token, no kind.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::mode::LockMode;

/// The manager listens on the lock port + 1, as the reference server's
/// does; None when there is no next port.
pub(crate) fn port_for(lock_port: u16) -> Option<u16> {
    lock_port.checked_add(1)
}

pub(crate) const KEYS: &[u8; 4] = b"KEYS";
pub(crate) const RESET_KEYS: &[u8; 4] = b"RSET";
pub(crate) const RESET_SOURCES: &[u8; 4] = b"RSBS";
pub(crate) const KEYS_EXTENDED: &[u8; 4] = b"KEYX";

/// One held key as the manager reports it (and the server's table lists it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyReport {
    pub key: Vec<u8>,
    pub source: Vec<u8>,
    /// The holder's address as text (`ip:port`).
    pub peer: Vec<u8>,
    /// When the hold began (sent as unix seconds or milliseconds).
    pub since: SystemTime,
    pub waiting: u32,
    /// The grant's fencing token (None from a server before tokens).
    pub token: Option<u64>,
    /// A session hold (ends with its holder) rather than a kept one (until
    /// Unlock); None from a server before sessions.
    pub session: Option<bool>,
    /// How the key is held; None from a server before shared locks (there,
    /// exclusive).
    pub mode: Option<LockMode>,
    /// When a kept hold frees itself (`lock KEY --expire`); None: never, or
    /// a server before expiring holds.
    pub expires: Option<SystemTime>,
    /// The holder's token's identity (`serve --token-file`): in Keys'
    /// listing only (lc-cli's action 17), never on the manager port.
    pub identity: Option<Vec<u8>>,
    /// The hold's field list and its key's mark (issue 44): in a listing
    /// of version 2 only (Keys with flags bit 1).
    pub fields: Option<Vec<u8>>,
    pub mark: Option<u64>,
    /// A `--limit N` hold's slot (issue 45): in a listing of version 2 of
    /// a server that keeps slots.
    pub slot: Option<u32>,
}

/// The high bit of `KEYX`'s count: entries carry a token and a hold kind.
const WITH_TOKENS: u32 = 0x8000_0000;
/// The next bit: entries carry a mode too.
const WITH_MODES: u32 = 0x4000_0000;
/// The third: entries carry when they expire (sent only when one does).
const WITH_EXPIRES: u32 = 0x2000_0000;
const COUNT: u32 = !(WITH_TOKENS | WITH_MODES | WITH_EXPIRES);

/// Unix milliseconds of `t`, negative before the epoch.
pub(super) fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_millis().min(i64::MAX as u128) as i64),
    }
}

pub(super) fn from_unix_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

pub(super) fn push_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let bytes = &bytes[..bytes.len().min(u8::MAX as usize)];
    out.push(bytes.len() as u8);
    out.extend_from_slice(bytes);
}

/// The answer to `KEYS`, as the reference server writes it (final `+` included).
pub(crate) fn encode_keys(reports: &[KeyReport]) -> Vec<u8> {
    let mut out = (reports.len() as u32).to_le_bytes().to_vec();
    for r in reports {
        push_short(&mut out, &r.key);
        push_short(&mut out, &r.source);
        push_short(&mut out, &r.peer);
        out.extend_from_slice(&(unix_ms(r.since).div_euclid(1000)).to_le_bytes());
    }
    out.push(b'+');
    out
}

/// The answer to `KEYX` (final `+` included).
pub(crate) fn encode_keys_extended(reports: &[KeyReport]) -> Vec<u8> {
    let with_expires = reports.iter().any(|r| r.expires.is_some());
    let mut n = (reports.len() as u32).min(COUNT) | WITH_TOKENS | WITH_MODES;
    if with_expires {
        n |= WITH_EXPIRES;
    }
    let mut out = n.to_le_bytes().to_vec();
    for r in reports {
        push_short(&mut out, &r.key);
        push_short(&mut out, &r.source);
        push_short(&mut out, &r.peer);
        out.extend_from_slice(&unix_ms(r.since).to_le_bytes());
        out.extend_from_slice(&r.waiting.to_le_bytes());
        out.extend_from_slice(&r.token.unwrap_or(0).to_le_bytes());
        out.push(u8::from(r.session == Some(true)));
        let mode = r.mode.unwrap_or(LockMode::Exclusive);
        out.extend_from_slice(&mode.word().to_le_bytes());
        if with_expires {
            out.extend_from_slice(&r.expires.map_or(0, unix_ms).to_le_bytes());
        }
    }
    out.push(b'+');
    out
}

/// Reads a `KEYX` answer; `None` if it is incomplete or malformed.
pub(crate) fn decode_keys_extended(buf: &[u8]) -> Option<Vec<KeyReport>> {
    let mut cur = Reader { buf, pos: 0 };
    let n = u32::from_le_bytes(cur.take(4)?.try_into().ok()?);
    let with_tokens = n & WITH_TOKENS != 0;
    let with_modes = n & WITH_MODES != 0;
    let with_expires = n & WITH_EXPIRES != 0;
    if (with_modes && !with_tokens) || (with_expires && !with_modes) {
        return None;
    }
    let n = n & COUNT;
    let mut out = Vec::with_capacity(n.min(4096) as usize);
    for _ in 0..n {
        let key = cur.short()?;
        let source = cur.short()?;
        let peer = cur.short()?;
        let since_ms = i64::from_le_bytes(cur.take(8)?.try_into().ok()?);
        let waiting = u32::from_le_bytes(cur.take(4)?.try_into().ok()?);
        let (token, session) = if with_tokens {
            let token = u64::from_le_bytes(cur.take(8)?.try_into().ok()?);
            let session = match cur.take(1)? {
                [0] => false,
                [1] => true,
                _ => return None,
            };
            // 0: a hold restored from a log written before tokens.
            ((token != 0).then_some(token), Some(session))
        } else {
            (None, None)
        };
        let mode = match with_modes {
            true => Some(LockMode::from_word(u32::from_le_bytes(
                cur.take(4)?.try_into().ok()?,
            ))),
            false => None,
        };
        let expires = match with_expires {
            true => match i64::from_le_bytes(cur.take(8)?.try_into().ok()?) {
                0 => None,
                ms => Some(from_unix_ms(ms)),
            },
            false => None,
        };
        out.push(KeyReport {
            key,
            source,
            peer,
            since: from_unix_ms(since_ms),
            waiting,
            token,
            session,
            mode,
            expires,
            identity: None,
            fields: None,
            mark: None,
            slot: None,
        });
    }
    (cur.take(1)? == b"+").then_some(out)
}

/// A `RSET`/`RSBS` request body: `u32 n` then n short fields (lc-cli's
/// client sends none; the tests' manager client does).
#[cfg(test)]
fn encode_names(names: &[&[u8]]) -> Vec<u8> {
    let mut out = (names.len() as u32).to_le_bytes().to_vec();
    for n in names {
        push_short(&mut out, n);
    }
    out
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.buf.get(self.pos..self.pos + n)?;
        self.pos += n;
        Some(bytes)
    }

    fn short(&mut self) -> Option<Vec<u8>> {
        let len = *self.take(1)?.first()? as usize;
        Some(self.take(len)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> KeyReport {
        KeyReport {
            key: b"deploy/prod".to_vec(),
            source: b"ci-7".to_vec(),
            peer: b"127.0.0.1:5000".to_vec(),
            since: from_unix_ms(1_700_000_000_123),
            waiting: 3,
            token: Some(1_700_000_000_123_456),
            session: Some(true),
            mode: Some(LockMode::limit(3)),
            expires: None,
            identity: None,
            fields: None,
            mark: None,
            slot: None,
        }
    }

    #[test]
    fn keys_extended_of_an_earlier_server_still_reads() {
        let mut bytes = 1u32.to_le_bytes().to_vec();
        for f in [&b"k"[..], b"s", b"p"] {
            push_short(&mut bytes, f);
        }
        bytes.extend_from_slice(&5i64.to_le_bytes());
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.push(b'+');
        let got = decode_keys_extended(&bytes).unwrap();
        assert_eq!(got[0].token, None);
        assert_eq!(got[0].session, None);
        assert_eq!(got[0].mode, None);
        assert_eq!(got[0].waiting, 2);
    }

    #[test]
    fn keys_matches_the_reference_layout() {
        let bytes = encode_keys(&[report()]);
        let mut expected = vec![1, 0, 0, 0, 11];
        expected.extend_from_slice(b"deploy/prod");
        expected.push(4);
        expected.extend_from_slice(b"ci-7");
        expected.push(14);
        expected.extend_from_slice(b"127.0.0.1:5000");
        expected.extend_from_slice(&1_700_000_000i64.to_le_bytes());
        expected.push(b'+');
        assert_eq!(bytes, expected);
    }

    #[test]
    fn keys_extended_roundtrips_and_needs_every_byte() {
        let reports = vec![
            report(),
            KeyReport {
                waiting: 0,
                session: Some(false),
                mode: Some(LockMode::Shared),
                ..report()
            },
            KeyReport {
                mode: Some(LockMode::Exclusive),
                ..report()
            },
        ];
        let bytes = encode_keys_extended(&reports);
        assert_eq!(decode_keys_extended(&bytes), Some(reports.clone()));
        for cut in 0..bytes.len() {
            assert_eq!(decode_keys_extended(&bytes[..cut]), None);
        }
        // One hold that expires: every entry carries the field.
        let mut expiring = reports;
        expiring[1].expires = Some(from_unix_ms(1_700_000_007_000));
        let bytes2 = encode_keys_extended(&expiring);
        assert_eq!(bytes2.len(), bytes.len() + 8 * expiring.len());
        assert_eq!(decode_keys_extended(&bytes2), Some(expiring));
        for cut in 0..bytes2.len() {
            assert_eq!(decode_keys_extended(&bytes2[..cut]), None);
        }
    }

    #[test]
    fn names_layout() {
        assert_eq!(encode_names(&[b"ab"]), [1, 0, 0, 0, 2, b'a', b'b']);
        assert_eq!(encode_names(&[]), [0, 0, 0, 0]);
    }
}
