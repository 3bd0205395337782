//! The nodes of a Redis backend and the lease settings every operation on
//! them uses; one node is the quorum of one. Runs commands and scripts on
//! every node and counts the answers; what the answers mean is `answer.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::ScriptInvocation;
use tokio::task::JoinSet;

use super::node::{self, Node, NodeError, NodeResult};
use super::scripts::{self, Scripts};
use crate::backend::{BackendError, Result};

/// The nodes and the lease settings every operation on them uses; one node
/// is the quorum of one.
pub(super) struct Quorum {
    pub(super) nodes: Vec<Arc<Node>>,
    pub(super) server: String,
    pub(super) ttl: Duration,
    pub(super) queue_timeout: Duration,
    /// How long a node may take to answer (`--connect-timeout`).
    pub(super) response_timeout: Duration,
}

impl Quorum {
    pub(super) fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    pub(super) fn is_multi_node(&self) -> bool {
        self.nodes.len() > 1
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().max(1) as u64
    }

    pub(super) fn queue_timeout_ms(&self) -> u64 {
        self.queue_timeout.as_millis().max(1) as u64
    }

    /// Whether node `i`'s answers count toward a majority: only once it has
    /// been up for a lease, unless it keeps every write across a restart. A
    /// node restarted empty has forgotten the holds it granted and would
    /// grant the key again before their holders' next renewal puts it back;
    /// Redlock delays such a restart by a lease, which lc-cli cannot impose
    /// on a server, so it refuses to count it instead.
    pub(super) fn counts(&self, i: usize) -> bool {
        self.nodes[i].vouches(self.ttl)
    }

    /// How much of a lease we give up to clock drift between nodes and us.
    pub(super) fn drift(&self) -> Duration {
        self.ttl / 100 + Duration::from_millis(2)
    }

    /// How often a waiter refreshes its entry and re-checks without a wake-up.
    pub(super) fn recheck(&self) -> Duration {
        (self.ttl.min(self.queue_timeout) / 3)
            .clamp(Duration::from_millis(50), Duration::from_secs(10))
    }

    /// How long an offer lasts on one node; how often the head re-checks.
    pub(super) fn offer(&self) -> Duration {
        scripts::OFFER.min(self.ttl)
    }

    /// How long a waiter woken by a release has to confirm its grant. On a
    /// quorum its check and its renewal each wait for every node's answer,
    /// up to a response timeout for a frozen one: the offer allows for both,
    /// or one frozen node would keep every waiter from confirming in time.
    pub(super) fn offer_window(&self) -> Duration {
        if self.is_multi_node() {
            (scripts::OFFER + self.response_timeout * 2).min(self.ttl)
        } else {
            self.offer()
        }
    }

    /// The lease of a grant a waiter's own script makes: the ttl on one
    /// node, where that answer is the confirmation; an offer on several,
    /// which RENEW confirms right after (a waiter killed in between holds
    /// the key up for an offer only).
    pub(super) fn own_grant_ms(&self) -> u64 {
        if self.is_multi_node() {
            self.offer_window().as_millis().max(1) as u64
        } else {
            self.ttl_ms()
        }
    }

    /// How long a waiter with `ahead` in front of it sleeps without a
    /// wake-up. An offer to a waiter that died in line is withdrawn only by
    /// the next script that runs, so the head of the line checks every half
    /// offer; each place further back has at least one more offer to wait
    /// out first, and checks that much less often, up to [`Self::recheck`]
    /// (the load stays about logarithmic in the length of the line).
    pub(super) fn poll(&self, ahead: Option<usize>) -> Duration {
        let Some(ahead) = ahead else {
            return self.recheck();
        };
        let near = (self.offer() / 2).saturating_mul(ahead.saturating_add(1).min(1000) as u32);
        near.max(Duration::from_millis(20)).min(self.recheck())
    }

