//! Answering a grant (of a Lock or a TryLock): only once it is durable, and
//! only to a client still there to take it; otherwise the key is released
//! again, so neither a failed log write nor a closed connection keeps a key.

use std::net::SocketAddr;
use std::sync::Arc;

use super::stream::Stream;
use tokio::io::AsyncWriteExt;

use super::lock::Answering;
use super::metrics::Counters;
use super::table::{Durable, Grant, GrantId};
use super::{expiry, session, Shared};
use crate::proto::{printable, Hold};

/// Answers grant `g` (see [`answer`]); a delivered session grant is then
/// served as a session, in a task of its own.
pub(super) async fn hand_over(
    mut stream: Stream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    g: Grant,
    answering: Answering,
) {
    let hold = answering.hold;
    // The secret field, on a connection that took the feature: the
    // hold's secret (a session's), else empty.
    let secret = answering
        .secret
        .then(|| g.secret.as_ref().map_or(&[][..], |s| &s[..]));
    let mut bytes = hold.granted(g.token, shared.reclaim_grace, secret);
    // The slot field, on a connection that took the feature `slots`.
    if answering.slots && hold != Hold::Classic {
        crate::proto::grant::push_slot(&mut bytes, g.slot);
    }
    let delivered = answer(&mut stream, shared, &key, g.id, g.durable, hold, &bytes).await;
    // A kept hold that expires (not kept in the Grant: every waiter's
    // future holds one).
    if delivered && hold == Hold::Kept && shared.table.expires(&key, g.id).is_some() {
        expiry::spawn(shared, key.clone(), g.id);
    }
    if let (true, Some(link)) = (delivered, g.link) {
        session::spawn_hold(stream, peer, shared, key, g.id, link);
    }
}

/// Waits until the grant is durable, then answers it; if the log failed, the
/// key is released again and the client refused. True if the grant was
/// delivered (the client holds the key).
async fn answer(
    stream: &mut Stream,
    shared: &Shared,
    key: &[u8],
    id: GrantId,
    durable: Durable,
    hold: Hold,
    bytes: &[u8],
) -> bool {
    if let Err(e) = durable.wait().await {
        Counters::bump(&shared.counters.refused);
        shared.table.release_grant(key, id);
        shared.events.error(format_args!(
            "grant of '{}' not recorded in the log, refused: {e}",
            printable(key)
        ));
        let _ = stream.write_all(&[hold.refused()]).await;
        return false;
    }
    deliver(stream, shared, key, id, bytes).await
}

/// Sends the grant; a grant that cannot be delivered is released again, so
/// a closed connection never keeps a key.
///
/// A write to a socket whose peer has already closed usually succeeds (the
/// peer answers with a reset later), so the connection is checked for a
/// hang-up first: a client that went away before its `+` could be written is
/// never left holding the key.
async fn deliver(
    stream: &mut Stream,
    shared: &Shared,
    key: &[u8],
    id: GrantId,
    bytes: &[u8],
) -> bool {
    let delivered = !stream.peer_gone() && stream.write_all(bytes).await.is_ok();
    if !delivered && shared.table.release_grant(key, id) {
        shared.events.error(format_args!(
            "could not deliver the grant of '{}': the client hung up, released it again",
            printable(key)
        ));
    }
    delivered
}
