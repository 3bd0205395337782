//! The holds a log still describes (granted, not yet released): what a
//! replay rebuilds and what a compaction keeps. Each is kept as its framed
//! Grant record, by key and token.
//!
//! The writer applies a batch only once it is durable: a batch that could
//! not be written changes nothing here, as it changed nothing in the file.
//! (Applied at append time instead, a Release the disk refused would drop
//! its hold from the next compaction while the table still has it.)

use std::collections::HashMap;

use super::record::{decode, Next, Record};
use crate::mode::LockMode;

#[derive(Debug, Default, Clone)]
pub struct Live {
    /// key -> (token, framed Grant) of each live hold, oldest first.
    keys: HashMap<Vec<u8>, Vec<(u64, Vec<u8>)>>,
    /// The framed bytes of them all: what a compacted log needs.
    bytes: u64,
}

impl Live {
    /// Applies `record` (framed as `framed`, for a Grant) to the set.
    pub fn apply(&mut self, record: &Record, framed: &[u8]) {
        match record {
            Record::Grant {
                key, token, mode, ..
            } => {
                let holds = self.keys.entry(key.clone()).or_default();
                // An exclusive hold is its key's only one (and a grant of a
                // log before modes replaces the key's holder).
                if *mode == LockMode::Exclusive {
                    self.bytes -= holds.iter().map(|(_, f)| f.len() as u64).sum::<u64>();
                    holds.clear();
                }
                holds.push((*token, framed.to_vec()));
                self.bytes += framed.len() as u64;
            }
            Record::Release { key, token } => {
                let Some(holds) = self.keys.get_mut(key) else {
                    return;
                };
                holds.retain(|(t, f)| {
                    let gone = token.is_none_or(|token| token == *t);
                    if gone {
                        self.bytes -= f.len() as u64;
                    }
                    !gone
                });
                if holds.is_empty() {
                    self.keys.remove(key);
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

    /// The framed Grant record of every live hold.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> {
        self.keys
            .values()
            .flat_map(|holds| holds.iter().map(|(_, f)| f.as_slice()))
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
