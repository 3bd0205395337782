//! A SessionRelease that asks its hold kept (the feature `keep`,
//! `--hold-at-least`, issue 45): instead of releasing the session hold, the
//! table turns it into a kept hold that expires `keep_ms` from now, in one
//! step (`table/keep.rs`), and its timer is started as for `lock KEY
//! --expire` (`expiry.rs`). `unlock` and `reset` clear it as any kept hold.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::expiry;
use super::metrics::Counters;
use super::table::{NotYours, Whose};
use super::Shared;
use crate::backend::fields::MAX_AT_LEAST;
use crate::proto::printable;
use crate::proto::{Answer, ReleaseKind};

/// Keeps session hold `token` of `key` for `keep_ms` more (1 ms to 30
/// days) as a kept hold that expires. `+` once that is durable; `#` when
/// it is not held under that token; `-` when the log could not record it:
/// the hold then stays kept in memory and expires at its deadline (a
/// restart before it finds the session hold, which expires a grace later).
pub(super) async fn keep(
    shared: &Arc<Shared>,
    peer: SocketAddr,
    key: &[u8],
    token: u64,
    whose: Whose,
    keep_ms: u64,
) -> Result<Answer, NotYours> {
    let keep = Duration::from_millis(keep_ms.max(1)).min(MAX_AT_LEAST);
    let Some((id, durable)) = shared.table.keep_session(key, token, whose, keep)? else {
        return Ok(ReleaseKind::Token(token).not_held());
    };
    expiry::spawn(shared, key.to_vec(), id);
    if let Err(e) = durable.wait().await {
        Counters::bump(&shared.counters.refused);
        shared.events.error(format_args!(
            "{peer}: kept hold of '{}' (--hold-at-least) not recorded in the log; it expires at its deadline: {e}",
            printable(key)
        ));
        return Ok(Answer::Fail);
    }
    let until = humantime::format_rfc3339_millis(SystemTime::now() + keep);
    shared.events.session(format_args!(
        "{peer}: session hold of '{}' (token {token}) kept until {until} (--hold-at-least)",
        printable(key)
    ));
    Ok(Answer::Ok)
}
