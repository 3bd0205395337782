//! A key we hold: the keys older than ours let it hold (`line.rs`).
//! Lost when the lease is gone (revoked, expired, or not renewed for too
//! long) or our key is deleted from outside. A hold taken with
//! `--cancel-running` also watches the notice a newer such request leaves
//! on its lease; one with `--order` raises the key's mark on a release
//! after a command that ended with status 0.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, EventType, Txn, TxnOp, WatchOptions, WatchStream};

use super::arrive::{MarkSeen, Rules};
use super::history::Opened;
use super::history::{self, Trim};
use super::lease::{Lease, LeaseEnd};
use super::names::{self, KeyData, OwnKey};
use super::rpc::Rpc;
use super::slots;
use crate::backend::history::Ending;
use crate::backend::{BackendError, Expiry, HeldLock, LockMode, LostReason, Result};

pub(super) struct EtcdHeld {
    rpc: Rpc,
    lease: Lease,
    place: OwnKey,
    /// The revision of the answer that showed us first (etcdctl's
    /// ETCD_LOCK_REV).
    header_rev: i64,
    source: String,
    /// Written again into a kept hold's value: its mode stays.
    mode: LockMode,
    /// Kept across calls of `lost` (it may be cancelled and called again).
    watch: Option<WatchStream>,
    /// Changes up to this revision have been seen.
    seen_rev: i64,
    released: bool,
    /// The request's fields, and the mark as the grant read it.
    rules: Option<(Rules, MarkSeen)>,
    /// The command's exit status (`command_ended`).
    status: Option<i32>,
    /// The cancel notice is watched from after this revision: our key's
    /// creation (any notice on our lease is for us), or the last direct
    /// read of it after the history was compacted.
    notice_seen: i64,
    /// The key's history as the grant read it: what the release trims.
    trim: Trim,
    /// When the grant was seen (ms since the epoch), for the history.
    granted_ms: u64,
    /// The slot claimed (`--limit`, `slots.rs`): its key is on our lease.
    slot: Option<u32>,
    /// Our history entry as the grant opened it (None: not opened).
    opened: Option<Opened>,
}

/// How long without renewal the command may run on: two thirds of the TTL.
pub(super) fn term_after_contact(ttl: Duration) -> Duration {
    ttl * 2 / 3
}

/// How long after the last renewal the command must be gone: the server
/// expires the lease no sooner than the TTL after it renewed it; a
/// twentieth is left for the kill to land.
pub(super) fn kill_after_contact(ttl: Duration) -> Duration {
    ttl - ttl / 20
}

impl EtcdHeld {
    pub(super) fn new(
        rpc: Rpc,
        lease: Lease,
        place: OwnKey,
        header_rev: i64,
        source: String,
        mode: LockMode,
    ) -> Self {
        EtcdHeld {
            mode,
            rpc,
            lease,
            seen_rev: header_rev,
            place,
            header_rev,
            source,
            watch: None,
            released: false,
            rules: None,
            status: None,
            notice_seen: 0,
            trim: Trim::default(),
            granted_ms: history::now_ms(),
            slot: None,
            opened: None,
        }
    }

    /// With our history entry as the grant opened it.
    pub(super) fn with_opened(mut self, opened: Option<Opened>) -> Self {
        if let Some(o) = opened {
            self.granted_ms = o.granted_ms;
        }
        self.opened = opened;
        self
    }

    /// With the slot the grant claimed.
    pub(super) fn with_slot(mut self, slot: Option<u32>) -> Self {
        self.slot = slot;
        self
    }

    /// A kept hold's puts: our key, and our slot's key beside it, on the
    /// new lease (or none), so the slot stays taken while the key is held.
    fn kept_ops(
        &self,
        key: &str,
        data: Vec<u8>,
        put: Option<etcd_client::PutOptions>,
    ) -> Vec<TxnOp> {
        let mut ops = vec![TxnOp::put(key, data, put.clone())];
        if let Some(slot) = self.slot_key() {
            ops.push(TxnOp::put(slot, key, put));
        }
        ops
    }

    /// The slot's key, when we have one.
    fn slot_key(&self) -> Option<String> {
        let (rules, _) = self.rules.as_ref()?;
        Some(slots::key(&rules.state, self.slot?))
    }

    /// The slot as `LC_SLOT` shows it: its name in a named pool.
    fn slot_shown(&self) -> Option<String> {
        let names = self
            .rules
            .as_ref()
            .map(|(r, _)| r.extras.slots.clone())
            .unwrap_or_default();
        self.slot.map(|i| slots::shown(i, &names))
    }

    /// With the key's history as the grant's transaction read it.
    pub(super) fn with_trim(mut self, trim: Trim) -> Self {
        self.trim = trim;
        self
    }

