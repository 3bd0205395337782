//! Requests leaving the table other than by a release: a waiter whose
//! client hung up, and the resets (by key, by source).

use tokio::sync::oneshot;

use super::key::Waiter;
use super::End;
use super::{Durable, GrantId, Holder, Notice, Released, Table, Withdrawal};
use crate::backend::history::Ending;

impl Table {
    /// The client of request `id` hung up. A waiter leaving the head of the
    /// line may let the ones behind it in (shared requests behind an
    /// exclusive one): they are returned with it.
    pub(crate) fn withdraw(&self, key: &[u8], id: GrantId) -> (Withdrawal, Vec<Holder>) {
        let mut inner = self.lock_inner();
        let Some(state) = inner.keys.get_mut(key) else {
            return (Withdrawal::Gone, Vec::new());
        };
        let place = state.waiters.iter().position(|w| w.id == id);
        if let Some(pos) = place {
            let w = state.waiters.remove(pos).expect("just found");
            let mut more = Vec::new();
            if let Some(name) = w.ask.group() {
                inner.left_group(name, key, id, &mut more);
            }
            let next = inner.promote(key, &Durable::default());
            for k in more {
                inner.promote(&k, &Durable::default());
            }
            return (Withdrawal::Dequeued, next);
        }
        if state.hold(id).is_some() {
            let next = inner
                .release(key, id, true, Some(&End::new(Ending::Freed)))
                .map(|(_, next, _)| next)
                .unwrap_or_default();
            return (Withdrawal::Released, next);
        }
        (Withdrawal::Gone, Vec::new())
    }

    /// Ends every hold of the key; the waiters at the head of the line that
    /// may hold together get it, the rest keep their places.
    /// `by`: who reset it, for the key's history.
    pub(crate) fn reset_key(&self, key: &[u8], by: &str) -> Option<(Released, Durable)> {
        let mut inner = self.lock_inner();
        let ids: Vec<GrantId> = inner.keys.get(key)?.holds.iter().map(|h| h.id).collect();
        inner.release_each(key, &ids, &End::reset(by.to_string()))
    }

    /// Ends every hold of `source` (each key passes to its next waiters)
    /// and withdraws that source's waiters. Returns the keys released and
    /// how many waiters were withdrawn. `by`: who reset it, for the keys'
    /// histories.
    pub(crate) fn reset_source(&self, source: &[u8], by: &str) -> (Vec<Released>, usize, Durable) {
        let end = End::reset(by.to_string());
        let mut inner = self.lock_inner();
        let mut withdrawn = 0;
        let mut touched = Vec::new();
        let mut grouped = Vec::new();
        // Withdraw first, so a released key never goes to a waiter of the
        // source being cleared.
        for (key, state) in inner.keys.iter_mut() {
            let before = state.waiters.len();
            state.waiters.retain_mut(|w| {
                if *w.ask.source != *source {
                    return true;
                }
                if let Some(name) = w.ask.group() {
                    grouped.push((name, key.clone(), w.id));
                }
                let _ = tell(w, Notice::Withdrawn);
                false
            });
            if state.waiters.len() != before {
                withdrawn += before - state.waiters.len();
                touched.push(key.clone());
            }
        }
        // A group that lost a request opens the lines it reserved.
        for (name, key, id) in grouped {
            inner.left_group(name, &key, id, &mut touched);
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
            if let Some((r, d)) = inner.release_each(&key, &ids, &end) {
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
}

/// Tells a waiter leaving the line `notice` (its entry is dropped
/// anyway); false if its task is gone.
pub(super) fn tell(w: &mut Waiter, notice: Notice) -> bool {
    let (dummy, _) = oneshot::channel();
    let notify = std::mem::replace(&mut w.notify, dummy);
    notify.send(notice).is_ok()
}
