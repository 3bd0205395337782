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

use super::record::{decode, Next, Record, HEADER};
use crate::mode::LockMode;

#[derive(Debug, Default, Clone)]
pub struct Live {
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
fn key_of(frame: &[u8]) -> &[u8] {
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

impl Live {
    /// Applies `record` (framed as `framed`, in this build's format, for a
    /// Grant) to the set.
    pub fn apply(&mut self, record: &Record, framed: &[u8]) {
        match record {
            Record::Grant { key, mode, .. } => {
                let earlier = self.keys.take(key.as_slice());
                // An exclusive hold is its key's only one (and a grant of a
                // log before modes replaces the key's holder).
                let mut all = Vec::new();
                if let Some(holds) = earlier {
                    self.bytes -= holds.0.len() as u64;
                    if *mode != LockMode::Exclusive {
                        all = holds.0.into_vec();
                    }
                }
                all.extend_from_slice(framed);
                self.bytes += all.len() as u64;
                self.keys.insert(KeyHolds(all.into_boxed_slice()));
            }
            Record::Release { key, token } => {
                let Some(holds) = self.keys.take(key.as_slice()) else {
                    return;
                };
                self.bytes -= holds.0.len() as u64;
                let kept: Vec<u8> = holds
                    .frames()
                    .filter(|f| token.is_some_and(|t| t != token_of(f)))
                    .flatten()
                    .copied()
                    .collect();
                if !kept.is_empty() {
                    self.bytes += kept.len() as u64;
                    self.keys.insert(KeyHolds(kept.into_boxed_slice()));
                }
            }
            Record::Floor { .. } => {}
        }
    }

    /// Applies every record of a batch (framed records, back to back).
    pub fn apply_batch(&mut self, mut bytes: &[u8]) {
        while let Next::Record(record, used) = decode(bytes) {
            self.apply(&record, &bytes[..used]);
            bytes = &bytes[used..];
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The framed Grant record of every live hold, by key, each key's
    /// oldest first.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().flat_map(KeyHolds::frames)
    }
}

#[cfg(test)]
mod tests {
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
        }
    }

    fn apply(live: &mut Live, r: Record) {
        let framed = r.encode();
        live.apply(&r, &framed);
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
