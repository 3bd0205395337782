//! TryLock, SessionTryLock and the mode trylocks (13, 15): the key if the
//! request may hold it now and nobody waits, else `#` at once; it never
//! queues.

use std::sync::Arc;

use super::stream::Stream;
use tokio::io::AsyncWriteExt;

use super::grant;
use super::lock::Answering;
use super::table::{Ask, TryOutcome};
use super::Shared;
use crate::proto::Answer;

pub(super) async fn serve(
    mut stream: Stream,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    ask: Ask,
    answer: Answering,
) {
    let g = match shared.table.try_lock(&key, &ask) {
        TryOutcome::Granted(g) => g,
        TryOutcome::Busy => {
            let _ = stream.write_all(&[Answer::Busy.byte()]).await;
            return;
        }
        TryOutcome::Conflict(theirs) => {
            let _ = stream.write_all(&answer.hold.conflict(theirs)).await;
            return;
        }
        TryOutcome::Outdated(mark) => {
            let _ = stream
                .write_all(&crate::proto::with_u64(crate::proto::OUTDATED, mark))
                .await;
            return;
        }
    };
    shared
        .events
        .grant(&key, &ask.source, ask.peer, ask.owner.as_ref());
    grant::hand_over(stream, ask.peer, shared, key, g, answer).await;
}
