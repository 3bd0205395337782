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

mod key;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

pub use self::key::{Ask, Holder, LinkEnd, NotYours, Owner, Whose};
use self::key::{Hold, KeyState, Link, QueuedAsk, Source, Waiter};
use super::metrics::Counters;

use crate::mode::LockMode;
use crate::proto::listing::{self, HoldView, PeerText, WaiterView};
use crate::proto::manager::KeyReport;
use crate::wal::{Held, HeldRef, NotDurable, Record, Stats as WalStats, Ticket, Wal};

/// Identifies one lock request for its whole life: queued, then maybe held.
pub type GrantId = u64;

/// The fencing token of a grant.
pub type Token = u64;

/// A grant, as the request that got it sees it.
#[derive(Debug)]
pub struct Grant {
    pub id: GrantId,
    pub token: Token,
    pub durable: Durable,
    /// For a session hold.
    pub link: Option<LinkEnd>,
}

/// Where the task serving a session hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// It still serves the hold.
    Mine,
    /// A reclaim moved the hold to another connection.
    Moved,
    /// The hold has ended (released, reset, expired).
    Gone,
}

/// What an expiry check found.
#[derive(Debug)]
pub enum Expiry {
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
pub struct Durable(Vec<Ticket>);

impl Durable {
    pub async fn wait(self) -> Result<(), NotDurable> {
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
pub enum Notice {
    /// It is now a holder, once its grant is durable. Boxed: every queued
    /// waiter's channel has room for a notice, and only one is sent.
    Granted(Box<Grant>),
    /// A reset by its source removed it from the queue.
    Withdrawn,
}

#[derive(Default)]
struct Inner {
    /// By key: a B-tree keeps them in the order Keys lists them (no sort of
    /// a million names under the mutex) in about 45 bytes per key, where a
    /// hash map's buckets take 25 to 50. Each state is boxed: a node moves
    /// pointers, not states, and the tree's slack is pointers too.
    keys: BTreeMap<Box<[u8]>, Box<KeyState>>,
    /// Every holder's source, once.
    sources: Sources,
    next_id: GrantId,
    /// The last fencing token given.
    last_token: Token,
    /// The write-ahead log, owned here: every append happens under this
    /// mutex, so the log's order is the table's.
    wal: Option<Wal>,
    /// Grants are counted here, where every one of them (hand-offs included)
    /// happens.
    counters: Arc<Counters>,
}

pub enum LockOutcome {
    Granted(Grant),
    Queued(GrantId, oneshot::Receiver<Notice>),
    /// The key is held or waited for in a mode this one cannot join.
    Conflict(LockMode),
}

/// What a TryLock found.
pub enum TryOutcome {
    Granted(Grant),
    /// Held (or waited for) by others: it would have to queue.
    Busy,
    Conflict(LockMode),
}

/// What became of a request whose client hung up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawal {
    /// It left the queue.
    Dequeued,
    /// It had been granted meanwhile: the key was released again.
    Released,
    /// Nothing to do (a reset already took it out).
    Gone,
}

/// The holds of one key ended by a reset, and who held them.
#[derive(Debug, Clone)]
pub struct Released {
    pub key: Vec<u8>,
    pub holders: Vec<Holder>,
    /// The grants that followed, if waiters were next.
    pub next: Vec<Holder>,
}

/// What a metrics scrape reads from the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Keys with at least one holder.
    pub held: usize,
    pub waiting: usize,
    /// When the longest-standing hold began.
    pub oldest_since: Option<SystemTime>,
}

#[derive(Default)]
pub struct Table {
    inner: Mutex<Inner>,
}

impl Table {
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on, grants and releases are recorded in `wal` first (for a
    /// table just restored from it).
    pub fn attach_wal(&self, wal: Wal) {
        self.lock_inner().wal = Some(wal);
    }

    /// The log's counters, with a log.
    pub fn wal_stats(&self) -> Option<WalStats> {
        self.lock_inner().wal.as_ref().map(Wal::stats)
    }

    /// Blocks until everything appended to the log so far is durable (Ok
    /// without a log); for start-up, before any client is served.
    pub fn sync_wal(&self) -> Result<(), NotDurable> {
        match &self.lock_inner().wal {
            Some(wal) => wal.sync(),
            None => Ok(()),
        }
    }

    /// Writes what is pending to the log and stops its writer (shutdown);
    /// returns its final counters. Blocks: run it off the async threads.
    pub fn close_wal(&self) -> Option<WalStats> {
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
    pub fn raise_token_floor(&self, floor: Token) {
        let mut inner = self.lock_inner();
        inner.last_token = inner.last_token.max(floor);
    }

    /// Takes the key if `ask` may hold it now and nobody waits, else queues
    /// behind the current waiters.
    pub fn lock(&self, key: &[u8], ask: &Ask) -> LockOutcome {
        let mut inner = self.lock_inner();
        let state = inner.keys.get(key);
        if let Some(theirs) = state.and_then(|s| s.mode()) {
            if !ask.mode.agrees(theirs) {
                return LockOutcome::Conflict(theirs);
            }
        }
        let free = state.is_none_or(|s| s.waiters.is_empty() && s.admits(ask.mode));
        let id = inner.fresh_id();
        if free {
            return LockOutcome::Granted(inner.grant(key, id, ask));
        }
        let (tx, rx) = oneshot::channel();
        let state = inner.keys.get_mut(key).expect("held, so present");
        state.waiters.push_back(Waiter {
            id,
            ask: QueuedAsk::new(ask),
            since: SystemTime::now(),
            notify: tx,
        });
        LockOutcome::Queued(id, rx)
    }

    /// Takes the key only if `ask` may hold it now and nobody waits for it.
    pub fn try_lock(&self, key: &[u8], ask: &Ask) -> TryOutcome {
        let mut inner = self.lock_inner();
        if let Some(state) = inner.keys.get(key) {
            if let Some(theirs) = state.mode().filter(|&m| !ask.mode.agrees(m)) {
                return TryOutcome::Conflict(theirs);
            }
            if !state.waiters.is_empty() || !state.admits(ask.mode) {
                return TryOutcome::Busy;
            }
        }
        let id = inner.fresh_id();
        TryOutcome::Granted(inner.grant(key, id, ask))
    }

    /// A session holder is heard from (a heartbeat on its connection).
    pub fn heard(&self, key: &[u8], id: GrantId, gen: u64) {
        let mut inner = self.lock_inner();
        if let Some(link) = inner.link_mut(key, id, gen) {
            link.heard = Instant::now();
        }
    }

    /// The owner (token fingerprint) of hold `id` of `key`, if it has one.
    pub fn owner_of(&self, key: &[u8], id: GrantId) -> Option<Owner> {
        let inner = self.lock_inner();
        inner.keys.get(key)?.hold(id)?.owner()
    }

    /// Whether the task of connection `gen` still serves session hold `id`.
    pub fn link_state(&self, key: &[u8], id: GrantId, gen: u64) -> LinkState {
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
    pub fn expire(&self, key: &[u8], id: GrantId, gen: u64, timeout: Duration) -> Expiry {
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
    pub fn expires(&self, key: &[u8], id: GrantId) -> Option<SystemTime> {
        let inner = self.lock_inner();
        inner.keys.get(key)?.hold(id)?.expires()
    }

    /// First half of the expiry of kept hold `id` (`lock KEY --expire`) at
    /// its deadline: records its release, as [`Table::expire`] does for a
    /// session, and leaves the hold in place until that is durable
    /// ([`Table::finish_release`] then ends it and hands the key on).
    pub fn expire_kept(&self, key: &[u8], id: GrantId) -> Expiry {
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
    pub fn reclaim(&self, key: &[u8], token: Token) -> Option<Grant> {
        self.reclaim_by(key, token, Whose::Any, None).ok().flatten()
    }

    /// As [`Table::reclaim`], for a caller who may reclaim only `whose`
    /// holds (and those without an owner: restored from the log); the
    /// hold is then `owner`'s, if given.
    pub fn reclaim_by(
        &self,
        key: &[u8],
        token: Token,
        whose: Whose,
        owner: Option<Owner>,
    ) -> Result<Option<Grant>, NotYours> {
        let mut inner = self.lock_inner();
        let Some(hold) = inner
            .keys
            .get_mut(key)
            .and_then(|s| s.holds.iter_mut().find(|h| h.session && h.token == token))
        else {
            return Ok(None);
        };
        if hold.owner().is_some() && !whose.may_release(hold.owner()) {
            return Err(NotYours);
        }
        if let Some(owner) = owner {
            hold.set_owner(owner);
        }
        let gen = hold.link().map_or(0, |l| l.gen) + 1;
        let (link, end) = Link::new(gen);
        hold.set_link(link);
        Ok(Some(Grant {
            id: hold.id,
            token,
            durable: Durable::default(),
            link: Some(end),
        }))
    }

    /// Releases the hold a plain Unlock ends (see [`Table::begin_release`])
    /// and hands the key on.
    #[cfg(test)]
    pub fn unlock(&self, key: &[u8]) -> Option<(Holder, Vec<Holder>, Durable)> {
        let mut inner = self.lock_inner();
        let id = inner.keys.get(key)?.unlock_target()?.id;
        inner.release(key, id, true)
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
    pub fn begin_release(&self, key: &[u8], token: Option<Token>) -> Option<(GrantId, Durable)> {
        self.begin_release_by(key, token, Whose::Any).ok().flatten()
    }

    /// As [`Table::begin_release`], among the holds `whose` may release:
    /// `Err` if the key is held (under `token`, if given) but by none of
    /// them.
    pub fn begin_release_by(
        &self,
        key: &[u8],
        token: Option<Token>,
        whose: Whose,
    ) -> Result<Option<(GrantId, Durable)>, NotYours> {
        let inner = self.lock_inner();
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
        Ok(Some((h.id, inner.record_release(key, h.token))))
    }

    /// Second half, once the release is durable: ends hold `id` in memory
    /// if it is still there (its release is in the log already) and hands
    /// the key on.
    pub fn finish_release(&self, key: &[u8], id: GrantId) -> Option<(Holder, Vec<Holder>)> {
        self.lock_inner()
            .release(key, id, false)
            .map(|(h, next, _)| (h, next))
    }

    /// Ends hold `id` of the key, if it is still there.
    pub fn release_grant(&self, key: &[u8], id: GrantId) -> bool {
        self.lock_inner().release(key, id, true).is_some()
    }

    /// The client of request `id` hung up. A waiter leaving the head of the
    /// line may let the ones behind it in (shared requests behind an
    /// exclusive one): they are returned with it.
    pub fn withdraw(&self, key: &[u8], id: GrantId) -> (Withdrawal, Vec<Holder>) {
        let mut inner = self.lock_inner();
        let Some(state) = inner.keys.get_mut(key) else {
            return (Withdrawal::Gone, Vec::new());
        };
        let place = state.waiters.iter().position(|w| w.id == id);
        if let Some(pos) = place {
            state.waiters.remove(pos);
            let next = inner.promote(key, &Durable::default());
            return (Withdrawal::Dequeued, next);
        }
        if state.hold(id).is_some() {
            let next = inner
                .release(key, id, true)
                .map(|(_, next, _)| next)
                .unwrap_or_default();
            return (Withdrawal::Released, next);
        }
        (Withdrawal::Gone, Vec::new())
    }

    /// Ends every hold of the key; the waiters at the head of the line that
    /// may hold together get it, the rest keep their places.
    pub fn reset_key(&self, key: &[u8]) -> Option<(Released, Durable)> {
        let mut inner = self.lock_inner();
        let ids: Vec<GrantId> = inner.keys.get(key)?.holds.iter().map(|h| h.id).collect();
        inner.release_each(key, &ids)
    }

    /// Ends every hold of `source` (each key passes to its next waiters)
    /// and withdraws that source's waiters. Returns the keys released and
    /// how many waiters were withdrawn.
    pub fn reset_source(&self, source: &[u8]) -> (Vec<Released>, usize, Durable) {
        let mut inner = self.lock_inner();
        let mut withdrawn = 0;
        let mut touched = Vec::new();
        // Withdraw first, so a released key never goes to a waiter of the
        // source being cleared.
        for (key, state) in inner.keys.iter_mut() {
            let before = state.waiters.len();
            state.waiters.retain_mut(|w| {
                if *w.ask.source != *source {
                    return true;
                }
                // Swap the sender out to notify; the entry is dropped anyway.
                let (dummy, _) = oneshot::channel();
                let notify = std::mem::replace(&mut w.notify, dummy);
                let _ = notify.send(Notice::Withdrawn);
                false
            });
            if state.waiters.len() != before {
                withdrawn += before - state.waiters.len();
                touched.push(key.clone());
            }
        }
        let holds: Vec<(Box<[u8]>, Vec<GrantId>)> = inner
            .keys
            .iter()
            .filter_map(|(k, s)| {
                let ids: Vec<GrantId> = s
                    .holds
                    .iter()
                    .filter(|h| *h.source == *source)
                    .map(|h| h.id)
                    .collect();
                (!ids.is_empty()).then(|| (k.clone(), ids))
            })
            .collect();
        let mut released = Vec::with_capacity(holds.len());
        let mut durable = Durable::default();
        for (key, ids) in holds {
            if let Some((r, d)) = inner.release_each(&key, &ids) {
                durable.add(d);
                released.push(r);
            }
        }
        // A withdrawn waiter may have stood in front of ones who can hold
        // now: they get the key.
        for key in touched {
            inner.promote(&key, &durable);
        }
        (released, withdrawn, durable)
    }

    /// Every hold as the operator sees it, sorted by key, then oldest first.
    pub fn held(&self) -> Vec<KeyReport> {
        let inner = self.lock_inner();
        let mut out: Vec<KeyReport> = inner
            .keys
            .iter()
            .flat_map(|(k, s)| {
                let waiting = s.waiters.len().min(u32::MAX as usize) as u32;
                s.holds.iter().map(move |h| report(k, h, waiting))
            })
            .collect();
        // By key already (the tree's order), then by token.
        out.sort_by(|a, b| (&a.key, a.token).cmp(&(&b.key, b.token)));
        out
    }

    /// What Keys (action 17) lists, as its records, appended to `out`: for
    /// `key`, or every key (by name) when None, its holds oldest first and,
    /// with `waiters`, its live waiters in line order. One key is a lookup,
    /// not a scan; every key is one pass in the tree's order (no sort, no
    /// copy of a field), under the mutex.
    pub fn listing_into(&self, key: Option<&[u8]>, waiters: bool, out: &mut Vec<u8>) {
        let inner = self.lock_inner();
        let one = key.map(|k| inner.keys.get_key_value(k));
        let keys: Box<dyn Iterator<Item = Entry<'_>>> = match one {
            Some(found) => Box::new(found.into_iter()),
            None => Box::new(inner.keys.iter()),
        };
        for (k, s) in keys {
            push_listed(out, k, s, waiters);
        }
    }

    /// A part of the listing of every key ([`Table::listing_into`] of
    /// None): the records of the keys after `after` (from the first when
    /// None), in key order, appended to `out` until it has `budget` bytes
    /// (a key's records are never split). Returns the last key listed, to
    /// go on from, or None once the last key is in. Each part takes the
    /// mutex once, for about `budget` bytes' work, so a listing of a
    /// million keys never holds up the server for all of it.
    pub fn listing_part(
        &self,
        after: Option<&[u8]>,
        waiters: bool,
        out: &mut Vec<u8>,
        budget: usize,
    ) -> Option<Box<[u8]>> {
        let inner = self.lock_inner();
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut keys = inner.keys.range::<[u8], _>((from, Bound::Unbounded));
        for (k, s) in keys.by_ref() {
            push_listed(out, k, s, waiters);
            if out.len() >= budget {
                // More to come only if a key follows.
                return keys.next().is_some().then(|| k.clone());
            }
        }
        None
    }

    /// Adds the holds of a log, without a client (restored at start-up):
    /// see [`Restorer`]. The table is locked until it is dropped.
    pub fn restorer(&self) -> Restorer<'_> {
        Restorer {
            inner: self.lock_inner(),
            built: Vec::new(),
            stragglers: Vec::new(),
        }
    }

    /// The event counters of this table's server (grants are bumped here).
    pub fn counters(&self) -> Arc<Counters> {
        self.lock_inner().counters.clone()
    }

    /// Keys held, waiters queued and the oldest hold's start, in one pass
    /// under the mutex and without copying any key (for a metrics scrape).
    pub fn gauges(&self) -> Gauges {
        let inner = self.lock_inner();
        let mut g = Gauges::default();
        for s in inner.keys.values() {
            g.waiting += s.waiters.len();
            g.held += usize::from(!s.holds.is_empty());
            for h in s.holds.iter() {
                let since = h.since();
                g.oldest_since = Some(g.oldest_since.map_or(since, |o| o.min(since)));
            }
        }
        g
    }

    /// Holds and waiters.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock_inner();
        let held = inner.keys.values().map(|s| s.holds.len()).sum();
        let waiting = inner.keys.values().map(|s| s.waiters.len()).sum();
        (held, waiting)
    }
}

/// Adds the holds of a log to a table, given sorted by key (as
/// [`Wal::open_with`] tells them), one [`Restorer::add`] each; they enter
/// the table's tree when it is dropped. The tree is built in one pass,
/// node by node, instead of a lookup and an insert per key (most of a
/// restart's time with a million keys), and its nodes are full. A hold out
/// of that order is added one by one.
pub struct Restorer<'t> {
    inner: std::sync::MutexGuard<'t, Inner>,
    /// Each key once, in key order.
    built: Vec<(Box<[u8]>, Box<KeyState>)>,
    stragglers: Vec<(Box<[u8]>, Hold)>,
}

impl Restorer<'_> {
    /// Adds `held`. A session hold is heard from "now", so its holder has
    /// the session timeout to reclaim it; its link is returned for the task
    /// that expires it otherwise. The grant id of every hold is returned
    /// too (a kept hold that expires needs it for its timer).
    pub fn add(&mut self, held: &HeldRef<'_>, peer: SocketAddr) -> (GrantId, Option<LinkEnd>) {
        let (hold, end) = self.inner.restored(held, peer);
        let id = hold.id;
        let key = held.key;
        match self.built.last_mut() {
            Some((k, state)) if **k == *key => state.holds.push(hold),
            Some((k, _)) if **k > *key => self.stragglers.push((key.into(), hold)),
            _ => {
                let mut state = Box::<KeyState>::default();
                state.holds.push(hold);
                self.built.push((key.into(), state));
            }
        }
        (id, end)
    }
}

impl Drop for Restorer<'_> {
    fn drop(&mut self) {
        // Sorted and each key once: collected without a sort's moves.
        let mut tree: BTreeMap<Box<[u8]>, Box<KeyState>> =
            std::mem::take(&mut self.built).into_iter().collect();
        self.inner.keys.append(&mut tree);
        for (key, hold) in std::mem::take(&mut self.stragglers) {
            self.inner.add_hold(&key, hold);
        }
    }
}

/// A key and its state, as the tree lends them.
type Entry<'a> = (&'a Box<[u8]>, &'a Box<KeyState>);

/// Appends the records of key `k` (state `s`): its holds oldest first and,
/// with `waiters`, its live waiters in line order.
fn push_listed(out: &mut Vec<u8>, k: &[u8], s: &KeyState, waiters: bool) {
    let waiting = s.waiters.len().min(u32::MAX as usize) as u32;
    for h in s.holds.iter() {
        listing::push_hold_view(
            out,
            &HoldView {
                key: k,
                source: &h.source,
                peer: PeerText::Addr(h.peer()),
                since: h.since(),
                waiting,
                token: h.token,
                session: h.session,
                mode: h.mode,
                expires: h.expires(),
            },
        );
    }
    if !waiters {
        return;
    }
    // A waiter whose client is gone is no longer in line.
    for w in s.waiters.iter().filter(|w| !w.notify.is_closed()) {
        listing::push_waiter_view(
            out,
            &WaiterView {
                key: k,
                source: &w.ask.source,
                peer: PeerText::Addr(w.ask.peer()),
                since: w.since,
                mode: w.ask.mode,
                session: w.ask.session,
            },
        );
    }
}

/// A hold as the manager's KEYX reads it.
fn report(key: &[u8], h: &Hold, waiting: u32) -> KeyReport {
    KeyReport {
        key: key.to_vec(),
        source: h.source.to_vec(),
        peer: h.peer().to_string().into_bytes(),
        since: h.since(),
        waiting,
        token: Some(h.token),
        session: Some(h.session),
        mode: Some(h.mode),
        expires: h.expires(),
    }
}

/// Every holder's source, kept once: a hold keeps a pointer to it. A source
/// nobody holds under any more is dropped at the next purge, when the set
/// has doubled since the last one (so purging costs O(1) per source added).
#[derive(Default)]
struct Sources {
    set: HashSet<Source>,
    purge_at: usize,
}

impl Sources {
    fn intern(&mut self, name: &[u8]) -> Source {
        if let Some(s) = self.set.get(name) {
            return s.clone();
        }
        if self.set.len() >= self.purge_at {
            self.set.retain(|s| Arc::strong_count(s) > 1);
            self.purge_at = (2 * self.set.len()).max(64);
        }
        let s: Source = Arc::from(name);
        self.set.insert(s.clone());
        s
    }
}

impl Inner {
    /// The hold `held` describes, with a fresh grant id, its source
    /// interned and its link (for a session hold): not yet in the tree.
    fn restored(&mut self, held: &HeldRef<'_>, peer: SocketAddr) -> (Hold, Option<LinkEnd>) {
        let id = self.fresh_id();
        self.last_token = self.last_token.max(held.token);
        let (link, end) = Link::for_hold(held.session);
        let holder = Holder {
            id,
            token: held.token,
            source: Vec::new(),
            peer,
            since: held.since,
            session: held.session,
            mode: held.mode,
            owner: None,
            expires: held.expires,
        };
        let source = self.sources.intern(held.source);
        (Hold::new(&holder, source, link), end)
    }

