//! A key we hold: our node is first in the queue.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client as zk;

use super::history::{self, Closed, Closing, Record};
use super::names::{self, Mode, NodeData};
use super::rules::{self, CancelWatch};
use super::session::{OwnWatch, Session, SessionEnd};
use crate::backend::fields::FieldList;
use crate::backend::history::Ending;
use crate::backend::{BackendError, Expiry, HeldLock, LockMode, LostReason, Result, Rival};

pub(super) struct ZkHeld {
    s: Arc<Session>,
    node: String,
    czxid: i64,
    /// Polled in place, never taken while pending, so `lost` can be
    /// cancelled and called again without losing the watch.
    own_watch: Option<OwnWatch>,
    source: String,
    /// The request's field list, kept by a detached hold.
    pub(super) fields: String,
    /// `--order`: what raises the key's mark.
    pub(super) order: Option<rules::Raise>,
    /// `--cancel-running`: the watch on our cancel marker.
    pub(super) cancel: Option<CancelWatch>,
    /// The command's exit status (`command_ended`).
    status: Option<i32>,
    released: bool,
    /// The hold's history entry (`history.rs`): what it says of the hold,
    /// whether its opening (at the grant, before the command) created it,
    /// and what the release writes.
    record: Record,
    opened: bool,
    /// The cap's trim, sent while the command runs (awaited by the
    /// release, so that a short command's session stays for it).
    trimming: Option<tokio::task::JoinHandle<()>>,
    closing: Option<Closing>,
    /// Who cancelled the command (`--cancel-running`), for the entry.
    cancelled_by: Option<String>,
    /// A `--limit` lease's slot (`slots.rs`): its index and its node,
    /// deleted with the lease.
    pub(super) slot: Option<(u32, String)>,
}

impl ZkHeld {
    pub(super) fn new(
        s: Arc<Session>,
        node: String,
        czxid: i64,
        own_watch: OwnWatch,
        source: String,
    ) -> Self {
        ZkHeld {
            s,
            node,
            czxid,
            own_watch: Some(own_watch),
            source,
            fields: String::new(),
            order: None,
            cancel: None,
            status: None,
            released: false,
            record: Record::new("", LockMode::Exclusive),
            opened: false,
            trimming: None,
            closing: None,
            cancelled_by: None,
            slot: None,
        }
    }

    /// Opens the hold's history entry (`history::open`), before the
    /// command starts: `mode`, and when the request arrived (ms since the
    /// epoch, this host's clock).
    pub(super) async fn open_history(&mut self, mode: LockMode, arrived_ms: u64) {
        let granted = history::now_ms();
        let mut r = Record::new(&self.source, mode);
        r.token = u64::try_from(self.czxid).ok();
        r.granted_ms = Some(granted);
        r.waited_ms = Some(granted.saturating_sub(arrived_ms));
        r.fields = FieldList::parse(self.fields.as_bytes()).unwrap_or_default();
        self.record = r.clone();
        let Some(path) = history::entry_path(&self.node) else {
            return;
        };
        (self.opened, self.trimming) = history::open(&self.s, &path, &r).await;
    }

    /// The path of the entry, when it was opened (for a grant given back
    /// at once: it goes with the node).
    pub(super) fn opened_entry(&self) -> Option<String> {
        self.opened
            .then(|| history::entry_path(&self.node))
            .flatten()
    }

    /// What the release writes into the entry (once: kept for a release
    /// tried again).
    async fn closing(&mut self) -> Option<Closing> {
        if self.closing.is_none() {
            if let Some(task) = self.trimming.take() {
                let _ = tokio::time::timeout(self.s.retry_for, task).await;
            }
            let path = history::entry_path(&self.node)?;
            let exists = self.opened;
            let (how, by) = match self.cancelled_by.take() {
                Some(by) => (Ending::Cancelled, Some(by)),
                None => (Ending::Released, None),
            };
            let data = self.record.clone().ended(how, self.status, by).encode();
            let slot = self.slot.as_ref().map(|(_, node)| node.clone());
            self.closing = Some(Closing {
                path,
                data,
                exists,
                slot,
            });
        }
        self.closing.clone()
    }

    /// The deadline of every loss but a deletion from outside: the command
    /// is gone before the server can have expired the session.
    fn kill_by(&self) -> std::time::Instant {
        (self.s.last_contact() + kill_after_contact(self.s.retry_for)).into_std()
    }

    fn gone(&self, gone: SessionEnd) -> LostReason {
        let reason = match gone {
            SessionEnd::Expired => format!(
                "the ZooKeeper session expired (no contact for longer than the session timeout), so {} is gone",
                self.node
            ),
            SessionEnd::Silent => format!(
                "no contact with ZooKeeper for longer than the session timeout ({:?}): the session and {} must be taken as expired",
                self.s.retry_for, self.node
            ),
            SessionEnd::Closed => "the ZooKeeper session was closed".into(),
        };
        LostReason::kill_by(reason, self.kill_by())
    }

