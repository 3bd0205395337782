//! Hello (lc-cli's action 16): the first frame of each connection lc-cli
//! opens, with the client's version and its token; the request follows it
//! on the same connection (in the same write).
//!
//! Without `--token-file` it is answered `+` and this server's version, and
//! the token is not looked at. With it, the token is checked
//! (`tokens.rs`): `*`, the version and the token's role, or `%` and why
//! not, and the connection ends; a connection whose first frame is not a
//! Hello (a reference client's, one without a token) gets `-` and is
//! closed. Refusals are logged once per peer address and reason.
//!
//! A client may name features after its version, one word each
//! (`0.1.0 secret`); the server names those it takes after its own
//! version in the answer. `secret`: the session grants on this connection
//! carry the hold's secret, which its Reclaim must show. `history`: it
//! may ask a key's history (History, 21); taken only by a server that
//! keeps one (`--history` not 0). `slots`: every `=` answer on this
//! connection ends with the hold's slot field (`proto::grant`). `keep`: a
//! SessionRelease may ask the hold kept as a kept hold that expires
//! (`--hold-at-least`, `keep.rs`). `group`: a lock that names a group of
//! requests for several keys is granted with them in one step
//! (`table/group.rs`); always taken.

use std::net::SocketAddr;

use super::stream::Stream;
use tokio::io::AsyncWriteExt;

use super::metrics::Counters;
use super::tokens::{Caller, Refusal};
use super::Shared;
use crate::proto::{self, Answer, Request};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the frames that opened a connection said: whether it began with a
/// Hello, the features that Hello asked for, and who its token proved
/// the caller is (`--token-file`).
#[derive(Debug, Clone, Default)]
pub(super) struct Greeted {
    /// The connection began with a Hello (lc-cli's client): a refusal may
    /// be answered `%` and its reason.
    pub hello: bool,
    /// Its session grants carry the hold's secret (the feature `secret`).
    pub secret: bool,
    /// It takes the answers of deploy queues (the feature `queues`): a
    /// waiter's ticket, a holder's cancel notice.
    pub queues: bool,
    /// It may ask a key's history (the feature `history`).
    pub history: bool,
    /// Its `=` answers end with the hold's slot field (the feature `slots`).
    pub slots: bool,
    /// Its SessionRelease may ask the hold kept for a while (the feature
    /// `keep`, `--hold-at-least`).
    pub keep: bool,
    /// It asked whether locks of a group are granted together (the feature
    /// `group`: always taken).
    pub group: bool,
    pub caller: Option<Caller>,
}

/// Whether the client field of a Hello (`VERSION [FEATURE...]`) names
/// the feature `secret`.
pub(super) fn asks_secret(client: &[u8]) -> bool {
    asks(client, proto::FEATURE_SECRET)
}

/// Whether the client field of a Hello names `feature`.
fn asks(client: &[u8], feature: &str) -> bool {
    client
        .split(|b| b.is_ascii_whitespace())
        .any(|word| word == feature.as_bytes())
}

/// The answer to a Hello of `greeted`'s caller (None: the server has no
/// tokens), the features it took named after the version.
fn welcome(greeted: &Greeted) -> Vec<u8> {
    let (caller, secret, queues) = (greeted.caller.as_ref(), greeted.secret, greeted.queues);
    let mut version = VERSION.to_string();
    if secret {
        version = format!("{version} {}", proto::FEATURE_SECRET);
    }
    // Named when asked: the client reads it before the answer to the
    // ExtendedLock behind the Hello, and so knows what that answer is.
    if queues {
        version = format!("{version} {}", proto::FEATURE_QUEUES);
    }
    if greeted.history {
        version = format!("{version} {}", proto::FEATURE_HISTORY);
    }
    if greeted.slots {
        version = format!("{version} {}", proto::FEATURE_SLOTS);
    }
    if greeted.keep {
        version = format!("{version} {}", proto::FEATURE_KEEP);
    }
    if greeted.group {
        version = format!("{version} {}", proto::FEATURE_GROUP);
    }
    match caller {
        None => proto::hello_answer(version.as_bytes()),
        Some(c) => proto::hello_accepted(version.as_bytes(), c.role.name().as_bytes()),
    }
}

/// Answers the Hello that opened a connection (`client`: its version and
/// features). `Some(greeted)`: go on with the request behind it, as its
/// caller (None without tokens); None: the token was refused, answered
/// and logged, and the connection ends.
pub(super) async fn greet(
    stream: &mut Stream,
    peer: SocketAddr,
    shared: &Shared,
    client: &[u8],
    token: &[u8],
) -> Option<Greeted> {
    let secret = asks_secret(client);
    let queues = asks(client, proto::FEATURE_QUEUES);
    let history = asks(client, proto::FEATURE_HISTORY) && shared.table.keeps_history();
    let mut greeted = Greeted {
        hello: true,
        secret,
        queues,
        history,
        slots: asks(client, proto::FEATURE_SLOTS),
        keep: asks(client, proto::FEATURE_KEEP),
        group: asks(client, proto::FEATURE_GROUP),
        caller: None,
    };
    let Some(tokens) = &shared.tokens else {
        let _ = stream.write_all(&welcome(&greeted)).await;
        return Some(greeted);
    };
    if let Some(caller) = tokens.check(token) {
        greeted.caller = Some(caller);
        let _ = stream.write_all(&welcome(&greeted)).await;
        return Some(greeted);
    }
    Counters::bump(&shared.counters.refused);
    let (why, reason) = match token.is_empty() {
        true => (Refusal::NoToken, "serve --token-file"),
        false => (
            Refusal::WrongToken,
            "it is not one of its tokens (serve --token-file)",
        ),
    };
    if tokens.first_refusal(peer.ip(), why) {
        shared.events.error(format_args!(
            "{peer}: refused: {}; further such refusals of {} are not logged",
            match why {
                Refusal::NoToken => "a Hello without a token",
                _ => "a token that is not in the token file",
            },
            peer.ip()
        ));
    }
    let _ = stream.write_all(&proto::not_allowed(reason)).await;
    None
}

/// A connection to a server with tokens whose first frame is not a Hello:
/// `-` (what a reference client understands), then the close.
pub(super) async fn refuse_unannounced(
    stream: &mut Stream,
    peer: SocketAddr,
    shared: &Shared,
    request: &Request,
) {
    Counters::bump(&shared.counters.refused);
    let first = shared
        .tokens
        .as_ref()
        .is_some_and(|t| t.first_refusal(peer.ip(), Refusal::NoHello));
    if first {
        shared.events.error(format_args!(
            "{peer}: refused: action {} before a Hello with a token (serve --token-file); \
             further such refusals of {} are not logged",
            request.action(),
            peer.ip()
        ));
    }
    let _ = stream.write_all(&[Answer::Fail.byte()]).await;
}

/// A Hello that is not the first frame (a client that sent two): answered
/// as the first was, and the connection ends.
pub(super) async fn serve(mut stream: Stream, greeted: &Greeted) {
    let _ = stream.write_all(&welcome(greeted)).await;
}

#[cfg(test)]
mod tests {
    #[test]
    fn features_follow_the_version() {
        assert!(super::asks_secret(b"0.1.0 secret\r\n"));
        assert!(super::asks_secret(b"0.1.0 other secret"));
        assert!(!super::asks_secret(b"0.1.0\r\n"));
        assert!(!super::asks_secret(b"secrets"));
        assert!(!super::asks_secret(b""));
    }
}
