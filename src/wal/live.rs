//! The holds a log still describes (granted, not yet released): what a
//! replay rebuilds and what a compaction keeps. Each is kept as its framed
//! Grant record; a key's records share one allocation, found by the key in
//! them (about 110 bytes per held key, where a map of key copies to vectors
//! of records took about 350).
//!
//! The writer applies a batch only once it is durable: a batch that could
//! not be written changes nothing here, as it changed nothing in the file.
//! (Applied at append time instead, a Release the disk refused would drop
//! its hold from the next compaction while the table still has it.)

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::record::{decode_ref, is_history, is_mark, Next, RecordRef, HEADER};
use crate::mode::LockMode;

#[derive(Debug, Default, Clone)]
pub(super) struct Live {
    /// Each key's live holds, ordered by key.
    keys: BTreeSet<KeyHolds>,
    /// The framed bytes of them all: what a compacted log needs.
    bytes: u64,
}

/// The framed Grant records (this build's format) of one key's live holds,
/// back to back, oldest first, in one allocation: the set finds it by the
/// key inside its first record, so the key is not kept twice.
#[derive(Debug, Clone)]
struct KeyHolds(Box<[u8]>);

impl KeyHolds {
    fn key(&self) -> &[u8] {
        key_of(&self.0)
    }

    fn frames(&self) -> Frames<'_> {
        Frames(&self.0)
    }
}

/// The key of a framed Grant or Release: `[tag][keyLen][key]...` after
/// the frame's header.
pub(super) fn key_of(frame: &[u8]) -> &[u8] {
    let len = frame[HEADER + 1] as usize;
    &frame[HEADER + 2..HEADER + 2 + len]
}

/// The token of a framed Grant of this build's format: after the key,
/// source and peer fields and the start time.
fn token_of(frame: &[u8]) -> u64 {
    let mut at = HEADER + 1;
    for _ in 0..3 {
        at += 1 + frame[at] as usize;
    }
    at += 8;
    u64::from_le_bytes(frame[at..at + 8].try_into().expect("8 bytes"))
}

/// The records of a [`KeyHolds`], one by one.
struct Frames<'a>(&'a [u8]);

impl<'a> Iterator for Frames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_le_bytes(self.0.get(..4)?.try_into().ok()?) as usize;
        let (frame, rest) = self.0.split_at(HEADER + len);
        self.0 = rest;
        Some(frame)
    }
}

impl Borrow<[u8]> for KeyHolds {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

impl PartialEq for KeyHolds {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for KeyHolds {}

impl PartialOrd for KeyHolds {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyHolds {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(other.key())
    }
}

/// What a framed record does to its key's holds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Change {
    /// A Grant: exclusive (the key's only hold) or not.
    Grant { exclusive: bool },
    /// The hold under that token ends (every hold, without one).
    Release(Option<u64>),
    /// The key's mark is set (or cleared): its one Mark record replaced.
    Mark { set: bool },
    /// An ended hold of the key: its History record added, the oldest
    /// dropped past `keep` (issue 46).
    History { keep: u32 },
}

/// A key's record kept whatever happens to its holds: its Mark and its
/// History records.
fn kept_aside(frame: &[u8]) -> bool {
    is_mark(frame) || is_history(frame)
}

impl Change {
    /// The change `record` makes; none for a Floor.
    pub(super) fn of(record: &RecordRef<'_>) -> Option<Change> {
        match *record {
            RecordRef::Grant { mode, .. } => Some(Change::Grant {
                exclusive: mode == LockMode::Exclusive,
            }),
            RecordRef::Release { token, .. } => Some(Change::Release(token)),
            RecordRef::Mark { mark, .. } => Some(Change::Mark {
                set: mark.is_some(),
            }),
            RecordRef::History { keep, .. } => Some(Change::History { keep }),
            RecordRef::Floor { .. } => None,
        }
    }

