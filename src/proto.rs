//! The Locking-Center one-byte protocol: frames in, values out, no I/O.
//! The manager port's codec is [`manager`].
//!
//! One request per TCP connection, one answer byte back:
//!
//! | action | frame                                   |
//! |--------|-----------------------------------------|
//! | Lock          | `[1][keySize][key][sourceSize][source]` |
//! | Unlock        | `[2][keySize][key]`                     |
//! | ResetByKey    | `[3][keySize][key]`                     |
//! | ResetBySource | `[4][sourceSize][source]`               |
//! | TryLock       | `[5][keySize][key][sourceSize][source]` |
//! | Release       | `[6][keySize][key]` (lc-cli extension)  |
//! | Ping          | `[7][keySize][key][sourceSize][source]` (lc-cli extension) |
//! | SessionLock    | `[8][keySize][key][sourceSize][source]` (lc-cli extension) |
//! | SessionTryLock | `[9][keySize][key][sourceSize][source]` (lc-cli extension) |
//! | Reclaim        | `[10][keySize][key][8][token:u64be]` (lc-cli extension) |
//! | SessionRelease | `[11][keySize][key][8][token:u64be]` (lc-cli extension) |
//! | ModeSessionLock    | `[12][keySize][key][sourceSize][source][4][mode:u32be]` (lc-cli extension) |
//! | ModeSessionTryLock | `[13]` as 12 (lc-cli extension) |
//! | ModeLock           | `[14]` as 12 (lc-cli extension) |
//! | ModeTryLock        | `[15]` as 12 (lc-cli extension) |
//!
//! Actions 12 to 15 lock in a mode: 0 shared, 1 exclusive, N (2 and more)
//! at most N holders (`--limit N`). 12 and 13 are session holds, answered as
//! 8 and 9 are; 14 and 15 are kept holds (until an Unlock), granted `=` with
//! their token and a timeout of 0 (a client that gives its hold back, or
//! withdraws, releases it under its token: a plain Unlock of a shared key
//! ends its oldest kept hold, maybe someone else's). All
//! four answer `#` (a try found the key taken), `!` (withdrawn: a reset by
//! source, or the grant could not be logged), or `~` and the key's mode as a
//! u32be (the key is held or waited for in a mode this request cannot
//! join). Their `-` is only ever a server that does not know them (a
//! reference server): the client then says the server cannot take shared
//! or limited locks. Actions 8 and 9 answer `~` too, for an exclusive
//! request on a `--limit N` key; actions 1 and 5, the reference's, `-`.
//!
//! Ping is an lc-cli extension: `lc-cli serve` answers `+` (and ignores the
//! key and source), a reference server `-` (an unknown action): one protocol
//! byte either way, so a client learns the peer speaks the protocol.
//! Sizes are one signed byte: a key is 1..=127 bytes, a source 0..=127.
//! Answers: `+` success, `-` failure, `#` a TryLock found the key held.
//!
//! Actions 1 to 5 are the 2021 reference server's, answered byte for byte as
//! it does; in particular Unlock answers `+` whether or not the key was held,
//! because the public clients retry Unlock until they read `+`.
//!
//! Release is lc-cli's own: the same frame as Unlock, with answers that tell
//! the cases apart: `+` released, `#` it was not held, `-` it could not be
//! released (the log could not record it; the key is still held). A
//! reference server answers `-` to an action it does not know, so a client
//! that reads `-` to a Release asks again with the classic Unlock, whose `-`
//! (from lc-cli's server: the release could not be recorded) also means "not
//! released". Against a reference server "not held" cannot be told from
//! "released".

use std::fmt;

use crate::mode::LockMode;

pub mod manager;

pub const MAX_FIELD: usize = 127;

