//! The lock table: who holds each key and who waits for it, in arrival order.
//!
//! All state changes happen under one short mutex; a waiter is a queue entry
//! and a oneshot sender, woken only when it is its turn. Grants are numbered
//! so a late release (a grant that could not be delivered) can never free a
//! key that has since passed to someone else.
//!
//! With a write-ahead log, every grant and release is appended to it inside
//! the same mutex, so the log's order is the table's order. The change takes
//! effect in memory at once, but nobody outside can observe it before it is
//! durable: every answer that depends on it (the `+` of a grant, of an
//! Unlock, of a reset) waits first for the [`Durable`] the call returned,
//! and any later grant of the key sits after it in the log.
//!
//! Every grant carries a fencing token, greater than every earlier one (see
//! [`Inner::fresh_token`]). A session hold also has a [`Link`]: when its
//! holder was last heard from, and a sender whose drop wakes the connection
//! task serving it when the hold is taken away or reclaimed elsewhere.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

use super::metrics::Counters;

use crate::proto::manager::KeyReport;
use crate::wal::{Held, NotDurable, Record, Stats as WalStats, Ticket, Wal};

/// Identifies one lock request for its whole life: queued, then maybe held.
pub type GrantId = u64;

/// The fencing token of a grant.
pub type Token = u64;

#[derive(Debug, Clone)]
pub struct Holder {
    pub id: GrantId,
    pub token: Token,
    pub source: Vec<u8>,
    pub peer: SocketAddr,
    pub since: SystemTime,
    /// Held only while its holder is heard from (a session), not until an
    /// Unlock.
    pub session: bool,
}

/// The live end of a session hold.
struct Link {
    /// Bumped by each reclaim: which connection serves the hold now.
    gen: u64,
    heard: Instant,
    /// Dropped when the hold ends or moves to another connection, which
    /// wakes the task holding the receiver.
    _changed: oneshot::Sender<()>,
}

/// What the task serving a session hold keeps.
#[derive(Debug)]
pub struct LinkEnd {
    pub gen: u64,
    /// Resolves (with an error) when the hold ends or is reclaimed elsewhere.
    pub changed: oneshot::Receiver<()>,
}

impl Link {
    fn new(gen: u64) -> (Link, LinkEnd) {
        let (tx, rx) = oneshot::channel();
        let link = Link {
            gen,
            heard: Instant::now(),
            _changed: tx,
        };
        (link, LinkEnd { gen, changed: rx })
    }
}

/// A grant, as the request that got it sees it.
#[derive(Debug)]
pub struct Grant {
    pub id: GrantId,
    pub token: Token,
    pub durable: Durable,
    /// For a session hold.
    pub link: Option<LinkEnd>,
}

struct Waiter {
    id: GrantId,
    source: Vec<u8>,
    peer: SocketAddr,
    session: bool,
    notify: oneshot::Sender<Notice>,
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
    /// Released, and the next holder if any.
    Released(Holder, Option<Holder>),
}

/// What must be durable before a change may be reported (nothing without a
/// log).
#[derive(Debug, Default)]
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
    /// It is now the holder, once its grant is durable.
    Granted(Grant),
    /// A reset by its source removed it from the queue.
    Withdrawn,
}

#[derive(Default)]
struct KeyState {
    holder: Option<Holder>,
    /// Set while `holder` is a session hold.
    link: Option<Link>,
    waiters: VecDeque<Waiter>,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<Vec<u8>, KeyState>,
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

/// One key released by a reset, and who held it.
#[derive(Debug, Clone)]
pub struct Released {
    pub key: Vec<u8>,
    pub holder: Holder,
    /// The grant that followed, if a waiter was next.
    pub next: Option<Holder>,
}

/// What a metrics scrape reads from the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
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

    /// A table whose grants and releases are recorded in `wal` first.
    pub fn with_wal(wal: Wal) -> Self {
        let table = Self::default();
        table.lock_inner().wal = Some(wal);
        table
    }

