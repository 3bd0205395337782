//! Record framing: `length:u32le | crc32c:u32le | payload`, no I/O.
//!
//! The checksum covers the four length bytes and the payload, so a flipped
//! bit in either is caught. Payloads:
//!
//! - Grant   `[5][keyLen][key][sourceLen][source][peerLen][peer][since_ms:u64le][token:u64le][session:u8][mode:u32le]`
//! - Grant of a kept hold that expires (version 4, `lock KEY --expire`):
//!   `[7]` as 5, then `[expires_ms:u64le]` (the deadline, wall clock, ms
//!   since the epoch)
//! - Grant of an owned hold (version 5, `serve --token-file`, or a session
//!   hold with a secret): `[8]` as 5, then `[expires_ms:u64le, 0 never]
//!   [owner:u64le, 0 none][nameLen][name][secretLen: 0 or 16][secret
//!   digest]`: the owner is its token's fingerprint and name, never the
//!   token; the secret's digest, never the secret
//! - Grant with a field list (version 6, issue 44: `--order`,
//!   `--newest`, `--cancel-running`, `--note`): `[9]` as 8, then
//!   `[fieldsLen:u16le][field list]`
//! - Grant with a slot (version 8, issue 45: a `--limit N` hold's slot):
//!   `[12]` as 9 (its field list may be empty), then `[slot:u32le]`
//!   (`grant.rs` has the tails of tags 7, 8, 9 and 12)
//! - Release `[6][keyLen][key][token:u64le]`: the hold under that token
//! - Mark    `[10][keyLen][key][set:u8][mark:u64le]` (version 6, issue 44):
//!   the key's mark is now `mark` (set 1), or has none (set 0: cleared)
//! - History `[11][keyLen][key][keep:u32le][owner:u64le][entry]` (v7, `history.rs`)
//! - Floor   `[4][token:u64le]`: no token at or below it may be given again
//!   (written first in a compacted log, so the highest token survives the
//!   records it removes)
//!
//! Read from logs of earlier versions: tag 3, a Grant of version 2 (no mode:
//! exclusive, the key's only hold), `[3]...[session:u8]`; tag 2, a Release of
//! every hold of the key, `[2][keyLen][key]`; tag 1, a Grant of version 1
//! (no token, not a session), `[1][keyLen][key][sourceLen][source][peerLen][peer][since_ms:u64le]`.

use crate::mode::LockMode;

/// Header bytes before each payload.
pub const HEADER: usize = 8;
/// No valid payload is longer (3 fields of at most 255 bytes, tag, time,
/// token, session flag, mode, deadline, an owned hold's owner, name and
/// secret digest, and a field list).
pub const MAX_PAYLOAD: usize = max(
    1 + 3 * 256 + 8 + 8 + 1 + 4 + 8 + 8 + 256 + 1 + SECRET_DIGEST + 2 + MAX_FIELDS + 4,
    history::MAX_PAYLOAD,
);

mod grant;
mod history;
pub use grant::{Ownership, OwnershipRef};
use grant::{TAG_GRANT, TAG_GRANT_EXPIRING, TAG_GRANT_FIELDS, TAG_GRANT_OWNED, TAG_GRANT_SLOT};
pub use history::is_history;
use history::{max, TAG_HISTORY};

/// The longest field list a Grant keeps (docs/request-fields.md).
pub const MAX_FIELDS: usize = 1024;

/// The bytes of a session hold's secret digest.
pub const SECRET_DIGEST: usize = 16;

const TAG_GRANT_V1: u8 = 1;
const TAG_RELEASE_ALL: u8 = 2;
const TAG_GRANT_V2: u8 = 3;
const TAG_FLOOR: u8 = 4;
const TAG_RELEASE: u8 = 6;
const TAG_MARK: u8 = 10;

/// Whether a framed record (a valid one) is a Mark.
pub fn is_mark(frame: &[u8]) -> bool {
    frame.get(HEADER) == Some(&TAG_MARK)
}