pub const ACTION_LOCK: u8 = 1;
pub const ACTION_UNLOCK: u8 = 2;
pub const ACTION_RESET_BY_KEY: u8 = 3;
pub const ACTION_RESET_BY_SOURCE: u8 = 4;
pub const ACTION_TRY_LOCK: u8 = 5;
/// lc-cli's extension: Unlock that says whether the key was held.
pub const ACTION_RELEASE: u8 = 6;
pub const ACTION_PING: u8 = 7;
pub const ACTION_SESSION_LOCK: u8 = 8;
pub const ACTION_SESSION_TRY_LOCK: u8 = 9;
pub const ACTION_RECLAIM: u8 = 10;
pub const ACTION_SESSION_RELEASE: u8 = 11;
pub const ACTION_MODE_SESSION_LOCK: u8 = 12;
pub const ACTION_MODE_SESSION_TRY_LOCK: u8 = 13;
pub const ACTION_MODE_LOCK: u8 = 14;
pub const ACTION_MODE_TRY_LOCK: u8 = 15;
/// lc-cli's extension: `[16][len][client version][len][token]`, both fields
/// may be empty; answered `+[len][server version]`. The token field is
/// where issue 22's token goes: a server without tokens ignores it.
pub const ACTION_HELLO: u8 = 16;

/// `~` and the key's mode (u32be): the request's mode cannot join the key's.
pub const MODE_CONFLICT: u8 = b'~';
pub const MODE_CONFLICT_LEN: usize = 5;

/// The answer to a request whose mode the key's refuses.
pub fn mode_conflict(theirs: LockMode) -> [u8; MODE_CONFLICT_LEN] {
    let mut out = [0u8; MODE_CONFLICT_LEN];
    out[0] = MODE_CONFLICT;
    out[1..].copy_from_slice(&theirs.word().to_be_bytes());
    out
}

/// The key's mode in a whole conflict answer.
pub fn parse_mode_conflict(bytes: &[u8]) -> Option<LockMode> {
    if bytes.len() != MODE_CONFLICT_LEN || bytes[0] != MODE_CONFLICT {
        return None;
    }
    Some(LockMode::from_word(u32::from_be_bytes(
        bytes[1..].try_into().ok()?,
    )))
}

/// The session answers and heartbeat (see the module docs).
pub const SESSION_GRANTED: u8 = b'=';
pub const SESSION_LOST: u8 = b'!';
pub const HEARTBEAT: u8 = b'.';
/// `=`, token u64be, timeout ms u32be.
pub const SESSION_GRANT_LEN: usize = 13;

/// The answer to a session grant or reclaim.
pub fn session_grant(token: u64, timeout: std::time::Duration) -> [u8; SESSION_GRANT_LEN] {
    let mut out = [0u8; SESSION_GRANT_LEN];
    out[0] = SESSION_GRANTED;
    out[1..9].copy_from_slice(&token.to_be_bytes());
    let ms = timeout.as_millis().min(u32::MAX as u128) as u32;
    out[9..].copy_from_slice(&ms.to_be_bytes());
    out
}

/// The token and timeout of a whole session grant answer.
pub fn parse_session_grant(bytes: &[u8]) -> Option<(u64, std::time::Duration)> {
    if bytes.len() != SESSION_GRANT_LEN || bytes[0] != SESSION_GRANTED {
        return None;
    }
    let token = u64::from_be_bytes(bytes[1..9].try_into().ok()?);
    let ms = u32::from_be_bytes(bytes[9..].try_into().ok()?);
    Some((token, std::time::Duration::from_millis(u64::from(ms))))
}

