//! A lock we hold on Redis: the renewal task and the lease it keeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::node::{NodeError, NodeResult};
use super::quorum::Quorum;
use crate::backend::{BackendError, Expiry, HeldLock, LockRequest, LostReason, Result};

/// Keeps the lease alive at a third of the TTL; reports a loss on `lost`.
/// `valid_until` is when the lease can first run out on a node: the TTL
/// after the send time of the last confirmed renewal (a node starts it
/// later, when it runs the script), less the drift allowance. The command
/// is stopped a third of the TTL before that (SIGTERM), and killed a
/// twentieth before it at the latest, whatever `--kill-after` says.
pub(super) async fn renew_loop(
    sh: Arc<Quorum>,
    args: Vec<String>,
    valid: watch::Sender<Instant>,
    lost: watch::Sender<Option<LostReason>>,
) {
    let mut valid_until = *valid.borrow();
    let key = args[0].clone();
    let every = sh.ttl / 3;
    let mut next = Instant::now() + every;
    let mut last_failure = String::new();
    let unconfirmed = |last_failure: &str, valid_until: Instant| {
        LostReason::kill_by(
            format!(
                "no renewal of the lease confirmed by Redis for two thirds of it ({:?}), so it may run out ({})",
                sh.ttl,
                if last_failure.is_empty() {
                    "no answer in time"
                } else {
                    last_failure
                }
            ),
            kill_by(valid_until, sh.ttl),
        )
    };
    loop {
        let stop_at = valid_until - stop_before_expiry(sh.ttl);
        tokio::time::sleep_until(next.min(stop_at).into()).await;
        if Instant::now() >= stop_at {
            let _ = lost.send(Some(unconfirmed(&last_failure, valid_until)));
            return;
        }
        let start = Instant::now();
        let round = sh.script::<i64>(|s| &s.renew, &key, args.clone());
        let answers = tokio::select! {
            a = round => a,
            _ = tokio::time::sleep_until(stop_at.into()) => {
                let _ = lost.send(Some(unconfirmed(&last_failure, valid_until)));
                return;
            }
        };
        let Renewal { confirmed, denied } = Renewal::of(&sh, &answers);
        if confirmed >= sh.majority() {
            valid_until = start + sh.ttl - sh.drift();
            valid.send_replace(valid_until);
            next = start + every;
        } else if sh.nodes.len() - denied < sh.majority() {
            // Fewer than a majority can still confirm it: lost at once.
            let reason = if sh.is_multi_node() {
                format!(
                    "only {confirmed} of {} Redis nodes still hold the lock key for us ({denied} lost it to a reset, another owner, or a restart that emptied them)",
                    sh.nodes.len()
                )
            } else {
                "the lock key was deleted, taken by another owner, or lost in a Redis restart"
                    .to_string()
            };
            let _ = lost.send(Some(LostReason::kill_by(
                reason,
                kill_by(valid_until, sh.ttl),
            )));
            return;
        } else {
            last_failure = sh.failures(&answers);
            next = Instant::now() + (sh.ttl / 10).max(Duration::from_millis(20));
        }
    }
}

/// The arguments of the RENEW script. The fence is also the node's floor:
/// a node that lost the key (restarted empty) gets it back with a counter
/// no lower than ours, and with the request's field list; a `--limit`
/// hold, in its slot.
pub(super) fn renew_args(
    request: &LockRequest,
    id: &str,
    ttl: Duration,
    fence: u64,
    slot: Option<u32>,
) -> Vec<String> {
    let mut args = vec![
        request.key.clone(),
        id.to_string(),
        ttl.as_millis().max(1).to_string(),
        fence.to_string(),
        request.source.clone(),
    ];
    args.extend(super::scripts::mode_args(request.mode));
    let fields = super::queue::fields_arg(request);
    if let Some(slot) = slot {
        args.push(fields.unwrap_or_default());
        args.push(slot.to_string());
    } else {
        args.extend(fields);
    }
    args
}

/// What the nodes said to a renewal.
pub(super) struct Renewal {
    /// Renewed (or put back) on a node that counts.
    pub(super) confirmed: usize,
    /// Definitely not ours there: taken, deleted, a script error, or a node
    /// too recently restarted to count. The rest did not answer.
    pub(super) denied: usize,
}

impl Renewal {
    pub(super) fn of(sh: &Quorum, answers: &[NodeResult<i64>]) -> Renewal {
        let (mut confirmed, mut denied) = (0, 0);
        for (i, a) in answers.iter().enumerate() {
            match a {
                Ok(v) if *v >= 0 && sh.counts(i) => confirmed += 1,
                Ok(_) | Err(NodeError::Server(_)) => denied += 1,
                Err(NodeError::Transport(_)) => {}
            }
        }
        Renewal { confirmed, denied }
    }
}