    /// Applies the change (its framed record, in this build's format for a
    /// Grant, is `framed`) to one key's holds, framed back to back.
    fn apply_to(self, holds: &mut Vec<u8>, framed: &[u8]) {
        match self {
            // An exclusive hold is its key's only one (and a grant of a
            // log before modes replaces the key's holder).
            // The key's Mark record (issue 44) is kept with its holds,
            // whatever happens to them.
            Change::Grant { exclusive } => {
                if exclusive {
                    keep(holds, kept_aside);
                }
                holds.extend_from_slice(framed);
            }
            Change::Release(token) => {
                keep(holds, |f| {
                    kept_aside(f) || token.is_some_and(|t| t != token_of(f))
                });
            }
            Change::Mark { set } => {
                keep(holds, |f| !is_mark(f));
                if set {
                    holds.extend_from_slice(framed);
                }
            }
            Change::History { keep: cap } => {
                holds.extend_from_slice(framed);
                let over = Frames(holds)
                    .filter(|f| is_history(f))
                    .count()
                    .saturating_sub(cap as usize);
                if over > 0 {
                    let mut dropped = 0;
                    keep(holds, |f| {
                        if is_history(f) && dropped < over {
                            dropped += 1;
                            return false;
                        }
                        true
                    });
                }
            }
        }
    }
}

/// Keeps the frames of `holds` that `wanted` says.
fn keep(holds: &mut Vec<u8>, mut wanted: impl FnMut(&[u8]) -> bool) {
    let kept: Vec<u8> = Frames(holds)
        .filter(|f| wanted(f))
        .flatten()
        .copied()
        .collect();
    *holds = kept;
}

impl Live {
    /// Applies `record` (framed as `framed`, in this build's format, for a
    /// Grant) to the set.
    pub(super) fn apply(&mut self, record: &RecordRef<'_>, framed: &[u8]) {
        let Some(change) = Change::of(record) else {
            return;
        };
        let earlier = self.keys.take(record.key());
        if earlier.is_none() && matches!(change, Change::Release(_) | Change::Mark { set: false }) {
            return;
        }
        let mut all = Vec::new();
        if let Some(holds) = earlier {
            self.bytes -= holds.0.len() as u64;
            all = holds.0.into_vec();
        }
        change.apply_to(&mut all, framed);
        if !all.is_empty() {
            self.bytes += all.len() as u64;
            self.keys.insert(KeyHolds(all.into_boxed_slice()));
        }
    }

    /// The set a log's changes leave, given them grouped by key in key
    /// order, each key's in log order (the order within a key is all that
    /// matters: the changes of different keys commute). Built in one pass:
    /// no lookup per record, and the set's tree filled node by node.
    pub(super) fn from_key_order<'a>(
        changes: impl IntoIterator<Item = (Change, &'a [u8])>,
    ) -> Live {
        let mut keys: Vec<KeyHolds> = Vec::new();
        let mut bytes = 0;
        let mut holds: Vec<u8> = Vec::new();
        let mut key: &[u8] = &[];
        let mut done = |holds: &mut Vec<u8>| {
            if !holds.is_empty() {
                bytes += holds.len() as u64;
                keys.push(KeyHolds(std::mem::take(holds).into_boxed_slice()));
            }
        };
        for (change, framed) in changes {
            let k = key_of(framed);
            if k != key {
                done(&mut holds);
                key = k;
            }
            change.apply_to(&mut holds, framed);
        }
        done(&mut holds);
        Live {
            // Given sorted, each key once: the tree is built without a sort.
            keys: keys.into_iter().collect(),
            bytes,
        }
    }

