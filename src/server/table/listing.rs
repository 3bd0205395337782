//! What the table shows without changing anything: Keys' listing (whole,
//! or in parts under a budget), the manager's KEYX report, and the gauges a
//! metrics scrape reads.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::SystemTime;

use super::key::{Hold, KeyState, Whose};
use super::Table;
use crate::proto::listing::{self, HoldView, PeerText, WaiterView};
use crate::proto::manager::KeyReport;

/// What a metrics scrape reads from the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Gauges {
    /// Keys with at least one holder.
    pub held: usize,
    pub waiting: usize,
    /// When the longest-standing hold began.
    pub oldest_since: Option<SystemTime>,
}

/// What a listing carries besides the holds: the waiters (flags bit 0),
/// and the field lists and marks (bit 1, version 2 of the listing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct What {
    pub waiters: bool,
    pub fields: bool,
}

impl Table {
    /// Every hold as the operator sees it, sorted by key, then oldest first.
    pub(crate) fn held(&self) -> Vec<KeyReport> {
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
    /// copy of a field), under the mutex. Fencing tokens are shown of the
    /// holds `viewer` may release only (0 for the others: a `lock`
    /// token's listing shows its own).
    pub(crate) fn listing_into(
        &self,
        key: Option<&[u8]>,
        waiters: What,
        viewer: Whose,
        out: &mut Vec<u8>,
    ) {
        let inner = self.lock_inner();
        let one = key.map(|k| inner.keys.get_key_value(k));
        let keys: Box<dyn Iterator<Item = Entry<'_>>> = match one {
            Some(found) => Box::new(found.into_iter()),
            None => Box::new(inner.keys.iter()),
        };
        for (k, s) in keys {
            push_listed(out, k, s, waiters, viewer, &inner.marks);
        }
    }

    /// A part of the listing of every key that starts with `prefix` (of
    /// every key when it is empty; [`Table::listing_into`] of None): the
    /// records of the keys after `after` (from the first when None), in key
    /// order, appended to `out` until it has `budget` bytes (a key's records
    /// are never split). Returns the last key listed, to go on from, or None
    /// once the last key is in. Each part takes the mutex once, for about
    /// `budget` bytes' work, so a listing of a million keys never holds up
    /// the server for all of it; the keys under a prefix are a range of the
    /// tree, so listing them costs nothing of the keys outside it.
    pub(crate) fn listing_part(
        &self,
        (prefix, after): (&[u8], Option<&[u8]>),
        waiters: What,
        viewer: Whose,
        out: &mut Vec<u8>,
        budget: usize,
    ) -> Option<Box<[u8]>> {
        let inner = self.lock_inner();
        let from = after.map_or(Bound::Included(prefix), Bound::Excluded);
        let mut keys = inner
            .keys
            .range::<[u8], _>((from, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix));
        for (k, s) in keys.by_ref() {
            push_listed(out, k, s, waiters, viewer, &inner.marks);
            if out.len() >= budget {
                // More to come only if a key follows.
                return keys.next().is_some().then(|| k.clone());
            }
        }
        None
    }

    /// Keys held, waiters queued and the oldest hold's start, in one pass
    /// under the mutex and without copying any key (for a metrics scrape).
    pub(crate) fn gauges(&self) -> Gauges {
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
}

/// A key and its state, as the tree lends them.
type Entry<'a> = (&'a Box<[u8]>, &'a Box<KeyState>);

/// Appends the records of key `k` (state `s`): its holds oldest first and,
/// with `waiters`, its live waiters in line order; the tokens of the holds
/// `viewer` may release.
fn push_listed(
    out: &mut Vec<u8>,
    k: &[u8],
    s: &KeyState,
    what: What,
    viewer: Whose,
    marks: &BTreeMap<Box<[u8]>, u64>,
) {
    let mark = match what.fields {
        true => marks.get(k).copied(),
        false => None,
    };
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
                token: match viewer.may_release(h.owner()) {
                    true => h.token,
                    false => 0,
                },
                session: h.session,
                mode: h.mode,
                expires: h.expires(),
                identity: h.owner().map_or(&[][..], |o| o.name.as_bytes()),
                extra: what
                    .fields
                    .then(|| (h.fields().map_or(&[][..], |f| &f[..]), mark)),
                slot: h.slot(),
            },
        );
    }
    if !what.waiters {
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
                identity: w.ask.owner().map_or(&[][..], |o| o.name.as_bytes()),
                fields: what.fields.then(|| w.ask.fields().unwrap_or_default()),
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
        identity: None,
        fields: None,
        mark: None,
        slot: None,
    }
}
