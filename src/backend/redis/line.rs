//! The wait in line: a waiter takes a ticket (quorum), enqueues on every
//! node, then runs one round of CHECK per wake-up or re-check until a
//! majority grants the key (confirmed into a hold), the wait is cancelled,
//! withdrawn by a reset, or out of contact for longer than the queue
//! timeout. `trylock` is a single round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use std::sync::atomic::Ordering;

use super::answer::{self, ahead_in_line, disagreement, granted_slot, offer_left, NodeAnswer};
use super::fresh;
use super::held::{self, renew_loop, RedisHeld};
use super::node::{Node, NodeResult};
use super::queue;
use super::scripts::{self, mode_args};
use super::RedisBackend;
use crate::backend::{Acquired, BackendError, HeldLock, LockRequest, Result, WaitProgress};

/// A waiter's state across its rounds.
struct Waiter<'a> {
    request: &'a LockRequest,
    id: &'a str,
    /// Its place (quorum); 0 on one node, which hands out its own.
    ticket: u64,
    /// When the last round was sent: a grant in it started no earlier.
    sent: Instant,
    answers: Vec<NodeResult<Vec<i64>>>,
}

/// What a round of answers means for a waiter (see `read_round`).
enum AfterRound {
    Held(Box<dyn HeldLock>),
    /// Outdated or superseded: it has left the line everywhere.
    Ended(Acquired),
    EnqueuedAgain,
    Waiting {
        ahead: Option<usize>,
        /// What is left of an unconfirmed offer to the waiter ahead.
        offer_left: Option<Duration>,
        /// How long until enough nodes count, when that is what holds us up.
        counts_in: Option<Duration>,
    },
}

