//! ResetByKey and ResetBySource, served the same way whichever port they
//! come in on: the lock protocol and the manager port share this one path
//! (table, log records, log lines, counters, hand-off to the next waiter).

use std::net::SocketAddr;

use super::events::now_held_by;
use super::metrics::Counters;
use super::table::Durable;
use super::Shared;
use crate::proto::printable;
use crate::proto::Answer;

/// Force-releases `key`, whoever holds it; the first waiter gets it. A key
/// that is not held is answered `+` too.
pub(super) async fn key(shared: &Shared, peer: SocketAddr, key: &[u8]) -> Answer {
    Counters::bump(&shared.counters.resets);
    match shared.table.reset_key(key) {
        Some((r, durable)) => {
            let holders: Vec<String> = r.holders.iter().map(|h| printable(&h.source)).collect();
            shared.events.reset(format_args!(
                "{peer}: reset key '{}' held by '{}'{}",
                printable(key),
                holders.join("', '"),
                now_held_by(&r.next)
            ));
            confirmed(shared, durable, "reset", key).await
        }
        None => {
            shared.events.reset(format_args!(
                "{peer}: reset key '{}' (not held)",
                printable(key)
            ));
            Answer::Ok
        }
    }
}

/// Releases every key `source` holds (each passes to its next waiter) and
/// withdraws that source's waiters (they are answered `-`).
pub(super) async fn source(shared: &Shared, peer: SocketAddr, source: &[u8]) -> Answer {
    Counters::bump(&shared.counters.resets);
    let (released, withdrawn, durable) = shared.table.reset_source(source);
    shared
        .counters
        .withdrawals
        .fetch_add(withdrawn as u64, std::sync::atomic::Ordering::Relaxed);
    let keys: Vec<String> = released.iter().map(|r| printable(&r.key)).collect();
    shared.events.reset(format_args!(
        "{peer}: reset source '{}': released {} key(s) [{}], withdrew {withdrawn} waiter(s)",
        printable(source),
        keys.len(),
        keys.join(", ")
    ));
    confirmed(shared, durable, "reset by source", source).await
}

/// `+` once the release is durable; `-` if the log could not record it (the
/// release has taken effect in memory, but a restart would bring the key back
/// held: the client must not believe it is gone for good).
async fn confirmed(shared: &Shared, durable: Durable, what: &str, key: &[u8]) -> Answer {
    match durable.wait().await {
        Ok(()) => Answer::Ok,
        Err(e) => {
            Counters::bump(&shared.counters.refused);
            shared.events.error(format_args!(
                "{what} '{}' not recorded in the log: {e}",
                printable(key)
            ));
            Answer::Fail
        }
    }
}
