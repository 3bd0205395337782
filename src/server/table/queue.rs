//! The deploy-queue rules of issue 44, applied under the table's mutex when
//! a request joins a key's line and when its turn comes: `--newest`
//! (a waiting request superseded by a newer one), `--order` and the key's
//! mark (a request below it is outdated), `--cancel-running` (a holder
//! that took the key with it is asked to stop). The mark of each key lives
//! here too, in the table (kept while the key is unused) and in the log.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::inner::Inner;
use super::key::{Ask, KeyState, Waiter};
use super::{Durable, Left, LockOutcome, Notice, Table};
use crate::backend::fields::FieldList;
use crate::proto::RivalWire;
use crate::wal::Record;

/// What the rules read of a request's field list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rules {
    pub order: Option<u64>,
    pub newest: bool,
    pub cancel: bool,
}

impl Rules {
    /// The rules of a field list (none without one, or one that does not
    /// parse: the connection checked it before).
    pub(crate) fn of(fields: Option<&[u8]>) -> Rules {
        let Some(list) = fields.and_then(|f| FieldList::parse(f).ok()) else {
            return Rules::default();
        };
        Rules {
            order: list.get("order").and_then(|v| v.parse().ok()),
            newest: list.get("newest") == Some("1"),
            cancel: list.get("cancel") == Some("1"),
        }
    }
}

/// Whether a request (`order`, joined at `since`) ranks at or above
/// another: both with an order, the higher order, or the later arrival of
/// equal ones; else the later arrival.
fn ranks_at_or_above(a: (Option<u64>, SystemTime), b: (Option<u64>, SystemTime)) -> bool {
    match (a.0, b.0) {
        (Some(x), Some(y)) if x != y => x > y,
        _ => a.1 >= b.1,
    }
}

/// A request as a superseded, outdated or cancelled one is told of it.
pub(super) fn rival_of(ask: &Ask) -> RivalWire {
    RivalWire {
        source: ask.source.clone(),
        identity: ask
            .owner
            .as_ref()
            .map_or_else(Vec::new, |o| o.name.as_bytes().to_vec()),
        fields: ask.fields.as_deref().map_or_else(Vec::new, <[u8]>::to_vec),
    }
}

fn rival_of_waiter(w: &Waiter) -> RivalWire {
    rival_of(&w.ask.to_ask())
}

/// What a request's arrival decided before it may join the line.
pub(super) enum Joined {
    /// It goes on: granted if the key is free, else queued.
    GoOn,
    /// It does not wait (outdated, or superseded at once).
    Done(LockOutcome),
}

impl Inner {
    /// The next waiter's place: a time in ns since the epoch, later than
    /// every earlier one (and, the clock permitting, than those of a run
    /// of the server before a restart, which a ticket shown again keeps).
    pub(super) fn fresh_ticket(&mut self) -> SystemTime {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.last_ticket = (self.last_ticket + 1).max(now);
        UNIX_EPOCH + Duration::from_nanos(self.last_ticket)
    }

    /// The arrival of `ask` at `key`, joining at `since`: outdated below
    /// the mark; with `--newest`, superseded at once by a waiting request
    /// that ranks above it, else it supersedes every waiting `--newest`
    /// one; with `--cancel-running`, the holder that took the key with it
    /// is asked to stop (unless it has a higher order).
    pub(super) fn join(&mut self, key: &[u8], ask: &Ask, since: SystemTime) -> Joined {
        let rules = Rules::of(ask.fields.as_deref());
        if let (Some(order), Some(&mark)) = (rules.order, self.marks.get(key)) {
            if order < mark {
                return Joined::Done(LockOutcome::Outdated(mark));
            }
        }
        let Some(state) = self.keys.get_mut(key) else {
            return Joined::GoOn;
        };
        if rules.newest {
            let me = (rules.order, since);
            let above = state.waiters.iter().find(|w| {
                let r = Rules::of(w.ask.fields());
                r.newest && !w.notify.is_closed() && !ranks_at_or_above(me, (r.order, w.since))
            });
            if let Some(w) = above {
                return Joined::Done(LockOutcome::Superseded(rival_of_waiter(w)));
            }
            let by = rival_of(ask);
            let left = &mut self.left;
            state.waiters.retain_mut(|w| {
                if !Rules::of(w.ask.fields()).newest {
                    return true;
                }
                left.insert(w.id, Left::Superseded(by.clone()));
                if !super::reset::tell(w, Notice::Withdrawn) {
                    left.remove(&w.id);
                }
                false
            });
        }
        if rules.cancel {
            cancel_holders(state, ask, rules);
        }
        Joined::GoOn
    }

