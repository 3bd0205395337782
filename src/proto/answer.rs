//! The answers of the one-byte protocol: one byte (`+`, `-`, `#`), or a
//! byte and a fixed or length-prefixed body (`=`, `~`, Hello's `+` and `*`,
//! the token refusal `%`); built
//! and parsed here, by the server and the client alike.

use std::time::Duration;

use super::request::{push_field, Hold};
use super::MAX_FIELD;
use crate::mode::LockMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `+`: done (the key is yours, released, reset).
    Ok,
    /// `-`: refused or failed.
    Fail,
    /// `#`: a TryLock found the key held by someone else; a Release found
    /// it not held.
    Busy,
}

impl Answer {
    pub(crate) fn byte(self) -> u8 {
        match self {
            Answer::Ok => b'+',
            Answer::Fail => b'-',
            Answer::Busy => b'#',
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Answer> {
        match b {
            b'+' => Some(Answer::Ok),
            b'-' => Some(Answer::Fail),
            b'#' => Some(Answer::Busy),
            _ => None,
        }
    }
}

/// `~` and the key's mode (u32be): the request's mode cannot join the key's.
pub(crate) const MODE_CONFLICT: u8 = b'~';
pub(crate) const MODE_CONFLICT_LEN: usize = 5;

/// The answer to a request whose mode the key's refuses.
pub(crate) fn mode_conflict(theirs: LockMode) -> [u8; MODE_CONFLICT_LEN] {
    let mut out = [0u8; MODE_CONFLICT_LEN];
    out[0] = MODE_CONFLICT;
    out[1..].copy_from_slice(&theirs.word().to_be_bytes());
    out
}

/// The key's mode in a whole conflict answer.
pub(crate) fn parse_mode_conflict(bytes: &[u8]) -> Option<LockMode> {
    if bytes.len() != MODE_CONFLICT_LEN || bytes[0] != MODE_CONFLICT {
        return None;
    }
    Some(LockMode::from_word(u32::from_be_bytes(
        bytes[1..].try_into().ok()?,
    )))
}

/// The session answers and heartbeat (see the module docs).
pub(crate) const SESSION_GRANTED: u8 = b'=';
pub(crate) const SESSION_LOST: u8 = b'!';
pub(crate) const HEARTBEAT: u8 = b'.';
/// `=`, token u64be, timeout ms u32be.
pub(crate) const SESSION_GRANT_LEN: usize = 13;

/// The answer to a session grant or reclaim.
pub(crate) fn session_grant(token: u64, timeout: Duration) -> [u8; SESSION_GRANT_LEN] {
    let mut out = [0u8; SESSION_GRANT_LEN];
    out[0] = SESSION_GRANTED;
    out[1..9].copy_from_slice(&token.to_be_bytes());
    let ms = timeout.as_millis().min(u32::MAX as u128) as u32;
    out[9..].copy_from_slice(&ms.to_be_bytes());
    out
}

/// The answer to a session grant or reclaim on a connection that took
/// the feature `secret` ([`super::FEATURE_SECRET`]): as
/// [`session_grant`], then `[len][secret]`, the hold's secret (16 bytes)
/// in the answer to a session grant, empty in the others (a kept hold has
/// none; a reclaim does not send it again).
pub(crate) fn session_grant_with_secret(token: u64, timeout: Duration, secret: &[u8]) -> Vec<u8> {
    let mut out = session_grant(token, timeout).to_vec();
    push_field(&mut out, secret);
    out
}

/// The token and timeout of a whole session grant answer.
pub(crate) fn parse_session_grant(bytes: &[u8]) -> Option<(u64, Duration)> {
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
    /// a kept hold, which has none but its token all the same); with
    /// `secret` (a connection that took the feature), then the secret
    /// field (empty for a kept hold).
    pub(crate) fn granted(
        self,
        token: u64,
        session_timeout: Duration,
        secret: Option<&[u8]>,
    ) -> Vec<u8> {
        let timeout = match self {
            Hold::Classic => return vec![Answer::Ok.byte()],
            Hold::Kept => Duration::ZERO,
            Hold::Session => session_timeout,
        };
        match secret {
            None => session_grant(token, timeout).to_vec(),
            Some(secret) => session_grant_with_secret(token, timeout, secret),
        }
    }

    /// No grant (withdrawn, or the grant could not be logged).
    pub(crate) fn refused(self) -> u8 {
        match self {
            Hold::Classic => Answer::Fail.byte(),
            Hold::Kept | Hold::Session => SESSION_LOST,
        }
    }

    /// The key is held or waited for in a mode (`theirs`) this one cannot join.
    pub(crate) fn conflict(self, theirs: LockMode) -> Vec<u8> {
        match self {
            Hold::Classic => vec![Answer::Fail.byte()],
            Hold::Kept | Hold::Session => mode_conflict(theirs).to_vec(),
        }
    }
}

/// Which release an action asks for; they differ in their answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseKind {
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
    pub(crate) fn token(self) -> Option<u64> {
        match self {
            ReleaseKind::Token(t) => Some(t),
            ReleaseKind::Unlock | ReleaseKind::Release => None,
        }
    }

    /// The answer when there was nothing to release.
    pub(crate) fn not_held(self) -> Answer {
        match self {
            ReleaseKind::Unlock => Answer::Ok,
            ReleaseKind::Release | ReleaseKind::Token(_) => Answer::Busy,
        }
    }
}

/// The answer to a Hello: `+` and the server's version, length-prefixed.
pub(crate) fn hello_answer(version: &[u8]) -> Vec<u8> {
    let version = &version[..version.len().min(MAX_FIELD)];
    let mut out = vec![Answer::Ok.byte()];
    push_field(&mut out, version);
    out
}

/// The server version in a Hello answer; None while it is incomplete or
/// when it is not one (a `-`, or bytes of another protocol).
pub(crate) fn parse_hello_answer(bytes: &[u8]) -> Option<Vec<u8>> {
    let (&b'+', rest) = bytes.split_first()? else {
        return None;
    };
    let (&len, version) = rest.split_first()?;
    (len as usize <= MAX_FIELD && version.len() == len as usize).then(|| version.to_vec())
}

/// `*`: a server with `--token-file` took the Hello's token:
/// `*[len][server version][len][role]`.
pub(crate) const HELLO_ACCEPTED: u8 = b'*';

/// `%` and a reason, `%[len][reason]`: what a server with `--token-file`
/// answers a Hello whose token it does not take, and a request the
/// token's role may not make. Sent only on a connection that began with a
/// Hello (lc-cli's clients, never the reference's).
pub(crate) const NOT_ALLOWED: u8 = b'%';

/// `&` and a reason, `&[len][reason]`: what `lc-cli serve` sends on a
/// plain connection to its lock port that is over one of its connection
/// limits (`--max-connections`, `--max-connections-per-peer`,
/// `--max-pending-logins`), before it reads anything, and then it closes
/// it. The reason names the limit. A reference client reads a byte that is
/// not `+`: a failure. (A TLS connection gets a TLS alert instead:
/// `server::refuse`.)
pub(crate) const AT_LIMIT: u8 = b'&';

/// The refusal of a connection over a limit: `&` and the reason.
pub(crate) fn at_limit(reason: &str) -> Vec<u8> {
    let reason = reason.as_bytes();
    let mut out = vec![AT_LIMIT];
    push_field(&mut out, &reason[..reason.len().min(MAX_FIELD)]);
    out
}

/// The answer to a Hello whose token a server with tokens took.
pub(crate) fn hello_accepted(version: &[u8], role: &[u8]) -> Vec<u8> {
    let mut out = vec![HELLO_ACCEPTED];
    push_field(&mut out, &version[..version.len().min(MAX_FIELD)]);
    push_field(&mut out, &role[..role.len().min(MAX_FIELD)]);
    out
}

/// The refusal of a token or of a request: `%` and the reason.
pub(crate) fn not_allowed(reason: &str) -> Vec<u8> {
    let reason = reason.as_bytes();
    let mut out = vec![NOT_ALLOWED];
    push_field(&mut out, &reason[..reason.len().min(MAX_FIELD)]);
    out
}

/// What a server answered a Hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HelloAnswer {
    /// `+`: a server without tokens (the token, if any, is not checked).
    Unchecked { version: String },
    /// `*`: the token was taken, with this role.
    Accepted { version: String, role: String },
    /// `%`: the token was refused (or none was given): the reason.
    Refused(String),
    /// `&`: the connection is over a connection limit of the server and
    /// was closed unread: the limit.
    AtLimit(String),
    /// `-` and the end of the connection: a server that does not know
    /// Hello (a reference server, an lc-cli serve before it).
    Unknown,
    /// Not an answer of the protocol: the bytes as read.
    Foreign,
}

