//! Telling a Locking-Center server from a peer that speaks something else
//! (Redis's port, an HTTP server, etcd), so that a wrong `--server` is one
//! clear error instead of a wait that looks like a held key.
//!
//! A Locking-Center server answers each request with one byte (`+`, `-` or
//! `#`) and closes. A Lock may rightly get no answer for hours (the key is
//! held), so silence alone proves nothing: when a Lock has had no answer for
//! a moment, [`watch`] pings on a second connection. A reply of one protocol
//! byte means the server is alive and the key just held; silence or any other
//! reply ends the wait with an error.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dial::Dialer;
use crate::backend::BackendError;
use crate::proto::{printable, Answer, PING_FRAME};

/// How long a Lock waits for its answer before pinging: a free key is
/// answered well within this, so the common path costs nothing.
pub(super) const PROBE_AFTER: Duration = Duration::from_millis(250);

/// The most of a foreign reply that is read and shown.
const SHOWN: usize = 48;

/// What a peer sent back to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    Answer(Answer),
    /// Not one protocol byte: text, a banner, several bytes.
    Foreign(Vec<u8>),
}

/// One protocol byte alone is an answer; anything else is foreign.
pub(super) fn classify(bytes: &[u8]) -> Reply {
    match bytes {
        [b] => match Answer::from_byte(*b) {
            Some(a) => Reply::Answer(a),
            None => Reply::Foreign(bytes.to_vec()),
        },
        _ => Reply::Foreign(bytes.to_vec()),
    }
}

/// What a ping found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Probe {
    /// One protocol byte: a Locking-Center server (ours `+`, a reference one `-`).
    Speaks,
    /// No answer within the time given.
    Silent,
    Foreign(Vec<u8>),
    /// No connection, or closed without a byte.
    Unreachable(String),
}

/// Pings the server on a new connection (TLS too for `lcs://`), all of it
/// within `budget`.
pub(super) async fn ping(dialer: &Dialer, budget: Duration) -> Probe {
    let started = Instant::now();
    let exchange = async {
        let mut stream = match dialer.connect_once(budget).await {
            Ok(s) => s,
            Err(e) => return Probe::Unreachable(e),
        };
        if let Err(e) = stream.write_all(&PING_FRAME).await {
            return Probe::Unreachable(e.to_string());
        }
        let mut got = Vec::new();
        let mut buf = [0u8; SHOWN];
        // Until the server closes, or enough to tell; a server that keeps
        // the connection open after its byte is judged on what it sent.
        loop {
            let left = budget.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, stream.read(&mut buf)).await {
                Ok(Ok(0)) => break,
                Ok(Ok(n)) => {
                    got.extend_from_slice(&buf[..n]);
                    if got.len() >= SHOWN || Answer::from_byte(got[0]).is_none() {
                        break;
                    }
                }
                // The reference's `-` to the Hello in front: it speaks.
                Ok(Err(e)) if super::dial::hello_unknown(&e) => return Probe::Speaks,
                Ok(Err(e)) if got.is_empty() => return Probe::Unreachable(e.to_string()),
                Ok(Err(_)) | Err(_) => break,
            }
        }
        match (got.is_empty(), classify(&got)) {
            (true, _) if started.elapsed() >= budget => Probe::Silent,
            (true, _) => Probe::Unreachable("closed the connection without an answer".into()),
            (false, Reply::Answer(_)) => Probe::Speaks,
            (false, Reply::Foreign(bytes)) => Probe::Foreign(bytes),
        }
    };
    let probe = tokio::time::timeout(budget, exchange)
        .await
        .unwrap_or(Probe::Silent);
    // Closed at a connection limit of the server (its `&`, its TLS alert):
    // lc-cli serve, alive; the request it checks on was let in before.
    match dialer.greeting().take_at_limit() {
        Some(_) => Probe::Speaks,
        None => probe,
    }
}