    pub(super) fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            server: self.server.clone(),
            reason: reason.into(),
        }
    }

    /// Runs `f` on every node at once; answers in node order.
    pub(super) async fn all<T, F, Fut>(&self, f: F) -> Vec<NodeResult<T>>
    where
        T: Send + 'static,
        F: Fn(Arc<Node>) -> Fut,
        Fut: std::future::Future<Output = NodeResult<T>> + Send + 'static,
    {
        if self.nodes.len() == 1 {
            return vec![f(self.nodes[0].clone()).await];
        }
        let mut set = JoinSet::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let fut = f(node.clone());
            set.spawn(async move { (i, fut.await) });
        }
        let mut out: Vec<Option<NodeResult<T>>> = (0..self.nodes.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            if let Ok((i, r)) = joined {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(NodeError::Transport("task failed".into()))))
            .collect()
    }

    /// Runs one script on every node.
    pub(super) async fn script<T>(
        &self,
        pick: fn(&'static Scripts) -> &'static redis::Script,
        key: &str,
        args: Vec<String>,
    ) -> Vec<NodeResult<T>>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let prefix = scripts::prefix(key);
        let args = Arc::new(args);
        self.all(move |node| {
            let prefix = prefix.clone();
            let args = args.clone();
            async move {
                let mut inv: ScriptInvocation<'static> = pick(Scripts::get()).prepare_invoke();
                inv.key(prefix);
                for a in args.iter() {
                    inv.arg(a);
                }
                node.run(&inv).await
            }
        })
        .await
    }

    /// PINGs every node until a majority answers, retrying refused or
    /// failed connections with a short backoff for up to `timeout` (a
    /// server restarting, or started after us); an error answer (a
    /// password required...) ends it at once.
    pub(super) async fn reach(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut delay = Duration::from_millis(50);
        loop {
            let answers = self
                .all(|node| async move { node.cmd::<String>(&redis::cmd("PING")).await })
                .await;
            let err = match self.need_quorum(&answers) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let rejected = answers
                .iter()
                .any(|a| matches!(a, Err(NodeError::Server(_))));
            let marked = |prefix: &str| {
                answers
                    .iter()
                    .any(|a| matches!(a, Err(NodeError::Server(e)) if e.starts_with(prefix)))
            };
            // Credentials are refused (76, as on PostgreSQL); a server
            // whose certificate is not trusted is not reached (69).
            if marked(node::REFUSED) {
                return Err(BackendError::Refused {
                    server: self.server.clone(),
                    reason: self.failures(&answers),
                });
            }
            if marked(node::UNTRUSTED) {
                return Err(self.unavailable(self.failures(&answers)));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if rejected || left.is_zero() {
                return Err(err);
            }
            tokio::time::sleep(delay.min(left)).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    /// One line naming the nodes that failed, for errors.
    pub(super) fn failures<T>(&self, answers: &[NodeResult<T>]) -> String {
        let parts: Vec<String> = answers
            .iter()
            .zip(&self.nodes)
            .filter_map(|(a, n)| a.as_ref().err().map(|e| format!("{}: {e}", n.addr)))
            .collect();
        parts.join("; ")
    }

    /// Unless a majority answered, the error that says so.
    pub(super) fn need_quorum<T>(&self, answers: &[NodeResult<T>]) -> Result<()> {
        let ok = answers.iter().filter(|a| a.is_ok()).count();
        if ok >= self.majority() {
            return Ok(());
        }
        let failures = self.failures(answers);
        if self.is_multi_node() {
            Err(self.unavailable(format!(
                "quorum lost: {ok} of {} Redis nodes answered, {} needed ({failures})",
                self.nodes.len(),
                self.majority()
            )))
        } else if answers
            .iter()
            .any(|a| matches!(a, Err(NodeError::Server(_))))
        {
            Err(BackendError::Protocol {
                server: self.server.clone(),
                reason: failures,
            })
        } else {
            Err(self.unavailable(failures))
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::backend::redis) fn quorum_of(
        nodes: usize,
        ttl: u64,
        queue_timeout: u64,
    ) -> Quorum {
        Quorum {
            nodes: (0..nodes)
                .map(|i| {
                    Arc::new(
                        Node::new(
                            &format!("127.0.0.1:{}", 1000 + i),
                            0,
                            &Default::default(),
                            Duration::from_secs(1),
                        )
                        .unwrap(),
                    )
                })
                .collect(),
            server: "redis://test".into(),
            ttl: Duration::from_millis(ttl),
            queue_timeout: Duration::from_millis(queue_timeout),
            response_timeout: Duration::from_secs(2),
        }
    }

    #[test]
    fn majorities() {
        assert_eq!(quorum_of(1, 30_000, 60_000).majority(), 1);
        assert_eq!(quorum_of(3, 30_000, 60_000).majority(), 2);
        assert_eq!(quorum_of(4, 30_000, 60_000).majority(), 3);
        assert_eq!(quorum_of(5, 30_000, 60_000).majority(), 3);
    }

    #[test]
    fn timers_follow_the_leases() {
        let s = quorum_of(1, 30_000, 60_000);
        assert_eq!(s.recheck(), Duration::from_secs(10));
        assert_eq!(s.drift(), Duration::from_millis(302));
        let s = quorum_of(1, 1_000, 60_000);
        assert_eq!(s.recheck().as_millis(), 333);
        let s = quorum_of(1, 30_000, 90);
        assert_eq!(s.recheck(), Duration::from_millis(50));
    }

    #[test]
    fn the_head_of_the_line_polls_for_dead_offers() {
        let s = quorum_of(1, 30_000, 60_000);
        assert_eq!(s.offer(), Duration::from_secs(1));
        assert_eq!(s.own_grant_ms(), 30_000);
        assert_eq!(s.poll(Some(0)), Duration::from_millis(500));
        assert_eq!(s.poll(Some(3)), Duration::from_secs(2));
        assert_eq!(s.poll(Some(100)), s.recheck());
        assert_eq!(s.poll(None), s.recheck());
        // A short lease: the offer is never longer than it.
        let s = quorum_of(3, 400, 60_000);
        assert_eq!(s.offer(), Duration::from_millis(400));
        assert_eq!(s.own_grant_ms(), 400);
        assert_eq!(s.poll(Some(0)), s.recheck());
        // A quorum's offer allows for a frozen node's two response timeouts.
        let s = quorum_of(3, 30_000, 60_000);
        assert_eq!(s.offer_window(), Duration::from_secs(5));
        assert_eq!(s.own_grant_ms(), 5_000);
        assert_eq!(
            quorum_of(1, 30_000, 60_000).offer_window(),
            Duration::from_secs(1)
        );
        // The head still re-checks on the one-node offer (it learns the
        // longer offer's end from its check).
        assert_eq!(s.poll(Some(0)), Duration::from_millis(500));
    }
}
