//! Unlock (the reference's action 2), Release (lc-cli's action 6) and
//! SessionRelease (action 11): the same release, answered two ways; the
//! last frees the key only under the token it names.

use std::net::SocketAddr;

use super::metrics::Counters;
use super::table::{End, NotYours, Owner, Whose};
use super::Shared;
use crate::proto::printable;
use crate::proto::{Answer, ReleaseKind};

/// Releases a hold of `key` (the one under the token, else the oldest kept
/// one, else the oldest) and lets the next waiters in.
///
/// The key stays held until its release is durable: if the log cannot record
/// it, nothing changes (a restart would bring the holder back anyway) and the
/// client is told `-`, "not released".
/// The answers differ by `kind` (see [`ReleaseKind`]). Only the holds
/// `whose` may release are looked at (a `lock` token's own); `Err` if the
/// key is held, but by none of them. `by`: the caller's identity, for the
/// log's line.
pub(super) async fn release_by(
    shared: &Shared,
    peer: SocketAddr,
    key: &[u8],
    kind: ReleaseKind,
    whose: Whose,
    by: Option<&Owner>,
    ended: Option<crate::proto::Ended>,
) -> Result<Answer, NotYours> {
    let Some((id, durable)) = shared
        .table
        .begin_release_by(key, kind.token(), whose, ended)?
    else {
        return Ok(kind.not_held());
    };
    if let Err(e) = durable.wait().await {
        Counters::bump(&shared.counters.refused);
        shared.events.error(format_args!(
            "{peer}: release of '{}' not recorded in the log, the key stays held: {e}",
            printable(key)
        ));
        return Ok(Answer::Fail);
    }
    // None: a reset (or another Unlock) released this holder meanwhile;
    // that release is as durable as ours.
    // The holders let in log their own grants.
    let end = End::released(ended.map(|e| e.status));
    if let Some((holder, next)) = shared.table.finish_release(key, id, end) {
        Counters::bump(&shared.counters.releases);
        shared
            .events
            .release(key, &holder.source, peer, holder.owner.as_ref(), by);
        if !next.is_empty() {
            // The hand-off first: the tasks of the holders let in were just
            // woken; one turn of the scheduler lets them write their grants
            // before this answer and this connection's close.
            tokio::task::yield_now().await;
        }
    }
    Ok(Answer::Ok)
}
