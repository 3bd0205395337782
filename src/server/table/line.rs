//! A key's line of waiters.

use std::collections::VecDeque;

use super::key::Waiter;

/// A key's line of waiters, in arrival order: a pointer while nobody waits
/// (most held keys), the queue once someone does (freed again when empty).
// Boxed on purpose: 8 bytes in every key's state where a `VecDeque` is 32.
#[allow(clippy::box_collection)]
#[derive(Default)]
pub(super) struct Line(Option<Box<VecDeque<Waiter>>>);

impl Line {
    pub(super) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|q| q.is_empty())
    }

    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.len())
    }

    pub(super) fn front(&self) -> Option<&Waiter> {
        self.0.as_ref()?.front()
    }

    pub(super) fn get(&self, i: usize) -> Option<&Waiter> {
        self.0.as_ref()?.get(i)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.0.iter().flat_map(|q| q.iter())
    }

    pub(super) fn push_back(&mut self, w: Waiter) {
        // Room for one at first: most lines are one waiter long, and an empty
        // `VecDeque` grows to four at its first push.
        self.0
            .get_or_insert_with(|| Box::new(VecDeque::with_capacity(1)))
            .push_back(w);
    }

    /// Puts `w` before the first waiter that joined after `since` (a
    /// waiter taking its place back after a restart).
    pub(super) fn insert_by_since(&mut self, w: Waiter) {
        let q = self
            .0
            .get_or_insert_with(|| Box::new(VecDeque::with_capacity(1)));
        let at = q.iter().position(|o| o.since > w.since).unwrap_or(q.len());
        q.insert(at, w);
    }

    pub(super) fn pop_front(&mut self) -> Option<Waiter> {
        let w = self.0.as_mut()?.pop_front();
        self.free_if_empty();
        w
    }

    pub(super) fn remove(&mut self, pos: usize) -> Option<Waiter> {
        let w = self.0.as_mut()?.remove(pos);
        self.free_if_empty();
        w
    }

    pub(super) fn retain_mut(&mut self, keep: impl FnMut(&mut Waiter) -> bool) {
        if let Some(q) = &mut self.0 {
            q.retain_mut(keep);
        }
        self.free_if_empty();
    }

    fn free_if_empty(&mut self) {
        if self.is_empty() {
            self.0 = None;
        }
    }
}
