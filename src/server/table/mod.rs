//! The lock table: who holds each key and who waits for it, in arrival order.
//!
//! All state changes happen under one short mutex; a waiter is a queue entry
//! and a oneshot sender, woken only when it is its turn. Grants are numbered
//! so a late release (a grant that could not be delivered) can never free a
//! key that has since passed to someone else.
//!
//! A key has one line across modes (`key.rs` has its rules): the head of the
//! line is granted as soon as it may hold beside the current holders, so
//! consecutive shared waiters are granted together, an exclusive waiter
//! blocks the shared ones behind it, and with `--limit N` each release
//! grants exactly the next one. Nobody else is woken.
//!
//! With a write-ahead log, every grant and release is appended to it inside
//! the same mutex, so the log's order is the table's order. The change takes
//! effect in memory at once, but nobody outside can observe it before it is
//! durable: every answer that depends on it (the `+` of a grant, of an
//! Unlock, of a reset) waits first for the [`Durable`] the call returned,
//! and any later grant of the key sits after it in the log.
//!
//! Every grant carries a fencing token, greater than every earlier one (see
//! [`Inner::fresh_token`]). A session hold also has a link: when its
//! holder was last heard from, and a sender whose drop wakes the connection
//! task serving it when the hold is taken away or reclaimed elsewhere.
//!
//! This file holds the table's types and the requests it serves (lock,
//! release, expire, reclaim, reset); `inner.rs` the state under the mutex
//! and the steps every change is made of (grant, release, hand-off, the
//! log's records); `key.rs` one key's line; `listing.rs` what the table
//! shows (Keys, KEYX, the gauges); `restore.rs` its rebuilding from the log
//! at start-up.

mod group;
mod history;
mod inner;
mod keep;
mod key;
mod line;
mod listing;
mod owner;
mod queue;
mod reset;
mod restore;
mod slots;
#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

pub(crate) use self::history::End;
use self::inner::Inner;
pub(crate) use self::key::{Ask, Holder, LinkEnd, NotYours};
use self::key::{Link, QueuedAsk, WaitCount, Waiter};
pub(crate) use self::listing::What;
#[cfg(test)]
pub(crate) use self::owner::SECRET_LEN;
pub(crate) use self::owner::{secret_digest, Fingerprint, Identity, Owner, Secret, Whose};
use super::metrics::Counters;

use crate::mode::LockMode;
use crate::wal::{NotDurable, Stats as WalStats, Ticket, Wal};

/// Identifies one lock request for its whole life: queued, then maybe held.
pub(crate) type GrantId = u64;

/// The fencing token of a grant.
pub(crate) type Token = u64;

/// A grant, as the request that got it sees it.
#[derive(Debug)]
pub(crate) struct Grant {
    pub id: GrantId,
    pub token: Token,
    pub durable: Durable,
    /// For a session hold.
    pub link: Option<LinkEnd>,
    /// A session hold's secret, for its holder only (its Hello asked for
    /// one): the table keeps its digest.
    pub secret: Option<Secret>,
    /// Whose it is (`--token-file`), for the log's line.
    pub owner: Option<Owner>,
    /// A `--limit N` hold's slot (issue 45), told with the grant.
    pub slot: Option<u32>,
}

/// Why a Reclaim is refused while the hold is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReclaimRefused {
    /// Another token's hold.
    NotYours,
    /// The hold has a secret, and the Reclaim did not show it.
    Secret,
}

/// Where the task serving a session hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkState {
    /// It still serves the hold.
    Mine,
    /// A reclaim moved the hold to another connection.
    Moved,
    /// The hold has ended (released, reset, expired).
    Gone,
}

/// What an expiry check found.
#[derive(Debug)]
pub(crate) enum Expiry {
    /// Heard from recently: check again then.
    NotYet(Instant),
    /// Not this task's hold any more.
    Gone,
    /// Due: its release is recorded, the hold still in place. Once that is
    /// durable, [`Table::finish_release`] ends it and hands the key on; if
    /// it cannot be made durable, nothing changed (ask again later).
    Due(Durable),
}

/// What must be durable before a change may be reported (nothing without a
/// log).
#[derive(Debug, Default, Clone)]
#[must_use]
pub(crate) struct Durable(Vec<Ticket>);

