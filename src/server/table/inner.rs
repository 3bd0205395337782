//! The table's state under its one mutex, and the steps every change is
//! made of: a fresh grant id and fencing token, a grant, a release, the
//! hand-off to the next waiters, and each recorded in the log.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::history::End;
use super::key::{Ask, Hold, Holder, KeyState, Link, Source, Waiter};
use super::owner::{secret_digest, Secret, SECRET_LEN};
use super::{Durable, Grant, GrantId, Notice, Released, Token};
use crate::server::metrics::Counters;
use crate::wal::{Held, Ownership, Record, Wal};

#[derive(Default)]
pub(super) struct Inner {
    /// By key: a B-tree keeps them in the order Keys lists them (no sort of
    /// a million names under the mutex) in about 45 bytes per key, where a
    /// hash map's buckets take 25 to 50. Each state is boxed: a node moves
    /// pointers, not states, and the tree's slack is pointers too.
    pub(super) keys: BTreeMap<Box<[u8]>, Box<KeyState>>,
    /// Every holder's source, once.
    pub(super) sources: Sources,
    pub(super) next_id: GrantId,
    /// The last fencing token given.
    pub(super) last_token: Token,
    /// The write-ahead log, owned here: every append happens under this
    /// mutex, so the log's order is the table's.
    pub(super) wal: Option<Wal>,
    /// Grants are counted here, where every one of them (hand-offs included)
    /// happens.
    pub(super) counters: Arc<Counters>,
    /// Each key's mark (issue 44): the highest `--order` whose command
    /// ended with status 0; kept while the key is unused.
    pub(super) marks: BTreeMap<Box<[u8]>, u64>,
    /// The last waiter's place given ([`Inner::fresh_ticket`]).
    pub(super) last_ticket: u64,
    /// Why each waiter a deploy-queue rule took out of its line left,
    /// until its task reads it ([`super::Notice::Withdrawn`]).
    pub(super) left: std::collections::HashMap<GrantId, super::Left>,
    /// How many holds each token (by fingerprint) has, for the token
    /// file's `held=` quota (`server::quota`): counted where a hold with an
    /// owner enters or leaves the table, restored holds and reclaims of
    /// ownerless ones included.
    pub(super) held_by: std::collections::HashMap<u64, u32>,
    /// How many requests of each token (by fingerprint) wait in line, for
    /// the token file's `waits=`: each waiter of a token with a cap holds
    /// a [`super::key::WaitCount`] of its count.
    pub(super) waiting_by: std::collections::HashMap<u64, Arc<std::sync::atomic::AtomicU32>>,
    /// Each key's last ended holds (`serve --history`).
    pub(super) history: super::history::Rings,
    /// The groups of requests for several keys in line (`group.rs`).
    pub(super) groups: super::group::Groups,
}

/// Every holder's source, kept once: a hold keeps a pointer to it. A source
/// nobody holds under any more is dropped at the next purge, when the set
/// has doubled since the last one (so purging costs O(1) per source added).
#[derive(Default)]
pub(super) struct Sources {
    set: HashSet<Source>,
    purge_at: usize,
}

