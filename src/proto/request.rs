//! The requests of the one-byte protocol: one variant per action family,
//! with what the action number encodes as fields; decoded and encoded here.

use std::fmt;

use super::answer::ReleaseKind;
use super::*;
use crate::mode::LockMode;

/// What a lock request's grant is (and so which answers it has).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The reference's Lock and TryLock (1, 5): exclusive, kept until an
    /// Unlock; `+` granted, `-` anything else.
    Classic,
    /// Held as long as the holder is heard from (8, 9, 12, 13): `=` with the
    /// token and the session timeout, `!` refused, `~` a mode conflict.
    Session,
    /// Kept until an Unlock, in a mode (14, 15): `=` with the token and a
    /// timeout of 0, `!` refused, `~` a mode conflict.
    Kept,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// Actions 1, 5, 8, 9 and 12 to 15.
    Lock {
        key: Vec<u8>,
        source: Vec<u8>,
        /// Always exclusive for a classic hold; a session hold in another
        /// mode is sent as 12, 13 (exclusive: 8, 9).
        mode: LockMode,
        hold: Hold,
        /// Wait in line (1, 8, 12, 14), else only if free now (5, 9, 13, 15).
        wait: bool,
    },
    /// Actions 2, 6 and 11: the same release, answered as `kind` says.
    /// A SessionRelease may say how the hold's command ended (`ended`, on
    /// a connection that took the feature `queues`): its token field is
    /// then 20 bytes, `[token:u64be][status:i32be][order:u64be]`.
    Release {
        key: Vec<u8>,
        kind: ReleaseKind,
        ended: Option<Ended>,
    },
    /// Takes a session hold back on a new connection (10), showing the
    /// hold's secret if its grant carried one.
    Reclaim {
        key: Vec<u8>,
        token: u64,
        secret: Option<[u8; SECRET_LEN]>,
    },
    ResetByKey {
        key: Vec<u8>,
    },
    ResetBySource {
        source: Vec<u8>,
    },
    /// A kept hold in a mode that the server releases `ttl_ms` after its
    /// grant (18, `lock KEY --expire`), waiting in line or only trying;
    /// answered as a kept hold (14, 15). A variant of its own, not a `Hold`,
    /// so the requests every waiter keeps stay as small as before.
    ExpiringLock {
        key: Vec<u8>,
        source: Vec<u8>,
        mode: LockMode,
        ttl_ms: u64,
        wait: bool,
    },
    /// Are you a Locking-Center server? (7)
    Ping,
    /// Who are you? (16): the client's version and a token, either empty.
    Hello {
        client: Vec<u8>,
        token: Vec<u8>,
    },
    /// Who holds and waits (17): one key, or every key when `key` is
    /// empty; its waiters too with `waiters`. Answered with a listing
    /// ([`super::listing`]).
    Keys {
        key: Vec<u8>,
        waiters: bool,
        /// Flags bit 1: the holds' and waiters' field lists and the keys'
        /// marks too (a listing of version 2).
        fields: bool,
        /// Flags bit 2: `key` is a prefix: every key that starts with it
        /// (a listing that opens with a prefix record, so a client can tell
        /// a server before it, which lists the one key named so).
        prefix: bool,
    },
    /// A lock request with a field list (19): `lock` is a [`Request::Lock`]
    /// of lc-cli's (not a classic one) or a [`Request::ExpiringLock`].
    Extended {
        lock: Box<Request>,
        fields: Vec<u8>,
    },
    /// A key's mark (20): read, or cleared with `clear`.
    Mark {
        key: Vec<u8>,
        clear: bool,
    },
    /// A key's last `limit` ended holds (21), newest first.
    History {
        key: Vec<u8>,
        limit: u32,
    },
}

/// How a hold's command ended, as its SessionRelease tells it: its exit
/// status, and its `--order` (the server raises the key's mark to it when
/// the status is 0; [`NO_ORDER`] on the wire when there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub status: i32,
    pub order: Option<u64>,
    /// `--hold-at-least` (the feature `keep`): instead of releasing it,
    /// keep the hold this many ms from now as a kept hold that expires.
    pub keep_ms: Option<u64>,
}

/// The order field of an [`Ended`] without an order.
pub(crate) const NO_ORDER: u64 = u64::MAX;

/// The longest field list (docs/request-fields.md).
pub(crate) const MAX_FIELDS: usize = 1024;

/// The bytes of a SessionRelease's token field that says how the command
/// ended: token, status, order.
const ENDED_TOKEN_FIELD: usize = 8 + 4 + 8;

/// The bytes of a SessionRelease's token field that also asks the hold
/// kept for a while (the feature `keep`).
const KEEP_TOKEN_FIELD: usize = ENDED_TOKEN_FIELD + 8;