impl Durable {
    pub(crate) async fn wait(self) -> Result<(), NotDurable> {
        for ticket in self.0 {
            ticket.wait().await?;
        }
        Ok(())
    }

    fn add(&mut self, other: Durable) {
        self.0.extend(other.0);
    }
}

/// What a queued request is told.
#[derive(Debug)]
pub(crate) enum Notice {
    /// It is now a holder, once its grant is durable. Boxed: every queued
    /// waiter's channel has room for a notice, and only one is sent.
    Granted(Box<Grant>),
    /// A reset by its source removed it from the queue; or a deploy-queue
    /// rule did, and why is kept for it in the table
    /// ([`Table::take_left`]): a notice stays one pointer (every parked
    /// waiter's task keeps room for one).
    Withdrawn,
}

/// Why a deploy-queue rule took a waiter out of its line.
#[derive(Debug)]
pub(crate) enum Left {
    /// `--newest`: a newer request superseded it (who).
    Superseded(crate::proto::RivalWire),
    /// `--order`: its turn came with its order below the key's mark.
    Outdated(u64),
}

pub(crate) enum LockOutcome {
    Granted(Grant),
    /// Queued, with its ticket (its place, shown again after a restart).
    Queued(GrantId, oneshot::Receiver<Notice>, u64),
    /// The key is held or waited for in a mode this one cannot join.
    Conflict(LockMode),
    /// `--newest`: a waiting request ranks above it (who); it does not wait.
    Superseded(crate::proto::RivalWire),
    /// `--order` below the key's mark (the mark).
    Outdated(u64),
    /// It would wait, and its token has this many (its `waits=`) in line.
    OverWaits(u32),
}

/// What a TryLock found.
pub(crate) enum TryOutcome {
    Granted(Grant),
    /// Held (or waited for) by others: it would have to queue.
    Busy,
    Conflict(LockMode),
    /// `--order` below the key's mark (the mark).
    Outdated(u64),
}

/// What became of a request whose client hung up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Withdrawal {
    /// It left the queue.
    Dequeued,
    /// It had been granted meanwhile: the key was released again.
    Released,
    /// Nothing to do (a reset already took it out).
    Gone,
}

/// The holds of one key ended by a reset, and who held them.
#[derive(Debug, Clone)]
pub(crate) struct Released {
    pub key: Vec<u8>,
    pub holders: Vec<Holder>,
    /// The grants that followed, if waiters were next.
    pub next: Vec<Holder>,
}

#[derive(Default)]
pub(crate) struct Table {
    inner: Mutex<Inner>,
}

impl Table {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// From now on, grants and releases are recorded in `wal` first (for a
    /// table just restored from it).
    pub(crate) fn attach_wal(&self, wal: Wal) {
        self.lock_inner().wal = Some(wal);
    }

    /// The log's counters, with a log.
    pub(crate) fn wal_stats(&self) -> Option<WalStats> {
        self.lock_inner().wal.as_ref().map(Wal::stats)
    }

    /// Blocks until everything appended to the log so far is durable (Ok
    /// without a log); for start-up, before any client is served.
    pub(crate) fn sync_wal(&self) -> Result<(), NotDurable> {
        match &self.lock_inner().wal {
            Some(wal) => wal.sync(),
            None => Ok(()),
        }
    }

    /// Writes what is pending to the log and stops its writer (shutdown);
    /// returns its final counters. Blocks: run it off the async threads.
    pub(crate) fn close_wal(&self) -> Option<WalStats> {
        let inner = self.lock_inner();
        let wal = inner.wal.as_ref()?;
        wal.close();
        Some(wal.stats())
    }

    fn lock_inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere must not take every key down with it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// No token given from now on is at or below `floor` (the log's).
    pub(crate) fn raise_token_floor(&self, floor: Token) {
        let mut inner = self.lock_inner();
        inner.last_token = inner.last_token.max(floor);
    }

