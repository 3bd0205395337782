//! `keys --watch` on Redis: keyspace notifications, where the server has
//! them on. Each node is asked `CONFIG GET notify-keyspace-events` (one
//! request at arming); where they include keyspace (`K`) or keyevent (`E`)
//! events of the classes lc-cli's writes make (`g$hzx`, or `A`), a
//! subscriber connection of its own per node takes `PSUBSCRIBE` of lc-cli's
//! keys (`__keyspace@DB__:lc-cli:*`, or `__keyevent@DB__:*`, filtered
//! here), confirmed before the listing it follows. 0 requests per refresh
//! while nothing changes.
//!
//! A lease's renewal (`PEXPIRE`, the `expire` event) is no change and
//! does not list again; the other writes of a renewal (a shared or
//! limited hold's `ZADD`, a quorum's fence) and a waiter's renewal do. An
//! exclusive hold whose holder died ends when Redis expires its key (the
//! `expired` event: Redis's active expiry finds it within about 100 ms
//! while few keys have a deadline); a shared or limited holder's lease and
//! a waiter's are deadlines in a sorted set, which pass unannounced
//! ([`ChangeFeed::quiet_ends`]): while a listing shows such a hold or a
//! waiter, the watch lists once per interval, as it polled.
//!
//! No feed (the watch polls, and says why with `-v`): notifications are
//! off or lack a class (Redis ships with them off: `CONFIG SET
//! notify-keyspace-events KA` turns them on), or `CONFIG GET` is refused
//! (hosted services often rename it), or a node cannot be reached at
//! arming. Lost: a subscriber connection ends (the node went down or
//! restarted, the connection dropped).

use std::pin::Pin;
use std::task::Poll;

use async_trait::async_trait;
use futures_core::Stream;
use redis::aio::PubSubStream;

use super::node::NodeError;
use super::quorum::Quorum;
use crate::backend::feed::{ChangeFeed, Feed};
use crate::backend::{BackendError, Result};

/// The event classes lc-cli's writes make: generic (del, expire), string
/// (set), hash, sorted set, expired.
const CLASSES: &str = "g$hzx";

/// What to subscribe to for `flags`, the node's notify-keyspace-events:
/// (pattern, by key) — by key: a keyspace channel, the event its payload;
/// else a keyevent channel, the key its payload. None: not enough.
fn subscription(flags: &str, db: i64) -> Option<(String, bool)> {
    let all = flags.contains('A');
    if !all && !CLASSES.chars().all(|c| flags.contains(c)) {
        return None;
    }
    if flags.contains('K') {
        Some((format!("__keyspace@{db}__:lc-cli:*"), true))
    } else if flags.contains('E') {
        Some((format!("__keyevent@{db}__:*"), false))
    } else {
        None
    }
}

/// Whether a notification tells a change `keys` would see.
fn is_change(channel: &str, payload: &str, by_key: bool) -> bool {
    let (key, event) = match by_key {
        true => (channel.split_once("__:").map_or("", |(_, k)| k), payload),
        false => (payload, channel.rsplit_once("__:").map_or("", |(_, e)| e)),
    };
    key.starts_with("lc-cli:") && event != "expire"
}

struct RedisFeed {
    /// Each node's subscription, and whether it is by key.
    streams: Vec<(PubSubStream, bool)>,
    server: String,
}

pub(super) async fn arm(q: &Quorum, db: i64) -> Result<Feed> {
    let mut streams = Vec::new();
    for node in &q.nodes {
        let ask = redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .clone();
        let flags = match node.cmd::<Vec<String>>(&ask).await {
            Ok(answer) => answer.get(1).cloned().unwrap_or_default(),
            Err(NodeError::Server(e)) => {
                return Ok(Feed::Poll(format!(
                    "{} refuses CONFIG GET notify-keyspace-events ({e})",
                    node.addr
                )))
            }
            Err(NodeError::Transport(e)) => {
                return Ok(Feed::Poll(format!("{} not reached ({e})", node.addr)))
            }
        };
        let Some((pattern, by_key)) = subscription(&flags, db) else {
            return Ok(Feed::Poll(format!(
                "keyspace notifications are off on {} (notify-keyspace-events '{flags}'; \
                 'KA' or 'K{CLASSES}' turns them on)",
                node.addr
            )));
        };
        let lost = |e: String| BackendError::Unavailable {
            server: q.server.clone(),
            reason: format!("subscribing to {} on {}: {e}", pattern, node.addr),
        };
        let mut pubsub = node.pubsub().await.map_err(|e| lost(e.to_string()))?;
        let subscribed =
            tokio::time::timeout(q.response_timeout, pubsub.psubscribe(&pattern)).await;
        match subscribed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(lost(e.to_string())),
            Err(_) => return Err(lost("no answer in time".into())),
        }
        streams.push((pubsub.into_on_message(), by_key));
    }
    Ok(Feed::Armed(Box::new(RedisFeed {
        streams,
        server: q.server.clone(),
    })))
}

#[async_trait]
impl ChangeFeed for RedisFeed {
    async fn changed(&mut self) -> Result<()> {
        let told = std::future::poll_fn(|cx| {
            for (stream, by_key) in &mut self.streams {
                loop {
                    match Pin::new(&mut *stream).poll_next(cx) {
                        Poll::Ready(Some(msg)) => {
                            let payload: String = msg.get_payload().unwrap_or_default();
                            if is_change(msg.get_channel_name(), &payload, *by_key) {
                                return Poll::Ready(true);
                            }
                        }
                        Poll::Ready(None) => return Poll::Ready(false),
                        Poll::Pending => break,
                    }
                }
            }
            Poll::Pending
        })
        .await;
        match told {
            true => Ok(()),
            false => Err(BackendError::Unavailable {
                server: self.server.clone(),
                reason: "a subscriber connection ended".into(),
            }),
        }
    }

    /// A shared or limited holder's lease, and a waiter's, are deadlines
    /// in a sorted set: nothing expires when one passes.
    fn quiet_ends(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_of_every_class_lc_cli_writes_are_needed() {
        assert_eq!(
            subscription("KA", 0),
            Some(("__keyspace@0__:lc-cli:*".into(), true))
        );
        assert_eq!(
            subscription("Eg$hzx", 2),
            Some(("__keyevent@2__:*".into(), false))
        );
        assert_eq!(subscription("", 0), None);
        assert_eq!(subscription("Ex", 0), None);
        assert_eq!(subscription("A", 0), None);
    }

    #[test]
    fn a_renewal_is_no_change_and_other_keys_are_not_ours() {
        assert!(is_change("__keyspace@0__:lc-cli:{a}:lock", "del", true));
        assert!(!is_change("__keyspace@0__:lc-cli:{a}:lock", "expire", true));
        assert!(is_change(
            "__keyevent@0__:expired",
            "lc-cli:{a}:lock",
            false
        ));
        assert!(!is_change("__keyevent@0__:set", "other", false));
    }
}