/// How long before the lease can run out the command is stopped: a third
/// of the lease, so SIGTERM comes two thirds of a lease after the last
/// confirmed renewal, as on ZooKeeper.
pub(super) fn stop_before_expiry(ttl: Duration) -> Duration {
    ttl / 3
}

/// When the command must be gone: a twentieth of the lease before it can
/// run out, for the kill to land.
fn kill_by(valid_until: Instant, ttl: Duration) -> Instant {
    valid_until - ttl / 20
}

pub(super) struct RedisHeld {
    pub(super) quorum: Arc<Quorum>,
    pub(super) key: String,
    pub(super) id: String,
    /// Our `--source`: the release takes it out of the source's index.
    pub(super) source: String,
    pub(super) fence: u64,
    pub(super) lost: watch::Receiver<Option<LostReason>>,
    /// When the lease can first run out, as of the last confirmed renewal.
    pub(super) valid_until: watch::Receiver<Instant>,
    pub(super) renewer: Option<tokio::task::JoinHandle<()>>,
    /// `--order`: the release raises the key's mark to it after a status 0.
    pub(super) order: Option<u64>,
    /// How the command ended (`command_ended`).
    pub(super) status: Option<i32>,
    /// `--cancel-running`: the listeners on `P cancel:ID` and what they hear.
    pub(super) cancel: Option<(JoinSet<()>, mpsc::Receiver<String>)>,
    /// A `--limit N` hold's slot (0 to N-1).
    pub(super) slot: Option<u32>,
    /// The source of the newer `--cancel-running` request that stopped the
    /// command: the release records the hold as cancelled by it.
    pub(super) cancelled_by: Option<String>,
}

impl RedisHeld {
    fn stop_renewing(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        self.cancel = None;
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

    fn slot(&self) -> Option<u32> {
        self.slot
    }

    fn expiry(&self) -> Option<Expiry> {
        let valid_until = *self.valid_until.borrow();
        Some(Expiry {
            term_at: valid_until - stop_before_expiry(self.quorum.ttl),
            kill_at: kill_by(valid_until, self.quorum.ttl),
        })
    }

    /// A loss the renewals found, or a cancel notice (one node's is
    /// enough: it only ever names this hold's id).
    async fn lost(&mut self) -> LostReason {
        let Self {
            lost,
            cancel,
            cancelled_by,
            ..
        } = self;
        let cancelled = async {
            match cancel {
                Some((_, heard)) => match heard.recv().await {
                    Some(raw) => {
                        let rival = super::queue::rival(&raw);
                        *cancelled_by = Some(rival.source.clone());
                        LostReason::cancelled(rival)
                    }
                    None => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        let renewals = async {
            loop {
                if let Some(reason) = lost.borrow_and_update().clone() {
                    return reason;
                }
                if lost.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        };
        tokio::select! {
            reason = renewals => reason,
            reason = cancelled => reason,
        }
    }

    fn command_ended(&mut self, status: i32) {
        self.status = Some(status);
    }

    /// Gives the hold back, its end in the key's history: released (with
    /// the command's status), cancelled (by the newer request), or lost
    /// (after the renewals found it gone: written where our record is
    /// still there, else a script that settled it wrote `freed`). No round
    /// trip is added: it rides the release script.
    async fn release(&mut self) -> Result<()> {
        self.stop_renewing();
        let sh = &self.quorum;
        let order = match (self.status, self.order) {
            (Some(0), Some(order)) => order.to_string(),
            _ => String::new(),
        };
        let ended = if self.cancelled_by.is_some() {
            "cancelled"
        } else if self.lost.borrow().is_some() {
            "lost"
        } else {
            "released"
        };
        let args = vec![
            self.key.clone(),
            self.id.clone(),
            self.source.clone(),
            order,
            ended.to_string(),
            self.status.map(|s| s.to_string()).unwrap_or_default(),
            self.cancelled_by.clone().unwrap_or_default(),
        ];
        let answers: Vec<NodeResult<i64>> = sh.script(|s| &s.release, &self.key, args).await;
        sh.need_quorum(&answers)
    }

    async fn detach(mut self: Box<Self>, expire: Option<Duration>) -> Result<()> {
        self.stop_renewing();
        let sh = &self.quorum;
        let answers: Vec<NodeResult<i64>> = sh
            .script(
                |s| &s.detach,
                &self.key,
                vec![
                    self.key.clone(),
                    self.id.clone(),
                    // Every node the same TTL, in ms, at least 1.
                    expire.map_or(0, |ttl| ttl.as_millis().max(1)).to_string(),
                    // `--hold-at-least`: the command's status, for the history.
                    self.status.map(|s| s.to_string()).unwrap_or_default(),
                ],
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