/// The ping as lc-cli sends it. Its key is CR LF, so a line-based server
/// (Redis, HTTP) sees a whole line and answers with text, which tells it
/// apart at once from one that stays silent.
pub const PING_FRAME: [u8; 5] = [ACTION_PING, 2, b'\r', b'\n', 0];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Lock {
        key: Vec<u8>,
        source: Vec<u8>,
    },
    Unlock {
        key: Vec<u8>,
    },
    ResetByKey {
        key: Vec<u8>,
    },
    ResetBySource {
        source: Vec<u8>,
    },
    TryLock {
        key: Vec<u8>,
        source: Vec<u8>,
    },
    Release {
        key: Vec<u8>,
    },
    /// Are you a Locking-Center server? (lc-cli extension)
    Ping,
    /// Lock, held as long as the holder is heard from (lc-cli extension).
    SessionLock {
        key: Vec<u8>,
        source: Vec<u8>,
    },
    SessionTryLock {
        key: Vec<u8>,
        source: Vec<u8>,
    },
    /// Takes a session hold back on a new connection.
    Reclaim {
        key: Vec<u8>,
        token: u64,
    },
    /// Releases the key only if it is held under `token`.
    SessionRelease {
        key: Vec<u8>,
        token: u64,
    },
    /// Who are you? (lc-cli extension): the client's version and a token,
    /// either empty.
    Hello {
        client: Vec<u8>,
        token: Vec<u8>,
    },
    /// A lock in a mode (actions 12 to 15).
    ModeLock {
        key: Vec<u8>,
        source: Vec<u8>,
        mode: LockMode,
        /// A session hold (12, 13), else a kept one (14, 15).
        session: bool,
        /// Only if free now (13, 15), else wait in line (12, 14).
        try_only: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `+`: done (the key is yours, released, reset).
    Ok,
    /// `-`: refused or failed.
    Fail,
    /// `#`: a TryLock found the key held by someone else; a Release found
    /// it not held.
    Busy,
}

impl Answer {
    pub fn byte(self) -> u8 {
        match self {
            Answer::Ok => b'+',
            Answer::Fail => b'-',
            Answer::Busy => b'#',
        }
    }

    pub fn from_byte(b: u8) -> Option<Answer> {
        match b {
            b'+' => Some(Answer::Ok),
            b'-' => Some(Answer::Fail),
            b'#' => Some(Answer::Busy),
            _ => None,
        }
    }
}

/// Decoding needs more bytes: a normal case, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A whole request, and how many bytes of the buffer it used.
    Frame(Request, usize),
    Incomplete,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    UnknownAction(u8),
    /// A size byte with the sign bit set (0x80 and above).
    NegativeSize(u8),
    EmptyKey,
    /// A token field that is not 8 bytes.
    BadToken(u8),
    /// A mode field that is not 4 bytes.
    BadMode(u8),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::UnknownAction(a) => write!(f, "unknown action {a}"),
            FrameError::NegativeSize(s) => write!(f, "negative size byte 0x{s:02x}"),
            FrameError::EmptyKey => write!(f, "empty key"),
            FrameError::BadToken(n) => write!(f, "a token of {n} byte(s), not 8"),
            FrameError::BadMode(n) => write!(f, "a mode of {n} byte(s), not 4"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Decodes one request from the start of `buf`. Bytes after a complete frame
/// are left alone (some clients append a source to Unlock; the caller ignores
/// them).
pub fn decode(buf: &[u8]) -> Result<Decoded, FrameError> {
    let Some(&action) = buf.first() else {
        return Ok(Decoded::Incomplete);
    };
    let mut cur = Cursor { buf, pos: 1 };
    let request = match action {
        ACTION_LOCK | ACTION_TRY_LOCK | ACTION_SESSION_LOCK | ACTION_SESSION_TRY_LOCK => {
            let Some(key) = cur.key()? else {
                return Ok(Decoded::Incomplete);
            };
            let Some(source) = cur.field()? else {
                return Ok(Decoded::Incomplete);
            };
            match action {
                ACTION_LOCK => Request::Lock { key, source },
                ACTION_TRY_LOCK => Request::TryLock { key, source },
                ACTION_SESSION_LOCK => Request::SessionLock { key, source },
                _ => Request::SessionTryLock { key, source },
            }
        }
        ACTION_RECLAIM | ACTION_SESSION_RELEASE => {
            let Some(key) = cur.key()? else {
                return Ok(Decoded::Incomplete);
            };
            let Some(token) = cur.token()? else {
                return Ok(Decoded::Incomplete);
            };
            if action == ACTION_RECLAIM {
                Request::Reclaim { key, token }
            } else {
                Request::SessionRelease { key, token }
            }
        }
        ACTION_UNLOCK | ACTION_RESET_BY_KEY | ACTION_RELEASE => {
            let Some(key) = cur.key()? else {
                return Ok(Decoded::Incomplete);
            };
            match action {
                ACTION_UNLOCK => Request::Unlock { key },
                ACTION_RELEASE => Request::Release { key },
                _ => Request::ResetByKey { key },
            }
        }
        ACTION_RESET_BY_SOURCE => {
            let Some(source) = cur.field()? else {
                return Ok(Decoded::Incomplete);
            };
            Request::ResetBySource { source }
        }
        ACTION_PING => {
            let (Some(_), Some(_)) = (cur.key()?, cur.field()?) else {
                return Ok(Decoded::Incomplete);
            };
            Request::Ping
        }
        ACTION_HELLO => {
            let Some(client) = cur.field()? else {
                return Ok(Decoded::Incomplete);
            };
            let Some(token) = cur.field()? else {
                return Ok(Decoded::Incomplete);
            };
            Request::Hello { client, token }
        }
        ACTION_MODE_SESSION_LOCK..=ACTION_MODE_TRY_LOCK => {
            let Some(key) = cur.key()? else {
                return Ok(Decoded::Incomplete);
            };
            let Some(source) = cur.field()? else {
                return Ok(Decoded::Incomplete);
            };
            let Some(mode) = cur.mode()? else {
                return Ok(Decoded::Incomplete);
            };
            Request::ModeLock {
                key,
                source,
                mode,
                session: action <= ACTION_MODE_SESSION_TRY_LOCK,
                try_only: action == ACTION_MODE_SESSION_TRY_LOCK || action == ACTION_MODE_TRY_LOCK,
            }
        }
        // Unknown: `-`, as the reference answers an action it does not know.
        other => return Err(FrameError::UnknownAction(other)),
    };
    Ok(Decoded::Frame(request, cur.pos))
}

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

    fn token(&mut self) -> Result<Option<u64>, FrameError> {
        match self.buf.get(self.pos) {
            Some(&n) if n != 8 => Err(FrameError::BadToken(n)),
            _ => Ok(self
                .field()?
                .map(|b| u64::from_be_bytes(b.try_into().unwrap()))),
        }
    }
}

