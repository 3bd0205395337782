//! Several keys granted in one step (issue 45, item 3: `lc-cli lock A --and
//! B -- CMD`; docs/several-keys.md).
//!
//! The client sends one request per key, each on its own connection (so
//! each hold keeps its own session and crash rules), all with the field
//! `group=ID/N`: ID its random name for the group, N how many keys. Each
//! request waits in its key's line like any other, but none is granted
//! alone. The rules, applied under the table's mutex:
//!
//! - A group is *complete* once all N requests are in their lines, under
//!   one token (a group is named by its token's fingerprint and ID, so no
//!   other token can join it or break it).
//! - A request of a group *stands at the head* of its line when every
//!   waiter in front of it is a request of another group that has not
//!   reserved.
//! - Until its group reserves, a group's request holds nobody up: a request
//!   behind it may take the key (it *passes* the group), as if the group's
//!   request were not there. This is what keeps a group waiting for one
//!   busy key from idling its other keys (Argo's head-of-line problem).
//! - A complete group whose requests all stand at the head of their lines
//!   *reserves* them: from then on nobody passes it. Once every one of its
//!   keys is free, all are granted to it in one step.
//! - If one of its requests leaves the line before (its client hung up, a
//!   reset), the group is broken: its reservation ends, its lines let
//!   others pass again, and its other requests are never granted (their
//!   client, which withdraws them all, takes them out).
//!
//! Neither side starves. A group waits behind others only until it stands
//! at the head of all its lines (its place in each line only moves up),
//! and then only for the holds already granted: at most one passer's per
//! line. A single-key request waits behind a group only once that group has
//! reserved, for the holds of the keys and then the group's own. And no
//! cycle of waits forms: a group reserves only when nothing reserved stands
//! in front of it in any of its lines, so of two reserved groups that share
//! lines, the one that reserved later stands in front in every line they
//! share, and waits for the other in none.

use std::collections::HashMap;

use super::inner::Inner;
use super::key::{Ask, Waiter};
use super::{Durable, GrantId};
use crate::backend::fields::{parse_group, FieldList};
use crate::mode::LockMode;

/// A group's name in the table: its token's fingerprint (0 without
/// tokens), the client's ID of it, and how many keys it asks.
pub(super) type GroupName = (u64, u64, u16);

/// The group `ask` belongs to, if it names one and may be in one: a
/// session's exclusive lock that waits under no deploy-queue rule (what
/// lc-cli sends for `--and`); any other request naming a group is served
/// as a request alone.
pub(super) fn name_of(ask: &Ask) -> Option<GroupName> {
    let list = FieldList::parse(ask.fields.as_deref()?).ok()?;
    let (id, n) = parse_group(list.get("group")?)?;
    let alone = ["order", "newest", "cancel", "atleast", "slots"]
        .iter()
        .any(|f| list.get(f).is_some());
    if alone || !ask.session || ask.mode != LockMode::Exclusive || ask.expire.is_some() {
        return None;
    }
    let owner = ask.owner.as_ref().map_or(0, |o| o.fingerprint.get());
    Some((owner, id, n))
}

/// One group's requests as they wait.
struct Group {
    /// Each request's key and id.
    members: Vec<(Box<[u8]>, GrantId)>,
    reserved: bool,
    /// A request of it left its line, or it was asked in a way that can
    /// never be granted (a key twice, more than N requests).
    broken: bool,
}

/// The groups that have requests in line.
#[derive(Default)]
pub(super) struct Groups(HashMap<GroupName, Group>);

impl Inner {
    /// Whether the waiters behind `w` may pass it: a group's request whose
    /// group has not reserved its lines (or is broken).
    pub(super) fn passable(&self, w: &Waiter) -> bool {
        w.ask
            .group()
            .is_some_and(|name| !self.groups.0.get(&name).is_some_and(|g| g.reserved))
    }