/// Resolves only when the peer is found not to be a Locking-Center server
/// (or gone): waits `after`, pings with the rest of `budget`. While it
/// answers like one, this never resolves, and the Lock keeps waiting.
pub(super) async fn watch(dialer: &Dialer, after: Duration, budget: Duration) -> BackendError {
    let addr = dialer.addr.as_str();
    tokio::time::sleep(after).await;
    match ping(dialer, budget.saturating_sub(after)).await {
        Probe::Speaks => std::future::pending().await,
        Probe::Silent => silent(addr, budget),
        Probe::Foreign(bytes) => foreign(addr, &bytes),
        Probe::Unreachable(reason) => BackendError::Unavailable {
            server: addr.to_string(),
            reason: format!("a check of the connection failed: {reason}"),
        },
    }
}

/// The error for a peer that did not answer within `waited`.
pub(super) fn silent(addr: &str, waited: Duration) -> BackendError {
    BackendError::Unavailable {
        server: addr.to_string(),
        reason: format!(
            "no answer within {:.1}s: it does not answer like a Locking-Center server{}",
            waited.as_secs_f64(),
            port_hint(addr)
        ),
    }
}

/// The error for a reply that is not one protocol byte. A TLS record (a
/// TLS server's alert to our plain frame) is a server we did not reach the
/// way it wants, not a foreign protocol: the status of a TLS failure.
pub(super) fn foreign(addr: &str, bytes: &[u8]) -> BackendError {
    if is_tls_record(bytes) {
        return BackendError::Unavailable {
            server: addr.to_string(),
            reason: format!(
                "it answered with a TLS alert: it speaks TLS, use lcs://{addr}?cacert=FILE"
            ),
        };
    }
    // Its first line only: the answer to the Hello's line, which the
    // token (after it) is not part of.
    let line = match bytes.iter().position(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None => bytes,
    };
    BackendError::Protocol {
        server: addr.to_string(),
        reason: format!(
            "\"{}\": not the Locking-Center protocol{}",
            printable(&line[..line.len().min(SHOWN)]),
            port_hint(addr)
        ),
    }
}

/// A TLS record's header: alert (21) or handshake (22), version 3.x.
fn is_tls_record(bytes: &[u8]) -> bool {
    matches!(bytes, [21 | 22, 3, 0..=4, ..])
}

/// What the well-known ports of the other backends suggest.
pub(super) use crate::backend::port_hint;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_protocol_byte_alone_is_an_answer() {
        assert_eq!(classify(b"+"), Reply::Answer(Answer::Ok));
        assert_eq!(classify(b"#"), Reply::Answer(Answer::Busy));
        assert_eq!(
            classify(b"-ERR unknown command\r\n"),
            Reply::Foreign(b"-ERR unknown command\r\n".to_vec())
        );
        assert_eq!(classify(b"H"), Reply::Foreign(b"H".to_vec()));
        assert_eq!(classify(b"+OK\r\n"), Reply::Foreign(b"+OK\r\n".to_vec()));
    }

    #[test]
    fn a_tls_alert_says_use_lcs() {
        // What rustls sends a plain frame: alert, TLS 1.2 record, fatal, decode_error.
        let e = foreign("h:1", &[21, 3, 3, 0, 2, 2, 50]);
        assert!(matches!(&e, BackendError::Unavailable { .. }), "{e}");
        assert!(e.to_string().contains("use lcs://h:1?cacert=FILE"), "{e}");
        assert!(matches!(
            foreign("h:1", b"HTTP/1.1 400"),
            BackendError::Protocol { .. }
        ));
    }

    #[test]
    fn hints_for_well_known_ports() {
        assert!(port_hint("127.0.0.1:6379").contains("redis://127.0.0.1:6379"));
        assert!(port_hint("zk1:2181").contains("zk://zk1:2181"));
        assert!(port_hint("e:2379").contains("etcd"));
        assert_eq!(port_hint("h:22119"), "");
    }
}
