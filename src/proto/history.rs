//! A key's history on the lock port (lc-cli's action 21, `lc-cli history`,
//! docs/history.md): one encoding of an ended hold, shared by the answer
//! and the write-ahead log's History record (tag 11).
//!
//! An entry is `[metaLen:u16be][meta][fieldsLen:u16be][fields]`: two field
//! lists (docs/request-fields.md). `meta` is the hold and its ending
//! (`key`, `source`, `ident`, `peer`, `mode` as its u32 word, `token`,
//! `granted` and `endedat` in ms since the epoch, `waited` in ms, `ended`,
//! `status`, `by`); `fields` the request's own, as it sent them.
//!
//! The answer to a History request (sent only on a connection whose Hello
//! the server answered naming the feature `history`): `+`, then each entry,
//! newest first, as `[len:u16be][entry]`, then `[0][0]` and the close.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::fields::FieldList;
use crate::backend::history::HistoryEntry;
use crate::mode::LockMode;

/// The longest entry kept or sent: the meta list's and the request's.
pub(crate) const MAX_ENTRY: usize = 2 + 1536 + 2 + super::request::MAX_FIELDS;

/// The end of the answer's entries.
pub(crate) const END: [u8; 2] = [0, 0];

/// An ended hold, as the server records it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta<'a> {
    pub key: &'a [u8],
    pub source: &'a [u8],
    pub ident: Option<&'a str>,
    pub peer: &'a str,
    pub mode: LockMode,
    pub token: Option<u64>,
    /// A `--limit N` hold's slot (issue 45).
    pub slot: Option<u32>,
    pub granted: SystemTime,
    pub waited: Option<Duration>,
    pub ended_at: SystemTime,
    /// The `ended=` name (`crate::backend::history::Ending::name`).
    pub ended: &'a str,
    pub status: Option<i32>,
    pub by: Option<&'a str>,
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The entry's bytes; the request's field list is left out if the whole
/// would be longer than [`MAX_ENTRY`].
pub(crate) fn encode_entry(m: &Meta<'_>, fields: &[u8]) -> Vec<u8> {
    let mut meta = FieldList::default();
    meta.push("key", &text(m.key));
    meta.push("source", &text(m.source));
    if let Some(i) = m.ident {
        meta.push("ident", i);
    }
    meta.push("peer", m.peer);
    meta.push("mode", &m.mode.word().to_string());
    if let Some(s) = m.slot {
        meta.push("slot", &s.to_string());
    }
    if let Some(t) = m.token {
        meta.push("token", &t.to_string());
    }
    meta.push("granted", &ms(m.granted).to_string());
    if let Some(w) = m.waited {
        meta.push("waited", &(w.as_millis() as u64).to_string());
    }
    meta.push("endedat", &ms(m.ended_at).to_string());
    meta.push("ended", m.ended);
    if let Some(s) = m.status {
        meta.push("status", &s.to_string());
    }
    if let Some(by) = m.by {
        meta.push("by", by);
    }
    let meta = meta.to_string().into_bytes();
    let meta = &meta[..meta.len().min(1536)];
    let fields = match 4 + meta.len() + fields.len() <= MAX_ENTRY {
        true => fields,
        false => &[][..],
    };
    let mut out = Vec::with_capacity(4 + meta.len() + fields.len());
    out.extend_from_slice(&(meta.len() as u16).to_be_bytes());
    out.extend_from_slice(meta);
    out.extend_from_slice(&(fields.len() as u16).to_be_bytes());
    out.extend_from_slice(fields);
    out
}

/// The two lists of an entry.
fn split(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = entry.split_at_checked(2)?;
    let len = u16::from_be_bytes(len.try_into().ok()?) as usize;
    let (meta, rest) = rest.split_at_checked(len)?;
    let (len, rest) = rest.split_at_checked(2)?;
    let len = u16::from_be_bytes(len.try_into().ok()?) as usize;
    (rest.len() == len).then_some((meta, rest))
}

/// Whether `entry` is one (a log's record is checked with it).
pub(crate) fn is_entry(entry: &[u8]) -> bool {
    entry.len() <= MAX_ENTRY && split(entry).is_some()
}

/// The entry without its fencing token (a `lock` token reading another
/// token's hold, as `keys` shows it).
pub(crate) fn without_token(entry: &[u8]) -> Vec<u8> {
    let Some((meta, fields)) = split(entry) else {
        return entry.to_vec();
    };
    let meta: Vec<u8> = meta
        .split_inclusive(|&b| b == b'\n')
        .filter(|line| !line.starts_with(b"token="))
        .flatten()
        .copied()
        .collect();
    let mut out = Vec::with_capacity(entry.len());
    out.extend_from_slice(&(meta.len() as u16).to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&(fields.len() as u16).to_be_bytes());
    out.extend_from_slice(fields);
    out
}