    fn fresh_id(&mut self) -> GrantId {
        self.next_id += 1;
        self.next_id
    }

    /// The next fencing token: one more than the last, and at least the
    /// wall clock in microseconds, so that a server restarted without a
    /// log (which remembers no token) still gives larger ones than before,
    /// unless it gave more than a million a second or the clock went back.
    fn fresh_token(&mut self) -> Token {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as Token)
            .unwrap_or(0);
        self.last_token = (self.last_token + 1).max(now_us);
        self.last_token
    }

    /// Adds request `id` to the holders of `key` (its caller checked that
    /// it may hold now), logged.
    fn grant(&mut self, key: &[u8], id: GrantId, ask: &Ask) -> Grant {
        let token = self.fresh_token();
        let since = SystemTime::now();
        // A kept hold only: a session hold ends with its holder.
        let expires = ask
            .expire
            .filter(|_| !ask.session)
            .map(|secs| since + Duration::from_secs(u64::from(secs.get())));
        let holder = Holder {
            id,
            token,
            source: ask.source.clone(),
            peer: ask.peer,
            since,
            session: ask.session,
            mode: ask.mode,
            owner: ask.owner,
            expires,
        };
        let durable = self.record_grant(key, &holder);
        let (link, end) = Link::for_hold(ask.session);
        let source = self.sources.intern(&ask.source);
        self.add_hold(key, Hold::new(&holder, source, link));
        Counters::bump(&self.counters.grants);
        Grant {
            id,
            token,
            durable,
            link: end,
        }
    }

