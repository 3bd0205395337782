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

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

use super::metrics::Counters;

use crate::proto::manager::KeyReport;
use crate::wal::{NotDurable, Record, Stats as WalStats, Ticket, Wal};

/// Identifies one lock request for its whole life: queued, then maybe held.
pub type GrantId = u64;

#[derive(Debug, Clone)]
pub struct Holder {
    pub id: GrantId,
    pub source: Vec<u8>,
    pub peer: SocketAddr,
    pub since: SystemTime,
}

struct Waiter {
    id: GrantId,
    source: Vec<u8>,
    peer: SocketAddr,
    notify: oneshot::Sender<Notice>,
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
    Granted(Durable),
    /// A reset by its source removed it from the queue.
    Withdrawn,
}

#[derive(Default)]
struct KeyState {
    holder: Option<Holder>,
    waiters: VecDeque<Waiter>,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<Vec<u8>, KeyState>,
    next_id: GrantId,
    /// The write-ahead log, owned here: every append happens under this
    /// mutex, so the log's order is the table's.
    wal: Option<Wal>,
    /// Grants are counted here, where every one of them (hand-offs included)
    /// happens.
    counters: Arc<Counters>,
}

pub enum LockOutcome {
    Granted(GrantId, Durable),
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

    /// Takes the key if free, else queues behind the current waiters.
    pub fn lock(&self, key: &[u8], source: &[u8], peer: SocketAddr) -> LockOutcome {
        let mut inner = self.lock_inner();
        let id = inner.fresh_id();
        let state = inner.keys.entry(key.to_vec()).or_default();
        if state.holder.is_none() {
            let h = holder(id, source, peer);
            state.holder = Some(h.clone());
            Counters::bump(&inner.counters.grants);
            let durable = inner.record_grant(key, &h);
            return LockOutcome::Granted(id, durable);
        }
        let (tx, rx) = oneshot::channel();
        state.waiters.push_back(Waiter {
            id,
            source: source.to_vec(),
            peer,
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
    ) -> Option<(GrantId, Durable)> {
        let mut inner = self.lock_inner();
        if inner.keys.get(key).is_some_and(|s| s.holder.is_some()) {
            return None;
        }
        let id = inner.fresh_id();
        let state = inner.keys.entry(key.to_vec()).or_default();
        let h = holder(id, source, peer);
        state.holder = Some(h.clone());
        Counters::bump(&inner.counters.grants);
        Some((id, inner.record_grant(key, &h)))
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
    pub fn begin_release(&self, key: &[u8]) -> Option<(GrantId, Durable)> {
        let inner = self.lock_inner();
        let id = inner.keys.get(key)?.holder.as_ref()?.id;
        Some((id, inner.record_release(key)))
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
                })
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Marks a key held without a client (restored from the log at start-up).
    pub fn restore(
        &self,
        key: &[u8],
        source: &[u8],
        peer: SocketAddr,
        since: SystemTime,
    ) -> GrantId {
        let mut inner = self.lock_inner();
        let id = inner.fresh_id();
        let state = inner.keys.entry(key.to_vec()).or_default();
        state.holder = Some(Holder {
            id,
            source: source.to_vec(),
            peer,
            since,
        });
        id
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

    /// Records `holder`'s grant of `key`, with the same start time the
    /// table keeps (so a restart restores the time `keys` showed).
    fn record_grant(&self, key: &[u8], holder: &Holder) -> Durable {
        let Some(wal) = &self.wal else {
            return Durable::default();
        };
        let since_ms = holder
            .since
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Durable(vec![wal.append(&Record::Grant {
            key: key.to_vec(),
            source: holder.source.clone(),
            peer: holder.peer.to_string().into_bytes(),
            since_ms,
        })])
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
            let h = holder(w.id, &w.source, w.peer);
            let grant = self.record_grant(key, &h);
            if w.notify.send(Notice::Granted(grant)).is_ok() {
                if let Some(state) = self.keys.get_mut(key) {
                    state.holder = Some(h.clone());
                }
                Counters::bump(&self.counters.grants);
                next = Some(h);
                break;
            }
            // It went away just now: undo its grant in the log too.
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

fn holder(id: GrantId, source: &[u8], peer: SocketAddr) -> Holder {
    Holder {
        id,
        source: source.to_vec(),
        peer,
        since: SystemTime::now(),
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
        let LockOutcome::Granted(first, _) = t.lock(b"k", b"a", peer()) else {
            panic!()
        };
        let mut rxs = Vec::new();
        for _ in 0..3 {
            let LockOutcome::Queued(id, rx) = t.lock(b"k", b"b", peer()) else {
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
        let LockOutcome::Granted(first, _) = t.lock(b"k", b"a", peer()) else {
            panic!()
        };
        let LockOutcome::Queued(_, _rx) = t.lock(b"k", b"b", peer()) else {
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
            t.lock(b"k", b"a", peer()),
            LockOutcome::Granted(..)
        ));
        let LockOutcome::Queued(_, rx) = t.lock(b"k", b"b", peer()) else {
            panic!()
        };
        drop(rx);
        let LockOutcome::Queued(_, mut rx2) = t.lock(b"k", b"c", peer()) else {
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
            t.lock(b"k", b"a", peer()),
            LockOutcome::Granted(..)
        ));
        let LockOutcome::Queued(id, _rx) = t.lock(b"k", b"b", peer()) else {
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
            t.lock(b"k1", b"dead", peer()),
            LockOutcome::Granted(..)
        ));
        assert!(matches!(
            t.lock(b"k2", b"live", peer()),
            LockOutcome::Granted(..)
        ));
        let LockOutcome::Queued(_, mut dead_rx) = t.lock(b"k2", b"dead", peer()) else {
            panic!()
        };
        let LockOutcome::Queued(_, mut live_rx) = t.lock(b"k1", b"live", peer()) else {
            panic!()
        };
        let (released, withdrawn, _) = t.reset_source(b"dead");
        assert_eq!(withdrawn, 1);
        assert_eq!(released.len(), 1);
        assert!(matches!(dead_rx.try_recv(), Ok(Notice::Withdrawn)));
        assert!(matches!(live_rx.try_recv(), Ok(Notice::Granted(_))));
    }
}