    /// Whether a new request may take `key` without passing anyone it may
    /// not pass (every waiter is a group's that has not reserved).
    pub(super) fn line_open(&self, key: &[u8]) -> bool {
        self.keys
            .get(key)
            .is_none_or(|s| s.waiters.iter().all(|w| self.passable(w)))
    }

    /// Request `id` of `key` has joined the line as one of group `name`.
    pub(super) fn join_group(&mut self, name: GroupName, key: &[u8], id: GrantId) {
        let group = self.groups.0.entry(name).or_insert_with(|| Group {
            members: Vec::with_capacity(usize::from(name.2)),
            reserved: false,
            broken: false,
        });
        let twice = group.members.iter().any(|(k, _)| **k == *key);
        if twice || group.members.len() >= usize::from(name.2) {
            group.broken = true;
            group.reserved = false;
        }
        group.members.push((key.into(), id));
    }

    /// Request `id` of `key`, one of group `name`'s, left its line without
    /// a grant: the group is broken, and the lines it reserved open again
    /// (their keys are put in `more`, to let the next waiters in).
    pub(super) fn left_group(
        &mut self,
        name: GroupName,
        key: &[u8],
        id: GrantId,
        more: &mut Vec<Box<[u8]>>,
    ) {
        let Some(group) = self.groups.0.get_mut(&name) else {
            return;
        };
        group.members.retain(|(k, i)| !(*i == id && **k == *key));
        if group.reserved {
            more.extend(group.members.iter().map(|(k, _)| k.clone()));
        }
        group.reserved = false;
        group.broken = true;
        if group.members.is_empty() {
            self.groups.0.remove(&name);
        }
    }

    /// Whether request `id` stands at the head of `key`'s line (only
    /// requests of groups that have not reserved in front of it) and its
    /// client still waits.
    fn stands_at_head(&self, key: &[u8], id: GrantId) -> bool {
        let Some(state) = self.keys.get(key) else {
            return false;
        };
        for w in state.waiters.iter() {
            if w.id == id {
                return !w.notify.is_closed();
            }
            if !self.passable(w) {
                return false;
            }
        }
        false
    }

    /// Group `name` reserves its lines if it is complete and stands at the
    /// head of all of them; a group that has reserved is granted every key
    /// once all are free. True if it was granted (its keys are held).
    /// `after`: what its grants wait for too (the release that let it in).
    pub(super) fn consider(&mut self, name: GroupName, after: &Durable) -> bool {
        let Some(group) = self.groups.0.get(&name) else {
            return false;
        };
        if group.broken || group.members.len() < usize::from(name.2) {
            return false;
        }
        let at_head = group
            .members
            .iter()
            .all(|(k, id)| self.stands_at_head(k, *id));
        if !at_head {
            return false;
        }
        let free = group
            .members
            .iter()
            .all(|(k, _)| self.keys.get(k).is_none_or(|s| s.holds.is_empty()));
        let Some(group) = self.groups.0.get_mut(&name) else {
            return false;
        };
        group.reserved = true;
        if !free {
            return false;
        }
        let group = self.groups.0.remove(&name).expect("just seen");
        for (key, id) in group.members {
            let state = self.keys.get_mut(&key).expect("a waiter's key");
            let pos = state
                .waiters
                .iter()
                .position(|w| w.id == id)
                .expect("stands in line");
            let w = state.waiters.remove(pos).expect("just found");
            self.grant_waiter(&key, w, after);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_group_field_names_an_id_and_a_count() {
        use crate::backend::fields::parse_group;
        assert_eq!(parse_group("1f/2"), Some((0x1f, 2)));
        assert_eq!(parse_group("ffffffffffffffff/64"), Some((u64::MAX, 64)));
        for bad in ["1f/1", "1f/65", "1f", "/2", "zz/2", "1f/2/3", ""] {
            assert_eq!(parse_group(bad), None, "{bad}");
        }
    }
}
