//! The answer to Keys (lc-cli's action 17): who holds each key and who
//! waits for it, on the lock port. Bytes in, values out; no I/O.
//!
//! `+`, then records, each `[kind:1][len:u16be][body]`, then the end record
//! `[.][0][0]`. A listing of any size is a stream of records of at most
//! 64 KiB each, so no frame limit applies, and a reader can tell a whole
//! listing (its end record) from a connection that broke. The fields are
//! `KEYX`'s (see [`super::manager`]), in the lock port's big-endian order:
//!
//! | kind | body |
//! | --- | --- |
//! | `H` a hold | `[u8 len][key][u8 len][source][u8 len][peer ip:port][since:i64 unix ms][waiters:u32][token:u64][session:u8][mode:u32][expires:i64 unix ms, 0 never][u8 len][identity]` (`expires` may be absent: never; `identity` may be absent or empty: none) |
//! | `P` the prefix listed | `[u8 len][prefix]`: first, in the answer to Keys with flags bit 2 (every key that starts with the prefix); a server before it lists the key named so instead, and sends no `P` |
//! | `W` a waiter | `[u8 len][key][u8 len][source][u8 len][peer ip:port][since:i64 unix ms, when it queued][mode:u32][session:u8][u8 len][identity]` (`identity` as for a hold) |
//!
//! `identity` is the holder's (or waiter's) token's name on a server with
//! `--token-file`; `token` is 0 where the asker may not see it (a `lock`
//! token's listing of another token's hold).
//!
//! A key's holds come first (oldest first), then its waiters in line
//! order; keys are sorted by name. A reader skips a record of a kind it
//! does not know and the bytes of a body past the fields it knows, so a
//! later server may add both.

use std::fmt;
use std::io::Write;
use std::net::SocketAddr;
use std::time::SystemTime;

use super::manager::{from_unix_ms, push_short, unix_ms, KeyReport};
use crate::mode::LockMode;

/// The first byte of a listing (a reference server answers `-`).
pub(crate) const LISTING: u8 = b'+';
pub(crate) const HOLD: u8 = b'H';
pub(crate) const WAITER: u8 = b'W';
pub(crate) const PREFIX: u8 = b'P';
pub(crate) const END: u8 = b'.';
/// The record header: kind and body length.
pub(crate) const HEADER: usize = 3;

/// One waiter as a listing reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaiterReport {
    pub key: Vec<u8>,
    pub source: Vec<u8>,
    /// Its connection's address as the server sees it (`ip:port`).
    pub peer: Vec<u8>,
    /// When it joined the line.
    pub since: SystemTime,
    pub mode: LockMode,
    /// A session request (a command's hold) rather than a kept one.
    pub session: bool,
    /// Its token's identity (`--token-file`), where the server says.
    pub identity: Option<Vec<u8>>,
    /// Its field list (a listing of version 2).
    pub fields: Option<Vec<u8>>,
}

/// One record of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    Hold(KeyReport),
    Waiter(WaiterReport),
    /// The listing is of every key that starts with this.
    Prefix(Vec<u8>),
}

/// A whole listing, as the client reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    pub holds: Vec<KeyReport>,
    pub waiters: Vec<WaiterReport>,
    /// The prefix its `P` record names: the server listed the keys under
    /// it (None: no `P`, a listing of one key or of all).
    pub prefix: Option<Vec<u8>>,
}

/// What the start of a buffer holds. (A step is returned and taken apart
/// at once, never kept: its record is not boxed.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// A record, and how many bytes it took.
    Record(Entry, usize),
    /// A record of a kind this reader does not know: skip its bytes.
    Skip(usize),
    /// The end record: the listing is whole.
    End,
    /// More bytes are needed (a normal case, not an error).
    Incomplete,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListingError {
    /// The first byte is not `+`.
    NotAListing(u8),
    /// A body too short for its fields, or a field longer than the body.
    Malformed { kind: u8, len: usize },
    /// An end record with a body.
    BadEnd(usize),
}

impl fmt::Display for ListingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListingError::NotAListing(b) => write!(f, "answered 0x{b:02x}, not a listing"),
            ListingError::Malformed { kind, len } => write!(
                f,
                "a malformed '{}' record of {len} byte(s)",
                char::from(*kind).escape_default()
            ),
            ListingError::BadEnd(len) => write!(f, "an end record of {len} byte(s)"),
        }
    }
}