/// Blocks on a list on one node (a waiter's wake-up list, a holder's
/// cancel list), forwarding each value pushed.
pub(super) async fn listen(
    node: Arc<Node>,
    wake: String,
    block: Duration,
    tx: mpsc::Sender<String>,
) {
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
                    Ok(Ok(Some((_, value)))) => {
                        let _ = tx.try_send(value);
                    }
                    Ok(Ok(None)) => {}
                    _ => break,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl RedisBackend {
    /// The arguments of ENQUEUE and CHECK: `flag` is nonblock or refresh.
    fn args(&self, request: &LockRequest, id: &str, ticket: u64, flag: bool) -> Vec<String> {
        let sh = &self.quorum;
        let mut args = vec![
            request.key.clone(),
            id.to_string(),
            request.source.clone(),
            sh.ttl_ms().to_string(),
            sh.queue_timeout_ms().to_string(),
            ticket.to_string(),
            if flag { "1" } else { "0" }.to_string(),
        ];
        args.extend(mode_args(request.mode));
        args.push(sh.own_grant_ms().to_string());
        args.push(sh.offer_window().as_millis().max(1).to_string());
        args.extend(queue::fields_arg(request));
        args
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
    /// A `--limit` hold's `slot` is the one most nodes gave: the renewal
    /// moves it there on the others, or is refused where another has it.
    async fn confirm(
        &self,
        request: &LockRequest,
        id: &str,
        granted: &[u64],
        slot: Option<u32>,
        sent: Instant,
    ) -> Option<Box<dyn HeldLock>> {
        let sh = &self.quorum;
        let fence = granted.iter().copied().max().unwrap_or(0);
        if !sh.is_multi_node() {
            return Some(self.held(request, id, fence, slot, sent + sh.ttl - sh.drift()));
        }
        let start = Instant::now();
        let answers: Vec<NodeResult<i64>> = sh
            .script(
                |s| &s.renew,
                &request.key,
                held::renew_args(request, id, sh.ttl, fence, slot),
            )
            .await;
        let mine = held::Renewal::of(sh, &answers).confirmed;
        let elapsed = start.elapsed();
        if mine >= sh.majority() && elapsed + sh.drift() < sh.ttl {
            Some(self.held(request, id, fence, slot, start + sh.ttl - sh.drift()))
        } else {
            None
        }
    }

    fn held(
        &self,
        request: &LockRequest,
        id: &str,
        fence: u64,
        slot: Option<u32>,
        valid_until: Instant,
    ) -> Box<dyn HeldLock> {
        let (tx, rx) = watch::channel(None);
        let (valid_tx, valid_rx) = watch::channel(valid_until);
        let renewer = tokio::spawn(renew_loop(
            self.quorum.clone(),
            held::renew_args(request, id, self.quorum.ttl, fence, slot),
            valid_tx,
            tx,
        ));
        let cancel = request
            .extras
            .cancel
            .then(|| queue::cancel_listeners(&self.quorum, &request.key, id));
        Box::new(RedisHeld {
            quorum: self.quorum.clone(),
            key: request.key.clone(),
            id: id.to_string(),
            source: request.source.clone(),
            fence,
            lost: rx,
            valid_until: valid_rx,
            renewer: Some(renewer),
            order: request.extras.order,
            status: None,
            cancel,
            slot,
            cancelled_by: None,
        })
    }

    pub(super) async fn try_once(&self, request: &LockRequest, id: &str) -> Result<Acquired> {
        let sh = &self.quorum;
        let args = self.args(request, id, 0, true);
        let sent = Instant::now();
        let answers: Vec<NodeResult<Vec<i64>>> =
            sh.script(|s| &s.enqueue, &request.key, args).await;
        let said: Vec<NodeAnswer> = answers.iter().filter_map(NodeAnswer::of).collect();
        if let Some(refused) = disagreement(request, &said) {
            self.leave(&request.key, id).await;
            return Err(refused);
        }
        let each: Vec<Option<NodeAnswer>> = answers.iter().map(NodeAnswer::of).collect();
        if let Some(ending) = queue::ending(sh, &each) {
            self.leave(&request.key, id).await;
            return Ok(queue::outcome(sh, &request.key, id, ending).await);
        }
        let granted = answer::grants(sh, &answers);
        if granted.len() >= sh.majority() {
            let slot = granted_slot(sh, &answers);
            if let Some(held) = self.confirm(request, id, &granted, slot, sent).await {
                return Ok(Acquired::Held(held));
            }
        }
        self.note_fresh(request, &answers);
        let any_grant = answers
            .iter()
            .any(|a| matches!(NodeAnswer::of(a), Some(NodeAnswer::Granted { .. })));
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
    /// the queue timeout; one round of [`Self::read_round`] per wake-up or
    /// re-check.
    pub(super) async fn wait_in_line(
        &self,
        request: &LockRequest,
        id: &str,
        cancel: &CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        let sh = &self.quorum;
        let mut line = self.enqueue(request, id).await?;
        // Started once a round says we wait (a key granted at once needs no
        // connection for them: a push waits in its list); aborted when
        // dropped, on every way out.
        let mut wake_ups = None;
        let mut last_contact = Instant::now();
        let mut last_ahead = None;
        loop {
            let poll = match self.read_round(&mut line, &mut last_contact).await? {
                AfterRound::Held(held) => {
                    if cancel.is_cancelled() {
                        self.leave(&request.key, id).await;
                        return Ok(Acquired::Cancelled);
                    }
                    return Ok(Acquired::Held(held));
                }
                AfterRound::Ended(ended) => return Ok(ended),
                AfterRound::EnqueuedAgain => continue,
                AfterRound::Waiting {
                    ahead,
                    offer_left,
                    counts_in,
                } => {
                    if ahead != last_ahead {
                        last_ahead = ahead;
                        progress(WaitProgress { ahead });
                    }
                    // Just after a dead waiter's offer runs out, or the
                    // nodes come to count, if sooner.
                    let soon = |d: Duration| d + Duration::from_millis(10);
                    let poll = sh.poll(ahead);
                    let poll = offer_left.map_or(poll, |left| poll.min(soon(left)));
                    counts_in.map_or(poll, |left| poll.min(soon(left)))
                }
            };
            let (_listeners, wake) =
                wake_ups.get_or_insert_with(|| self.wake_ups(&request.key, id));
            tokio::select! {
                _ = cancel.cancelled() => {
                    self.leave(&request.key, id).await;
                    return Ok(Acquired::Cancelled);
                }
                _ = wake.recv() => {}
                _ = tokio::time::sleep(poll) => {}
            }
            let args = self.args(request, id, line.ticket, !sh.is_multi_node());
            line.sent = Instant::now();
            line.answers = sh.script(|s| &s.check, &request.key, args).await;
        }
    }

    /// Takes a ticket (quorum) and enqueues on every node; a majority must
    /// answer.
    async fn enqueue<'a>(&self, request: &'a LockRequest, id: &'a str) -> Result<Waiter<'a>> {
        let ticket = if self.quorum.is_multi_node() {
            self.ticket(&request.key).await?
        } else {
            0
        };
        let mut line = Waiter {
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

    async fn send_enqueue(&self, line: &mut Waiter<'_>) {
        let args = self.args(line.request, line.id, line.ticket, false);
        line.sent = Instant::now();
        line.answers = self
            .quorum
            .script(|s| &s.enqueue, &line.request.key, args)
            .await;
    }

    /// One listener per node on the waiter's wake-up list.
    fn wake_ups(&self, key: &str, id: &str) -> (JoinSet<()>, mpsc::Receiver<String>) {
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

    /// What the last round's answers mean: withdrawn (an error), outdated
    /// or superseded (`queue::ending`), granted by a majority (held, or
    /// given back and enqueued again when confirming took too long), out of
    /// contact too long (an error), or still waiting.
    async fn read_round(
        &self,
        line: &mut Waiter<'_>,
        last_contact: &mut Instant,
    ) -> Result<AfterRound> {
        let sh = &self.quorum;
        let (key, id) = (&line.request.key, line.id);
        let said: Vec<NodeAnswer> = line.answers.iter().filter_map(NodeAnswer::of).collect();
        if let Some(refused) = disagreement(line.request, &said) {
            self.leave(key, id).await;
            return Err(refused);
        }
        if said.contains(&NodeAnswer::Withdrawn) {
            self.leave(key, id).await;
            return Err(BackendError::Refused {
                server: sh.server.clone(),
                reason: format!("the wait for '{key}' was withdrawn by a reset --source"),
            });
        }
        let each: Vec<Option<NodeAnswer>> = line.answers.iter().map(NodeAnswer::of).collect();
        if let Some(ending) = queue::ending(sh, &each) {
            let ended = queue::outcome(sh, key, id, ending).await;
            self.leave(key, id).await;
            return Ok(AfterRound::Ended(ended));
        }
        let granted = answer::grants(sh, &line.answers);
        if granted.len() >= sh.majority() {
            let slot = granted_slot(sh, &line.answers);
            if let Some(held) = self
                .confirm(line.request, id, &granted, slot, line.sent)
                .await
            {
                return Ok(AfterRound::Held(held));
            }
            // Too slow to be safe: give everything back, keep the ticket.
            self.leave(key, id).await;
            self.send_enqueue(line).await;
            return Ok(AfterRound::EnqueuedAgain);
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
        Ok(AfterRound::Waiting {
            offer_left: offer_left(&line.answers),
            ahead: ahead_in_line(&said, sh.majority()),
            counts_in: self.note_fresh(line.request, &line.answers),
        })
    }

    /// Remembers whether nodes too fresh to count are what this round waits
    /// for (`Backend::wait_reason`), says so once with `-v` while waiting
    /// (`trylock`'s own line says it), and how long until they count.
    fn note_fresh<T>(&self, request: &LockRequest, answers: &[NodeResult<T>]) -> Option<Duration> {
        let sh = &self.quorum;
        let answered: Vec<bool> = answers.iter().map(|a| a.is_ok()).collect();
        let Some(why) = fresh::reason(sh, &answered) else {
            *self.fresh_wait.lock().unwrap() = None;
            return None;
        };
        *self.fresh_wait.lock().unwrap() = Some(answered.clone());
        if self.verbose && !request.nonblock && !self.fresh_said.swap(true, Ordering::Relaxed) {
            // From column 0, over a status line that may be drawn.
            let erase = if crate::terminal::stderr_is_terminal() {
                "\r\x1b[K"
            } else {
                ""
            };
            eprintln!(
                "{erase}lc-cli: waiting for '{}' on {}: {why}",
                request.key, sh.server
            );
        }
        fresh::counts_in(sh, &answered)
    }
}
