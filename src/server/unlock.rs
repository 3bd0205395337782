//! Unlock (the reference's action 2), Release (lc-cli's action 6) and
//! SessionRelease (action 11): the same release, answered two ways; the
//! last frees the key only under the token it names.

use std::net::SocketAddr;

use super::metrics::Counters;
use super::show::show;
use super::table::Token;
use super::Shared;
use crate::proto::Answer;

/// Which frame asked for the release; they differ only in the answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// `+` released or not held (the reference's answer: its clients retry
    /// Unlock until `+`), `-` not released.
    Unlock,
    /// `+` released, `#` not held, `-` not released.
    Release,
    /// As Release, and only the hold under this token is released (`#`
    /// if the key is held under another).
    Session(Token),
}

/// Releases a hold of `key` (the one under the token, else the oldest kept
/// one, else the oldest) and lets the next waiters in.
///
/// The key stays held until its release is durable: if the log cannot record
/// it, nothing changes (a restart would bring the holder back anyway) and the
/// client is told `-`, "not released".
pub async fn release(shared: &Shared, peer: SocketAddr, key: &[u8], frame: Frame) -> Answer {
    let token = match frame {
        Frame::Session(t) => Some(t),
        Frame::Unlock | Frame::Release => None,
    };
    let Some((id, durable)) = shared.table.begin_release(key, token) else {
        return match frame {
            Frame::Unlock => Answer::Ok,
            Frame::Release | Frame::Session(_) => Answer::Busy,
        };
    };
    if let Err(e) = durable.wait().await {
        Counters::bump(&shared.counters.refused);
        shared.events.error(format_args!(
            "{peer}: release of '{}' not recorded in the log, the key stays held: {e}",
            show(key)
        ));
        return Answer::Fail;
    }
    // None: a reset (or another Unlock) released this holder meanwhile;
    // that release is as durable as ours.
    // The holders let in log their own grants.
    if let Some((holder, _)) = shared.table.finish_release(key, id) {
        Counters::bump(&shared.counters.releases);
        shared.events.release(key, &holder.source, peer);
    }
    Answer::Ok
}