    /// The entry of this hold as `data` says (open where `ending` is
    /// None), and its key (None without the request's rules: no history is
    /// written).
    fn entry(&self, data: &KeyData, ending: Option<Ending>) -> Option<(Vec<u8>, String)> {
        let (rules, _) = self.rules.as_ref()?;
        let ended = history::Ended {
            data: Some(data),
            token: self.place.rev,
            granted_ms: Some(self.granted_ms),
            slot: self.slot_shown(),
            ending,
            status: self.status,
            by: None,
        };
        let key = history::entry_key(&rules.history, self.place.key.as_bytes());
        Some((ended.encode(), key))
    }

    /// The entry of this hold ended as `ending`, the transaction that
    /// writes it `lost` unless whoever deleted our key or saw it gone wrote
    /// one (it is absent, or open as we opened it), and its key.
    fn ended(&self, ending: Ending) -> Option<(Vec<u8>, Txn, String)> {
        let (rules, _) = self.rules.as_ref()?;
        let mut data =
            KeyData::new(&self.source, self.mode, false).with_fields(rules.fields.clone());
        data.since_ms = rules.since_ms;
        let (entry, key) = self.entry(&data, Some(ending))?;
        let (lost, _) = self.entry(&data, Some(Ending::Lost))?;
        let absent = history::put_when(&key, lost.clone(), 0, None);
        let lost = match self.opened.map(|o| o.rev).filter(|r| *r > 0) {
            Some(rev) => history::put_when(&key, lost, rev, None).or_else([TxnOp::txn(absent)]),
            None => absent,
        };
        Some((entry, lost, key))
    }

    /// The transaction that ends the hold: if our key is still ours, it is
    /// deleted and the entry `released` (with the command's status) put,
    /// the oldest entries past the cap deleted; else (the lease ran out, a
    /// delete from outside) the entry `lost` is put unless whoever deleted
    /// it or saw it gone wrote one.
    fn release_txn(&self) -> Txn {
        let key = self.place.key.as_str();
        let mine = Compare::create_revision(key, CompareOp::Equal, self.place.rev);
        let mut then = Vec::new();
        let mut otherwise = Vec::new();
        if let Some((entry, lost, entry_key)) = self.ended(Ending::Released) {
            then.extend(self.trim.deletes());
            then.push(TxnOp::put(entry_key, entry, None));
            otherwise.push(TxnOp::txn(lost));
        }
        then.push(TxnOp::delete(key, None));
        if let Some(slot) = self.slot_key() {
            then.push(TxnOp::delete(slot, None));
        }
        Txn::new().when([mine]).and_then(then).or_else(otherwise)
    }

    /// With the request's fields and the mark its grant read.
    pub(super) fn with_rules(mut self, rules: Rules, mark: MarkSeen) -> Self {
        self.rules = Some((rules, mark));
        self.notice_seen = self.place.rev;
        self
    }

    /// The notice a newer `--cancel-running` request leaves us, when we
    /// took the key with `--cancel-running`.
    fn cancel_key(&self) -> Option<String> {
        let (rules, _) = self.rules.as_ref()?;
        rules
            .extras
            .cancel
            .then(|| names::cancel_key(&rules.state, self.lease.id))
    }