/// A whole Hello answer at the start of `bytes`, and its length; None while
/// it is incomplete (`closed`: nothing more will come). Every field byte
/// must be printable ASCII, so the reply of a text protocol (`+OK\r\n`,
/// `-ERR ...`, `*2\r\n`) is told apart at its first line end, not after
/// a length that was never one.
pub(crate) fn parse_hello(bytes: &[u8], closed: bool) -> Option<(HelloAnswer, usize)> {
    let foreign = Some((HelloAnswer::Foreign, bytes.len()));
    let Some(&first) = bytes.first() else {
        return closed.then_some((HelloAnswer::Foreign, 0));
    };
    let fields = match first {
        b'+' | NOT_ALLOWED | AT_LIMIT => 1,
        HELLO_ACCEPTED => 2,
        b'-' if bytes.len() == 1 => return closed.then_some((HelloAnswer::Unknown, 1)),
        _ => return foreign,
    };
    let mut pos = 1;
    let mut got: Vec<String> = Vec::with_capacity(fields);
    for _ in 0..fields {
        let Some(&len) = bytes.get(pos) else {
            return if closed { foreign } else { None };
        };
        if len as usize > MAX_FIELD {
            return foreign;
        }
        let end = pos + 1 + len as usize;
        let have = &bytes[pos + 1..end.min(bytes.len())];
        if !have.iter().all(|b| (0x20..0x7f).contains(b)) {
            return foreign;
        }
        if have.len() < len as usize {
            return if closed { foreign } else { None };
        }
        got.push(String::from_utf8_lossy(have).into_owned());
        pos = end;
    }
    let mut got = got.into_iter();
    let mut next = || got.next().unwrap_or_default();
    let answer = match first {
        b'+' => HelloAnswer::Unchecked { version: next() },
        NOT_ALLOWED => HelloAnswer::Refused(next()),
        AT_LIMIT => HelloAnswer::AtLimit(next()),
        _ => HelloAnswer::Accepted {
            version: next(),
            role: next(),
        },
    };
    Some((answer, pos))
}

