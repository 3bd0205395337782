//! Keys (lc-cli's action 17): who holds a key (or every key) and, if
//! asked, who waits for it, on the lock port, so a client needs no other
//! port for `keys`, the holder's name or its place in line. The table
//! writes the records in one pass under its mutex (one key: a lookup);
//! they are sent in pieces, each within the write limit, so a client that
//! stops reading cannot keep the task.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::stream::Stream;
use super::Shared;
use crate::proto::listing;

/// A piece of the listing written at once.
const PIECE: usize = 64 * 1024;

pub async fn serve(mut stream: Stream, shared: &Shared, key: Vec<u8>, waiters: bool) {
    let key = (!key.is_empty()).then_some(key);
    let mut out = vec![listing::LISTING];
    shared.table.listing_into(key.as_deref(), waiters, &mut out);
    // The end record says the listing is whole; the close follows.
    listing::push_end(&mut out);
    let limit = shared.read_timeout.max(Duration::from_secs(1));
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