impl std::error::Error for ListingError {}

/// Appends one record: its header, then the body `fill` writes.
fn record(out: &mut Vec<u8>, kind: u8, fill: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[kind, 0, 0]);
    fill(out);
    // Four short fields of at most 255 bytes and 30 fixed: always fits.
    let len = (out.len() - start - HEADER).min(u16::MAX as usize) as u16;
    out[start + 1..start + HEADER].copy_from_slice(&len.to_be_bytes());
}

/// A peer's address as a listing carries it: `ip:port` text (a
/// [`KeyReport`]'s, in tests), or the address itself, written as that text.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PeerText<'a> {
    #[cfg_attr(not(test), allow(dead_code))]
    Text(&'a [u8]),
    Addr(SocketAddr),
}

/// A hold's fields, borrowed: the server writes its table's holds with
/// this, without a [`KeyReport`] (three allocations) per hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldView<'a> {
    pub key: &'a [u8],
    pub source: &'a [u8],
    pub peer: PeerText<'a>,
    pub since: SystemTime,
    pub waiting: u32,
    /// 0: none.
    pub token: u64,
    pub session: bool,
    pub mode: LockMode,
    pub expires: Option<SystemTime>,
    /// Empty: none.
    pub identity: &'a [u8],
    /// A listing of version 2: the hold's field list and its key's mark.
    pub extra: Option<(&'a [u8], Option<u64>)>,
    /// A `--limit N` hold's slot: written with `extra` (version 2).
    pub slot: Option<u32>,
}

/// A waiter's fields, borrowed (as [`HoldView`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaiterView<'a> {
    pub key: &'a [u8],
    pub source: &'a [u8],
    pub peer: PeerText<'a>,
    pub since: SystemTime,
    pub mode: LockMode,
    pub session: bool,
    /// Empty: none.
    pub identity: &'a [u8],
    /// A listing of version 2: the waiter's field list.
    pub fields: Option<&'a [u8]>,
}

fn push_peer(out: &mut Vec<u8>, peer: PeerText<'_>) {
    match peer {
        PeerText::Text(bytes) => push_short(out, bytes),
        PeerText::Addr(addr) => {
            // At most 55 bytes (`[v6%scope]:port`): its length fits a u8.
            let at = out.len();
            out.push(0);
            match addr {
                // As `Display` writes it, without its machinery (a listing
                // of a million holds has a million peers).
                SocketAddr::V4(v4) => {
                    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
                        if i > 0 {
                            out.push(b'.');
                        }
                        push_decimal(out, u64::from(octet));
                    }
                    out.push(b':');
                    push_decimal(out, u64::from(v4.port()));
                }
                SocketAddr::V6(_) => {
                    let _ = write!(out, "{addr}");
                }
            }
            out[at] = (out.len() - at - 1) as u8;
        }
    }
}

