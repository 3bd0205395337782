//! The Redis backend: a fair FIFO queue with leased lock keys, on one node or
//! on a quorum of independent nodes.
//!
//! - [`scripts`]: the key layout and the Lua scripts (one per step).
//! - [`node`]: connections to one server.
//! - [`held`]: a held lock and its renewal.
//! - [`list`]: `keys`, what a majority of nodes agree is held.
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

pub mod address;
mod held;
mod list;
mod node;
mod ping;
mod scripts;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::ScriptInvocation;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::held::{renew_loop, RedisHeld};
use self::node::{Node, NodeError, NodeResult};
use self::scripts::Scripts;
pub use address::RedisAddress;

use super::{
    Acquired, Backend, BackendConfig, BackendError, HeldLock, KeyInfo, LockMode, LockRequest,
    Result, WaitProgress,
};

pub struct RedisBackend {
    quorum: Arc<Quorum>,
}

/// The nodes and the lease settings every operation on them uses; one node
/// is the quorum of one.
struct Quorum {
    nodes: Vec<Arc<Node>>,
    server: String,
    ttl: Duration,
    queue_timeout: Duration,
    /// How long a node may take to answer (`--connect-timeout`).
    response_timeout: Duration,
}

impl Quorum {
    fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    fn is_multi_node(&self) -> bool {
        self.nodes.len() > 1
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().max(1) as u64
    }

    fn queue_timeout_ms(&self) -> u64 {
        self.queue_timeout.as_millis().max(1) as u64
    }

    /// Whether node `i`'s answers count toward a majority: only once it has
    /// been up for a lease, unless it keeps every write across a restart. A
    /// node restarted empty has forgotten the holds it granted and would
    /// grant the key again before their holders' next renewal puts it back;
    /// Redlock delays such a restart by a lease, which lc-cli cannot impose
    /// on a server, so it refuses to count it instead.
    fn counts(&self, i: usize) -> bool {
        self.nodes[i].vouches(self.ttl)
    }

    /// The fences of the grants that count.
    fn grants(&self, answers: &[NodeResult<Vec<i64>>]) -> Vec<u64> {
        answers
            .iter()
            .enumerate()
            .filter(|(i, _)| self.counts(*i))
            .filter_map(|(_, a)| match standing(a) {
                Some(Standing::Granted { fence }) => Some(fence),
                _ => None,
            })
            .collect()
    }

    /// How much of a lease we give up to clock drift between nodes and us.
    fn drift(&self) -> Duration {
        self.ttl / 100 + Duration::from_millis(2)
    }

    /// How often a waiter refreshes its entry and re-checks without a wake-up.
    fn recheck(&self) -> Duration {
        (self.ttl.min(self.queue_timeout) / 3)
            .clamp(Duration::from_millis(50), Duration::from_secs(10))
    }

    /// How long an offer lasts on one node; how often the head re-checks.
    fn offer(&self) -> Duration {
        scripts::OFFER.min(self.ttl)
    }