impl Sources {
    pub(super) fn intern(&mut self, name: &[u8]) -> Source {
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
    /// One hold of `owner` more (`up`) or less in [`Inner::held_by`].
    pub(super) fn count_hold(&mut self, owner: Option<&super::Owner>, up: bool) {
        let Some(o) = owner else { return };
        let f = o.fingerprint.get();
        if up {
            *self.held_by.entry(f).or_insert(0) += 1;
        } else if let Some(n) = self.held_by.get_mut(&f) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.held_by.remove(&f);
            }
        }
    }

    pub(super) fn fresh_id(&mut self) -> GrantId {
        self.next_id += 1;
        self.next_id
    }

    /// The next fencing token: one more than the last, and at least the
    /// wall clock in microseconds, so that a server restarted without a
    /// log (which remembers no token) still gives larger ones than before,
    /// unless it gave more than a million a second or the clock went back.
    pub(super) fn fresh_token(&mut self) -> Token {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as Token)
            .unwrap_or(0);
        self.last_token = (self.last_token + 1).max(now_us);
        self.last_token
    }

    /// Adds request `id` to the holders of `key` (its caller checked that
    /// it may hold now), logged.
    pub(super) fn grant(&mut self, key: &[u8], id: GrantId, ask: &Ask) -> Grant {
        let token = self.fresh_token();
        let since = SystemTime::now();
        // A kept hold only: a session hold ends with its holder.
        let expires = ask
            .expire
            .filter(|_| !ask.session)
            .map(|secs| since + Duration::from_secs(u64::from(secs.get())));
        // The holder's secret goes to it alone; the table and the log keep
        // its digest.
        let secret = (ask.session && ask.secret).then(fresh_secret);
        // `--limit N`: the lowest slot no hold of the key has.
        let slot = match self.keys.get(key) {
            Some(state) => state.free_slot(ask.mode),
            None => KeyState::default().free_slot(ask.mode),
        };
        let holder = Holder {
            id,
            token,
            source: ask.source.clone(),
            peer: ask.peer,
            since,
            session: ask.session,
            mode: ask.mode,
            owner: ask.owner.clone(),
            expires,
            secret: secret.as_ref().map(secret_digest),
            fields: ask.fields.clone(),
            slot,
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
            secret,
            owner: ask.owner.clone(),
            slot,
        }
    }

    /// Adds `hold` to the holds of `key` (its entry made if new).
    pub(super) fn add_hold(&mut self, key: &[u8], hold: Hold) {
        self.count_hold(hold.owner(), true);
        match self.keys.get_mut(key) {
            Some(state) => state.holds.push(hold),
            None => {
                let mut state = Box::<KeyState>::default();
                state.holds.push(hold);
                self.keys.insert(key.into(), state);
            }
        }
    }

    pub(super) fn link_mut(&mut self, key: &[u8], id: GrantId, gen: u64) -> Option<&mut Link> {
        let hold = self.keys.get_mut(key)?.hold_mut(id)?;
        hold.link_mut().filter(|l| l.gen == gen)
    }

    /// Records `holder`'s grant of `key`, with the same start time the
    /// table keeps (so a restart restores the time `keys` showed).
    pub(super) fn record_grant(&self, key: &[u8], holder: &Holder) -> Durable {
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
            ownership: Ownership {
                fingerprint: holder.owner.as_ref().map_or(0, |o| o.fingerprint.get()),
                name: holder
                    .owner
                    .as_ref()
                    .map_or_else(Vec::new, |o| o.name.as_bytes().to_vec()),
                secret: holder.secret,
                fields: holder
                    .fields
                    .as_deref()
                    .map_or_else(Vec::new, <[u8]>::to_vec),
                slot: holder.slot,
            },
        };
        Durable(vec![wal.append(&held.record())])
    }

    pub(super) fn record_release(&self, key: &[u8], token: Token) -> Durable {
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
    /// that follow it, and with `end` it is kept in the key's history
    /// (none for a grant that never reached its client). Returns the
    /// holder and the holders let in.
    pub(super) fn release(
        &mut self,
        key: &[u8],
        id: GrantId,
        record: bool,
        end: Option<&End>,
    ) -> Option<(Holder, Vec<Holder>, Durable)> {
        let state = self.keys.get_mut(key)?;
        let pos = state.holds.iter().position(|h| h.id == id)?;
        // Dropping the hold's link wakes the task serving a session hold.
        let holder = state.holds.remove(pos).holder();
        self.count_hold(holder.owner.as_ref(), false);
        let durable = if record {
            self.record_release(key, holder.token)
        } else {
            Durable::default()
        };
        if let Some(end) = end {
            self.record_end(key, &holder, end);
        }
        let next = self.promote(key, &durable);
        Some((holder, next, durable))
    }

    /// Ends the holds `ids` of `key` (a reset), then lets the next waiters in.
    pub(super) fn release_each(
        &mut self,
        key: &[u8],
        ids: &[GrantId],
        end: &End,
    ) -> Option<(Released, Durable)> {
        let mut durable = Durable::default();
        let mut holders = Vec::with_capacity(ids.len());
        let mut next = Vec::new();
        for &id in ids {
            // Only the holds found: waiters let in by an earlier release
            // of this reset keep the key.
            if let Some((h, n, d)) = self.release(key, id, true, Some(end)) {
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
    /// hold beside its holders (passing the requests of groups that have
    /// not reserved, `group.rs`); drops the key's entry once nobody holds
    /// or wants it. Returns the holders let in. A group that stands at the
    /// head of its lines may reserve them or be granted all its keys; a
    /// group broken on the way opens its other lines, which are served
    /// too.
    ///
    /// Their grants are answered only once `after` (the release that let
    /// them in) is durable too: a later batch of the log can be written
    /// when an earlier one failed, and a grant reported while the log still
    /// has the hold before it would come back beside it after a restart.
    pub(super) fn promote(&mut self, key: &[u8], after: &Durable) -> Vec<Holder> {
        let mut more = Vec::new();
        let next = self.promote_one(key, after, &mut more);
        // Each group breaks once, so this ends.
        while let Some(k) = more.pop() {
            self.promote_one(&k, after, &mut more);
        }
        next
    }

    fn promote_one(
        &mut self,
        key: &[u8],
        after: &Durable,
        more: &mut Vec<Box<[u8]>>,
    ) -> Vec<Holder> {
        let mut next = Vec::new();
        'line: loop {
            // Its turn came below the mark: outdated, it never holds.
            self.drop_outdated_head(key);
            // Past the requests of groups that let others pass (each may
            // reserve its lines or take its keys on the way), to the first
            // waiter nobody passes.
            let mut i = 0;
            loop {
                let Some(w) = self.keys.get(key).and_then(|s| s.waiters.get(i)) else {
                    break 'line;
                };
                // A waiter whose task is gone cannot take the key: out.
                if w.notify.is_closed() {
                    let w = self.keys.get_mut(key).and_then(|s| s.waiters.remove(i));
                    let w = w.expect("just seen");
                    if let Some(name) = w.ask.group() {
                        self.left_group(name, key, w.id, more);
                    }
                    continue 'line;
                }
                let Some(name) = w.ask.group() else {
                    break;
                };
                if self.consider(name, after) {
                    continue 'line;
                }
                // Its group reserved its lines (now or before): it waits
                // for the key, and nobody passes it.
                let w = self.keys.get(key).and_then(|s| s.waiters.get(i));
                if !w.is_some_and(|w| self.passable(w)) {
                    break 'line;
                }
                i += 1;
            }
            let state = self.keys.get(key).expect("a waiter's key");
            let w = state.waiters.get(i).expect("stopped at it");
            if !state.admits(w.ask.mode) {
                break;
            }
            let w = self.keys.get_mut(key).and_then(|s| s.waiters.remove(i));
            if let Some(h) = self.grant_waiter(key, w.expect("just seen"), after) {
                next.push(h);
            }
        }
        if self.keys.get(key).is_some_and(|s| s.is_idle()) {
            self.keys.remove(key);
        }
        next
    }

    /// Grants `w`, just taken out of `key`'s line, the key and tells it;
    /// the holder, or None if its task went away just now (the grant is
    /// then undone, in the log and the count too).
    pub(super) fn grant_waiter(
        &mut self,
        key: &[u8],
        w: Waiter,
        after: &Durable,
    ) -> Option<Holder> {
        let mut grant = self.grant(key, w.id, &w.ask.to_ask());
        grant.durable.add(after.clone());
        let token = grant.token;
        if w.notify.send(Notice::Granted(Box::new(grant))).is_ok() {
            return self
                .keys
                .get(key)
                .and_then(|s| s.hold(w.id))
                .map(|h| h.holder());
        }
        self.counters
            .grants
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let removed = self.keys.get_mut(key).is_some_and(|state| {
            let before = state.holds.len();
            state.holds.retain(|h| h.id != w.id);
            state.holds.len() < before
        });
        if removed {
            self.count_hold(w.ask.owner(), false);
        }
        let _ = self.record_release(key, token);
        None
    }
}

/// A session hold's secret: random bytes from the system (through ring,
/// the crypto of the TLS in the tree).
fn fresh_secret() -> Secret {
    static PROVIDER: std::sync::OnceLock<rustls::crypto::CryptoProvider> =
        std::sync::OnceLock::new();
    let provider = PROVIDER.get_or_init(rustls::crypto::ring::default_provider);
    let mut secret = [0u8; SECRET_LEN];
    provider
        .secure_random
        .fill(&mut secret)
        .expect("the system gives random bytes");
    secret
}