    /// The log's counters, with a log.
    pub fn wal_stats(&self) -> Option<WalStats> {
        self.lock_inner().wal.as_ref().map(Wal::stats)
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

    /// Takes the key if free, else queues behind the current waiters.
    pub fn lock(&self, key: &[u8], source: &[u8], peer: SocketAddr, session: bool) -> LockOutcome {
        let mut inner = self.lock_inner();
        let id = inner.fresh_id();
        if inner.keys.get(key).is_none_or(|s| s.holder.is_none()) {
            return LockOutcome::Granted(inner.grant(key, id, source, peer, session));
        }
        let (tx, rx) = oneshot::channel();
        let state = inner.keys.get_mut(key).expect("held, so present");
        state.waiters.push_back(Waiter {
            id,
            source: source.to_vec(),
            peer,
            session,
            notify: tx,
        });
        LockOutcome::Queued(id, rx)
    }

    /// Takes the key only if nobody holds it and nobody waits for it.
    pub fn try_lock(
        &self,
        key: &[u8],
        source: &[u8],
        peer: SocketAddr,
        session: bool,
    ) -> Option<Grant> {
        let mut inner = self.lock_inner();
        if inner.keys.get(key).is_some_and(|s| s.holder.is_some()) {
            return None;
        }
        let id = inner.fresh_id();
        Some(inner.grant(key, id, source, peer, session))
    }

    /// A session holder is heard from (a heartbeat on its connection).
    pub fn heard(&self, key: &[u8], id: GrantId, gen: u64) {
        let mut inner = self.lock_inner();
        if let Some(link) = inner.link_mut(key, id, gen) {
            link.heard = Instant::now();
        }
    }

    /// Whether the task of connection `gen` still serves session hold `id`.
    pub fn link_state(&self, key: &[u8], id: GrantId, gen: u64) -> LinkState {
        let inner = self.lock_inner();
        let Some(state) = inner.keys.get(key) else {
            return LinkState::Gone;
        };
        match (&state.holder, &state.link) {
            (Some(h), Some(l)) if h.id == id && l.gen == gen => LinkState::Mine,
            (Some(h), Some(_)) if h.id == id => LinkState::Moved,
            _ => LinkState::Gone,
        }
    }

    /// Releases session hold `id` if its holder has not been heard from for
    /// `timeout`, and hands the key on.
    pub fn expire(&self, key: &[u8], id: GrantId, gen: u64, timeout: Duration) -> Expiry {
        let mut inner = self.lock_inner();
        let Some(link) = inner.link_mut(key, id, gen) else {
            return Expiry::Gone;
        };
        let due = link.heard + timeout;
        if Instant::now() < due {
            return Expiry::NotYet(due);
        }
        match inner.release(key, Some(id), true) {
            Some((holder, next, _)) => Expiry::Released(holder, next),
            None => Expiry::Gone,
        }
    }

    /// Moves session hold `token` of `key` to a new connection, if it is
    /// still held under that token.
    pub fn reclaim(&self, key: &[u8], token: Token) -> Option<Grant> {
        let mut inner = self.lock_inner();
        let state = inner.keys.get_mut(key)?;
        let h = state
            .holder
            .as_ref()
            .filter(|h| h.session && h.token == token)?;
        let id = h.id;
        let gen = state.link.as_ref().map_or(0, |l| l.gen) + 1;
        let (link, end) = Link::new(gen);
        state.link = Some(link);
        Some(Grant {
            id,
            token,
            durable: Durable::default(),
            link: Some(end),
        })
    }

    /// Releases the key, whoever holds it, and grants it to the next waiter.
    /// Returns the released holder and the next one, or None if it was free.
    #[cfg(test)]
    pub fn unlock(&self, key: &[u8]) -> Option<(Holder, Option<Holder>, Durable)> {
        self.lock_inner().release(key, None, true)
    }

    /// First half of a client's Unlock: records the release of the current
    /// holder but leaves the key held, so that a release the log cannot
    /// record leaves the table as the log (and a restart) has it. Returns
    /// the holder's grant, or None if the key is free.
    ///
    /// Nothing else can be recorded for the key meanwhile except another
    /// release of the same holder (a reset, a second Unlock), after which
    /// [`Table::finish_release`] finds the holder gone and does nothing.
    ///
    /// With `token`, only a hold under that token is released (a session's
    /// own release: a stale token frees nothing).
    pub fn begin_release(&self, key: &[u8], token: Option<Token>) -> Option<(GrantId, Durable)> {
        let inner = self.lock_inner();
        let h = inner.keys.get(key)?.holder.as_ref()?;
        if token.is_some_and(|t| t != h.token) {
            return None;
        }
        Some((h.id, inner.record_release(key)))
    }

    /// Second half, once the release is durable: frees the key in memory if
    /// grant `id` still holds it (its release is in the log already) and
    /// hands it to the next waiter.
    pub fn finish_release(&self, key: &[u8], id: GrantId) -> Option<(Holder, Option<Holder>)> {
        self.lock_inner()
            .release(key, Some(id), false)
            .map(|(h, next, _)| (h, next))
    }

    /// Releases the key only if grant `id` still holds it.
    pub fn release_grant(&self, key: &[u8], id: GrantId) -> bool {
        self.lock_inner().release(key, Some(id), true).is_some()
    }

    /// The client of request `id` hung up.
    pub fn withdraw(&self, key: &[u8], id: GrantId) -> Withdrawal {
        let mut inner = self.lock_inner();
        let Some(state) = inner.keys.get_mut(key) else {
            return Withdrawal::Gone;
        };
        if let Some(pos) = state.waiters.iter().position(|w| w.id == id) {
            state.waiters.remove(pos);
            return Withdrawal::Dequeued;
        }
        if state.holder.as_ref().is_some_and(|h| h.id == id) {
            inner.release(key, Some(id), true);
            return Withdrawal::Released;
        }
        Withdrawal::Gone
    }

    /// Force-releases the key; the first waiter gets it, the rest keep their
    /// places.
    pub fn reset_key(&self, key: &[u8]) -> Option<(Released, Durable)> {
        let mut inner = self.lock_inner();
        let (holder, next, durable) = inner.release(key, None, true)?;
        Some((
            Released {
                key: key.to_vec(),
                holder,
                next,
            },
            durable,
        ))
    }

    /// Releases every key held by `source` (each passes to its next waiter)
    /// and withdraws that source's waiters. Returns the released keys and how
    /// many waiters were withdrawn.
    pub fn reset_source(&self, source: &[u8]) -> (Vec<Released>, usize, Durable) {
        let mut inner = self.lock_inner();
        let mut withdrawn = 0;
        // Withdraw first, so a released key never goes to a waiter of the
        // source being cleared.
        for state in inner.keys.values_mut() {
            let before = state.waiters.len();
            state.waiters.retain_mut(|w| {
                if w.source != source {
                    return true;
                }
                // Swap the sender out to notify; the entry is dropped anyway.
                let (dummy, _) = oneshot::channel();
                let notify = std::mem::replace(&mut w.notify, dummy);
                let _ = notify.send(Notice::Withdrawn);
                false
            });
            withdrawn += before - state.waiters.len();
        }
        let keys: Vec<Vec<u8>> = inner
            .keys
            .iter()
            .filter(|(_, s)| s.holder.as_ref().is_some_and(|h| h.source == source))
            .map(|(k, _)| k.clone())
            .collect();
        let mut released = Vec::with_capacity(keys.len());
        let mut durable = Durable::default();
        for key in keys {
            if let Some((holder, next, d)) = inner.release(&key, None, true) {
                durable.add(d);
                released.push(Released { key, holder, next });
            }
        }
        inner
            .keys
            .retain(|_, s| s.holder.is_some() || !s.waiters.is_empty());
        (released, withdrawn, durable)
    }

    /// Every held key as the operator sees it, sorted by key.
    pub fn held(&self) -> Vec<KeyReport> {
        let inner = self.lock_inner();
        let mut out: Vec<KeyReport> = inner
            .keys
            .iter()
            .filter_map(|(k, s)| {
                s.holder.as_ref().map(|h| KeyReport {
                    key: k.clone(),
                    source: h.source.clone(),
                    peer: h.peer.to_string().into_bytes(),
                    since: h.since,
                    waiting: s.waiters.len().min(u32::MAX as usize) as u32,
                    token: Some(h.token),
                    session: Some(h.session),
                })
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Marks a key held without a client (restored from the log at
    /// start-up). A session hold is heard from "now", so its holder has the
    /// session timeout to reclaim it; its grant id and link are returned
    /// for the task that expires it otherwise.
    pub fn restore(&self, held: &Held, peer: SocketAddr) -> Option<(GrantId, LinkEnd)> {
        let mut inner = self.lock_inner();
        let id = inner.fresh_id();
        inner.last_token = inner.last_token.max(held.token);
        let state = inner.keys.entry(held.key.clone()).or_default();
        state.holder = Some(Holder {
            id,
            token: held.token,
            source: held.source.clone(),
            peer,
            since: held.since,
            session: held.session,
        });
        if !held.session {
            return None;
        }
        let (link, end) = Link::new(0);
        state.link = Some(link);
        Some((id, end))
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
            if let Some(h) = &s.holder {
                g.held += 1;
                g.oldest_since = Some(g.oldest_since.map_or(h.since, |o| o.min(h.since)));
            }
        }
        g
    }

    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock_inner();
        let held = inner.keys.values().filter(|s| s.holder.is_some()).count();
        let waiting = inner.keys.values().map(|s| s.waiters.len()).sum();
        (held, waiting)
    }
}

impl Inner {
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

    /// Makes request `id` the holder of the free `key`, logged.
    fn grant(
        &mut self,
        key: &[u8],
        id: GrantId,
        source: &[u8],
        peer: SocketAddr,
        session: bool,
    ) -> Grant {
        let token = self.fresh_token();
        let h = Holder {
            id,
            token,
            source: source.to_vec(),
            peer,
            since: SystemTime::now(),
            session,
        };
        let durable = self.record_grant(key, &h);
        let state = self.keys.entry(key.to_vec()).or_default();
        let link = session.then(|| {
            let (link, end) = Link::new(0);
            state.link = Some(link);
            end
        });
        state.holder = Some(h);
        Counters::bump(&self.counters.grants);
        Grant {
            id,
            token,
            durable,
            link,
        }
    }

    fn link_mut(&mut self, key: &[u8], id: GrantId, gen: u64) -> Option<&mut Link> {
        let state = self.keys.get_mut(key)?;
        if state.holder.as_ref().map(|h| h.id) != Some(id) {
            return None;
        }
        state.link.as_mut().filter(|l| l.gen == gen)
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
        };
        Durable(vec![wal.append(&held.record())])
    }

    fn record_release(&self, key: &[u8]) -> Durable {
        match &self.wal {
            Some(wal) => Durable(vec![wal.append(&Record::Release { key: key.to_vec() })]),
            None => Durable::default(),
        }
    }

    /// Releases `key` (only grant `only` if given) and hands it to the next
    /// live waiter. Drops the key's entry once nobody holds or wants it.
    /// The release is logged (unless `record` is false: it already is)
    /// before the grant that follows it.
    fn release(
        &mut self,
        key: &[u8],
        only: Option<GrantId>,
        record: bool,
    ) -> Option<(Holder, Option<Holder>, Durable)> {
        let state = self.keys.get_mut(key)?;
        if only.is_some_and(|id| state.holder.as_ref().map(|h| h.id) != Some(id)) {
            return None;
        }
        let released = state.holder.take()?;
        // Wakes the task serving a session hold: it is gone.
        state.link = None;
        let durable = if record {
            self.record_release(key)
        } else {
            Durable::default()
        };
        let mut next = None;
        while let Some(w) = self.keys.get_mut(key).and_then(|s| s.waiters.pop_front()) {
            // A waiter whose task is gone cannot take the key: skip it.
            if w.notify.is_closed() {
                continue;
            }
            let grant = self.grant(key, w.id, &w.source, w.peer, w.session);
            if w.notify.send(Notice::Granted(grant)).is_ok() {
                next = self.keys.get(key).and_then(|s| s.holder.clone());
                break;
            }
            // It went away just now: undo its grant, in the log and the
            // count too.
            self.counters
                .grants
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(state) = self.keys.get_mut(key) {
                state.holder = None;
                state.link = None;
            }
            let _ = self.record_release(key);
        }
        if self
            .keys
            .get(key)
            .is_some_and(|s| s.holder.is_none() && s.waiters.is_empty())
        {
            self.keys.remove(key);
        }
        Some((released, next, durable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn fifo_handoff() {
        let t = Table::new();
        let LockOutcome::Granted(Grant { id: first, .. }) = t.lock(b"k", b"a", peer(), false)
        else {
            panic!()
        };
        let mut rxs = Vec::new();
        for _ in 0..3 {
            let LockOutcome::Queued(id, rx) = t.lock(b"k", b"b", peer(), false) else {
                panic!()
            };
            rxs.push((id, rx));
        }
        assert_eq!(t.gauges().held, 1);
        assert_eq!(t.gauges().waiting, 3);
        assert!(t.release_grant(b"k", first));
        for (i, (id, mut rx)) in rxs.into_iter().enumerate() {
            assert!(
                matches!(rx.try_recv(), Ok(Notice::Granted(_))),
                "waiter {i}"
            );
            assert!(t.release_grant(b"k", id));
        }
        assert_eq!(t.counts(), (0, 0));
        assert_eq!(t.gauges(), Gauges::default());
        let grants = t
            .counters()
            .grants
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(grants, 4, "one direct grant and three hand-offs");
    }

    #[test]
    fn a_stale_release_does_not_free_the_next_holder() {
        let t = Table::new();
        let LockOutcome::Granted(Grant { id: first, .. }) = t.lock(b"k", b"a", peer(), false)
        else {
            panic!()
        };
        let LockOutcome::Queued(_, _rx) = t.lock(b"k", b"b", peer(), false) else {
            panic!()
        };
        assert!(t.unlock(b"k").is_some());
        assert!(!t.release_grant(b"k", first));
        assert_eq!(t.counts(), (1, 0));
    }

    #[test]
    fn dead_waiters_are_skipped() {
        let t = Table::new();
        assert!(matches!(
            t.lock(b"k", b"a", peer(), false),
            LockOutcome::Granted(..)
        ));
        let LockOutcome::Queued(_, rx) = t.lock(b"k", b"b", peer(), false) else {
            panic!()
        };
        drop(rx);
        let LockOutcome::Queued(_, mut rx2) = t.lock(b"k", b"c", peer(), false) else {
            panic!()
        };
        let (_, next, _) = t.unlock(b"k").unwrap();
        assert_eq!(next.unwrap().source, b"c");
        assert!(matches!(rx2.try_recv(), Ok(Notice::Granted(_))));
    }

    #[test]
    fn withdrawal_after_grant_releases() {
        let t = Table::new();
        assert!(matches!(
            t.lock(b"k", b"a", peer(), false),
            LockOutcome::Granted(..)
        ));
        let LockOutcome::Queued(id, _rx) = t.lock(b"k", b"b", peer(), false) else {
            panic!()
        };
        t.unlock(b"k");
        assert_eq!(t.withdraw(b"k", id), Withdrawal::Released);
        assert_eq!(t.counts(), (0, 0));
    }

    #[test]
    fn reset_source_withdraws_and_releases() {
        let t = Table::new();
        assert!(matches!(
            t.lock(b"k1", b"dead", peer(), false),
            LockOutcome::Granted(..)
        ));
        assert!(matches!(
            t.lock(b"k2", b"live", peer(), false),
            LockOutcome::Granted(..)
        ));
        let LockOutcome::Queued(_, mut dead_rx) = t.lock(b"k2", b"dead", peer(), false) else {
            panic!()
        };
        let LockOutcome::Queued(_, mut live_rx) = t.lock(b"k1", b"live", peer(), false) else {
            panic!()
        };
        let (released, withdrawn, _) = t.reset_source(b"dead");
        assert_eq!(withdrawn, 1);
        assert_eq!(released.len(), 1);
        assert!(matches!(dead_rx.try_recv(), Ok(Notice::Withdrawn)));
        assert!(matches!(live_rx.try_recv(), Ok(Notice::Granted(_))));
    }
}

#[cfg(test)]
mod session_tests {
    use super::*;

    fn peer() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    fn granted(o: LockOutcome) -> Grant {
        match o {
            LockOutcome::Granted(g) => g,
            LockOutcome::Queued(..) => panic!("queued"),
        }
    }

    #[test]
    fn tokens_grow_with_every_grant() {
        let t = Table::new();
        let a = granted(t.lock(b"k", b"a", peer(), true));
        assert!(t.release_grant(b"k", a.id));
        let b = granted(t.lock(b"k", b"b", peer(), false));
        assert!(b.token > a.token);
        t.raise_token_floor(u64::MAX / 2);
        assert!(t.release_grant(b"k", b.id));
        let c = granted(t.lock(b"k", b"c", peer(), true));
        assert!(c.token > u64::MAX / 2);
    }

    #[test]
    fn a_stale_token_frees_nothing_and_a_reset_wakes_the_session() {
        let t = Table::new();
        let mut a = granted(t.lock(b"k", b"a", peer(), true));
        let mut link = a.link.take().unwrap();
        assert!(link
            .changed
            .try_recv()
            .is_err_and(|e| e == oneshot::error::TryRecvError::Empty));
        assert!(t.begin_release(b"k", Some(a.token + 1)).is_none());
        let _ = t.reset_key(b"k").unwrap();
        assert_eq!(
            link.changed.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(t.link_state(b"k", a.id, link.gen), LinkState::Gone);
        assert!(t.begin_release(b"k", Some(a.token)).is_none());
    }

    #[test]
    fn a_reclaim_moves_the_hold_and_expiry_waits_for_the_timeout() {
        let t = Table::new();
        let mut a = granted(t.lock(b"k", b"a", peer(), true));
        let mut old = a.link.take().unwrap();
        assert!(t.reclaim(b"k", a.token + 1).is_none());
        let new = t.reclaim(b"k", a.token).unwrap().link.unwrap();
        assert_eq!(
            old.changed.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(t.link_state(b"k", a.id, old.gen), LinkState::Moved);
        assert!(matches!(
            t.expire(b"k", a.id, old.gen, Duration::ZERO),
            Expiry::Gone
        ));
        assert!(matches!(
            t.expire(b"k", a.id, new.gen, Duration::from_secs(60)),
            Expiry::NotYet(_)
        ));
        let LockOutcome::Queued(_, mut rx) = t.lock(b"k", b"b", peer(), false) else {
            panic!()
        };
        assert!(matches!(
            t.expire(b"k", a.id, new.gen, Duration::ZERO),
            Expiry::Released(..)
        ));
        assert!(matches!(rx.try_recv(), Ok(Notice::Granted(_))));
    }
}
