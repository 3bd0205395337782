//! Encoding the requests (what the client sends), and the checks of a
//! key and a source before anything is sent.

use std::fmt;

use super::super::answer::ReleaseKind;
use super::super::*;
use super::{
    Hold, Request, KEYS_BY_PREFIX, KEYS_WITH_FIELDS, KEYS_WITH_WAITERS, MAX_FIELDS, NO_ORDER,
};
use crate::mode::LockMode;

/// Why a request cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EncodeError {
    EmptyKey,
    TooLong {
        what: &'static str,
        len: usize,
    },
    /// The reference's Lock and TryLock have no mode field.
    ClassicMode(LockMode),
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
            EncodeError::ClassicMode(mode) => write!(
                f,
                "the reference protocol's Lock is exclusive only, not {mode:?}"
            ),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Checks a key the way the server will, so a client can refuse it before
/// opening any connection.
pub(crate) fn check_key(key: &[u8]) -> Result<(), EncodeError> {
    if key.is_empty() {
        return Err(EncodeError::EmptyKey);
    }
    check_len("key", key)
}

pub(crate) fn check_source(source: &[u8]) -> Result<(), EncodeError> {
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
pub(crate) fn encode(request: &Request) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(3 + 2 * MAX_FIELD);
    let action = request.action();
    match request {
        Request::Lock {
            key,
            source,
            mode,
            hold,
            ..
        } => {
            check_key(key)?;
            check_source(source)?;
            if *hold == Hold::Classic && *mode != LockMode::Exclusive {
                return Err(EncodeError::ClassicMode(*mode));
            }
            out.push(action);
            push_field(&mut out, key);
            push_field(&mut out, source);
            if action >= ACTION_MODE_SESSION_LOCK {
                push_field(&mut out, &mode.word().to_be_bytes());
            }
        }
        Request::ExpiringLock {
            key,
            source,
            mode,
            ttl_ms,
            wait,
        } => {
            check_key(key)?;
            check_source(source)?;
            out.push(action);
            push_field(&mut out, key);
            push_field(&mut out, source);
            push_field(&mut out, &mode.word().to_be_bytes());
            push_field(&mut out, &ttl_ms.to_be_bytes());
            push_field(&mut out, &[u8::from(*wait)]);
        }
        Request::Release { key, kind, ended } => {
            check_key(key)?;
            out.push(action);
            push_field(&mut out, key);
            if let ReleaseKind::Token(token) = kind {
                let mut field = token.to_be_bytes().to_vec();
                if let Some(e) = ended {
                    field.extend_from_slice(&e.status.to_be_bytes());
                    field.extend_from_slice(&e.order.unwrap_or(NO_ORDER).to_be_bytes());
                    if let Some(ms) = e.keep_ms {
                        field.extend_from_slice(&ms.to_be_bytes());
                    }
                }
                push_field(&mut out, &field);
            }
        }
        Request::Extended { lock, fields } => {
            if fields.len() > MAX_FIELDS {
                return Err(EncodeError::TooLong {
                    what: "field list",
                    len: fields.len(),
                });
            }
            out.push(action);
            out.extend_from_slice(&encode(lock)?);
            out.extend_from_slice(&(fields.len() as u16).to_be_bytes());
            out.extend_from_slice(fields);
        }
        Request::Mark { key, clear } => {
            check_key(key)?;
            out.push(action);
            push_field(&mut out, key);
            push_field(&mut out, &[u8::from(*clear)]);
        }
        Request::History { key, limit } => {
            check_key(key)?;
            out.push(action);
            push_field(&mut out, key);
            push_field(&mut out, &limit.to_be_bytes());
        }
        Request::Reclaim { key, token, secret } => {
            check_key(key)?;
            out.push(action);
            push_field(&mut out, key);
            let mut field = token.to_be_bytes().to_vec();
            if let Some(secret) = secret {
                field.extend_from_slice(secret);
            }
            push_field(&mut out, &field);
        }
        Request::ResetByKey { key } => {
            check_key(key)?;
            out.push(action);
            push_field(&mut out, key);
        }
        Request::ResetBySource { source } => {
            check_source(source)?;
            out.push(action);
            push_field(&mut out, source);
        }
        Request::Ping => out.extend_from_slice(&PING_FRAME),
        Request::Hello { client, token } => {
            check_len("client version", client)?;
            check_len("token", token)?;
            out.push(action);
            push_field(&mut out, client);
            push_field(&mut out, token);
        }
        Request::Keys {
            key,
            waiters,
            fields,
            prefix,
        } => {
            check_len("key", key)?;
            out.push(action);
            push_field(&mut out, key);
            let bits = match waiters {
                true => KEYS_WITH_WAITERS,
                false => 0,
            } | match fields {
                true => KEYS_WITH_FIELDS,
                false => 0,
            } | match prefix {
                true => KEYS_BY_PREFIX,
                false => 0,
            };
            match bits {
                0 => push_field(&mut out, &[]),
                b => push_field(&mut out, &[b]),
            }
        }
    }
    Ok(out)
}

pub(crate) fn push_field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(bytes.len() as u8);
    out.extend_from_slice(bytes);
}