/// `n` in decimal digits (what `write!` gives, without the formatting
/// machinery: a million-key listing's numbers).
pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends the record of a hold (the server writes its own holds with
/// [`push_hold_view`]).
#[cfg(test)]
pub(crate) fn push_hold(out: &mut Vec<u8>, r: &KeyReport) {
    push_hold_view(
        out,
        &HoldView {
            key: &r.key,
            source: &r.source,
            peer: PeerText::Text(&r.peer),
            since: r.since,
            waiting: r.waiting,
            token: r.token.unwrap_or(0),
            session: r.session == Some(true),
            mode: r.mode.unwrap_or(LockMode::Exclusive),
            expires: r.expires,
            identity: r.identity.as_deref().unwrap_or_default(),
            extra: r.fields.as_deref().map(|f| (f, r.mark)),
            slot: r.slot,
        },
    );
}

/// Appends the record of a hold, from its fields.
pub(crate) fn push_hold_view(out: &mut Vec<u8>, h: &HoldView<'_>) {
    record(out, HOLD, |out| {
        push_short(out, h.key);
        push_short(out, h.source);
        push_peer(out, h.peer);
        out.extend_from_slice(&unix_ms(h.since).to_be_bytes());
        out.extend_from_slice(&h.waiting.to_be_bytes());
        out.extend_from_slice(&h.token.to_be_bytes());
        out.push(u8::from(h.session));
        out.extend_from_slice(&h.mode.word().to_be_bytes());
        out.extend_from_slice(&h.expires.map_or(0, unix_ms).to_be_bytes());
        push_short(out, h.identity);
        if let Some((fields, mark)) = h.extra {
            push_long(out, fields);
            out.push(u8::from(mark.is_some()));
            out.extend_from_slice(&mark.unwrap_or(0).to_be_bytes());
            // Slots (issue 45): a reader before them skips these bytes.
            out.push(u8::from(h.slot.is_some()));
            out.extend_from_slice(&h.slot.unwrap_or(0).to_be_bytes());
        }
    });
}

/// Appends the record of a waiter (see [`push_hold`]).
#[cfg(test)]
pub(crate) fn push_waiter(out: &mut Vec<u8>, w: &WaiterReport) {
    push_waiter_view(
        out,
        &WaiterView {
            key: &w.key,
            source: &w.source,
            peer: PeerText::Text(&w.peer),
            since: w.since,
            mode: w.mode,
            session: w.session,
            identity: w.identity.as_deref().unwrap_or_default(),
            fields: w.fields.as_deref(),
        },
    );
}

/// Appends the record of a waiter, from its fields.
pub(crate) fn push_waiter_view(out: &mut Vec<u8>, w: &WaiterView<'_>) {
    record(out, WAITER, |out| {
        push_short(out, w.key);
        push_short(out, w.source);
        push_peer(out, w.peer);
        out.extend_from_slice(&unix_ms(w.since).to_be_bytes());
        out.extend_from_slice(&w.mode.word().to_be_bytes());
        out.push(u8::from(w.session));
        push_short(out, w.identity);
        if let Some(fields) = w.fields {
            push_long(out, fields);
        }
    });
}

/// A field list: `[len:u16be][bytes]` (at most 1,024 bytes).
fn push_long(out: &mut Vec<u8>, bytes: &[u8]) {
    let bytes = &bytes[..bytes.len().min(super::request::MAX_FIELDS)];
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Appends the prefix record (the first of a listing by prefix).
pub(crate) fn push_prefix(out: &mut Vec<u8>, prefix: &[u8]) {
    let prefix = &prefix[..prefix.len().min(255)];
    out.push(PREFIX);
    out.extend_from_slice(&(prefix.len() as u16 + 1).to_be_bytes());
    out.push(prefix.len() as u8);
    out.extend_from_slice(prefix);
}

/// Appends the end record.
pub(crate) fn push_end(out: &mut Vec<u8>) {
    out.extend_from_slice(&[END, 0, 0]);
}

/// A whole listing in one buffer (`+` included): for tests and small tables;
/// the server writes the same records in pieces.
#[cfg(test)]
pub(crate) fn encode(holds: &[KeyReport], waiters: &[WaiterReport]) -> Vec<u8> {
    let mut out = vec![LISTING];
    for h in holds {
        push_hold(&mut out, h);
    }
    for w in waiters {
        push_waiter(&mut out, w);
    }
    push_end(&mut out);
    out
}

/// Decodes the record at the start of `buf` (after the leading `+`).
pub(crate) fn decode_record(buf: &[u8]) -> Result<Step, ListingError> {
    let Some(header) = buf.get(..HEADER) else {
        return Ok(Step::Incomplete);
    };
    let kind = header[0];
    let len = u16::from_be_bytes([header[1], header[2]]) as usize;
    if kind == END {
        return match len {
            0 => Ok(Step::End),
            n => Err(ListingError::BadEnd(n)),
        };
    }
    let Some(body) = buf.get(HEADER..HEADER + len) else {
        return Ok(Step::Incomplete);
    };
    let used = HEADER + len;
    let bad = || ListingError::Malformed { kind, len };
    let mut cur = Reader { buf: body, pos: 0 };
    let entry = match kind {
        HOLD => {
            let key = cur.short().ok_or_else(bad)?;
            let source = cur.short().ok_or_else(bad)?;
            let peer = cur.short().ok_or_else(bad)?;
            let since = cur.i64().ok_or_else(bad)?;
            let waiting = cur.u32().ok_or_else(bad)?;
            let token = cur.u64().ok_or_else(bad)?;
            let session = cur.flag().ok_or_else(bad)?;
            let mode = cur.u32().ok_or_else(bad)?;
            // Absent from a server before expiring holds.
            let expires = cur.i64().filter(|&ms| ms != 0).map(from_unix_ms);
            // Absent from a server before identities, empty for none.
            let identity = cur.short();
            // A listing of version 2: the field list and the key's mark.
            let fields = cur.long();
            // Each flag's value is there, set or not.
            let mark = match (cur.flag(), cur.u64()) {
                (Some(true), m) => m,
                _ => None,
            };
            // Absent from a server before slots.
            let slot = match (cur.flag(), cur.u32()) {
                (Some(true), s) => s,
                _ => None,
            };
            let identity = identity.filter(|i| !i.is_empty());
            Entry::Hold(KeyReport {
                key,
                source,
                peer,
                since: from_unix_ms(since),
                waiting,
                // 0: a hold restored from a log written before tokens.
                token: (token != 0).then_some(token),
                session: Some(session),
                mode: Some(LockMode::from_word(mode)),
                expires,
                identity,
                fields,
                mark,
                slot,
            })
        }
        WAITER => {
            let key = cur.short().ok_or_else(bad)?;
            let source = cur.short().ok_or_else(bad)?;
            let peer = cur.short().ok_or_else(bad)?;
            let since = cur.i64().ok_or_else(bad)?;
            let mode = cur.u32().ok_or_else(bad)?;
            let session = cur.flag().ok_or_else(bad)?;
            Entry::Waiter(WaiterReport {
                key,
                source,
                peer,
                since: from_unix_ms(since),
                mode: LockMode::from_word(mode),
                session,
                identity: cur.short().filter(|i| !i.is_empty()),
                fields: cur.long(),
            })
        }
        PREFIX => Entry::Prefix(cur.short().ok_or_else(bad)?),
        _ => return Ok(Step::Skip(used)),
    };
    Ok(Step::Record(entry, used))
}

/// Reads a listing from a reader's buffer as it fills: feed it bytes with
/// [`ListingReader::feed`], which consumes every whole record; `done` once the end
/// record came.
#[derive(Debug, Default)]
pub(crate) struct ListingReader {
    started: bool,
    pending: Vec<u8>,
    pub listing: Listing,
    pub done: bool,
    /// Bytes taken in so far (for a caller's bound).
    pub total: usize,
}

impl ListingReader {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes `bytes` in and decodes what it can.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<(), ListingError> {
        self.total += bytes.len();
        if self.done {
            return Ok(());
        }
        self.pending.extend_from_slice(bytes);
        let mut pos = 0;
        if !self.started {
            let Some(&first) = self.pending.first() else {
                return Ok(());
            };
            if first != LISTING {
                return Err(ListingError::NotAListing(first));
            }
            self.started = true;
            pos = 1;
        }
        loop {
            match decode_record(&self.pending[pos..])? {
                Step::Record(entry, used) => {
                    pos += used;
                    match entry {
                        Entry::Hold(h) => self.listing.holds.push(h),
                        Entry::Waiter(w) => self.listing.waiters.push(w),
                        Entry::Prefix(p) => self.listing.prefix = Some(p),
                    }
                }
                Step::Skip(used) => pos += used,
                Step::End => {
                    self.done = true;
                    self.pending.clear();
                    return Ok(());
                }
                Step::Incomplete => break,
            }
        }
        self.pending.drain(..pos);
        Ok(())
    }
}

/// A whole listing from one buffer; None when it is incomplete.
#[cfg(test)]
pub(crate) fn decode(buf: &[u8]) -> Result<Option<Listing>, ListingError> {
    let mut r = ListingReader::new();
    r.feed(buf)?;
    Ok(r.done.then_some(r.listing))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(bytes)
    }

    fn short(&mut self) -> Option<Vec<u8>> {
        let len = *self.take(1)?.first()? as usize;
        Some(self.take(len)?.to_vec())
    }

    /// A field list, `[len:u16be][bytes]`.
    fn long(&mut self) -> Option<Vec<u8>> {
        let len = self.take(2)?;
        let len = u16::from_be_bytes([len[0], len[1]]) as usize;
        self.take(len).map(<[u8]>::to_vec)
    }

    fn flag(&mut self) -> Option<bool> {
        match self.take(1)? {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests;
