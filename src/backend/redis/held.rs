//! A lock we hold on Redis: the renewal task and the lease it keeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::watch;

use super::node::{NodeError, NodeResult};
use super::Shared;
use crate::backend::{BackendError, HeldLock, LostReason, Result};

/// Keeps the lease alive at a third of the TTL; reports a loss on `lost`.
pub(super) async fn renew_loop(
    sh: Arc<Shared>,
    key: String,
    id: String,
    fence: u64,
    mut valid_until: Instant,
    lost: watch::Sender<Option<LostReason>>,
) {
    let every = sh.ttl / 3;
    let floor = if sh.quorum() { fence } else { 0 };
    let args = vec![key.clone(), id, sh.ttl_ms().to_string(), floor.to_string()];
    let mut next = Instant::now() + every;
    let mut last_failure = String::new();
    let expired = |last_failure: &str| {
        LostReason::new(format!(
            "the lease ({:?}) ran out before Redis confirmed a renewal ({})",
            sh.ttl,
            if last_failure.is_empty() {
                "no answer in time"
            } else {
                last_failure
            }
        ))
    };
    loop {
        tokio::time::sleep_until(next.min(valid_until).into()).await;
        if Instant::now() >= valid_until {
            let _ = lost.send(Some(expired(&last_failure)));
            return;
        }
        let start = Instant::now();
        let round = sh.script::<i64>(|s| &s.renew, &key, args.clone());
        let answers = tokio::select! {
            a = round => a,
            _ = tokio::time::sleep_until(valid_until.into()) => {
                let _ = lost.send(Some(expired(&last_failure)));
                return;
            }
        };
        let mine = answers
            .iter()
            .filter(|a| matches!(a, Ok(v) if *v >= 0))
            .count();
        let taken = answers
            .iter()
            .filter(|a| matches!(a, Ok(-1) | Err(NodeError::Server(_))))
            .count();
        if mine >= sh.majority() {
            valid_until = start + sh.ttl - sh.drift();
            next = start + every;
        } else if taken > sh.nodes.len() - sh.majority() {
            let reason = if sh.quorum() {
                format!(
                    "the lock key was deleted or taken by another owner on {taken} of {} nodes",
                    sh.nodes.len()
                )
            } else {
                "the lock key was deleted or taken by another owner".to_string()
            };
            let _ = lost.send(Some(LostReason::new(reason)));
            return;
        } else {
            last_failure = sh.failures(&answers);
            next = Instant::now() + (sh.ttl / 10).max(Duration::from_millis(20));
        }
    }
}

pub(super) struct RedisHeld {
    pub(super) shared: Arc<Shared>,
    pub(super) key: String,
    pub(super) id: String,
    pub(super) fence: u64,
    pub(super) lost: watch::Receiver<Option<LostReason>>,
    pub(super) renewer: Option<tokio::task::JoinHandle<()>>,
}

impl RedisHeld {
    fn stop_renewing(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
    }
}

impl Drop for RedisHeld {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

#[async_trait]
impl HeldLock for RedisHeld {
    fn token(&self) -> Option<u64> {
        Some(self.fence)
    }

    async fn lost(&mut self) -> LostReason {
        loop {
            if let Some(reason) = self.lost.borrow_and_update().clone() {
                return reason;
            }
            if self.lost.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    async fn release(&mut self) -> Result<()> {
        self.stop_renewing();
        let sh = &self.shared;
        let answers: Vec<NodeResult<i64>> = sh
            .script(
                |s| &s.release,
                &self.key,
                vec![self.key.clone(), self.id.clone()],
            )
            .await;
        sh.need_quorum(&answers)
    }

    async fn detach(mut self: Box<Self>) -> Result<()> {
        self.stop_renewing();
        let sh = &self.shared;
        let answers: Vec<NodeResult<i64>> = sh
            .script(
                |s| &s.detach,
                &self.key,
                vec![self.key.clone(), self.id.clone()],
            )
            .await;
        sh.need_quorum(&answers)?;
        let kept = answers.iter().filter(|a| matches!(a, Ok(1))).count();
        if kept >= sh.majority() {
            Ok(())
        } else {
            Err(BackendError::Refused {
                server: sh.server.clone(),
                reason: format!("'{}' was lost before it could be kept held", self.key),
            })
        }
    }
}