    /// The notice, if one is there (after a watch lost its history).
    async fn read_cancel(&self) -> Result<Option<LostReason>> {
        let Some(key) = self.cancel_key() else {
            return Ok(None);
        };
        let resp = self.get("reading the cancel notice", key).await?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| LostReason::cancelled(names::notice_rival(kv.value()))))
    }

    /// The mark to write on release: Some((order, mark seen)) after a
    /// command with an order that ended with status 0.
    fn raise(&self) -> Option<(u64, MarkSeen)> {
        let (rules, seen) = self.rules.as_ref()?;
        match (rules.extras.order, self.status) {
            (Some(order), Some(0)) => Some((order, *seen)),
            _ => None,
        }
    }

    /// Deletes our key and raises the mark to our order, in one
    /// transaction that holds while the mark is as last read; read again
    /// and retried when it was changed (`mark --clear`) in between.
    async fn release_raising(&mut self, order: u64, mut seen: MarkSeen) -> Result<()> {
        let (rules, _) = self.rules.as_ref().expect("raise() had rules");
        let mark = rules.mark_key();
        let key = self.place.key.clone();
        for _ in 0..10 {
            let mut ops = vec![TxnOp::txn(self.release_txn())];
            if seen.value.is_none_or(|m| m < order) {
                ops.push(TxnOp::put(mark.as_str(), order.to_string(), None));
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    mark.as_str(),
                    CompareOp::Equal,
                    seen.mod_rev,
                )])
                .and_then(ops)
                .or_else([TxnOp::get(mark.as_str(), None)]);
            let resp = self
                .rpc
                .call(&format!("deleting {key} and raising the mark"), |mut c| {
                    let txn = txn.clone();
                    async move { c.txn(txn).await }
                })
                .await?;
            if resp.succeeded() {
                return Ok(());
            }
            seen = MarkSeen::of(&super::queue::got(resp.op_responses().first()));
        }
        Err(BackendError::Unavailable {
            server: self.rpc.server.clone(),
            reason: format!("the mark {mark} kept changing; the key is still held"),
        })
    }

    fn kill_by(&self) -> std::time::Instant {
        (self.lease.last_contact() + kill_after_contact(self.lease.ttl)).into_std()
    }

    fn gone(&self, gone: LeaseEnd) -> LostReason {
        match gone {
            // Our key went with the lease: someone else may hold already.
            LeaseEnd::Expired => LostReason::kill_by(
                format!(
                    "the etcd lease {:x} was revoked or expired, so {} is gone",
                    self.lease.id, self.place.key
                ),
                std::time::Instant::now(),
            ),
            LeaseEnd::Silent => LostReason::kill_by(
                format!(
                    "no answer from etcd for longer than the lease TTL ({:?}): the lease and {} must be taken as expired",
                    self.lease.ttl, self.place.key
                ),
                self.kill_by(),
            ),
        }
    }

    fn silent(&self) -> LostReason {
        let ttl = self.lease.ttl;
        LostReason::kill_by(
            format!(
                "no answer from etcd for {:?}, two thirds of the lease TTL ({ttl:?}): {} may expire within {:?}",
                term_after_contact(ttl),
                self.place.key,
                ttl - term_after_contact(ttl),
            ),
            self.kill_by(),
        )
    }

    /// Our key was deleted: from outside (a reset), or with the lease.
    async fn deleted(&self) -> LostReason {
        let id = self.lease.id;
        let probe = tokio::time::timeout(Duration::from_secs(2), async {
            self.rpc
                .call("asking for the lease", |mut c| async move {
                    c.lease_time_to_live(id, None).await
                })
                .await
        });
        match probe.await {
            Ok(Ok(r)) if r.ttl() <= 0 => self.gone(LeaseEnd::Expired),
            _ if self.lease.is_expired() => self.gone(LeaseEnd::Expired),
            _ => LostReason::new(format!(
                "the lock key {} was deleted from outside (a reset?)",
                self.place.key
            )),
        }
    }

    /// One key's value, `what` naming the read in an error.
    async fn get(&self, what: &str, key: String) -> Result<etcd_client::GetResponse> {
        self.rpc
            .call(what, |mut c| {
                let key = key.clone();
                async move { c.get(key, None).await }
            })
            .await
    }

    /// Whether our key is still there with our create revision.
    async fn still_ours(&self) -> Result<bool> {
        let resp = self.get("reading our key", self.place.key.clone()).await?;
        Ok(resp
            .kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == self.place.rev))
    }
}

#[async_trait]
impl HeldLock for EtcdHeld {
    fn token(&self) -> Option<u64> {
        u64::try_from(self.place.rev).ok()
    }

