//! A table rebuilt from its write-ahead log at start-up: the holds the log
//! tells, added in key order without a client.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use super::inner::Inner;
use super::key::{Hold, Holder, KeyState, Link, LinkEnd};
use super::owner::{Fingerprint, Identity, Owner};
use super::{GrantId, Table};
use crate::mode::LockMode;
use crate::wal::HeldRef;

impl Table {
    /// Adds the holds of a log, without a client (restored at start-up):
    /// see [`Restorer`]. The table is locked until it is dropped.
    pub(crate) fn restorer(&self) -> Restorer<'_> {
        Restorer {
            inner: self.lock_inner(),
            built: Vec::new(),
            stragglers: Vec::new(),
            owners: HashMap::new(),
            unslotted: false,
        }
    }
}

/// Adds the holds of a log to a table, given sorted by key (as
/// [`Wal::open_with`](crate::wal::Wal::open_with) tells them), one
/// [`Restorer::add`] each; they enter the table's tree when it is dropped.
/// The tree is built in one pass, node by node, instead of a lookup and an
/// insert per key (most of a restart's time with a million keys), and its
/// nodes are full. A hold out of that order is added one by one.
pub(crate) struct Restorer<'t> {
    inner: std::sync::MutexGuard<'t, Inner>,
    /// Each key once, in key order.
    built: Vec<(Box<[u8]>, Box<KeyState>)>,
    stragglers: Vec<(Box<[u8]>, Hold)>,
    /// Each owner once, by fingerprint: its holds share it.
    owners: HashMap<u64, Owner>,
    /// A `--limit N` hold came without a slot (a log of an earlier
    /// release): slots are given once every hold is in.
    unslotted: bool,
}

impl Restorer<'_> {
    /// Adds `held`, with its owner and its secret's digest as the log has
    /// them. A session hold is heard from "now", so its holder has
    /// the session timeout to reclaim it; its link is returned for the task
    /// that expires it otherwise. The grant id of every hold is returned
    /// too (a kept hold that expires needs it for its timer).
    pub(crate) fn add(
        &mut self,
        held: &HeldRef<'_>,
        peer: SocketAddr,
    ) -> (GrantId, Option<LinkEnd>) {
        let owned = held.ownership;
        let owner = Fingerprint::new(owned.fingerprint).map(|fingerprint| {
            self.owners
                .entry(fingerprint.get())
                .or_insert_with(|| {
                    Arc::new(Identity {
                        fingerprint,
                        name: String::from_utf8_lossy(owned.name).into(),
                    })
                })
                .clone()
        });
        let (hold, end) = self.inner.restored(held, peer, owner);
        self.unslotted |= matches!(hold.mode, LockMode::Limit(_)) && hold.slot().is_none();
        let id = hold.id;
        let key = held.key;
        let owner = hold.owner().cloned();
        match self.built.last_mut() {
            Some((k, state)) if **k == *key => state.holds.push(hold),
            // Counted by add_hold when the stragglers go in.
            Some((k, _)) if **k > *key => {
                self.stragglers.push((key.into(), hold));
                return (id, end);
            }
            _ => {
                let mut state = Box::<KeyState>::default();
                state.holds.push(hold);
                self.built.push((key.into(), state));
            }
        }
        self.inner.count_hold(owner.as_ref(), true);
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
        // Each the lowest slot its key's other holds leave free, once the
        // holds with a slot in the log are all in (nobody was told one).
        if self.unslotted {
            for state in self.inner.keys.values_mut() {
                state.give_slots();
            }
        }
    }
}

impl Inner {
    /// The hold `held` describes, with a fresh grant id, its source
    /// interned and its link (for a session hold): not yet in the tree.
    fn restored(
        &mut self,
        held: &HeldRef<'_>,
        peer: SocketAddr,
        owner: Option<Owner>,
    ) -> (Hold, Option<LinkEnd>) {
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
            owner,
            expires: held.expires,
            secret: held.ownership.secret,
            fields: (!held.ownership.fields.is_empty())
                .then(|| std::sync::Arc::from(held.ownership.fields)),
            slot: held.ownership.slot,
        };
        let source = self.sources.intern(held.source);
        (Hold::new(&holder, source, link), end)
    }
}
