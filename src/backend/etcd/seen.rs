//! What a waiter records of the holders ahead of it that vanish
//! (docs/history.md, "etcd: what can be known"): a holder whose lease ran
//! out (its lc-cli died, or lost the service) leaves its history entry
//! open; the waiter behind it, whose watch sees the key deleted, closes it
//! `freed` (`expired` for a kept hold's `--expire`) in the looks it sends
//! anyway. 0 round trips added.
//!
//! Each look reads the entries of the holders the waiter tracks (keys only
//! by name: no range), and holds, per holder, a nested transaction that
//! closes its entry only if the holder's key is gone and the entry is as
//! the waiter last read it (open; a release or a reset rewrites it in the
//! transaction that deletes the key), else puts a `freed` entry from the
//! key's own value where none is (a hold of an older lc-cli that opened
//! none). A holder first seen gone in a look whose entry that look read
//! open is closed by the next look (the one that confirms the waiter's
//! turn, when the waiter is next).

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp, TxnOpResponse};

use super::history;
use super::line;
use super::names::KeyData;

/// A holder ahead, and its entry as last read (an open one: its value and
/// mod revision).
struct Tracked {
    kv: KeyValue,
    entry: Option<(Vec<u8>, i64)>,
}

/// The holders a waiter tracks, in the key's history range `range`.
pub(super) struct Seen {
    range: String,
    tracked: Vec<Tracked>,
}

/// The most holders tracked (a wide `--limit` or many shared holders: the
/// oldest are kept; one not tracked ends unrecorded by the waiter and is
/// read `freed` by `history`).
const AT_MOST: usize = 16;

impl Seen {
    pub(super) fn new(range: &str) -> Seen {
        Seen {
            range: range.to_string(),
            tracked: Vec::new(),
        }
    }

    fn entry_key(&self, kv: &KeyValue) -> String {
        history::entry_key(&self.range, kv.key())
    }

    /// What a look adds: the reads of the tracked holders' entries, then
    /// one nested transaction per tracked holder (one that lc-cli could
    /// see end: `history::vanished`).
    pub(super) fn ops(&self) -> Vec<TxnOp> {
        let mut ops: Vec<TxnOp> = self
            .tracked
            .iter()
            .map(|t| TxnOp::get(self.entry_key(&t.kv), None))
            .collect();
        ops.extend(self.tracked.iter().map(|t| TxnOp::txn(self.closing(t))));
        ops
    }

    fn closing(&self, t: &Tracked) -> Txn {
        let key = self.entry_key(&t.kv);
        let gone = || Compare::create_revision(t.kv.key(), CompareOp::Equal, 0);
        // Tracked only where lc-cli can tell how it ended (`update`).
        let ending = history::vanished(&t.kv).unwrap_or(crate::backend::history::Ending::Freed);
        let token = t.kv.create_revision();
        let fresh = history::unopened(&t.kv, ending, None);
        let absent = history::put_when(&key, fresh, 0, Some(gone()));
        let open = t.entry.as_ref().and_then(|(value, m)| {
            // The entry knows a kept hold's expiry even where the key as
            // last seen (before it was kept) does not.
            let ending = history::vanished_as(value, ending);
            let closed = history::close(value, token, ending, None, None)?;
            Some(history::put_when(&key, closed, *m, Some(gone())))
        });
        match open {
            // Closed as read, else put where none is: one transaction
            // nested in the other's `else` (never two puts of one key).
            Some(open) => open.or_else([TxnOp::txn(absent)]),
            None => absent,
        }
    }

    /// After a look: `tail` its answers to [`Seen::ops`] (in order),
    /// `ahead` the keys ahead of ours that it read. Keeps tracking a holder
    /// gone whose entry is still open (the next look closes it) and starts
    /// tracking every holder `ahead` shows.
    pub(super) fn update(&mut self, tail: &[TxnOpResponse], ahead: &[KeyValue]) {
        let n = self.tracked.len();
        let there = |kv: &KeyValue| {
            ahead
                .iter()
                .any(|a| a.key() == kv.key() && a.create_revision() == kv.create_revision())
        };
        let old = std::mem::take(&mut self.tracked);
        for (i, mut t) in old.into_iter().enumerate() {
            let read = match tail.get(i) {
                Some(TxnOpResponse::Get(g)) => g.kvs().first().cloned(),
                _ => None,
            };
            let closed_now =
                matches!(tail.get(n + i), Some(TxnOpResponse::Txn(r)) if r.succeeded());
            t.entry = read
                .filter(|e| history::is_open(e.value()))
                .map(|e| (e.value().to_vec(), e.mod_revision()));
            let keep = match there(&t.kv) {
                true => true,
                false => !closed_now && t.entry.is_some(),
            };
            if keep {
                self.tracked.push(t);
            }
        }
        let modes: Vec<_> = ahead
            .iter()
            .map(|kv| KeyData::mode_of(kv.value()))
            .collect();
        for (kv, held) in ahead.iter().zip(line::holders(&modes)) {
            let known = self
                .tracked
                .iter()
                .any(|t| t.kv.key() == kv.key() && t.kv.create_revision() == kv.create_revision());
            let told = history::vanished(kv).is_some();
            if held && told && !known && self.tracked.len() < AT_MOST {
                self.tracked.push(Tracked {
                    kv: kv.clone(),
                    entry: None,
                });
            }
        }
    }
}