    /// Adds `hold` to the holds of `key` (its entry made if new).
    fn add_hold(&mut self, key: &[u8], hold: Hold) {
        match self.keys.get_mut(key) {
            Some(state) => state.holds.push(hold),
            None => {
                let mut state = Box::<KeyState>::default();
                state.holds.push(hold);
                self.keys.insert(key.into(), state);
            }
        }
    }

    fn link_mut(&mut self, key: &[u8], id: GrantId, gen: u64) -> Option<&mut Link> {
        let hold = self.keys.get_mut(key)?.hold_mut(id)?;
        hold.link_mut().filter(|l| l.gen == gen)
    }

    /// Records `holder`'s grant of `key`, with the same start time the
    /// table keeps (so a restart restores the time `keys` showed).
    fn record_grant(&self, key: &[u8], holder: &Holder) -> Durable {
        let Some(wal) = &self.wal else {
            return Durable::default();
        };
        // The log's record of a hold is written in one place: `Held::record`.
        let held = Held {
            key: key.to_vec(),
            source: holder.source.clone(),
            peer: holder.peer.to_string().into_bytes(),
            since: holder.since,
            token: holder.token,
            session: holder.session,
            mode: holder.mode,
            expires: holder.expires,
        };
        Durable(vec![wal.append(&held.record())])
    }