    /// Takes the key if `ask` may hold it now and nobody waits, else queues
    /// behind the current waiters.
    pub(crate) fn lock(&self, key: &[u8], ask: &Ask) -> LockOutcome {
        let mut inner = self.lock_inner();
        let state = inner.keys.get(key);
        if let Some(theirs) = state.and_then(|s| s.mode()) {
            if !ask.mode.agrees(theirs) {
                return LockOutcome::Conflict(theirs);
            }
        }
        // Its place: a ticket shown again (a waiter back after a restart),
        // else a fresh one.
        let since = match ask.ticket {
            Some(t) => UNIX_EPOCH + Duration::from_nanos(t),
            None => inner.fresh_ticket(),
        };
        if ask.fields.is_some() {
            if let queue::Joined::Done(outcome) = inner.join(key, ask, since) {
                return outcome;
            }
        }
        // A request of a group for several keys is never granted alone.
        let group = group::name_of(ask);
        let free = group.is_none()
            && inner.line_open(key)
            && inner.keys.get(key).is_none_or(|s| s.admits(ask.mode));
        let id = inner.fresh_id();
        if free {
            return LockOutcome::Granted(inner.grant(key, id, ask));
        }
        // Its token's `waits=`: one more waiter of it, or the refusal.
        let counted = match (&ask.owner, ask.waits) {
            (Some(o), Some(cap)) => {
                let count = inner.waiting_by.entry(o.fingerprint.get()).or_default();
                if count.load(Ordering::Relaxed) >= cap {
                    return LockOutcome::OverWaits(cap);
                }
                Some(WaitCount::new(count.clone()))
            }
            _ => None,
        };
        let (tx, rx) = oneshot::channel();
        if !inner.keys.contains_key(key) {
            inner.keys.insert(key.into(), Box::default());
        }
        let state = inner.keys.get_mut(key).expect("just made");
        let waiter = Waiter {
            id,
            ask: QueuedAsk::new(ask, counted),
            since,
            notify: tx,
        };
        match ask.ticket {
            Some(_) => state.waiters.insert_by_since(waiter),
            None => state.waiters.push_back(waiter),
        }
        if let Some(name) = group {
            inner.join_group(name, key, id);
            inner.promote(key, &Durable::default());
        }
        let ticket = since
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        LockOutcome::Queued(id, rx, ticket)
    }

    /// Takes the key only if `ask` may hold it now and nobody waits for it.
    pub(crate) fn try_lock(&self, key: &[u8], ask: &Ask) -> TryOutcome {
        let mut inner = self.lock_inner();
        let order = queue::Rules::of(ask.fields.as_deref()).order;
        if let (Some(order), Some(&mark)) = (order, inner.marks.get(key)) {
            if order < mark {
                return TryOutcome::Outdated(mark);
            }
        }
        if let Some(state) = inner.keys.get(key) {
            if let Some(theirs) = state.mode().filter(|&m| !ask.mode.agrees(m)) {
                return TryOutcome::Conflict(theirs);
            }
            if !inner.line_open(key) || !state.admits(ask.mode) {
                return TryOutcome::Busy;
            }
        }
        let id = inner.fresh_id();
        TryOutcome::Granted(inner.grant(key, id, ask))
    }

    /// A session holder is heard from (a heartbeat on its connection).
    pub(crate) fn heard(&self, key: &[u8], id: GrantId, gen: u64) {
        let mut inner = self.lock_inner();
        if let Some(link) = inner.link_mut(key, id, gen) {
            link.heard = Instant::now();
        }
    }

    /// The owner (token identity) of hold `id` of `key`, if it has one.
    pub(crate) fn owner_of(&self, key: &[u8], id: GrantId) -> Option<Owner> {
        let inner = self.lock_inner();
        inner.keys.get(key)?.hold(id)?.owner().cloned()
    }

    /// Whether the task of connection `gen` still serves session hold `id`.
    pub(crate) fn link_state(&self, key: &[u8], id: GrantId, gen: u64) -> LinkState {
        let inner = self.lock_inner();
        match inner.keys.get(key).and_then(|s| s.hold(id)) {
            Some(h) => match h.link() {
                Some(link) if link.gen == gen => LinkState::Mine,
                Some(_) => LinkState::Moved,
                None => LinkState::Gone,
            },
            None => LinkState::Gone,
        }
    }