/// Why a request cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    EmptyKey,
    TooLong { what: &'static str, len: usize },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::EmptyKey => write!(f, "the key is empty"),
            EncodeError::TooLong { what, len } => {
                write!(
                    f,
                    "the {what} is {len} bytes long, at most {MAX_FIELD} are allowed"
                )
            }
        }
    }
}

impl std::error::Error for EncodeError {}

/// Checks a key the way the server will, so a client can refuse it before
/// opening any connection.
pub fn check_key(key: &[u8]) -> Result<(), EncodeError> {
    if key.is_empty() {
        return Err(EncodeError::EmptyKey);
    }
    check_len("key", key)
}

pub fn check_source(source: &[u8]) -> Result<(), EncodeError> {
    check_len("source", source)
}

fn check_len(what: &'static str, bytes: &[u8]) -> Result<(), EncodeError> {
    if bytes.len() > MAX_FIELD {
        return Err(EncodeError::TooLong {
            what,
            len: bytes.len(),
        });
    }
    Ok(())
}

/// Encodes a request exactly as the reference clients send it.
pub fn encode(request: &Request) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(3 + 2 * MAX_FIELD);
    match request {
        Request::Lock { key, source } | Request::TryLock { key, source } => {
            check_key(key)?;
            check_source(source)?;
            out.push(if matches!(request, Request::Lock { .. }) {
                ACTION_LOCK
            } else {
                ACTION_TRY_LOCK
            });
            push_field(&mut out, key);
            push_field(&mut out, source);
        }
        Request::Unlock { key } | Request::ResetByKey { key } | Request::Release { key } => {
            check_key(key)?;
            out.push(match request {
                Request::Unlock { .. } => ACTION_UNLOCK,
                Request::Release { .. } => ACTION_RELEASE,
                _ => ACTION_RESET_BY_KEY,
            });
            push_field(&mut out, key);
        }
        Request::ResetBySource { source } => {
            check_source(source)?;
            out.push(ACTION_RESET_BY_SOURCE);
            push_field(&mut out, source);
        }
        Request::Ping => out.extend_from_slice(&PING_FRAME),
        Request::Hello { client, token } => {
            check_len("client version", client)?;
            check_len("token", token)?;
            out.push(ACTION_HELLO);
            push_field(&mut out, client);
            push_field(&mut out, token);
        }
        Request::SessionLock { key, source } | Request::SessionTryLock { key, source } => {
            check_key(key)?;
            check_source(source)?;
            out.push(if matches!(request, Request::SessionLock { .. }) {
                ACTION_SESSION_LOCK
            } else {
                ACTION_SESSION_TRY_LOCK
            });
            push_field(&mut out, key);
            push_field(&mut out, source);
        }
        Request::Reclaim { key, token } | Request::SessionRelease { key, token } => {
            check_key(key)?;
            out.push(if matches!(request, Request::Reclaim { .. }) {
                ACTION_RECLAIM
            } else {
                ACTION_SESSION_RELEASE
            });
            push_field(&mut out, key);
            push_field(&mut out, &token.to_be_bytes());
        }
        Request::ModeLock {
            key,
            source,
            mode,
            session,
            try_only,
        } => {
            check_key(key)?;
            check_source(source)?;
            out.push(match (session, try_only) {
                (true, false) => ACTION_MODE_SESSION_LOCK,
                (true, true) => ACTION_MODE_SESSION_TRY_LOCK,
                (false, false) => ACTION_MODE_LOCK,
                (false, true) => ACTION_MODE_TRY_LOCK,
            });
            push_field(&mut out, key);
            push_field(&mut out, source);
            push_field(&mut out, &mode.word().to_be_bytes());
        }
    }
    Ok(out)
}