/// A meta list's lines, unescaped (no length limit: a meta list may be
/// longer than a request's).
fn meta_list(meta: &[u8]) -> Option<FieldList> {
    let mut list = FieldList::default();
    for line in meta.split_inclusive(|&b| b == b'\n') {
        let one = FieldList::parse(line).ok()?;
        for (n, v) in one.iter() {
            list.push(n, v);
        }
    }
    Some(list)
}

/// An entry as `lc-cli history` shows it; None if it does not parse.
pub(crate) fn decode_entry(entry: &[u8]) -> Option<HistoryEntry> {
    let (meta, fields) = split(entry)?;
    let meta = meta_list(meta)?;
    let mut list = FieldList::parse(fields).unwrap_or_default();
    for name in ["slot", "ended", "status", "by"] {
        if let Some(v) = meta.get(name) {
            list.push(name, v);
        }
    }
    let time = |name: &str| {
        meta.get(name)
            .and_then(|v| v.parse().ok())
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
    };
    let mode = meta
        .get("mode")
        .and_then(|w| w.parse().ok())
        .map(LockMode::from_word)
        .unwrap_or(LockMode::Exclusive);
    Some(HistoryEntry {
        key: meta.get("key")?.to_string(),
        source: meta.get("source").unwrap_or_default().to_string(),
        identity: meta.get("ident").map(str::to_string),
        peer: meta.get("peer").map(str::to_string),
        mode,
        token: meta.get("token").and_then(|t| t.parse().ok()),
        granted: time("granted"),
        waited: meta
            .get("waited")
            .and_then(|w| w.parse().ok())
            .map(Duration::from_millis),
        ended_at: time("endedat"),
        fields: list,
    })
}

/// Appends one entry of the answer.
pub(crate) fn push_answered(out: &mut Vec<u8>, entry: &[u8]) {
    out.extend_from_slice(&(entry.len() as u16).to_be_bytes());
    out.extend_from_slice(entry);
}

/// Reads an answer's entries (after its `+`), read whole: None if it is
/// cut short or malformed.
pub(crate) fn decode_answer(mut bytes: &[u8]) -> Option<Vec<HistoryEntry>> {
    let mut out = Vec::new();
    loop {
        let (len, rest) = bytes.split_at_checked(2)?;
        let len = u16::from_be_bytes(len.try_into().ok()?) as usize;
        if len == 0 {
            return Some(out);
        }
        let (entry, rest) = rest.split_at_checked(len)?;
        out.push(decode_entry(entry)?);
        bytes = rest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta<'static> {
        Meta {
            key: b"k",
            source: b"host a",
            ident: Some("ci"),
            peer: "10.0.0.1:5",
            mode: LockMode::limit(3),
            token: Some(42),
            slot: Some(1),
            granted: UNIX_EPOCH + Duration::from_millis(1_000),
            waited: Some(Duration::from_millis(7)),
            ended_at: UNIX_EPOCH + Duration::from_millis(3_000),
            ended: "released",
            status: Some(3),
            by: None,
        }
    }

    #[test]
    fn an_entry_round_trips() {
        let bytes = encode_entry(&meta(), b"note=deploy 1%25\n");
        assert!(is_entry(&bytes));
        let e = decode_entry(&bytes).unwrap();
        assert_eq!(e.key, "k");
        assert_eq!(e.source, "host a");
        assert_eq!(e.identity.as_deref(), Some("ci"));
        assert_eq!(e.mode, LockMode::limit(3));
        assert_eq!(e.token, Some(42));
        assert_eq!(e.waited, Some(Duration::from_millis(7)));
        assert_eq!(e.status(), Some(3));
        assert_eq!(e.fields.get("note"), Some("deploy 1%"));
        assert_eq!(e.fields.get("ended"), Some("released"));
        assert_eq!(e.fields.get("slot"), Some("1"));
        let hidden = decode_entry(&without_token(&bytes)).unwrap();
        assert_eq!(hidden.token, None);
        let mut answer = Vec::new();
        push_answered(&mut answer, &bytes);
        push_answered(&mut answer, &bytes);
        answer.extend_from_slice(&END);
        assert_eq!(decode_answer(&answer).unwrap().len(), 2);
        assert!(decode_answer(&answer[..answer.len() - 1]).is_none());
    }
}