    /// Silent for [`term_after_contact`]: the session may still be alive,
    /// but the command must be stopped now to be gone in time.
    fn silent(&self) -> LostReason {
        LostReason::kill_by(
            format!(
                "no contact with ZooKeeper for {:?}, two thirds of the session timeout ({:?}): {} may expire within {:?}",
                term_after_contact(self.s.retry_for),
                self.s.retry_for,
                self.node,
                self.s.retry_for - term_after_contact(self.s.retry_for),
            ),
            self.kill_by(),
        )
    }

    fn deleted(&self) -> LostReason {
        LostReason::new(format!(
            "the lock node {} was deleted from outside (a reset?)",
            self.node
        ))
    }
}

/// How long without contact the command may run on: two thirds of the
/// session timeout, the read timeout ZooKeeper's own client uses.
pub(super) fn term_after_contact(session_timeout: Duration) -> Duration {
    session_timeout * 2 / 3
}

/// How long after the last contact the command must be gone: the server
/// expires the session no sooner than the session timeout after it heard
/// us last; a twentieth is left for the kill to land.
pub(super) fn kill_after_contact(session_timeout: Duration) -> Duration {
    session_timeout - session_timeout / 20
}

/// Resolves when a newer `--cancel-running` request asks us to stop:
/// never without the flag.
async fn cancel_notice(cancel: Option<&mut CancelWatch>, s: &Session) -> Rival {
    match cancel {
        Some(c) => c.notice(s).await,
        None => std::future::pending().await,
    }
}

/// Our node is gone: deleted from outside, or by the server expiring our
/// session (its notification can arrive before the news of the expiry).
/// One request tells which.
async fn expired_meanwhile(s: &Session, node: &str) -> bool {
    let probe = s.retry(|c| async move { c.check_stat(node).await });
    match tokio::time::timeout(Duration::from_secs(2), probe).await {
        Ok(Err(zk::Error::SessionExpired)) => true,
        _ => s.is_expired(),
    }
}

#[async_trait]
impl HeldLock for ZkHeld {
    fn token(&self) -> Option<u64> {
        u64::try_from(self.czxid).ok()
    }

    fn slot(&self) -> Option<u32> {
        self.slot.as_ref().map(|(i, _)| *i)
    }

    fn expiry(&self) -> Option<Expiry> {
        let contact = self.s.last_contact();
        Some(Expiry {
            term_at: (contact + term_after_contact(self.s.retry_for)).into_std(),
            kill_at: (contact + kill_after_contact(self.s.retry_for)).into_std(),
        })
    }

    async fn lost(&mut self) -> LostReason {
        let term = term_after_contact(self.s.retry_for);
        loop {
            if self.s.last_contact().elapsed() >= term {
                return self.silent();
            }
            // Woken then to look again: the heartbeat may have been answered.
            let look_again = self.s.last_contact() + term;
            if self.own_watch.is_none() {
                let armed = tokio::select! {
                    armed = self.s.watch_own(&self.node) => armed,
                    gone = self.s.until_gone() => return self.gone(gone),
                    _ = tokio::time::sleep_until(look_again) => continue,
                };
                match armed {
                    Ok(Some((_, w))) => self.own_watch = Some(w),
                    Ok(None) => return self.deleted(),
                    Err(_) => {
                        // Unreachable for now: the session watch decides.
                        tokio::select! {
                            gone = self.s.until_gone() => return self.gone(gone),
                            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                        }
                    }
                }
            }
            let watch = self.own_watch.as_mut().expect("armed above");
            tokio::select! {
                event = watch => {
                    self.own_watch = None;
                    match event.event_type {
                        zk::EventType::NodeDeleted => {
                            let expired = expired_meanwhile(&self.s, &self.node).await;
                            return if expired { self.gone(SessionEnd::Expired) } else { self.deleted() };
                        }
                        zk::EventType::Session if event.session_state == zk::SessionState::Expired => {
                            return self.gone(SessionEnd::Expired)
                        }
                        // A data change or a state event: look again.
                        _ => {}
                    }
                }
                gone = self.s.until_gone() => return self.gone(gone),
                by = cancel_notice(self.cancel.as_mut(), &self.s) => {
                    self.cancelled_by = Some(by.source.clone());
                    return LostReason::cancelled(by);
                }
                _ = tokio::time::sleep_until(look_again) => {}
            }
        }
    }

    fn command_ended(&mut self, status: i32) {
        self.status = Some(status);
    }

