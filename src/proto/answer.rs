//! The answers of the one-byte protocol: one byte (`+`, `-`, `#`), or a
//! byte and a fixed or length-prefixed body (`=`, `~`, Hello's `+`); built
//! and parsed here, by the server and the client alike.

use std::time::Duration;

use super::request::{push_field, Hold};
use super::MAX_FIELD;
use crate::mode::LockMode;

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
pub fn session_grant(token: u64, timeout: Duration) -> [u8; SESSION_GRANT_LEN] {
    let mut out = [0u8; SESSION_GRANT_LEN];
    out[0] = SESSION_GRANTED;
    out[1..9].copy_from_slice(&token.to_be_bytes());
    let ms = timeout.as_millis().min(u32::MAX as u128) as u32;
    out[9..].copy_from_slice(&ms.to_be_bytes());
    out
}

/// The token and timeout of a whole session grant answer.
pub fn parse_session_grant(bytes: &[u8]) -> Option<(u64, Duration)> {
    if bytes.len() != SESSION_GRANT_LEN || bytes[0] != SESSION_GRANTED {
        return None;
    }
    let token = u64::from_be_bytes(bytes[1..9].try_into().ok()?);
    let ms = u32::from_be_bytes(bytes[9..].try_into().ok()?);
    Some((token, Duration::from_millis(u64::from(ms))))
}

/// A lock request's answers, by the hold it asks for.
impl Hold {
    /// The grant: `+`, or `=` with the token and the session timeout (0 for
    /// a kept hold, which has none but its token all the same).
    pub fn granted(self, token: u64, session_timeout: Duration) -> Vec<u8> {
        match self {
            Hold::Classic => vec![Answer::Ok.byte()],
            Hold::Kept => session_grant(token, Duration::ZERO).to_vec(),
            Hold::Session => session_grant(token, session_timeout).to_vec(),
        }
    }

    /// No grant (withdrawn, or the grant could not be logged).
    pub fn refused(self) -> u8 {
        match self {
            Hold::Classic => Answer::Fail.byte(),
            Hold::Kept | Hold::Session => SESSION_LOST,
        }
    }

    /// The key is held or waited for in a mode (`theirs`) this one cannot join.
    pub fn conflict(self, theirs: LockMode) -> Vec<u8> {
        match self {
            Hold::Classic => vec![Answer::Fail.byte()],
            Hold::Kept | Hold::Session => mode_conflict(theirs).to_vec(),
        }
    }
}

/// Which release an action asks for; they differ in their answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseKind {
    /// The reference's Unlock (2): `+` released or not held (its clients
    /// retry Unlock until `+`), `-` not released.
    Unlock,
    /// lc-cli's Release (6): `+` released, `#` not held, `-` not released.
    Release,
    /// SessionRelease (11): as Release, and only the hold under this token
    /// is released (`#` if the key is held under another).
    Token(u64),
}

impl ReleaseKind {
    /// The hold it names, if it names one.
    pub fn token(self) -> Option<u64> {
        match self {
            ReleaseKind::Token(t) => Some(t),
            ReleaseKind::Unlock | ReleaseKind::Release => None,
        }
    }

    /// The answer when there was nothing to release.
    pub fn not_held(self) -> Answer {
        match self {
            ReleaseKind::Unlock => Answer::Ok,
            ReleaseKind::Release | ReleaseKind::Token(_) => Answer::Busy,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_answers() {
        let grant = session_grant(42, Duration::from_secs(10));
        assert_eq!(grant[0], b'=');
        assert_eq!(
            parse_session_grant(&grant),
            Some((42, Duration::from_secs(10)))
        );
        assert_eq!(parse_session_grant(&grant[..12]), None);
    }

    #[test]
    fn mode_conflict_answers() {
        let refused = mode_conflict(LockMode::limit(2));
        assert_eq!(refused, [b'~', 0, 0, 0, 2]);
        assert_eq!(parse_mode_conflict(&refused), Some(LockMode::limit(2)));
        assert_eq!(parse_mode_conflict(&refused[..4]), None);
    }

    #[test]
    fn each_hold_has_its_answers() {
        let t = Duration::from_secs(3);
        assert_eq!(Hold::Classic.granted(9, t), b"+");
        assert_eq!(Hold::Session.granted(9, t), session_grant(9, t));
        assert_eq!(Hold::Kept.granted(9, t), session_grant(9, Duration::ZERO));
        assert_eq!(Hold::Classic.refused(), b'-');
        assert_eq!(Hold::Kept.refused(), b'!');
        assert_eq!(Hold::Classic.conflict(LockMode::Shared), b"-");
        assert_eq!(
            Hold::Session.conflict(LockMode::Shared),
            mode_conflict(LockMode::Shared)
        );
        assert_eq!(ReleaseKind::Unlock.not_held(), Answer::Ok);
        assert_eq!(ReleaseKind::Token(1).not_held(), Answer::Busy);
    }

    #[test]
    fn hello_answers() {
        let answer = hello_answer(b"0.9.0");
        assert_eq!(answer, b"+\x050.9.0");
        assert_eq!(parse_hello_answer(&answer), Some(b"0.9.0".to_vec()));
        assert_eq!(parse_hello_answer(&answer[..4]), None);
        assert_eq!(parse_hello_answer(b"-"), None);
        assert_eq!(parse_hello_answer(b"+OK\r\n"), None);
    }
}