/// The answer to a Hello: `+` and the server's version, length-prefixed.
pub fn hello_answer(version: &[u8]) -> Vec<u8> {
    let version = &version[..version.len().min(MAX_FIELD)];
    let mut out = vec![Answer::Ok.byte()];
    push_field(&mut out, version);
    out
}

/// The server version in a Hello answer; None while it is incomplete or
/// when it is not one (a `-`, or bytes of another protocol).
pub fn parse_hello_answer(bytes: &[u8]) -> Option<Vec<u8>> {
    let (&b'+', rest) = bytes.split_first()? else {
        return None;
    };
    let (&len, version) = rest.split_first()?;
    (len as usize <= MAX_FIELD && version.len() == len as usize).then(|| version.to_vec())
}

fn push_field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(bytes.len() as u8);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn every_action_roundtrips() {
        roundtrip(Request::Lock {
            key: b"deploy/prod".to_vec(),
            source: b"ci-7".to_vec(),
        });
        roundtrip(Request::TryLock {
            key: b"k".to_vec(),
            source: vec![],
        });
        roundtrip(Request::Unlock {
            key: vec![b'x'; 127],
        });
        roundtrip(Request::ResetByKey { key: b"k".to_vec() });
        roundtrip(Request::ResetBySource { source: vec![] });
        roundtrip(Request::Ping);
        roundtrip(Request::Release { key: b"k".to_vec() });
        roundtrip(Request::SessionLock {
            key: b"k".to_vec(),
            source: b"s".to_vec(),
        });
        roundtrip(Request::SessionTryLock {
            key: b"k".to_vec(),
            source: vec![],
        });
        roundtrip(Request::Reclaim {
            key: b"k".to_vec(),
            token: 1 << 60,
        });
        roundtrip(Request::SessionRelease {
            key: b"k".to_vec(),
            token: 7,
        });
    }

    #[test]
    fn session_frames_and_answers() {
        let release = encode(&Request::SessionRelease {
            key: b"ab".to_vec(),
            token: 0x0102,
        })
        .unwrap();
        assert_eq!(release, [11, 2, b'a', b'b', 8, 0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(decode(&[10, 1, b'k', 7]), Err(FrameError::BadToken(7)));
        let grant = session_grant(42, std::time::Duration::from_secs(10));
        assert_eq!(grant[0], b'=');
        assert_eq!(
            parse_session_grant(&grant),
            Some((42, std::time::Duration::from_secs(10)))
        );
        assert_eq!(parse_session_grant(&grant[..12]), None);
        assert_eq!(
            decode(&[17, 1, b'k', 0]),
            Err(FrameError::UnknownAction(17))
        );
    }

    #[test]
    fn mode_frames_and_answers() {
        for (session, try_only, action) in [
            (true, false, 12),
            (true, true, 13),
            (false, false, 14),
            (false, true, 15),
        ] {
            let req = Request::ModeLock {
                key: b"k".to_vec(),
                source: b"s".to_vec(),
                mode: LockMode::limit(3),
                session,
                try_only,
            };
            assert_eq!(
                encode(&req).unwrap(),
                [action, 1, b'k', 1, b's', 4, 0, 0, 0, 3]
            );
            roundtrip(req);
        }
        roundtrip(Request::ModeLock {
            key: b"k".to_vec(),
            source: vec![],
            mode: LockMode::Shared,
            session: true,
            try_only: false,
        });
        assert_eq!(decode(&[12, 1, b'k', 0, 8]), Err(FrameError::BadMode(8)));
        let refused = mode_conflict(LockMode::limit(2));
        assert_eq!(refused, [b'~', 0, 0, 0, 2]);
        assert_eq!(parse_mode_conflict(&refused), Some(LockMode::limit(2)));
        assert_eq!(parse_mode_conflict(&refused[..4]), None);
    }

    #[test]
    fn frames_match_the_reference_layout() {
        let lock = encode(&Request::Lock {
            key: b"ab".to_vec(),
            source: b"s".to_vec(),
        })
        .unwrap();
        assert_eq!(lock, [1, 2, b'a', b'b', 1, b's']);
        let unlock = encode(&Request::Unlock {
            key: b"ab".to_vec(),
        })
        .unwrap();
        assert_eq!(unlock, [2, 2, b'a', b'b']);
        let rbs = encode(&Request::ResetBySource {
            source: b"h".to_vec(),
        })
        .unwrap();
        assert_eq!(rbs, [4, 1, b'h']);
        let release = encode(&Request::Release {
            key: b"ab".to_vec(),
        })
        .unwrap();
        assert_eq!(release, [6, 2, b'a', b'b']);
    }

    #[test]
    fn hello_frames_and_answers() {
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
        let answer = hello_answer(b"0.9.0");
        assert_eq!(answer, b"+\x050.9.0");
        assert_eq!(parse_hello_answer(&answer), Some(b"0.9.0".to_vec()));
        assert_eq!(parse_hello_answer(&answer[..4]), None);
        assert_eq!(parse_hello_answer(b"-"), None);
        assert_eq!(parse_hello_answer(b"+OK\r\n"), None);
    }

    #[test]
    fn bad_frames_are_errors() {
        assert_eq!(decode(&[17]), Err(FrameError::UnknownAction(17)));
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
            Ok(Decoded::Frame(Request::Unlock { key: b"k".to_vec() }, 3))
        );
    }

    #[test]
    fn encode_refuses_what_the_server_would() {
        assert_eq!(
            encode(&Request::Unlock { key: vec![] }),
            Err(EncodeError::EmptyKey)
        );
        assert!(encode(&Request::Lock {
            key: vec![1; 128],
            source: vec![]
        })
        .is_err());
        assert!(encode(&Request::Lock {
            key: vec![1],
            source: vec![1; 128]
        })
        .is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Decoded::Frame(req, used)) = decode(&bytes) {
                prop_assert!(used <= bytes.len());
                // Any key and source make a ping; the others encode back exactly.
                if req != Request::Ping {
                    prop_assert_eq!(encode(&req).unwrap(), bytes[..used].to_vec());
                }
            }
        }
    }
}
