//! Each key's history (issue 46, docs/history.md): the last `serve
//! --history N` holds of the key that ended, kept in memory as the bytes of
//! their entries (`proto::history`), the oldest dropped past N; with a log,
//! each is a History record too (tag 11), restored at start-up and kept
//! through compactions up to the same N.
//!
//! An entry is made where the hold leaves the table ([`Inner::release`]),
//! with how it ended ([`End`]): released (and its command's status, where
//! the release carried it), reset (by whom), expired (a kept hold's
//! `--expire`), freed (its session not heard from for the grace: its
//! holder's connection closed and was not reclaimed) or lost (the session
//! expired with its connection still open: the holder was there, silent).

use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

use super::inner::Inner;
use super::key::Holder;
use super::{Table, Whose};
use crate::backend::history::Ending;
use crate::proto::history::{self as wire, Meta};
use crate::wal::Record;

/// How a hold ended, as its entry says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct End {
    pub ending: Ending,
    /// The command's exit status, where the release carried it.
    pub status: Option<i32>,
    /// Who ended it (a reset's client).
    pub by: Option<String>,
}

impl End {
    pub(crate) fn new(ending: Ending) -> End {
        End {
            ending,
            status: None,
            by: None,
        }
    }

    pub(crate) fn released(status: Option<i32>) -> End {
        End {
            status,
            ..End::new(Ending::Released)
        }
    }

    pub(crate) fn reset(by: String) -> End {
        End {
            by: Some(by),
            ..End::new(Ending::Reset)
        }
    }
}

/// The entries of every key, each key's oldest first.
#[derive(Default)]
pub(super) struct Rings {
    /// How many entries a key keeps (0: none are made).
    pub(super) cap: usize,
    keys: BTreeMap<Box<[u8]>, VecDeque<Kept>>,
}

/// One entry, and the fingerprint of its hold's token (0: none), which
/// alone sees its fencing token when read with a `lock` token.
struct Kept {
    owner: u64,
    entry: Box<[u8]>,
}

impl Rings {
    fn push(&mut self, key: &[u8], owner: u64, entry: Box<[u8]>) {
        if self.cap == 0 {
            return;
        }
        let ring = match self.keys.get_mut(key) {
            Some(ring) => ring,
            None => self.keys.entry(key.into()).or_default(),
        };
        ring.push_back(Kept { owner, entry });
        while ring.len() > self.cap {
            ring.pop_front();
        }
    }
}

impl Inner {
    /// Keeps the end of `holder`'s hold of `key` in its history, and in the
    /// log (whose ticket is not waited for: an entry is what happened, not
    /// a change anyone is told of).
    pub(super) fn record_end(&mut self, key: &[u8], holder: &Holder, end: &End) {
        let cap = self.history.cap;
        if cap == 0 {
            return;
        }
        let peer = holder.peer.to_string();
        let meta = Meta {
            key,
            source: &holder.source,
            ident: holder.owner.as_ref().map(|o| &*o.name),
            peer: &peer,
            mode: holder.mode,
            token: Some(holder.token),
            slot: holder.slot,
            granted: holder.since,
            waited: None,
            ended_at: SystemTime::now(),
            ended: end.ending.name(),
            status: end.status,
            by: end.by.as_deref(),
        };
        let entry = wire::encode_entry(&meta, holder.fields.as_deref().unwrap_or_default());
        let owner = holder.owner.as_ref().map_or(0, |o| o.fingerprint.get());
        if let Some(wal) = &self.wal {
            let _ = wal.append(&Record::History {
                key: key.to_vec(),
                keep: u32::try_from(cap).unwrap_or(u32::MAX),
                owner,
                entry: entry.clone(),
            });
        }
        self.history.push(key, owner, entry.into_boxed_slice());
    }
}

impl Table {
    /// Keeps the last `cap` ended holds of each key (`serve --history`; 0:
    /// none). Set before the log's entries are restored.
    pub(crate) fn keep_history(&self, cap: usize) {
        self.lock_inner().history.cap = cap;
    }

    /// Whether ended holds are kept (the feature `history` is named).
    pub(crate) fn keeps_history(&self) -> bool {
        self.lock_inner().history.cap > 0
    }

    /// An entry of the log (start-up), in log order.
    pub(crate) fn restore_history(&self, key: &[u8], owner: u64, entry: &[u8]) {
        self.lock_inner().history.push(key, owner, entry.into());
    }

    /// The last `limit` entries of `key`, newest first, as the answer has
    /// them; the fencing token of a hold not `viewer`'s left out.
    pub(crate) fn history_into(&self, key: &[u8], limit: usize, viewer: Whose, out: &mut Vec<u8>) {
        let inner = self.lock_inner();
        let Some(ring) = inner.history.keys.get(key) else {
            return;
        };
        for kept in ring.iter().rev().take(limit) {
            let own = match viewer {
                Whose::Any => true,
                Whose::Only(f) => kept.owner == f.get(),
            };
            match own {
                true => wire::push_answered(out, &kept.entry),
                false => wire::push_answered(out, &wire::without_token(&kept.entry)),
            }
        }
    }

    /// How many entries `key` keeps.
    #[cfg(test)]
    pub(crate) fn history_len(&self, key: &[u8]) -> usize {
        self.lock_inner()
            .history
            .keys
            .get(key)
            .map_or(0, VecDeque::len)
    }
}