/// The limit in a whole `&` answer; None if it is not one.
pub(crate) fn parse_at_limit(bytes: &[u8]) -> Option<String> {
    match parse_hello(bytes, true)? {
        (HelloAnswer::AtLimit(reason), n) if n == bytes.len() => Some(reason),
        _ => None,
    }
}

/// The reason in a whole `%` answer to a request; None if it is not one.
pub(crate) fn parse_not_allowed(bytes: &[u8]) -> Option<String> {
    match parse_hello(bytes, true)? {
        (HelloAnswer::Refused(reason), n) if n == bytes.len() => Some(reason),
        _ => None,
    }
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
        assert_eq!(Hold::Classic.granted(9, t, None), b"+");
        assert_eq!(Hold::Classic.granted(9, t, Some(b"")), b"+");
        assert_eq!(Hold::Session.granted(9, t, None), session_grant(9, t));
        assert_eq!(
            Hold::Kept.granted(9, t, None),
            session_grant(9, Duration::ZERO)
        );
        let secret = [3u8; crate::proto::SECRET_LEN];
        let with = Hold::Session.granted(9, t, Some(&secret));
        assert_eq!(with.len(), SESSION_GRANT_LEN + 17);
        let tail = super::super::grant::Tail {
            secret: true,
            slot: false,
        };
        use super::super::grant::{grant_len, parse_grant};
        assert_eq!(grant_len(&with[..13], tail), None);
        assert_eq!(grant_len(&with[..14], tail), Some(with.len()));
        let g = parse_grant(&with, tail).unwrap();
        assert_eq!((g.token, g.timeout, g.secret), (9, t, Some(secret)));
        assert_eq!(parse_grant(&with[..20], tail), None);
        let kept = Hold::Kept.granted(9, t, Some(b""));
        let g = parse_grant(&kept, tail).unwrap();
        assert_eq!((g.token, g.timeout, g.secret), (9, Duration::ZERO, None));
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

    #[test]
    fn hello_answers_with_tokens() {
        let accepted = hello_accepted(b"0.9.0", b"admin");
        assert_eq!(accepted, b"*\x050.9.0\x05admin");
        let whole = (
            HelloAnswer::Accepted {
                version: "0.9.0".into(),
                role: "admin".into(),
            },
            accepted.len(),
        );
        assert_eq!(parse_hello(&accepted, false), Some(whole.clone()));
        // The answer to the request behind it is not part of it.
        let mut more = accepted.clone();
        more.push(b'+');
        assert_eq!(parse_hello(&more, false), Some(whole));
        for cut in 0..accepted.len() {
            assert_eq!(parse_hello(&accepted[..cut], false), None, "cut at {cut}");
            assert_eq!(
                parse_hello(&accepted[..cut], true).map(|a| a.0),
                Some(HelloAnswer::Foreign),
                "cut at {cut}"
            );
        }
        let refused = not_allowed("no token");
        assert_eq!(parse_not_allowed(&refused), Some("no token".into()));
        assert_eq!(parse_not_allowed(b"%"), None);
        assert_eq!(
            parse_hello(&hello_answer(b"1.0"), false),
            Some((
                HelloAnswer::Unchecked {
                    version: "1.0".into()
                },
                5
            ))
        );
        assert_eq!(parse_hello(b"-", false), None);
        assert_eq!(parse_hello(b"-", true), Some((HelloAnswer::Unknown, 1)));
    }

    #[test]
    fn a_connection_over_a_limit_is_told_so() {
        let refused = at_limit("256 connections from 10.0.0.1 are open");
        assert_eq!(refused[0], b'&');
        assert_eq!(
            parse_hello(&refused, false),
            Some((
                HelloAnswer::AtLimit("256 connections from 10.0.0.1 are open".into()),
                refused.len()
            ))
        );
        assert_eq!(
            parse_at_limit(&refused).as_deref(),
            Some("256 connections from 10.0.0.1 are open")
        );
        assert_eq!(parse_at_limit(b"&"), None);
        assert_eq!(parse_not_allowed(&refused), None);
        // Cut short and closed: not an answer.
        assert_eq!(
            parse_hello(&refused[..5], true).map(|a| a.0),
            Some(HelloAnswer::Foreign)
        );
    }

    #[test]
    fn text_protocols_are_no_hello_answer() {
        for reply in [
            &b"-ERR unknown command"[..],
            b"+OK\r\n",
            b"*2\r\n$3",
            b"%1\r\n",
            b"HTTP/1.1 400",
        ] {
            assert_eq!(
                parse_hello(reply, false).map(|a| a.0),
                Some(HelloAnswer::Foreign),
                "{reply:?}"
            );
        }
    }
}