/// One change to the table of held keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// `key` is now held by `source` (connected from `peer`, as text).
    Grant {
        key: Vec<u8>,
        source: Vec<u8>,
        peer: Vec<u8>,
        since_ms: u64,
        /// The grant's fencing token (0 in a version 1 log).
        token: u64,
        /// A session hold (released when its holder is not heard from).
        session: bool,
        /// Exclusive (then the key's only hold), shared or limited.
        mode: LockMode,
        /// A kept hold released at this wall-clock deadline (ms since the
        /// epoch); written as tag 7, None as tag 5.
        expires_ms: Option<u64>,
        /// Whose it is: with one, written as tag 8.
        ownership: Ownership,
    },
    /// The hold of `key` under `token` ended; with no token (logs of
    /// earlier versions), every hold of `key`.
    Release { key: Vec<u8>, token: Option<u64> },
    /// Every token given so far is at most `token`.
    Floor { token: u64 },
    /// The key's mark is now `mark` (None: cleared).
    Mark { key: Vec<u8>, mark: Option<u64> },
    /// An ended hold of `key` (`history.rs`).
    History {
        key: Vec<u8>,
        keep: u32,
        owner: u64,
        entry: Vec<u8>,
    },
}

impl Record {
    /// The key the record is about (none for a Floor).
    pub fn key(&self) -> &[u8] {
        match self {
            Record::Grant { key, .. }
            | Record::Release { key, .. }
            | Record::Mark { key, .. }
            | Record::History { key, .. } => key,
            Record::Floor { .. } => &[],
        }
    }

    /// Appends the framed record to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        self.borrowed().encode_into(out)
    }

    pub fn encode(&self) -> Vec<u8> {
        self.borrowed().encode()
    }
}

/// A record read in place ([`decode_ref`]): the fields of [`Record`],
/// borrowed from the bytes it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordRef<'a> {
    Grant {
        key: &'a [u8],
        source: &'a [u8],
        peer: &'a [u8],
        since_ms: u64,
        token: u64,
        session: bool,
        mode: LockMode,
        expires_ms: Option<u64>,
        ownership: OwnershipRef<'a>,
    },
    Release {
        key: &'a [u8],
        token: Option<u64>,
    },
    Floor {
        token: u64,
    },
    Mark {
        key: &'a [u8],
        mark: Option<u64>,
    },
    History {
        key: &'a [u8],
        keep: u32,
        owner: u64,
        entry: &'a [u8],
    },
}

impl RecordRef<'_> {
    /// The key the record is about (none for a Floor).
    pub fn key(&self) -> &[u8] {
        match self {
            RecordRef::Grant { key, .. }
            | RecordRef::Release { key, .. }
            | RecordRef::Mark { key, .. }
            | RecordRef::History { key, .. } => key,
            RecordRef::Floor { .. } => &[],
        }
    }

    /// Appends the framed record to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER]);
        match *self {
            RecordRef::Grant {
                key,
                source,
                peer,
                since_ms,
                token,
                session,
                mode,
                expires_ms,
                ownership,
            } => {
                let tag = grant::tag(&ownership, expires_ms);
                out.push(tag);
                for field in [key, source, peer] {
                    let field = &field[..field.len().min(255)];
                    out.push(field.len() as u8);
                    out.extend_from_slice(field);
                }
                out.extend_from_slice(&since_ms.to_le_bytes());
                out.extend_from_slice(&token.to_le_bytes());
                out.push(u8::from(session));
                out.extend_from_slice(&mode.word().to_le_bytes());
                grant::encode_tail(out, tag, expires_ms, &ownership);
            }
            RecordRef::History {
                key,
                keep,
                owner,
                entry,
            } => history::encode_into(out, key, keep, owner, entry),
            RecordRef::Floor { token } => {
                out.push(TAG_FLOOR);
                out.extend_from_slice(&token.to_le_bytes());
            }
            RecordRef::Mark { key, mark } => {
                let key = &key[..key.len().min(255)];
                out.push(TAG_MARK);
                out.push(key.len() as u8);
                out.extend_from_slice(key);
                out.push(u8::from(mark.is_some()));
                out.extend_from_slice(&mark.unwrap_or(0).to_le_bytes());
            }
            RecordRef::Release { key, token } => {
                let key = &key[..key.len().min(255)];
                out.push(if token.is_some() {
                    TAG_RELEASE
                } else {
                    TAG_RELEASE_ALL
                });
                out.push(key.len() as u8);
                out.extend_from_slice(key);
                if let Some(token) = token {
                    out.extend_from_slice(&token.to_le_bytes());
                }
            }
        }
        let len = (out.len() - start - HEADER) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        let crc = checksum(&out[start..start + 4], &out[start + HEADER..]);
        out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    pub fn to_owned(&self) -> Record {
        match *self {
            RecordRef::Grant {
                key,
                source,
                peer,
                since_ms,
                token,
                session,
                mode,
                expires_ms,
                ownership,
            } => Record::Grant {
                key: key.to_vec(),
                source: source.to_vec(),
                peer: peer.to_vec(),
                since_ms,
                token,
                session,
                mode,
                expires_ms,
                ownership: ownership.to_owned(),
            },
            RecordRef::Release { key, token } => Record::Release {
                key: key.to_vec(),
                token,
            },
            RecordRef::Floor { token } => Record::Floor { token },
            RecordRef::Mark { key, mark } => Record::Mark {
                key: key.to_vec(),
                mark,
            },
            RecordRef::History {
                key,
                keep,
                owner,
                entry,
            } => {
                let (key, entry) = (key.to_vec(), entry.to_vec());
                Record::History {
                    key,
                    keep,
                    owner,
                    entry,
                }
            }
        }
    }
}