    /// First half of the expiry of session hold `id`, if its holder has not
    /// been heard from for `timeout`: records its release, as an Unlock's
    /// [`Table::begin_release`] does, and leaves the hold in place. The key
    /// is never handed on before its expiry is in the log, else a restart
    /// would restore a hold the server had already handed on.
    pub(crate) fn expire(&self, key: &[u8], id: GrantId, gen: u64, timeout: Duration) -> Expiry {
        let mut inner = self.lock_inner();
        let Some(link) = inner.link_mut(key, id, gen) else {
            return Expiry::Gone;
        };
        let due = link.heard + timeout;
        if Instant::now() < due {
            return Expiry::NotYet(due);
        }
        let token = inner.keys[key].hold(id).expect("its link").token;
        Expiry::Due(inner.record_release(key, token))
    }

    /// When hold `id` of `key` expires (a kept hold with `--expire`).
    pub(crate) fn expires(&self, key: &[u8], id: GrantId) -> Option<SystemTime> {
        let inner = self.lock_inner();
        inner.keys.get(key)?.hold(id)?.expires()
    }

    /// First half of the expiry of kept hold `id` (`lock KEY --expire`) at
    /// its deadline: records its release, as [`Table::expire`] does for a
    /// session, and leaves the hold in place until that is durable
    /// ([`Table::finish_release`] then ends it and hands the key on).
    pub(crate) fn expire_kept(&self, key: &[u8], id: GrantId) -> Expiry {
        let inner = self.lock_inner();
        let Some(holder) = inner.keys.get(key).and_then(|s| s.hold(id)) else {
            return Expiry::Gone;
        };
        let Some(expires) = holder.expires() else {
            return Expiry::Gone;
        };
        if let Ok(left) = expires.duration_since(SystemTime::now()) {
            if !left.is_zero() {
                return Expiry::NotYet(Instant::now() + left);
            }
        }
        Expiry::Due(inner.record_release(key, holder.token))
    }

    /// Moves session hold `token` of `key` to a new connection, if it is
    /// still held under that token.
    #[cfg(test)]
    pub(crate) fn reclaim(&self, key: &[u8], token: Token) -> Option<Grant> {
        self.reclaim_by(key, token, None, Whose::Any, None)
            .ok()
            .flatten()
    }

    /// As [`Table::reclaim`], showing `secret` (a hold granted with one
    /// is refused without it), for a caller who may reclaim only `whose`
    /// holds (and those without an owner: restored from a log of an
    /// earlier release); the hold is then `owner`'s, if given and it had
    /// none.
    pub(crate) fn reclaim_by(
        &self,
        key: &[u8],
        token: Token,
        secret: Option<&Secret>,
        whose: Whose,
        owner: Option<Owner>,
    ) -> Result<Option<Grant>, ReclaimRefused> {
        let mut inner = self.lock_inner();
        let Some(hold) = inner
            .keys
            .get_mut(key)
            .and_then(|s| s.holds.iter_mut().find(|h| h.session && h.token == token))
        else {
            return Ok(None);
        };
        if hold.owner().is_some() && !whose.may_release(hold.owner()) {
            return Err(ReclaimRefused::NotYours);
        }
        if let Some(kept) = hold.secret() {
            let shown = secret.map(secret_digest);
            if !shown.is_some_and(|d| same_bytes(&d, &kept)) {
                return Err(ReclaimRefused::Secret);
            }
        }
        let newly = owner.filter(|_| hold.owner().is_none());
        if let Some(owner) = newly.clone() {
            hold.set_owner(owner);
        }
        let gen = hold.link().map_or(0, |l| l.gen) + 1;
        let (link, end) = Link::new(gen);
        hold.set_link(link);
        let grant = Grant {
            id: hold.id,
            token,
            durable: Durable::default(),
            link: Some(end),
            secret: None,
            owner: hold.owner().cloned(),
            slot: hold.slot(),
        };
        // An ownerless hold (from a log of an earlier release) now counts
        // toward its new owner's held= quota.
        inner.count_hold(newly.as_ref(), true);
        Ok(Some(grant))
    }

    /// How many holds the token of fingerprint `f` has (`held=`).
    pub(crate) fn held_by(&self, f: Fingerprint) -> u32 {
        self.lock_inner()
            .held_by
            .get(&f.get())
            .copied()
            .unwrap_or(0)
    }