    fn record_release(&self, key: &[u8], token: Token) -> Durable {
        match &self.wal {
            Some(wal) => Durable(vec![wal.append(&Record::Release {
                key: key.to_vec(),
                token: Some(token),
            })]),
            None => Durable::default(),
        }
    }

    /// Ends hold `id` of `key` and lets the next waiters in. The release is
    /// logged (unless `record` is false: it already is) before the grants
    /// that follow it. Returns the holder and the holders let in.
    fn release(
        &mut self,
        key: &[u8],
        id: GrantId,
        record: bool,
    ) -> Option<(Holder, Vec<Holder>, Durable)> {
        let state = self.keys.get_mut(key)?;
        let pos = state.holds.iter().position(|h| h.id == id)?;
        // Dropping the hold's link wakes the task serving a session hold.
        let holder = state.holds.remove(pos).holder();
        let durable = if record {
            self.record_release(key, holder.token)
        } else {
            Durable::default()
        };
        let next = self.promote(key, &durable);
        Some((holder, next, durable))
    }

    /// Ends the holds `ids` of `key` (a reset), then lets the next waiters in.
    fn release_each(&mut self, key: &[u8], ids: &[GrantId]) -> Option<(Released, Durable)> {
        let mut durable = Durable::default();
        let mut holders = Vec::with_capacity(ids.len());
        let mut next = Vec::new();
        for &id in ids {
            // Only the holds found: waiters let in by an earlier release
            // of this reset keep the key.
            if let Some((h, n, d)) = self.release(key, id, true) {
                holders.push(h);
                next.extend(n);
                durable.add(d);
            }
        }
        (!holders.is_empty()).then(|| {
            (
                Released {
                    key: key.to_vec(),
                    holders,
                    next,
                },
                durable,
            )
        })
    }