impl Record {
    /// The record, borrowed field by field.
    pub fn borrowed(&self) -> RecordRef<'_> {
        match self {
            Record::Grant {
                key,
                source,
                peer,
                since_ms,
                token,
                session,
                mode,
                expires_ms,
                ownership,
            } => RecordRef::Grant {
                key,
                source,
                peer,
                since_ms: *since_ms,
                token: *token,
                session: *session,
                mode: *mode,
                expires_ms: *expires_ms,
                ownership: ownership.borrowed(),
            },
            Record::Release { key, token } => RecordRef::Release { key, token: *token },
            Record::Floor { token } => RecordRef::Floor { token: *token },
            Record::Mark { key, mark } => RecordRef::Mark { key, mark: *mark },
            Record::History {
                key,
                keep,
                owner,
                entry,
            } => RecordRef::History {
                key,
                keep: *keep,
                owner: *owner,
                entry,
            },
        }
    }
}

/// Whether the framed record at the start of `frame` (a valid one) is in
/// this build's format, so that encoding it again gives the same bytes.
pub fn is_current(frame: &[u8]) -> bool {
    matches!(
        frame.get(HEADER),
        Some(
            &(TAG_GRANT
                | TAG_GRANT_EXPIRING
                | TAG_GRANT_OWNED
                | TAG_GRANT_FIELDS
                | TAG_GRANT_SLOT
                | TAG_RELEASE
                | TAG_FLOOR
                | TAG_MARK
                | TAG_HISTORY)
        )
    )
}

fn checksum(len: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(len), payload)
}

/// What is at one offset of a log: the record owned ([`decode`]) or read
/// in place ([`decode_ref`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Next<R = Record> {
    /// A whole, valid record and its framed length.
    Record(R, usize),
    /// The buffer ends inside a record (or is empty): a torn tail.
    Incomplete,
    /// A whole record that is not valid.
    Corrupt(&'static str),
}

/// Decodes the record at the start of `buf`.
pub fn decode(buf: &[u8]) -> Next {
    match decode_ref(buf) {
        Next::Record(record, used) => Next::Record(record.to_owned(), used),
        Next::Incomplete => Next::Incomplete,
        Next::Corrupt(reason) => Next::Corrupt(reason),
    }
}

