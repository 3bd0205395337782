//! The History record (tag 11, format version 7, issue 46): one ended hold
//! of a key, its entry as the lock port sends it (`proto::history`), and how
//! many entries the key keeps (`keep`: a compaction keeps that many, the
//! newest), and the fingerprint of the hold's token (0: none).
//!
//! `[11][keyLen:u8][key][keep:u32le][owner:u64le][entry]` (the entry runs
//! to the end of the payload).

use super::RecordRef;

pub(super) const TAG_HISTORY: u8 = 11;

/// Whether a framed record (a valid one) is a History record.
pub fn is_history(frame: &[u8]) -> bool {
    frame.get(super::HEADER) == Some(&TAG_HISTORY)
}

pub(super) const fn max(a: usize, b: usize) -> usize {
    [b, a][(a > b) as usize]
}

/// The longest payload of a History record.
pub(super) const MAX_PAYLOAD: usize = 1 + 256 + 4 + 8 + crate::proto::history::MAX_ENTRY;

pub(super) fn encode_into(out: &mut Vec<u8>, key: &[u8], keep: u32, owner: u64, entry: &[u8]) {
    let key = &key[..key.len().min(255)];
    out.push(TAG_HISTORY);
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out.extend_from_slice(&keep.to_le_bytes());
    out.extend_from_slice(&owner.to_le_bytes());
    out.extend_from_slice(entry);
}

/// The record after its tag.
pub(super) fn parse(rest: &[u8]) -> Option<RecordRef<'_>> {
    let (&n, rest) = rest.split_first()?;
    let (key, rest) = rest.split_at_checked(n as usize)?;
    let (keep, rest) = rest.split_at_checked(4)?;
    let (owner, entry) = rest.split_at_checked(8)?;
    let keep = u32::from_le_bytes(keep.try_into().ok()?);
    if key.is_empty() || keep == 0 || !crate::proto::history::is_entry(entry) {
        return None;
    }
    Some(RecordRef::History {
        key,
        keep,
        owner: u64::from_le_bytes(owner.try_into().ok()?),
        entry,
    })
}