/// The bits of Keys' flags field (its first byte; a missing field or byte
/// is 0, unknown bits are ignored).
pub(crate) const KEYS_WITH_WAITERS: u8 = 1;
/// Keys' flags bit 1: field lists and marks (version 2 of the listing).
pub(crate) const KEYS_WITH_FIELDS: u8 = 2;
/// Keys' flags bit 2: the key field is a prefix (`keys 'deploy/*'`).
pub(crate) const KEYS_BY_PREFIX: u8 = 4;

impl Request {
    /// The action byte this request is sent as.
    pub(crate) fn action(&self) -> u8 {
        match self {
            Request::Lock {
                mode, hold, wait, ..
            } => match (hold, mode, wait) {
                (Hold::Classic, _, true) => ACTION_LOCK,
                (Hold::Classic, _, false) => ACTION_TRY_LOCK,
                (Hold::Session, LockMode::Exclusive, true) => ACTION_SESSION_LOCK,
                (Hold::Session, LockMode::Exclusive, false) => ACTION_SESSION_TRY_LOCK,
                (Hold::Session, _, true) => ACTION_MODE_SESSION_LOCK,
                (Hold::Session, _, false) => ACTION_MODE_SESSION_TRY_LOCK,
                (Hold::Kept, _, true) => ACTION_MODE_LOCK,
                (Hold::Kept, _, false) => ACTION_MODE_TRY_LOCK,
            },
            Request::ExpiringLock { .. } => ACTION_EXPIRING_LOCK,
            Request::Release { kind, .. } => match kind {
                ReleaseKind::Unlock => ACTION_UNLOCK,
                ReleaseKind::Release => ACTION_RELEASE,
                ReleaseKind::Token(_) => ACTION_SESSION_RELEASE,
            },
            Request::Reclaim { .. } => ACTION_RECLAIM,
            Request::ResetByKey { .. } => ACTION_RESET_BY_KEY,
            Request::ResetBySource { .. } => ACTION_RESET_BY_SOURCE,
            Request::Ping => ACTION_PING,
            Request::Hello { .. } => ACTION_HELLO,
            Request::Keys { .. } => ACTION_KEYS,
            Request::Extended { .. } => ACTION_EXTENDED_LOCK,
            Request::Mark { .. } => ACTION_MARK,
            Request::History { .. } => ACTION_HISTORY,
        }
    }

    /// lc-cli's own actions, which a reference server answers `-`: every
    /// action numbered after the reference's five.
    pub(crate) fn is_extension(&self) -> bool {
        self.action() > LAST_REFERENCE_ACTION
    }
}