/// Decodes the record at the start of `buf` in place: its fields borrow
/// `buf` (no allocation; what a replay of a million records needs).
pub fn decode_ref(buf: &[u8]) -> Next<RecordRef<'_>> {
    if buf.len() < HEADER {
        return Next::Incomplete;
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
    if len == 0 || len > MAX_PAYLOAD {
        return Next::Corrupt("impossible record length");
    }
    let Some(payload) = buf.get(HEADER..HEADER + len) else {
        return Next::Incomplete;
    };
    let crc = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    if checksum(&buf[0..4], payload) != crc {
        return Next::Corrupt("checksum mismatch");
    }
    match parse(payload) {
        Some(record) => Next::Record(record, HEADER + len),
        None => Next::Corrupt("unreadable payload"),
    }
}

fn parse(payload: &[u8]) -> Option<RecordRef<'_>> {
    let (&tag, rest) = payload.split_first()?;
    let mut cur = rest;
    let mut field = || -> Option<&[u8]> {
        let (&n, rest) = cur.split_first()?;
        let bytes = rest.get(..n as usize)?;
        cur = &rest[n as usize..];
        Some(bytes)
    };
    let record = match tag {
        TAG_GRANT_V1 | TAG_GRANT_V2 | TAG_GRANT | TAG_GRANT_EXPIRING | TAG_GRANT_OWNED
        | TAG_GRANT_FIELDS | TAG_GRANT_SLOT => {
            let key = field()?;
            let source = field()?;
            let peer = field()?;
            let mut expires_ms = None;
            let mut ownership = OwnershipRef::default();
            if matches!(tag, TAG_GRANT_OWNED | TAG_GRANT_FIELDS | TAG_GRANT_SLOT) {
                let (fixed, at, owned) = grant::parse_owned(tag, cur)?;
                (cur, expires_ms, ownership) = (fixed, at, owned);
            }
            let (since, token, session, mode) = match (tag, cur.len()) {
                (TAG_GRANT_V1, 8) => (&cur[..8], [0; 8], 0, LockMode::Exclusive),
                (TAG_GRANT_V2, 17) => (
                    &cur[..8],
                    cur[8..16].try_into().ok()?,
                    cur[16],
                    LockMode::Exclusive,
                ),
                (TAG_GRANT | TAG_GRANT_OWNED | TAG_GRANT_FIELDS | TAG_GRANT_SLOT, 21) => (
                    &cur[..8],
                    cur[8..16].try_into().ok()?,
                    cur[16],
                    LockMode::from_word(u32::from_le_bytes(cur[17..].try_into().ok()?)),
                ),
                (TAG_GRANT_EXPIRING, 29) => {
                    expires_ms = Some(u64::from_le_bytes(cur[21..].try_into().ok()?));
                    (
                        &cur[..8],
                        cur[8..16].try_into().ok()?,
                        cur[16],
                        LockMode::from_word(u32::from_le_bytes(cur[17..21].try_into().ok()?)),
                    )
                }
                _ => return None,
            };
            if session > 1 {
                return None;
            }
            RecordRef::Grant {
                key,
                source,
                peer,
                since_ms: u64::from_le_bytes(since.try_into().ok()?),
                token: u64::from_le_bytes(token),
                session: session == 1,
                mode,
                expires_ms,
                ownership,
            }
        }
        TAG_FLOOR => {
            let token: [u8; 8] = rest.try_into().ok()?;
            return Some(RecordRef::Floor {
                token: u64::from_le_bytes(token),
            });
        }
        TAG_HISTORY => return history::parse(rest),
        TAG_MARK => {
            let key = field()?;
            let (&set, mark) = cur.split_first()?;
            let mark = u64::from_le_bytes(mark.try_into().ok()?);
            let mark = match set {
                0 => None,
                1 => Some(mark),
                _ => return None,
            };
            RecordRef::Mark { key, mark }
        }
        TAG_RELEASE_ALL | TAG_RELEASE => {
            let key = field()?;
            let token = match (tag, cur.len()) {
                (TAG_RELEASE_ALL, 0) => None,
                (TAG_RELEASE, 8) => Some(u64::from_le_bytes(cur.try_into().ok()?)),
                _ => return None,
            };
            RecordRef::Release { key, token }
        }
        _ => return None,
    };
    if record.key().is_empty() {
        return None;
    }
    Some(record)
}

#[cfg(test)]
mod tests;
