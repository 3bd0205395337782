//! ResetByKey and ResetBySource, served the same way whichever port they
//! come in on: the lock protocol and the manager port share this one path
//! (table, log records, log lines, counters, hand-off to the next waiter).

use std::net::SocketAddr;

use super::conn::who;
use super::events::{holders_named, now_held_by};
use super::metrics::Counters;
use super::table::{Durable, Owner};
use super::Shared;
use crate::proto::printable;
use crate::proto::Answer;

/// Force-releases `key`, whoever holds it; the first waiter gets it. A key
/// that is not held is answered `+` too. `by`: the caller's identity (a
/// token's), for the log's line, which names each holder's too.
pub(super) async fn key(
    shared: &Shared,
    peer: SocketAddr,
    by: Option<&Owner>,
    key: &[u8],
) -> Answer {
    Counters::bump(&shared.counters.resets);
    let who = who(peer, by);
    match shared.table.reset_key(key, &resetter(peer, by)) {
        Some((r, durable)) => {
            shared.events.reset(format_args!(
                "{who}: reset key '{}' held by {}{}",
                printable(key),
                holders_named(&r.holders),
                now_held_by(&r.next)
            ));
            confirmed(shared, durable, "reset", key).await
        }
        None => {
            shared.events.reset(format_args!(
                "{who}: reset key '{}' (not held)",
                printable(key)
            ));
            Answer::Ok
        }
    }
}

/// Releases every key `source` holds (each passes to its next waiter) and
/// withdraws that source's waiters (they are answered `-`).
pub(super) async fn source(
    shared: &Shared,
    peer: SocketAddr,
    by: Option<&Owner>,
    source: &[u8],
) -> Answer {
    Counters::bump(&shared.counters.resets);
    let (released, withdrawn, durable) = shared.table.reset_source(source, &resetter(peer, by));
    shared
        .counters
        .withdrawals
        .fetch_add(withdrawn as u64, std::sync::atomic::Ordering::Relaxed);
    // Each key with the identities of the holds it ended.
    let keys: Vec<String> = released
        .iter()
        .map(|r| {
            let mut names: Vec<&str> = r
                .holders
                .iter()
                .filter_map(|h| h.owner.as_ref().map(|o| &*o.name))
                .collect();
            names.dedup();
            match names.is_empty() {
                true => printable(&r.key),
                false => format!("{} as '{}'", printable(&r.key), names.join("', '")),
            }
        })
        .collect();
    shared.events.reset(format_args!(
        "{}: reset source '{}': released {} key(s) [{}], withdrew {withdrawn} waiter(s)",
        who(peer, by),
        printable(source),
        keys.len(),
        keys.join(", ")
    ));
    confirmed(shared, durable, "reset by source", source).await
}

/// Who reset, as a key's history names it (`by`): the identity of its
/// token, else its address (a reset names no source: the reference's rule
/// for a request without one).
fn resetter(peer: SocketAddr, by: Option<&Owner>) -> String {
    match by {
        Some(o) => o.name.to_string(),
        None => peer.ip().to_string(),
    }
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
