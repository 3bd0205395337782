//! The Redis backend: a fair FIFO queue with leased lock keys, on one node or
//! on a quorum of independent nodes.
//!
//! - this file: the [`Backend`] impl, one request each.
//! - [`line`]: the wait in line, round by round, and `trylock`'s one round.
//! - [`answer`]: what the nodes' answers to a waiter mean.
//! - [`quorum`]: the nodes, the timers, running a script on every node.
//! - [`scripts`]: the key layout and the Lua scripts (one per step, each a
//!   `.lua` file in `scripts/`).
//! - [`node`]: connections to one server.
//! - [`held`]: a held lock and its renewal.
//! - [`list`]: `keys`, what a majority of nodes agree is held.
//! - [`fresh`]: nodes that do not count yet, and why a lock waits for them.
//! - [`queue`]: deploy queues (`--newest`, `--order`, `--cancel-running`):
//!   markers, the holder's cancel listener, the key's mark.
//! - [`history`]: `lc-cli history KEY`, the stream the scripts that end a
//!   hold write to (`scripts/record.lua`).
//!
//! One node is the quorum of one: the same code path, with a majority of 1.
//!
//! Order: a waiter's place is a ticket the server hands out (`INCR` inside the
//! enqueue script). With several nodes, the waiter first takes a ticket on
//! every node and keeps the largest of a majority, then enqueues with that
//! ticket everywhere (each node raises its counter to it): a waiter that
//! finished enqueueing on a majority before another one began has the smaller
//! ticket on every node, so every node serves them in that order. Equal
//! tickets (concurrent waiters) are ordered by waiter id on every node alike.
//!
//! Handoff: releasing runs a script that offers the lock to the next waiter
//! (a short lease, [`scripts::OFFER`]) and pushes to that waiter's wake-up
//! list, on which it blocks (BLPOP); its check confirms the offer (the full
//! ttl). It also re-checks on a timer, so a lost wake-up costs time only;
//! near the head of the line that timer is short ([`Quorum::poll`]), so the
//! offer to a waiter that died in line passes on within about a second.

pub(crate) mod address;
mod answer;
mod feed;
mod fresh;
mod held;
mod history;
mod line;
mod list;
mod node;
mod ping;
mod queue;
mod quorum;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use self::node::{Node, NodeResult};
use self::quorum::Quorum;
pub(crate) use address::RedisAddress;

use super::{
    Acquired, Backend, BackendConfig, BackendError, KeyInfo, LockRequest, Result, WaitProgress,
};

pub(crate) struct RedisBackend {
    quorum: Arc<Quorum>,
    /// The database number (`/DB`), for the keyspace channels.
    db: i64,
    /// `-v`: the wait for nodes that do not count yet is said once.
    verbose: bool,
    /// Which nodes answered the last round of a wait that only nodes too
    /// fresh to count held up (None: something else, or nothing, did).
    fresh_wait: std::sync::Mutex<Option<Vec<bool>>>,
    /// That wait was said (`-v`).
    fresh_said: std::sync::atomic::AtomicBool,
}

impl RedisBackend {
    pub(crate) async fn connect(address: &RedisAddress, config: &BackendConfig) -> Result<Self> {
        let RedisAddress { nodes, db, .. } = address;
        let mut built = Vec::new();
        for addr in nodes {
            let node =
                Node::new(addr, *db, &config.access, config.connect_timeout).map_err(|reason| {
                    BackendError::Unavailable {
                        server: config.shown(),
                        reason,
                    }
                })?;
            built.push(Arc::new(node));
        }
        let quorum = Arc::new(Quorum {
            nodes: built,
            server: config.shown(),
            ttl: config.ttl.max(Duration::from_millis(30)),
            queue_timeout: config.queue_timeout.max(Duration::from_millis(30)),
            response_timeout: config.connect_timeout,
        });
        quorum.reach(config.connect_timeout).await?;
        Ok(RedisBackend {
            quorum,
            db: *db,
            verbose: config.verbose,
            fresh_wait: std::sync::Mutex::new(None),
            fresh_said: Default::default(),
        })
    }
}

#[async_trait]
impl Backend for RedisBackend {
    async fn ping(&self) -> Result<super::ping::PingReport> {
        self.ping_nodes().await
    }

    /// Keyspace notifications, where they are on (`feed.rs`).
    async fn change_feed(&self, _under: &str) -> Result<super::feed::Feed> {
        feed::arm(&self.quorum, self.db).await
    }

    async fn acquire(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        if cancel.is_cancelled() {
            return Ok(Acquired::Cancelled);
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        if request.nonblock {
            return self.try_once(request, &id).await;
        }
        self.wait_in_line(request, &id, &cancel, progress).await
    }

    async fn unlock(&self, key: &str) -> Result<bool> {
        let sh = &self.quorum;
        let answers: Vec<NodeResult<i64>> = sh
            .script(
                |s| &s.unlock,
                key,
                vec![key.to_string(), history::operator()],
            )
            .await;
        sh.need_quorum(&answers)?;
        let count = |v: i64| {
            answers
                .iter()
                .filter(|a| matches!(a, Ok(x) if *x == v))
                .count()
        };
        if count(-1) >= sh.majority() {
            return Err(BackendError::Refused {
                server: sh.server.clone(),
                reason: format!(
                    "'{key}' is held by a running lc-cli, not kept by `lock` without a command; `reset {key}` force-releases it"
                ),
            });
        }
        Ok(count(1) > 0)
    }

    async fn reset_key(&self, key: &str) -> Result<()> {
        let sh = &self.quorum;
        let answers: Vec<NodeResult<i64>> = sh
            .script(
                |s| &s.reset_key,
                key,
                vec![key.to_string(), history::operator()],
            )
            .await;
        sh.need_quorum(&answers)
    }

    async fn reset_source(&self, source: &str) -> Result<()> {
        let sh = &self.quorum;
        let index = scripts::source_index(source);
        let answers: Vec<NodeResult<Vec<String>>> = sh
            .all(move |node| {
                let index = index.clone();
                async move { node.cmd(redis::cmd("HKEYS").arg(&index)).await }
            })
            .await;
        sh.need_quorum(&answers)?;
        let mut keys: Vec<String> = answers.into_iter().flatten().flatten().collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let answers: Vec<NodeResult<i64>> = sh
                .script(
                    |s| &s.reset_source,
                    &key,
                    vec![key.clone(), source.to_string(), history::operator()],
                )
                .await;
            sh.need_quorum(&answers)?;
        }
        Ok(())
    }

    async fn mark(&self, key: &str) -> Result<Option<u64>> {
        queue::mark(&self.quorum, key).await
    }

    async fn clear_mark(&self, key: &str) -> Result<bool> {
        queue::clear_mark(&self.quorum, key).await
    }

    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        list::keys(&self.quorum).await
    }

    async fn history(&self, key: &str, limit: usize) -> Result<Vec<super::history::HistoryEntry>> {
        history::read(&self.quorum, key, limit).await
    }

    /// The live queue entries a majority of nodes agree on (`list.rs`).
    async fn waiters(&self) -> Result<Option<Vec<super::WaiterInfo>>> {
        list::waiters(&self.quorum).await.map(Some)
    }

    /// Said from the nodes' state now, so the seconds left stay current
    /// between rounds.
    fn wait_reason(&self) -> Option<String> {
        let answered = self.fresh_wait.lock().unwrap().clone()?;
        fresh::reason(&self.quorum, &answered)
    }
}
