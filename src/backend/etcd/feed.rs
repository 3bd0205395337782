//! `keys --watch` on etcd: one Watch on the whole lock prefix (every queue
//! key, mark and slot under it), armed before the listing it follows and
//! confirmed (`created`) before that listing starts, so a change made
//! after the listing's revision is always told. One request at arming (the
//! stream then stays open); 0 per refresh while nothing changes.
//!
//! Lost: the stream ends or fails (the member went away, the connection
//! dropped), or the watch is cancelled (compaction, a member's restart).
//! The watch lists again and arms a new one.

use async_trait::async_trait;
use etcd_client::{WatchOptions, WatchStream};

use super::names;
use super::rpc::Rpc;
use crate::backend::feed::{ChangeFeed, Feed};
use crate::backend::{BackendError, Result};

struct EtcdFeed {
    stream: WatchStream,
    server: String,
}

/// Opens the watch on `PREFIX/` (every key without a prefix) and waits
/// until etcd says it is created.
pub(super) async fn arm(rpc: &Rpc, prefix: &str) -> Result<Feed> {
    let start = names::scan_prefix(prefix);
    let (key, options) = match start.is_empty() {
        true => (vec![0], WatchOptions::new().with_all_keys()),
        false => (start.into_bytes(), WatchOptions::new().with_prefix()),
    };
    let stream = rpc
        .call("watching the lock keys", |mut c| {
            let key = key.clone();
            let options = options.clone();
            async move {
                let mut stream = c.watch(key, Some(options)).await?;
                // The first answer: created (or cancelled at once).
                match stream.message().await? {
                    Some(m) if m.created() && !m.canceled() => Ok(stream),
                    _ => Err(etcd_client::Error::WatchError(
                        "the watch was not created".into(),
                    )),
                }
            }
        })
        .await?;
    Ok(Feed::Armed(Box::new(EtcdFeed {
        stream,
        server: rpc.server.clone(),
    })))
}

#[async_trait]
impl ChangeFeed for EtcdFeed {
    async fn changed(&mut self) -> Result<()> {
        loop {
            let lost = match self.stream.message().await {
                Ok(Some(m)) if m.canceled() => match m.compact_revision() {
                    0 => "the watch was cancelled".to_string(),
                    rev => format!("the watch was cancelled (compacted to {rev})"),
                },
                Ok(Some(m)) if !m.events().is_empty() => return Ok(()),
                // A progress notice, or nothing to say.
                Ok(Some(_)) => continue,
                Ok(None) => "the watch stream ended".to_string(),
                Err(e) => format!("the watch stream failed: {e}"),
            };
            return Err(BackendError::Unavailable {
                server: self.server.clone(),
                reason: lost,
            });
        }
    }
}