    /// Ok once the server confirmed our node gone (deleted, or with our
    /// session expired): only then is the key free. Unconfirmed, an
    /// `Unavailable` error that the caller retries.
    /// After a command that ended with status 0, with `--order`: the mark
    /// raised with the deletion of our node (`rules::raise_mark`).
    async fn release(&mut self) -> Result<()> {
        if !self.released {
            if let Some(c) = &mut self.cancel {
                c.clear(&self.s).await;
            }
            let mut closing = self.closing().await;
            if let (Some(raise), Some(0)) = (&mut self.order, self.status) {
                self.released =
                    rules::raise_mark(&self.s, raise, &self.node, closing.as_mut()).await?;
                // Raised or not needed: not again.
                self.status = None;
            } else if let Some(c) = closing.as_mut() {
                // The entry closed with the deletion (a failure: deleted
                // alone below, the entry left open reads as freed).
                match history::close(&self.s, &self.node, c).await {
                    Closed::Done => self.released = true,
                    Closed::Unreached => {
                        return Err(BackendError::Unavailable {
                            server: self.s.server.clone(),
                            reason: format!(
                                "deleting {}: no answer from ZooKeeper within {:?}",
                                self.node, self.s.retry_for
                            ),
                        })
                    }
                    Closed::NoNode | Closed::Failed => {}
                }
            }
        }
        if !self.released {
            self.s.delete_confirmed(&self.node).await?;
            self.released = true;
        }
        self.s.close().await;
        Ok(())
    }

    /// Replaces our ephemeral node by a persistent one with the same
    /// sequence digits, in one transaction: the key stays held, at the same
    /// place in the queue, after our session ends. With `expire`, a TTL
    /// node (same name and layout, so Curator sees the same lock node),
    /// which the server deletes once it is that old (at its next container
    /// check, `znode.container.checkIntervalMs`); the next waiter, watching
    /// it, then holds. A server without `zookeeper.extendedTypesEnabled`
    /// refuses the transaction whole: nothing is kept, and our session's
    /// end frees the key.
    async fn detach(mut self: Box<Self>, expire: Option<Duration>) -> Result<()> {
        let Some(name) = self.node.rsplit('/').next().and_then(names::detached_name) else {
            return Err(BackendError::Other(format!(
                "{} is not a queue node",
                self.node
            )));
        };
        // The entry stays open under the kept node (same digits, same entry).
        let dir = &self.node[..self.node.rfind('/').unwrap_or(0)];
        let persistent = format!("{dir}/{name}");
        let mut data = NodeData::new(Mode::Detached, &self.source).with_fields(&self.fields);
        let mut options = zk::CreateMode::Persistent.with_acls(self.s.acls);
        if let Some(ttl) = expire {
            // ZooKeeper's TTLs are whole ms, at least 1.
            let ttl = Duration::from_millis(ttl.as_millis().clamp(1, u64::MAX as u128) as u64);
            data.expires_ms = Some(data.since_ms + ttl.as_millis() as u64);
            options = options.with_ttl(ttl);
        }
        let data = data.encode();
        // A lease's slot is kept with it, the same way (a TTL node of the
        // same TTL made in the same transaction: the server's check finds
        // both old enough at once), its data naming the kept lease.
        let slot = self.slot.as_ref().map(|(_, node)| node.as_str());
        let kept_name = name.as_bytes();
        let (node, target, data, options) =
            (self.node.as_str(), persistent.as_str(), &data, &options);
        let result = self
            .s
            .retry(|c| async move {
                let mut multi = c.new_multi_writer();
                multi.add_create(target, data, options)?;
                multi.add_delete(node, None)?;
                if let Some(slot) = slot {
                    multi.add_delete(slot, None)?;
                    multi.add_create(slot, kept_name, options)?;
                }
                multi.commit().await.map_err(zk::Error::from)
            })
            .await;
        let outcome = match result {
            Ok(_) => Ok(()),
            Err(e) => {
                // The transaction may have succeeded just before a
                // connection loss: then the persistent node is there.
                match self
                    .s
                    .retry(|c| async move { c.check_stat(target).await })
                    .await
                {
                    Ok(Some(_)) => Ok(()),
                    _ if expire.is_some() && e == zk::Error::Unimplemented => {
                        Err(BackendError::Unsupported {
                            server: self.s.server.clone(),
                            reason: "this ZooKeeper server does not create TTL nodes, which --expire needs: start it with zookeeper.extendedTypesEnabled=true (nothing was kept: the key is free again)".to_string(),
                        })
                    }
                    _ => Err(self.s.error(&format!("replacing {node} by {target}"), e)),
                }
            }
        };
        self.released = true;
        self.s.close().await;
        outcome
    }
}
