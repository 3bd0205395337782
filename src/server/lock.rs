//! Lock, SessionLock and the mode locks (12, 14): granted at once if the
//! request may hold the key now, else queued in arrival order until its turn
//! or until the client hangs up (which withdraws it). A session grant then
//! serves the hold on the same connection (`session.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use super::stream::Stream;
use tokio::io::AsyncWriteExt;

use super::grant;
use super::metrics::Counters;
use super::table::{Ask, LockOutcome, Notice, Withdrawal};
use super::Shared;
use crate::proto::Hold;

/// Serves a Lock on its connection. A queued waiter is this future parked
/// in the wait below, so what it keeps across the wait is what each waiter
/// costs (see `conn::handle`).
pub async fn serve(mut stream: Stream, shared: &Arc<Shared>, key: Vec<u8>, ask: Ask, hold: Hold) {
    let peer = ask.peer;
    let (id, notice) = match shared.table.lock(&key, &ask) {
        LockOutcome::Granted(g) => {
            shared.events.grant(&key, &ask.source, peer);
            return Box::pin(grant::hand_over(stream, peer, shared, key, g, hold)).await;
        }
        LockOutcome::Queued(id, notice) => (id, notice),
        LockOutcome::Conflict(theirs) => {
            let _ = Box::pin(stream.write_all(&hold.conflict(theirs))).await;
            return;
        }
    };
    shared.events.queued(&key, &ask.source, peer);
    // Wait for the turn or the hang-up, whichever comes first. Written as a
    // poll function so a parked waiter keeps no buffer and no extra future.
    let mut notice = notice;
    let notice = std::future::poll_fn(|cx| {
        if let Poll::Ready(n) = Pin::new(&mut notice).poll(cx) {
            return Poll::Ready(Some(n));
        }
        // Bytes after the request are ignored; EOF is a hang-up.
        stream.poll_hangup(cx).map(|()| None)
    })
    .await;
    let Some(notice) = notice else {
        // Waiters it stood in front of and who may hold now are told by
        // the table, and log their own grants.
        match shared.table.withdraw(&key, id).0 {
            Withdrawal::Dequeued | Withdrawal::Released => {
                Counters::bump(&shared.counters.withdrawals);
                shared.events.withdrawal(&key, &ask.source, peer)
            }
            Withdrawal::Gone => {}
        }
        return;
    };
    match notice {
        Ok(Notice::Granted(g)) => {
            // A hand-off: logged here, by the one it went to.
            shared.events.grant(&key, &ask.source, peer);
            Box::pin(grant::hand_over(stream, peer, shared, key, g, hold)).await
        }
        Ok(Notice::Withdrawn) | Err(_) => {
            let _ = stream.write_all(&[hold.refused()]).await;
        }
    }
}