    /// Grants the key to the waiters at the head of its line while they may
    /// hold beside its holders; drops the key's entry once nobody holds or
    /// wants it. Returns the holders let in.
    ///
    /// Their grants are answered only once `after` (the release that let
    /// them in) is durable too: a later batch of the log can be written
    /// when an earlier one failed, and a grant reported while the log still
    /// has the hold before it would come back beside it after a restart.
    fn promote(&mut self, key: &[u8], after: &Durable) -> Vec<Holder> {
        let mut next = Vec::new();
        loop {
            let Some(state) = self.keys.get_mut(key) else {
                return next;
            };
            let Some(w) = state.waiters.front() else {
                break;
            };
            // A waiter whose task is gone cannot take the key: skip it.
            if w.notify.is_closed() {
                state.waiters.pop_front();
                continue;
            }
            if !state.admits(w.ask.mode) {
                break;
            }
            let w = state.waiters.pop_front().expect("just seen");
            let mut grant = self.grant(key, w.id, &w.ask.to_ask());
            grant.durable.add(after.clone());
            let token = grant.token;
            if w.notify.send(Notice::Granted(Box::new(grant))).is_ok() {
                if let Some(h) = self.keys.get(key).and_then(|s| s.hold(w.id)) {
                    next.push(h.holder());
                }
                continue;
            }
            // It went away just now: undo its grant, in the log and the
            // count too.
            self.counters
                .grants
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(state) = self.keys.get_mut(key) {
                state.holds.retain(|h| h.id != w.id);
            }
            let _ = self.record_release(key, token);
        }
        if self.keys.get(key).is_some_and(|s| s.is_idle()) {
            self.keys.remove(key);
        }
        next
    }
}
