//! A service's own change feed, for `keys --watch` (docs/commands.md,
//! "keys --watch"): between two listings the watch waits on it and lists
//! again only when it says that something under the watched keys changed.
//!
//! A feed is armed *before* the listing it follows, so that a change made
//! while the listing runs is told too (at worst one listing too many,
//! never one too few). A lost feed (the connection dropped, the watch
//! cancelled or compacted away, the session moved) is an error of
//! [`ChangeFeed::changed`]: the watch drops it, lists again and arms a new
//! one, so the view is never left stale.
//!
//! Where a backend has no feed, [`super::Backend::change_feed`] says why
//! ([`Feed::Poll`]) and the watch lists every `--interval`, as before.

use async_trait::async_trait;

use super::Result;

/// An armed change feed (one per backend that has one: `etcd/feed.rs`,
/// `zk/feed.rs`, `redis/feed.rs`).
#[async_trait]
pub trait ChangeFeed: Send {
    /// Resolves when something under the watched prefix changed (or may
    /// have) since the feed was armed or last resolved; an error when the
    /// feed is lost. Cancel-safe: the watch waits on it in a `select!`.
    async fn changed(&mut self) -> Result<()>;

    /// The service lets a shared or `--limit` hold, or a waiter, run out
    /// without telling (Redis: a deadline in a sorted set, no key that
    /// expires): while the last listing shows one, the watch lists every
    /// `--interval` as well.
    fn quiet_ends(&self) -> bool {
        false
    }
}

/// What [`super::Backend::change_feed`] gives.
pub enum Feed {
    /// The service tells changes: list again when it does.
    Armed(Box<dyn ChangeFeed>),
    /// No feed here (why, for `-v`): list every `--interval`.
    Poll(String),
}