    /// Applies every record of a batch (framed records, back to back).
    pub(super) fn apply_batch(&mut self, mut bytes: &[u8]) {
        while let Next::Record(record, used) = decode_ref(bytes) {
            self.apply(&record, &bytes[..used]);
            bytes = &bytes[used..];
        }
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The framed Grant record of every live hold, by key, each key's
    /// oldest first.
    pub(super) fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().flat_map(KeyHolds::frames)
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::Record;
    use super::*;

    fn grant(key: &str, token: u64, mode: LockMode) -> Record {
        Record::Grant {
            key: key.into(),
            source: b"s".to_vec(),
            peer: b"p".to_vec(),
            since_ms: 1,
            token,
            session: false,
            mode,
            expires_ms: None,
            ownership: Default::default(),
        }
    }

    fn apply(live: &mut Live, r: Record) {
        let framed = r.encode();
        live.apply(&r.borrowed(), &framed);
    }

    /// The set built from the changes grouped by key is the one applying
    /// them in log order gives.
    #[test]
    fn built_in_key_order_is_applied_in_log_order() {
        let log = [
            grant("b", 1, LockMode::Shared),
            grant("a", 2, LockMode::Exclusive),
            grant("b", 3, LockMode::Shared),
            Record::Release {
                key: b"b".to_vec(),
                token: Some(1),
            },
            grant("c", 4, LockMode::Exclusive),
            Record::Release {
                key: b"c".to_vec(),
                token: None,
            },
            grant("b", 5, LockMode::Shared),
            Record::Release {
                key: b"z".to_vec(),
                token: Some(9),
            },
            grant("a", 6, LockMode::Exclusive),
        ];
        let mut one_by_one = Live::default();
        for r in &log {
            one_by_one.apply(&r.borrowed(), &r.encode());
        }
        let mut framed: Vec<(Change, Vec<u8>)> = log
            .iter()
            .map(|r| (Change::of(&r.borrowed()).unwrap(), r.encode()))
            .collect();
        framed.sort_by(|a, b| key_of(&a.1).cmp(key_of(&b.1)));
        let built = Live::from_key_order(framed.iter().map(|(c, f)| (*c, f.as_slice())));
        let frames = |l: &Live| l.frames().map(<[u8]>::to_vec).collect::<Vec<_>>();
        assert_eq!(frames(&built), frames(&one_by_one));
        assert_eq!(built.bytes(), one_by_one.bytes());
        assert_eq!(frames(&built).len(), 3);
    }

    fn ended(key: &str, n: u8) -> Record {
        Record::History {
            key: key.into(),
            keep: 3,
            owner: 0,
            entry: vec![0, 0, 0, 1, n],
        }
    }

    /// A key keeps its last `keep` History records through its grants and
    /// releases; an exclusive grant keeps them too.
    #[test]
    fn history_is_kept_aside_and_capped() {
        let mut live = Live::default();
        for n in 0..10 {
            apply(&mut live, grant("k", u64::from(n) + 1, LockMode::Exclusive));
            apply(
                &mut live,
                Record::Release {
                    key: b"k".to_vec(),
                    token: Some(u64::from(n) + 1),
                },
            );
            apply(&mut live, ended("k", n));
        }
        apply(&mut live, grant("k", 99, LockMode::Exclusive));
        let kept: Vec<Record> = live
            .frames()
            .map(|f| match decode_ref(f) {
                Next::Record(r, _) => r.to_owned(),
                _ => panic!("a frame that does not decode"),
            })
            .collect();
        assert_eq!(kept.len(), 4, "{kept:?}");
        assert_eq!(kept[..3], [ended("k", 7), ended("k", 8), ended("k", 9)]);
    }

    #[test]
    fn holds_are_released_by_token_or_all_at_once() {
        let mut live = Live::default();
        for t in 1..=3 {
            apply(&mut live, grant("k", t, LockMode::Shared));
        }
        apply(&mut live, grant("x", 9, LockMode::Exclusive));
        assert_eq!(live.frames().count(), 4);
        apply(
            &mut live,
            Record::Release {
                key: b"k".to_vec(),
                token: Some(2),
            },
        );
        assert_eq!(live.frames().count(), 3);
        apply(
            &mut live,
            Record::Release {
                key: b"k".to_vec(),
                token: None,
            },
        );
        assert_eq!(live.frames().count(), 1);
        // An exclusive grant replaces what a log before modes left.
        apply(&mut live, grant("x", 10, LockMode::Exclusive));
        assert_eq!(live.frames().count(), 1);
        assert_eq!(
            live.bytes(),
            live.frames().map(|f| f.len() as u64).sum::<u64>()
        );
        apply(
            &mut live,
            Record::Release {
                key: b"x".to_vec(),
                token: Some(10),
            },
        );
        assert_eq!((live.frames().count(), live.bytes()), (0, 0));
    }
}