    /// Takes the waiters at the head of `key`'s line whose order is below
    /// the mark out of it, telling each (its turn came, outdated).
    pub(super) fn drop_outdated_head(&mut self, key: &[u8]) {
        let Some(&mark) = self.marks.get(key) else {
            return;
        };
        let Some(state) = self.keys.get_mut(key) else {
            return;
        };
        while let Some(w) = state.waiters.front() {
            let below = Rules::of(w.ask.fields()).order.is_some_and(|o| o < mark);
            if !below {
                return;
            }
            let w = state.waiters.pop_front().expect("just seen");
            self.left.insert(w.id, Left::Outdated(mark));
            if w.notify.send(Notice::Withdrawn).is_err() {
                self.left.remove(&w.id);
            }
        }
    }

    /// Raises `key`'s mark to `order` (never lowers it), logged.
    pub(super) fn raise_mark(&mut self, key: &[u8], order: u64) -> Durable {
        let mark = self.marks.entry(key.into()).or_insert(order);
        if *mark > order {
            return Durable::default();
        }
        *mark = order;
        self.record_mark(key, Some(order))
    }

    pub(super) fn record_mark(&self, key: &[u8], mark: Option<u64>) -> Durable {
        match &self.wal {
            Some(wal) => Durable(vec![wal.append(&Record::Mark {
                key: key.to_vec(),
                mark,
            })]),
            None => Durable::default(),
        }
    }
}

/// Asks the holder of `state` to stop for `ask`, a `--cancel-running`
/// request, if it took the key with `--cancel-running` too and does not
/// have a higher order.
fn cancel_holders(state: &mut KeyState, ask: &Ask, rules: Rules) {
    for h in state.holds.iter_mut() {
        let theirs = Rules::of(h.fields().map(|f| &f[..]));
        if !theirs.cancel {
            continue;
        }
        if let (Some(mine), Some(their)) = (rules.order, theirs.order) {
            if mine < their {
                continue;
            }
        }
        h.cancel(rival_of(ask));
    }
}

impl Table {
    /// The key's mark (None: none).
    pub(crate) fn mark(&self, key: &[u8]) -> Option<u64> {
        self.lock_inner().marks.get(key).copied()
    }

    /// Clears the key's mark, logged; the mark it had, if any.
    pub(crate) fn clear_mark(&self, key: &[u8]) -> (Option<u64>, Durable) {
        let mut inner = self.lock_inner();
        match inner.marks.remove(key) {
            Some(m) => (Some(m), inner.record_mark(key, None)),
            None => (None, Durable::default()),
        }
    }

    /// A mark the log had (start-up).
    pub(crate) fn restore_mark(&self, key: &[u8], mark: u64) {
        self.lock_inner().marks.insert(key.into(), mark);
    }

    /// Why waiter `id` was taken out of its line by a deploy-queue rule
    /// (its [`Notice::Withdrawn`]), once.
    pub(crate) fn take_left(&self, id: super::GrantId) -> Option<Left> {
        self.lock_inner().left.remove(&id)
    }

    /// A new receiver for the task of connection `gen` serving hold `id`,
    /// after it read a cancel notice on its last; None if the hold ended
    /// or moved meanwhile.
    pub(crate) fn rearm(
        &self,
        key: &[u8],
        id: super::GrantId,
        gen: u64,
    ) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let mut inner = self.lock_inner();
        let link = inner.link_mut(key, id, gen)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        link.changed = Some(tx);
        Some(rx)
    }

    /// Who asked hold `id` of `key` to stop, if anyone did.
    pub(crate) fn cancel_notice(&self, key: &[u8], id: super::GrantId) -> Option<RivalWire> {
        let inner = self.lock_inner();
        inner.keys.get(key)?.hold(id)?.cancelled_by().cloned()
    }
}