    /// Releases the hold a plain Unlock ends (see [`Table::begin_release`])
    /// and hands the key on.
    #[cfg(test)]
    pub(crate) fn unlock(&self, key: &[u8]) -> Option<(Holder, Vec<Holder>, Durable)> {
        let mut inner = self.lock_inner();
        let id = inner.keys.get(key)?.unlock_target()?.id;
        inner.release(key, id, true, Some(&End::released(None)))
    }

    /// First half of a client's Unlock: records the release of a hold but
    /// leaves it in place, so that a release the log cannot record leaves
    /// the table as the log (and a restart) has it. Returns the hold's
    /// grant, or None if the key is free.
    ///
    /// Nothing else can be recorded for that hold meanwhile except another
    /// release of it (a reset, a second Unlock), after which
    /// [`Table::finish_release`] finds it gone and does nothing.
    ///
    /// With `token`, only the hold under that token is released (a
    /// session's own release: a stale token frees nothing); without, the
    /// oldest kept hold, else the oldest hold.
    #[cfg(test)]
    pub(crate) fn begin_release(
        &self,
        key: &[u8],
        token: Option<Token>,
    ) -> Option<(GrantId, Durable)> {
        self.begin_release_by(key, token, Whose::Any, None)
            .ok()
            .flatten()
    }

    /// As [`Table::begin_release`], among the holds `whose` may release:
    /// `Err` if the key is held (under `token`, if given) but by none of
    /// them.
    pub(crate) fn begin_release_by(
        &self,
        key: &[u8],
        token: Option<Token>,
        whose: Whose,
        ended: Option<crate::proto::Ended>,
    ) -> Result<Option<(GrantId, Durable)>, NotYours> {
        let mut inner = self.lock_inner();
        let Some(state) = inner.keys.get(key) else {
            return Ok(None);
        };
        let target = match token {
            Some(t) => state.holds.iter().find(|h| h.token == t),
            None => state.unlock_target_of(whose),
        };
        let Some(h) = target else {
            return match token.is_none() && !state.holds.is_empty() {
                true => Err(NotYours),
                false => Ok(None),
            };
        };
        if !whose.may_release(h.owner()) {
            return Err(NotYours);
        }
        let (id, token) = (h.id, h.token);
        // The command ended with 0: the key's mark rises to its order (the
        // hold's, else the one the release names: a hold restored from a
        // log of an earlier release has none), before the release.
        let order = queue::Rules::of(h.fields().map(|f| &f[..])).order;
        let mut durable = Durable::default();
        if let Some(e) = ended.filter(|e| e.status == 0) {
            if let Some(order) = order.or(e.order) {
                durable = inner.raise_mark(key, order);
            }
        }
        durable.add(inner.record_release(key, token));
        Ok(Some((id, durable)))
    }

    /// Second half, once the release is durable: ends hold `id` in memory
    /// if it is still there (its release is in the log already), keeps it
    /// in the key's history as `end` says, and hands the key on.
    pub(crate) fn finish_release(
        &self,
        key: &[u8],
        id: GrantId,
        end: End,
    ) -> Option<(Holder, Vec<Holder>)> {
        self.lock_inner()
            .release(key, id, false, Some(&end))
            .map(|(h, next, _)| (h, next))
    }

    /// Ends hold `id` of the key, if it is still there: a grant that never
    /// reached its client (kept in no history).
    pub(crate) fn release_grant(&self, key: &[u8], id: GrantId) -> bool {
        self.lock_inner().release(key, id, true, None).is_some()
    }

    /// The event counters of this table's server (grants are bumped here).
    pub(crate) fn counters(&self) -> Arc<Counters> {
        self.lock_inner().counters.clone()
    }

    /// Holds and waiters.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let inner = self.lock_inner();
        let held = inner.keys.values().map(|s| s.holds.len()).sum();
        let waiting = inner.keys.values().map(|s| s.waiters.len()).sum();
        (held, waiting)
    }
}

/// Whether `a` and `b` are the same, every byte compared (no early exit:
/// the time taken does not tell how much of a secret was right).
fn same_bytes(a: &Secret, b: &Secret) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}