    fn slot(&self) -> Option<u32> {
        self.slot
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("ETCD_LOCK_KEY".into(), self.place.key.clone()),
            ("ETCD_LOCK_REV".into(), self.header_rev.to_string()),
        ]
    }

    fn expiry(&self) -> Option<Expiry> {
        let contact = self.lease.last_contact();
        Some(Expiry {
            term_at: (contact + term_after_contact(self.lease.ttl)).into_std(),
            kill_at: (contact + kill_after_contact(self.lease.ttl)).into_std(),
        })
    }

    async fn lost(&mut self) -> LostReason {
        let term = term_after_contact(self.lease.ttl);
        loop {
            if self.lease.last_contact().elapsed() >= term {
                return self.silent();
            }
            // Woken then to look again: a keepalive may have been answered.
            let look_again = self.lease.last_contact() + term;
            if self.watch.is_none() {
                let key = self.place.key.clone();
                let options = WatchOptions::new().with_start_revision(self.seen_rev + 1);
                // Any notice ever left on our lease is for us: from our
                // key's creation on.
                let notice = self.cancel_key();
                let since = WatchOptions::new().with_start_revision(self.notice_seen + 1);
                let arm = |mut c: etcd_client::Client| {
                    let (key, options, notice, since) =
                        (key.clone(), options.clone(), notice.clone(), since.clone());
                    async move {
                        let mut w = c.watch(key, Some(options)).await?;
                        if let Some(notice) = notice {
                            w.watch(notice, Some(since)).await?;
                        }
                        Ok(w)
                    }
                };
                let armed = tokio::select! {
                    w = self.rpc.call("watching our key", arm) => w,
                    gone = self.lease.until_gone() => return self.gone(gone),
                    _ = tokio::time::sleep_until(look_again) => continue,
                };
                match armed {
                    Ok(w) => self.watch = Some(w),
                    Err(_) => {
                        tokio::select! {
                            gone = self.lease.until_gone() => return self.gone(gone),
                            _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                        }
                    }
                }
            }
            let watch = self.watch.as_mut().expect("armed above");
            tokio::select! {
                msg = watch.message() => match msg {
                    Ok(Some(m)) => {
                        if let Some(h) = m.header() {
                            self.seen_rev = self.seen_rev.max(h.revision());
                        }
                        let ours = self.place.key.as_bytes();
                        for e in m.events() {
                            let Some(kv) = e.kv() else { continue };
                            if kv.key() == ours && e.event_type() == EventType::Delete {
                                return self.deleted().await;
                            }
                            if kv.key() != ours && e.event_type() == EventType::Put {
                                return LostReason::cancelled(names::notice_rival(kv.value()));
                            }
                        }
                        if m.canceled() || m.compact_revision() > 0 {
                            // History we asked for is gone: look at the keys themselves.
                            self.watch = None;
                            if let Ok(false) = self.still_ours().await {
                                return self.deleted().await;
                            }
                            let before = self.seen_rev;
                            match self.read_cancel().await {
                                Ok(Some(cancelled)) => return cancelled,
                                Ok(None) => self.notice_seen = self.notice_seen.max(before),
                                Err(_) => {}
                            }
                        }
                    }
                    _ => self.watch = None,
                },
                gone = self.lease.until_gone() => return self.gone(gone),
                _ = tokio::time::sleep_until(look_again) => {}
            }
        }
    }

    fn command_ended(&mut self, status: i32) {
        self.status = Some(status);
    }

    async fn release(&mut self) -> Result<()> {
        if !self.released {
            if let Some((order, seen)) = self.raise() {
                self.release_raising(order, seen).await?;
                self.released = true;
                return self.lease.revoke().await;
            }
            let key = self.place.key.clone();
            let txn = self.release_txn();
            self.rpc
                .call(&format!("deleting {key}"), |mut c| {
                    let txn = txn.clone();
                    async move { c.txn(txn).await }
                })
                .await?;
            self.released = true;
        }
        self.lease.revoke().await
    }

    /// Takes our key off the lease, in one transaction that checks it is
    /// still ours: its create revision, and so its place at the head of the
    /// queue, stay; then the lease is revoked. With `expire`, the key goes
    /// onto a new lease of that TTL (whole seconds, rounded up; the server
    /// may round up to its minimum) that nobody keeps alive: when it runs
    /// out the server deletes the key, and the next waiter, watching it,
    /// holds (as after a crashed holder).
    async fn detach(mut self: Box<Self>, expire: Option<Duration>) -> Result<()> {
        let key = self.place.key.clone();
        let fields = self.rules.as_ref().map(|(r, _)| r.fields.clone());
        let mut data =
            KeyData::new(&self.source, self.mode, true).with_fields(fields.unwrap_or_default());
        let mut put = None;
        let mut bare = None;
        if let Some(ttl) = expire {
            let secs = ttl.as_secs_f64().ceil().max(1.0) as i64;
            let granted = self
                .rpc
                .call(
                    "granting the lease of a kept hold that expires",
                    |mut c| async move { c.lease_grant(secs, None).await },
                )
                .await?;
            let granted_ms = (granted.ttl().max(1) as u64) * 1000;
            data.expires_ms = Some(data.since_ms + granted_ms);
            put = Some(etcd_client::PutOptions::new().with_lease(granted.id()));
            bare = Some(granted.id());
        }
        let mut ops = self.kept_ops(&key, data.encode(), put);
        // The entry stays open, now saying when the kept hold expires.
        let mut arrived = data.clone();
        if let Some((rules, _)) = &self.rules {
            arrived.since_ms = rules.since_ms;
        }
        if let Some((entry, entry_key)) = self.entry(&arrived, None) {
            ops.push(TxnOp::put(entry_key, entry, None));
        }
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                self.place.rev,
            )])
            .and_then(ops);
        let resp = self
            .rpc
            .call(&format!("detaching {key} from its lease"), |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        // An error may hide a transaction that went through: the new lease
        // is then left to run out on its own (freeing the key at the
        // deadline), never revoked under a key it may carry.
        if !resp?.succeeded() {
            if let Some(id) = bare {
                let _ = self
                    .rpc
                    .call("revoking an unused lease", |mut c| async move {
                        c.lease_revoke(id).await
                    })
                    .await;
            }
            return Err(BackendError::Refused {
                server: self.rpc.server.clone(),
                reason: format!("{key} was gone before it could be kept held"),
            });
        }
        self.released = true;
        self.lease.revoke().await
    }
}
