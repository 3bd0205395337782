//! Kept holds that expire (lc-cli's action 18, `lock KEY --expire`): one
//! timer task per such hold, which releases it at its deadline as an Unlock
//! would (the release logged first, the key handed on once that is durable,
//! to the next waiters in line), unless it ended before (an `unlock`, a
//! reset). The deadline is wall-clock time, in the log with the grant, so a
//! restarted server re-arms it (or, past it, releases the hold before it
//! opens its port).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::events::now_held_by;
use super::metrics::Counters;
use super::table::{End, Expiry, GrantId};
use super::Shared;
use crate::backend::history::Ending;
use crate::proto::printable;

/// How soon an expiry the log could not record (a full disk) is tried again.
const EXPIRY_RETRY: Duration = Duration::from_secs(1);

/// Starts the timer of kept hold `id` of `key`.
pub(super) fn spawn(shared: &Arc<Shared>, key: Vec<u8>, id: GrantId) {
    tokio::spawn(run(shared.clone(), key, id));
}

/// Waits for the deadline of kept hold `id` and releases it; returns once
/// it is released or gone.
pub(super) async fn run(shared: Arc<Shared>, key: Vec<u8>, id: GrantId) {
    let mut failures = 0u32;
    loop {
        let durable = match shared.table.expire_kept(&key, id) {
            Expiry::Gone => return,
            Expiry::NotYet(at) => {
                // Looked at again at least every minute, so a hold ended
                // otherwise does not keep its task for hours.
                let at = at.min(Instant::now() + Duration::from_secs(60));
                tokio::time::sleep_until(at.into()).await;
                continue;
            }
            Expiry::Due(durable) => durable,
        };
        if let Err(e) = durable.wait().await {
            if failures == 0 {
                Counters::bump(&shared.counters.refused);
                shared.events.error(format_args!(
                    "expiry of the kept hold of '{}' not recorded in the log, the key stays held until it is (tried every {EXPIRY_RETRY:?}): {e}",
                    printable(&key)
                ));
            }
            failures = failures.saturating_add(1);
            tokio::time::sleep(EXPIRY_RETRY).await;
            continue;
        }
        // None: an unlock or a reset released it meanwhile (as durably).
        let end = End::new(Ending::Expired);
        if let Some((holder, next)) = shared.table.finish_release(&key, id, end) {
            Counters::bump(&shared.counters.releases);
            shared.events.session(format_args!(
                "{}: kept hold of '{}' by '{}' (token {}) expired at its deadline{}",
                holder.peer,
                printable(&key),
                printable(&holder.source),
                holder.token,
                now_held_by(&next)
            ));
        }
        return;
    }
}