    /// How long a waiter woken by a release has to confirm its grant. On a
    /// quorum its check and its renewal each wait for every node's answer,
    /// up to a response timeout for a frozen one: the offer allows for both,
    /// or one frozen node would keep every waiter from confirming in time.
    fn offer_window(&self) -> Duration {
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
    fn own_grant_ms(&self) -> u64 {
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
    fn poll(&self, ahead: Option<usize>) -> Duration {
        let Some(ahead) = ahead else {
            return self.recheck();
        };
        let near = (self.offer() / 2).saturating_mul(ahead.saturating_add(1).min(1000) as u32);
        near.max(Duration::from_millis(20)).min(self.recheck())
    }

    fn unavailable(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unavailable {
            server: self.server.clone(),
            reason: reason.into(),
        }
    }

    /// Runs `f` on every node at once; answers in node order.
    async fn all<T, F, Fut>(&self, f: F) -> Vec<NodeResult<T>>
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
    async fn script<T>(
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
    async fn reach(&self, timeout: Duration) -> Result<()> {
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
    fn failures<T>(&self, answers: &[NodeResult<T>]) -> String {
        let parts: Vec<String> = answers
            .iter()
            .zip(&self.nodes)
            .filter_map(|(a, n)| a.as_ref().err().map(|e| format!("{}: {e}", n.addr)))
            .collect();
        parts.join("; ")
    }

    /// Unless a majority answered, the error that says so.
    fn need_quorum<T>(&self, answers: &[NodeResult<T>]) -> Result<()> {
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

/// What one node said about a waiter (the answers of ENQUEUE and CHECK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Granted {
        fence: u64,
    },
    Waiting {
        ahead: usize,
    },
    Busy,
    Withdrawn,
    /// The key is used another way: 0 as a lock, N with --limit N.
    Disagrees {
        theirs: u32,
    },
}

/// A waiter's state across its rounds.
struct InLine<'a> {
    request: &'a LockRequest,
    id: &'a str,
    /// Its place (quorum); 0 on one node, which hands out its own.
    ticket: u64,
    /// When the last round was sent: a grant in it started no earlier.
    sent: Instant,
    answers: Vec<NodeResult<Vec<i64>>>,
}

/// What a round of answers means for a waiter (see `take_stock`).
enum Stock {
    Held(Box<dyn HeldLock>),
    EnqueuedAgain,
    Waiting {
        ahead: Option<usize>,
        /// What is left of an unconfirmed offer to the waiter ahead.
        offer_left: Option<Duration>,
    },
}

/// The longest unconfirmed offer the nodes report to the first in line:
/// by then it has passed on everywhere (to be noticed by the next script).
fn offer_left(answers: &[NodeResult<Vec<i64>>]) -> Option<Duration> {
    answers
        .iter()
        .filter_map(|a| match a.as_deref() {
            Ok([2, _, left, ..]) if *left >= 0 => Some(Duration::from_millis(*left as u64)),
            _ => None,
        })
        .max()
}

/// How many wait ahead of us: the smallest number a majority agrees is at
/// least that (the majority-th smallest), or the largest known.
fn ahead_in_line(standings: &[Standing], majority: usize) -> Option<usize> {
    let mut aheads: Vec<usize> = standings
        .iter()
        .filter_map(|s| match s {
            Standing::Waiting { ahead } => Some(*ahead),
            _ => None,
        })
        .collect();
    aheads.sort_unstable();
    aheads
        .get(majority.saturating_sub(1))
        .or(aheads.last())
        .copied()
}

fn standing(answer: &NodeResult<Vec<i64>>) -> Option<Standing> {
    let v = answer.as_ref().ok()?;
    let (status, value) = (*v.first()?, v.get(1).copied().unwrap_or(0));
    Some(match status {
        0 => Standing::Busy,
        1 => Standing::Granted {
            fence: value.max(0) as u64,
        },
        2 => Standing::Waiting {
            ahead: value.max(0) as usize,
        },
        4 => Standing::Disagrees {
            theirs: value.max(0) as u32,
        },
        _ => Standing::Withdrawn,
    })
}

impl RedisBackend {
    pub async fn connect(address: &RedisAddress, config: &BackendConfig) -> Result<Self> {
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
        Ok(RedisBackend { quorum })
    }
}

/// Blocks on a waiter's wake-up list on one node, forwarding each push.
async fn listen(node: Arc<Node>, wake: String, block: Duration, tx: mpsc::Sender<()>) {
    loop {
        if let Ok(mut conn) = node.blocking_conn().await {
            loop {
                let popped = tokio::time::timeout(
                    block + Duration::from_secs(2),
                    redis::cmd("BLPOP")
                        .arg(&wake)
                        .arg(format!("{:.3}", block.as_secs_f64()))
                        .query_async::<Option<(String, String)>>(&mut conn),
                )
                .await;
                match popped {
                    Ok(Ok(Some(_))) => {
                        let _ = tx.try_send(());
                    }
                    Ok(Ok(None)) => {}
                    _ => break,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The mode arguments of ENQUEUE and CHECK (after nonblock/refresh), and
/// of RENEW: `x`, `s` or `l`, and N.
pub(super) fn mode_args(mode: LockMode) -> [String; 2] {
    match mode {
        LockMode::Exclusive => ["x".into(), "1".into()],
        LockMode::Shared => ["s".into(), "0".into()],
        LockMode::Limit(n) => ["l".into(), n.to_string()],
    }
}

/// The refusal of a request whose mode a node's key disagrees with.
fn disagreement(request: &LockRequest, standings: &[Standing]) -> Option<BackendError> {
    standings.iter().find_map(|s| match s {
        Standing::Disagrees { theirs } => {
            let theirs = match *theirs {
                0 => LockMode::Exclusive,
                n => LockMode::limit(n),
            };
            Some(request.mode.conflict(&request.key, theirs))
        }
        _ => None,
    })
}

impl RedisBackend {
    fn args(&self, request: &LockRequest, id: &str, ticket: u64) -> Vec<String> {
        let sh = &self.quorum;
        vec![
            request.key.clone(),
            id.to_string(),
            request.source.clone(),
            sh.ttl_ms().to_string(),
            sh.queue_timeout_ms().to_string(),
            ticket.to_string(),
        ]
    }

    /// Gives back whatever `id` has on every node: a hold, a place in line.
    async fn leave(&self, key: &str, id: &str) -> Vec<NodeResult<i64>> {
        self.quorum
            .script(|s| &s.release, key, vec![key.to_string(), id.to_string()])
            .await
    }

    /// Turns grants on a majority into a hold. One node: its grant (or the
    /// refresh in CHECK) started the lease no earlier than `sent`. Several:
    /// the lease is renewed on all with the largest fence as the nodes' new
    /// floor, and holds only if a majority confirm within the validity left.
    async fn confirm(
        &self,
        request: &LockRequest,
        id: &str,
        granted: &[u64],
        sent: Instant,
    ) -> Option<Box<dyn HeldLock>> {
        let sh = &self.quorum;
        let fence = granted.iter().copied().max().unwrap_or(0);
        if !sh.is_multi_node() {
            return Some(self.held(request, id, fence, sent + sh.ttl - sh.drift()));
        }
        let start = Instant::now();
        let answers: Vec<NodeResult<i64>> = sh
            .script(
                |s| &s.renew,
                &request.key,
                held::renew_args(
                    &request.key,
                    id,
                    sh.ttl,
                    fence,
                    &request.source,
                    request.mode,
                ),
            )
            .await;
        let mine = held::Renewal::of(sh, &answers).confirmed;
        let elapsed = start.elapsed();
        if mine >= sh.majority() && elapsed + sh.drift() < sh.ttl {
            Some(self.held(request, id, fence, start + sh.ttl - sh.drift()))
        } else {
            None
        }
    }

    fn held(
        &self,
        request: &LockRequest,
        id: &str,
        fence: u64,
        valid_until: Instant,
    ) -> Box<dyn HeldLock> {
        let (tx, rx) = watch::channel(None);
        let (valid_tx, valid_rx) = watch::channel(valid_until);
        let renewer = tokio::spawn(renew_loop(
            self.quorum.clone(),
            held::renew_args(
                &request.key,
                id,
                self.quorum.ttl,
                fence,
                &request.source,
                request.mode,
            ),
            valid_tx,
            tx,
        ));
        Box::new(RedisHeld {
            quorum: self.quorum.clone(),
            key: request.key.clone(),
            id: id.to_string(),
            fence,
            lost: rx,
            valid_until: valid_rx,
            renewer: Some(renewer),
        })
    }

    async fn try_once(&self, request: &LockRequest, id: &str) -> Result<Acquired> {
        let sh = &self.quorum;
        let mut args = self.args(request, id, 0);
        args.push("1".into());
        args.extend(mode_args(request.mode));
        args.push(sh.own_grant_ms().to_string());
        args.push(sh.offer_window().as_millis().max(1).to_string());
        let sent = Instant::now();
        let answers: Vec<NodeResult<Vec<i64>>> =
            sh.script(|s| &s.enqueue, &request.key, args).await;
        let standings: Vec<Standing> = answers.iter().filter_map(standing).collect();
        if let Some(refused) = disagreement(request, &standings) {
            self.leave(&request.key, id).await;
            return Err(refused);
        }
        let granted = sh.grants(&answers);
        if granted.len() >= sh.majority() {
            if let Some(held) = self.confirm(request, id, &granted, sent).await {
                return Ok(Acquired::Held(held));
            }
        }
        let any_grant = answers
            .iter()
            .any(|a| matches!(standing(a), Some(Standing::Granted { .. })));
        if any_grant {
            self.leave(&request.key, id).await;
        }
        sh.need_quorum(&answers)?;
        Ok(Acquired::Busy)
    }

    /// Quorum: the largest of a majority of fresh tickets (see the module docs).
    async fn ticket(&self, key: &str) -> Result<u64> {
        let seq = format!("{}seq", scripts::prefix(key));
        let answers: Vec<NodeResult<u64>> = self
            .quorum
            .all(move |node| {
                let seq = seq.clone();
                async move { node.cmd(redis::cmd("INCR").arg(&seq)).await }
            })
            .await;
        self.quorum.need_quorum(&answers)?;
        Ok(answers
            .iter()
            .filter_map(|a| a.as_ref().ok())
            .copied()
            .max()
            .unwrap_or(0))
    }

    /// Waits in line until a majority grants the key, the wait is
    /// cancelled, withdrawn by a reset, or out of contact for longer than
    /// the queue timeout; one round of [`Self::take_stock`] per wake-up or
    /// re-check.
    async fn wait_in_line(
        &self,
        request: &LockRequest,
        id: &str,
        cancel: &CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        let sh = &self.quorum;
        let mut line = self.enqueue(request, id).await?;
        // Aborted when dropped, on every way out.
        let (_listeners, mut wake) = self.wake_ups(&request.key, id);
        let mut last_contact = Instant::now();
        let mut last_ahead = None;
        loop {
            let poll = match self.take_stock(&mut line, &mut last_contact).await? {
                Stock::Held(held) => {
                    if cancel.is_cancelled() {
                        self.leave(&request.key, id).await;
                        return Ok(Acquired::Cancelled);
                    }
                    return Ok(Acquired::Held(held));
                }
                Stock::EnqueuedAgain => continue,
                Stock::Waiting { ahead, offer_left } => {
                    if ahead != last_ahead {
                        last_ahead = ahead;
                        progress(WaitProgress { ahead });
                    }
                    // Just after a dead waiter's offer runs out, if sooner.
                    let poll = sh.poll(ahead);
                    offer_left.map_or(poll, |left| poll.min(left + Duration::from_millis(10)))
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => {
                    self.leave(&request.key, id).await;
                    return Ok(Acquired::Cancelled);
                }
                _ = wake.recv() => {}
                _ = tokio::time::sleep(poll) => {}
            }
            let mut args = self.args(request, id, line.ticket);
            args.push(if sh.is_multi_node() { "0" } else { "1" }.into());
            args.extend(mode_args(request.mode));
            args.push(sh.own_grant_ms().to_string());
            args.push(sh.offer_window().as_millis().max(1).to_string());
            line.sent = Instant::now();
            line.answers = sh.script(|s| &s.check, &request.key, args).await;
        }
    }

    /// Takes a ticket (quorum) and enqueues on every node; a majority must
    /// answer.
    async fn enqueue<'a>(&self, request: &'a LockRequest, id: &'a str) -> Result<InLine<'a>> {
        let ticket = if self.quorum.is_multi_node() {
            self.ticket(&request.key).await?
        } else {
            0
        };
        let mut line = InLine {
            request,
            id,
            ticket,
            sent: Instant::now(),
            answers: Vec::new(),
        };
        self.send_enqueue(&mut line).await;
        if let Err(e) = self.quorum.need_quorum(&line.answers) {
            self.leave(&request.key, id).await;
            return Err(e);
        }
        Ok(line)
    }

    async fn send_enqueue(&self, line: &mut InLine<'_>) {
        let mut args = self.args(line.request, line.id, line.ticket);
        args.push("0".into());
        args.extend(mode_args(line.request.mode));
        args.push(self.quorum.own_grant_ms().to_string());
        args.push(self.quorum.offer_window().as_millis().max(1).to_string());
        line.sent = Instant::now();
        line.answers = self
            .quorum
            .script(|s| &s.enqueue, &line.request.key, args)
            .await;
    }

    /// One listener per node on the waiter's wake-up list.
    fn wake_ups(&self, key: &str, id: &str) -> (JoinSet<()>, mpsc::Receiver<()>) {
        let sh = &self.quorum;
        let (tx, wake) = mpsc::channel(8);
        let mut listeners = JoinSet::new();
        let wake_key = format!("{}wake:{id}", scripts::prefix(key));
        for node in &sh.nodes {
            listeners.spawn(listen(
                node.clone(),
                wake_key.clone(),
                sh.recheck() * 2,
                tx.clone(),
            ));
        }
        (listeners, wake)
    }

    /// What the last round's answers mean: withdrawn (an error), granted by
    /// a majority (held, or given back and enqueued again when confirming
    /// took too long), out of contact too long (an error), or still waiting.
    async fn take_stock(&self, line: &mut InLine<'_>, last_contact: &mut Instant) -> Result<Stock> {
        let sh = &self.quorum;
        let (key, id) = (&line.request.key, line.id);
        let standings: Vec<Standing> = line.answers.iter().filter_map(standing).collect();
        if let Some(refused) = disagreement(line.request, &standings) {
            self.leave(key, id).await;
            return Err(refused);
        }
        if standings.contains(&Standing::Withdrawn) {
            self.leave(key, id).await;
            return Err(BackendError::Refused {
                server: sh.server.clone(),
                reason: format!("the wait for '{key}' was withdrawn by a reset --source"),
            });
        }
        let granted = sh.grants(&line.answers);
        if granted.len() >= sh.majority() {
            if let Some(held) = self.confirm(line.request, id, &granted, line.sent).await {
                return Ok(Stock::Held(held));
            }
            // Too slow to be safe: give everything back, keep the ticket.
            self.leave(key, id).await;
            self.send_enqueue(line).await;
            return Ok(Stock::EnqueuedAgain);
        }
        if line.answers.iter().filter(|a| a.is_ok()).count() >= sh.majority() {
            *last_contact = Instant::now();
        } else if last_contact.elapsed() > sh.queue_timeout {
            self.leave(key, id).await;
            return Err(sh
                .need_quorum(&line.answers)
                .err()
                .unwrap_or_else(|| sh.unavailable("lost contact while waiting in line")));
        }
        Ok(Stock::Waiting {
            offer_left: offer_left(&line.answers),
            ahead: ahead_in_line(&standings, sh.majority()),
        })
    }
}

#[async_trait]
impl Backend for RedisBackend {
    async fn ping(&self) -> Result<super::ping::PingReport> {
        self.ping_nodes().await
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
        let answers: Vec<NodeResult<i64>> =
            sh.script(|s| &s.unlock, key, vec![key.to_string()]).await;
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
            .script(|s| &s.reset_key, key, vec![key.to_string()])
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
                    vec![key.clone(), source.to_string()],
                )
                .await;
            sh.need_quorum(&answers)?;
        }
        Ok(())
    }

    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        list::keys(&self.quorum).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quorum_of(nodes: usize, ttl: u64, queue_timeout: u64) -> Quorum {
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

    #[test]
    fn script_answers() {
        assert_eq!(
            standing(&Ok(vec![1, 7])),
            Some(Standing::Granted { fence: 7 })
        );
        assert_eq!(
            standing(&Ok(vec![2, 3])),
            Some(Standing::Waiting { ahead: 3 })
        );
        assert_eq!(standing(&Ok(vec![0, 0])), Some(Standing::Busy));
        assert_eq!(standing(&Ok(vec![3, 0])), Some(Standing::Withdrawn));
        assert_eq!(standing(&Ok(vec![])), None);
        assert_eq!(standing(&Err(NodeError::Transport("down".into()))), None);
    }

    #[test]
    fn the_first_in_line_learns_how_long_an_offer_has_left() {
        let t = |s: &str| -> NodeResult<Vec<i64>> { Err(NodeError::Transport(s.into())) };
        assert_eq!(offer_left(&[Ok(vec![2, 0, -1])]), None);
        assert_eq!(
            offer_left(&[Ok(vec![2, 0, 300]), t("down"), Ok(vec![2, 0, 700])]),
            Some(Duration::from_millis(700))
        );
        // Not a waiting answer, or one from before offers: nothing known.
        assert_eq!(offer_left(&[Ok(vec![1, 9]), Ok(vec![2, 3])]), None);
    }

    #[test]
    fn ahead_is_what_a_majority_agrees_on() {
        let w = |ahead| Standing::Waiting { ahead };
        assert_eq!(ahead_in_line(&[w(3)], 1), Some(3));
        assert_eq!(ahead_in_line(&[w(4), w(1), w(2)], 2), Some(2));
        assert_eq!(ahead_in_line(&[w(5), Standing::Busy], 2), Some(5));
        assert_eq!(ahead_in_line(&[], 2), None);
    }

    #[test]
    fn key_names_share_a_hash_tag() {
        assert_eq!(scripts::prefix("deploy/prod"), "lc-cli:{deploy/prod}:");
        assert_eq!(scripts::source_index("host-7"), "lc-cli:source:host-7");
    }
}