/// Decoding needs more bytes: a normal case, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// A whole request, and how many bytes of the buffer it used.
    Frame(Request, usize),
    Incomplete,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    UnknownAction(u8),
    /// A size byte with the sign bit set (0x80 and above).
    NegativeSize(u8),
    EmptyKey,
    /// A token field that is not 8 bytes (or, in a Reclaim, 24: the token
    /// and the hold's secret).
    BadToken(u8),
    /// A mode field that is not 4 bytes.
    BadMode(u8),
    /// A TTL field that is not 8 bytes, or a wait flag not 1 byte of 0 or 1.
    BadExpiry(u8),
    /// An ExtendedLock around a frame that is not one of lc-cli's locks,
    /// or with a field list over [`MAX_FIELDS`] bytes.
    BadExtended,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::UnknownAction(a) => write!(f, "unknown action {a}"),
            FrameError::NegativeSize(s) => write!(f, "negative size byte 0x{s:02x}"),
            FrameError::EmptyKey => write!(f, "empty key"),
            FrameError::BadToken(n) => write!(f, "a token of {n} byte(s), not 8"),
            FrameError::BadMode(n) => write!(f, "a mode of {n} byte(s), not 4"),
            FrameError::BadExtended => write!(
                f,
                "an extended lock around no lock of lc-cli's, or with a field list over {MAX_FIELDS} bytes"
            ),
            FrameError::BadExpiry(n) => {
                write!(
                    f,
                    "an expiry field of {n} byte(s) (a TTL is 8, a wait flag 1)"
                )
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// `?` for a field the buffer does not hold yet: the frame is incomplete.
macro_rules! need {
    ($field:expr) => {
        match $field? {
            Some(v) => v,
            None => return Ok(Decoded::Incomplete),
        }
    };
}

/// Decodes one request from the start of `buf`. Bytes after a complete frame
/// are left alone (some clients append a source to Unlock; the caller ignores
/// them).
pub(crate) fn decode(buf: &[u8]) -> Result<Decoded, FrameError> {
    let Some(&action) = buf.first() else {
        return Ok(Decoded::Incomplete);
    };
    let mut cur = Cursor { buf, pos: 1 };
    let lock = |key, source, mode, hold, wait| Request::Lock {
        key,
        source,
        mode,
        hold,
        wait,
    };
    let request = match action {
        ACTION_LOCK | ACTION_TRY_LOCK | ACTION_SESSION_LOCK | ACTION_SESSION_TRY_LOCK => {
            let key = need!(cur.key());
            let source = need!(cur.field());
            let hold = match action {
                ACTION_LOCK | ACTION_TRY_LOCK => Hold::Classic,
                _ => Hold::Session,
            };
            let wait = matches!(action, ACTION_LOCK | ACTION_SESSION_LOCK);
            lock(key, source, LockMode::Exclusive, hold, wait)
        }
        ACTION_MODE_SESSION_LOCK..=ACTION_MODE_TRY_LOCK => {
            let key = need!(cur.key());
            let source = need!(cur.field());
            let mode = need!(cur.mode());
            let hold = match action {
                ACTION_MODE_SESSION_LOCK | ACTION_MODE_SESSION_TRY_LOCK => Hold::Session,
                _ => Hold::Kept,
            };
            let wait = matches!(action, ACTION_MODE_SESSION_LOCK | ACTION_MODE_LOCK);
            lock(key, source, mode, hold, wait)
        }
        ACTION_EXPIRING_LOCK => {
            let key = need!(cur.key());
            let source = need!(cur.field());
            let mode = need!(cur.mode());
            let ttl = need!(cur.token().map_err(|e| match e {
                FrameError::BadToken(n) => FrameError::BadExpiry(n),
                e => e,
            }));
            let wait = need!(cur.flag());
            Request::ExpiringLock {
                key,
                source,
                mode,
                ttl_ms: ttl,
                wait,
            }
        }
        ACTION_UNLOCK | ACTION_RELEASE => {
            let key = need!(cur.key());
            let kind = match action {
                ACTION_UNLOCK => ReleaseKind::Unlock,
                _ => ReleaseKind::Release,
            };
            Request::Release {
                key,
                kind,
                ended: None,
            }
        }
        ACTION_SESSION_RELEASE => {
            let key = need!(cur.key());
            let (token, ended) = need!(cur.token_and_end());
            Request::Release {
                key,
                kind: ReleaseKind::Token(token),
                ended,
            }
        }
        ACTION_EXTENDED_LOCK => {
            let inner = match decode(&buf[1..]) {
                Ok(Decoded::Frame(lock, used)) => {
                    cur.pos += used;
                    lock
                }
                Ok(Decoded::Incomplete) => return Ok(Decoded::Incomplete),
                Err(FrameError::UnknownAction(_)) => return Err(FrameError::BadExtended),
                Err(e) => return Err(e),
            };
            match &inner {
                Request::Lock { hold, .. } if *hold != Hold::Classic => {}
                Request::ExpiringLock { .. } => {}
                _ => return Err(FrameError::BadExtended),
            }
            let fields = need!(cur.long_field());
            Request::Extended {
                lock: Box::new(inner),
                fields,
            }
        }
        ACTION_MARK => {
            let key = need!(cur.key());
            let clear = need!(cur.flag());
            Request::Mark { key, clear }
        }
        ACTION_HISTORY => {
            let key = need!(cur.key());
            let limit = need!(cur.field());
            let limit = <[u8; 4]>::try_from(&limit[..])
                .map_err(|_| FrameError::BadToken(limit.len() as u8))?;
            Request::History {
                key,
                limit: u32::from_be_bytes(limit),
            }
        }
        ACTION_RECLAIM => {
            let key = need!(cur.key());
            let (token, secret) = need!(cur.token_and_secret());
            Request::Reclaim { key, token, secret }
        }
        ACTION_RESET_BY_KEY => Request::ResetByKey {
            key: need!(cur.key()),
        },
        ACTION_RESET_BY_SOURCE => Request::ResetBySource {
            source: need!(cur.field()),
        },
        ACTION_PING => {
            need!(cur.key());
            need!(cur.field());
            Request::Ping
        }
        ACTION_HELLO => {
            let client = need!(cur.field());
            let token = need!(cur.field());
            Request::Hello { client, token }
        }
        ACTION_KEYS => {
            let key = need!(cur.field());
            let flags = need!(cur.field());
            let bits = flags.first().copied().unwrap_or(0);
            Request::Keys {
                key,
                waiters: bits & KEYS_WITH_WAITERS != 0,
                fields: bits & KEYS_WITH_FIELDS != 0,
                prefix: bits & KEYS_BY_PREFIX != 0,
            }
        }
        // Unknown: `-`, as the reference answers an action it does not know.
        other => return Err(FrameError::UnknownAction(other)),
    };
    Ok(Decoded::Frame(request, cur.pos))
}

/// A Reclaim's token and, if it shows one, the hold's secret.
type TokenAndSecret = (u64, Option<[u8; SECRET_LEN]>);

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// A size-prefixed field; `None` when the buffer ends inside it.
    fn field(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(&size) = self.buf.get(self.pos) else {
            return Ok(None);
        };
        if size > MAX_FIELD as u8 {
            return Err(FrameError::NegativeSize(size));
        }
        let start = self.pos + 1;
        let end = start + size as usize;
        let Some(bytes) = self.buf.get(start..end) else {
            return Ok(None);
        };
        self.pos = end;
        Ok(Some(bytes.to_vec()))
    }

    fn key(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        // An empty key is refused as soon as its size byte arrives.
        if self.buf.get(self.pos) == Some(&0) {
            return Err(FrameError::EmptyKey);
        }
        self.field()
    }

    fn mode(&mut self) -> Result<Option<LockMode>, FrameError> {
        match self.buf.get(self.pos) {
            Some(&n) if n != 4 => Err(FrameError::BadMode(n)),
            _ => Ok(self
                .field()?
                .map(|b| LockMode::from_word(u32::from_be_bytes(b.try_into().unwrap())))),
        }
    }

    /// A one-byte field of 0 or 1.
    fn flag(&mut self) -> Result<Option<bool>, FrameError> {
        match self.buf.get(self.pos) {
            Some(&n) if n != 1 => Err(FrameError::BadExpiry(n)),
            _ => match self.field()? {
                None => Ok(None),
                Some(b) if b[0] <= 1 => Ok(Some(b[0] == 1)),
                Some(b) => Err(FrameError::BadExpiry(b[0])),
            },
        }
    }

    /// A Reclaim's field: the token (8 bytes), or the token and the hold's
    /// secret (8 + 16).
    fn token_and_secret(&mut self) -> Result<Option<TokenAndSecret>, FrameError> {
        match self.buf.get(self.pos) {
            Some(&n) if n as usize != 8 && n as usize != 8 + SECRET_LEN => {
                Err(FrameError::BadToken(n))
            }
            _ => Ok(self.field()?.map(|b| {
                let token = u64::from_be_bytes(b[..8].try_into().unwrap());
                (token, b[8..].try_into().ok())
            })),
        }
    }

    /// A field list: `[len:u16be][bytes]`, at most [`MAX_FIELDS`].
    fn long_field(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let Some(len) = self.buf.get(self.pos..self.pos + 2) else {
            return Ok(None);
        };
        let len = u16::from_be_bytes([len[0], len[1]]) as usize;
        if len > MAX_FIELDS {
            return Err(FrameError::BadExtended);
        }
        let start = self.pos + 2;
        let Some(bytes) = self.buf.get(start..start + len) else {
            return Ok(None);
        };
        self.pos = start + len;
        Ok(Some(bytes.to_vec()))
    }

    /// A SessionRelease's field: the token (8 bytes), or the token, the
    /// command's status and its order (20).
    fn token_and_end(&mut self) -> Result<Option<(u64, Option<Ended>)>, FrameError> {
        match self.buf.get(self.pos) {
            Some(&n)
                if n != 8 && n as usize != ENDED_TOKEN_FIELD && n as usize != KEEP_TOKEN_FIELD =>
            {
                Err(FrameError::BadToken(n))
            }
            _ => Ok(self.field()?.map(|b| {
                let token = u64::from_be_bytes(b[..8].try_into().unwrap());
                let ended = (b.len() >= ENDED_TOKEN_FIELD).then(|| {
                    let order = u64::from_be_bytes(b[12..20].try_into().unwrap());
                    Ended {
                        status: i32::from_be_bytes(b[8..12].try_into().unwrap()),
                        order: (order != NO_ORDER).then_some(order),
                        keep_ms: (b.len() == KEEP_TOKEN_FIELD)
                            .then(|| u64::from_be_bytes(b[20..28].try_into().unwrap())),
                    }
                });
                (token, ended)
            })),
        }
    }

    fn token(&mut self) -> Result<Option<u64>, FrameError> {
        match self.buf.get(self.pos) {
            Some(&n) if n != 8 => Err(FrameError::BadToken(n)),
            _ => Ok(self
                .field()?
                .map(|b| u64::from_be_bytes(b.try_into().unwrap()))),
        }
    }
}

mod encode;
pub(crate) use encode::*;

#[cfg(test)]
mod tests;
