//! Keys (lc-cli's action 17): who holds a key (or every key) and, if
//! asked, who waits for it, on the lock port, so a client needs no other
//! port for `keys`, the holder's name or its place in line. One key is a
//! lookup under the table's mutex. Every key (or every key under a prefix,
//! flags bit 2: a range of the table's tree) is listed in parts of about
//! [`PIECE`] bytes, each written under the mutex from where the last one
//! ended (in key order, each key once) and sent before the next is made,
//! with a yield between two: the one-thread server serves every other
//! connection between parts (a million keys in one pass under the mutex
//! held everyone up for half a second), and the client reads one part
//! while the next is made. So a listing of many keys is not one instant's:
//! a key changed while it is listed is shown as it was, or as it is, when
//! its part was made. Each piece is written within the write limit, so a
//! client that stops reading cannot keep the task.
//!
//! Each hold and waiter carries its token's identity (`--token-file`); a
//! `lock` token sees the fencing tokens of its own holds only (`viewer`),
//! an admin token, or anyone on a server without tokens, every one.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::stream::Stream;
use super::table::Whose;
use super::Shared;
use crate::proto::listing;

/// A part of the listing made and written at once.
const PIECE: usize = 64 * 1024;

/// What a Keys request asks for besides the holds.
pub(crate) use super::table::What;

/// Which keys a Keys request lists: one, or every key under a prefix
/// (the empty prefix: every key).
pub(super) enum Which {
    One(Vec<u8>),
    Under(Vec<u8>),
}

impl Which {
    /// What Keys' key field and flags bit 2 ask for.
    pub(super) fn of(key: Vec<u8>, prefix: bool) -> Which {
        match prefix || key.is_empty() {
            true => Which::Under(key),
            false => Which::One(key),
        }
    }
}

pub(super) async fn serve(
    mut stream: Stream,
    shared: &Shared,
    which: Which,
    waiters: What,
    viewer: Whose,
) {
    let limit = shared.read_timeout.max(Duration::from_secs(1));
    let mut out = Vec::with_capacity(PIECE + 4096);
    out.push(listing::LISTING);
    let prefix = match which {
        Which::Under(prefix) => prefix,
        Which::One(key) => return serve_one(stream, shared, &key, waiters, viewer, out).await,
    };
    // Says the listing is by prefix (a server before it names no prefix:
    // it would list the one key of that name). The whole listing says
    // nothing, as before.
    if !prefix.is_empty() {
        listing::push_prefix(&mut out, &prefix);
    }
    let mut after: Option<Box<[u8]>> = None;
    loop {
        after = shared.table.listing_part(
            (&prefix, after.as_deref()),
            waiters,
            viewer,
            &mut out,
            PIECE,
        );
        if after.is_none() {
            listing::push_end(&mut out);
        }
        if !write(&mut stream, &out, limit).await || after.is_none() {
            return;
        }
        out.clear();
        tokio::task::yield_now().await;
    }
}

/// The listing of one key: a lookup under the table's mutex.
async fn serve_one(
    mut stream: Stream,
    shared: &Shared,
    key: &[u8],
    waiters: What,
    viewer: Whose,
    mut out: Vec<u8>,
) {
    let limit = shared.read_timeout.max(Duration::from_secs(1));
    shared
        .table
        .listing_into(Some(key), waiters, viewer, &mut out);
    // The end record says the listing is whole; the close follows.
    listing::push_end(&mut out);
    for piece in out.chunks(PIECE) {
        if !write(&mut stream, piece, limit).await {
            return;
        }
    }
}

async fn write(stream: &mut Stream, bytes: &[u8], limit: Duration) -> bool {
    matches!(
        tokio::time::timeout(limit, stream.write_all(bytes)).await,
        Ok(Ok(()))
    )
}