/// `^`: a waiting `--newest` request was superseded by a newer one (or a
/// waiting one ranked above it when it came): `^` and the rival.
pub(crate) const SUPERSEDED: u8 = b'^';
/// `<` and the key's mark (u64be): the request's `--order` is below it.
pub(crate) const OUTDATED: u8 = b'<';
/// `>` and the rival, on a holder's connection (after its grant, between
/// the heartbeats' echoes): a newer `--cancel-running` request asks the
/// hold's command to stop. The hold is still its holder's.
pub(crate) const CANCEL_NOTICE: u8 = b'>';
/// `@` and a ticket (u64be), on a waiter's connection right after it
/// joined the line (a connection that took the feature `queues`): its
/// place, which it shows again (`ticket=` in an ExtendedLock) to take it
/// back after a restart of the server.
pub(crate) const TICKET: u8 = b'@';
pub(crate) const TICKET_LEN: usize = 9;

/// Another request, as `^` and `>` name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RivalWire {
    pub source: Vec<u8>,
    pub identity: Vec<u8>,
    pub fields: Vec<u8>,
}

/// `lead` and the rival: `[len][source][len][identity][len:u16be][fields]`.
pub(crate) fn rival_answer(lead: u8, r: &RivalWire) -> Vec<u8> {
    let mut out = vec![lead];
    push_field(&mut out, &r.source[..r.source.len().min(MAX_FIELD)]);
    push_field(&mut out, &r.identity[..r.identity.len().min(MAX_FIELD)]);
    let fields = &r.fields[..r.fields.len().min(super::request::MAX_FIELDS)];
    out.extend_from_slice(&(fields.len() as u16).to_be_bytes());
    out.extend_from_slice(fields);
    out
}

/// A whole `^` or `>` answer at the start of `bytes` and its length; None
/// while incomplete. Err: not one (a field too long).
pub(crate) fn parse_rival(bytes: &[u8]) -> Option<Result<(RivalWire, usize), ()>> {
    let mut pos = 1;
    let mut short = |bytes: &[u8]| -> Option<Result<Vec<u8>, ()>> {
        let &len = bytes.get(pos)?;
        if len as usize > MAX_FIELD {
            return Some(Err(()));
        }
        let field = bytes.get(pos + 1..pos + 1 + len as usize)?.to_vec();
        pos += 1 + len as usize;
        Some(Ok(field))
    };
    let source = match short(bytes)? {
        Ok(s) => s,
        Err(()) => return Some(Err(())),
    };
    let identity = match short(bytes)? {
        Ok(s) => s,
        Err(()) => return Some(Err(())),
    };
    let len = bytes.get(pos..pos + 2)?;
    let len = u16::from_be_bytes([len[0], len[1]]) as usize;
    if len > super::request::MAX_FIELDS {
        return Some(Err(()));
    }
    let fields = bytes.get(pos + 2..pos + 2 + len)?.to_vec();
    Some(Ok((
        RivalWire {
            source,
            identity,
            fields,
        },
        pos + 2 + len,
    )))
}

/// `lead` (`<`, `@`, or a Mark's `+`) and a u64be.
pub(crate) fn with_u64(lead: u8, n: u64) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = lead;
    out[1..].copy_from_slice(&n.to_be_bytes());
    out
}

/// The u64 of a whole 9-byte answer led by `lead`.
pub(crate) fn parse_u64(bytes: &[u8], lead: u8) -> Option<u64> {
    match bytes.split_first() {
        Some((&b, rest)) if b == lead && rest.len() == 8 => {
            Some(u64::from_be_bytes(rest.try_into().ok()?))
        }
        _ => None,
    }
}
