//! Mark (lc-cli's action 20, issue 44): a key's mark, the highest
//! `--order` whose command ended with status 0, read or cleared on the
//! lock port. `+` and the mark (u64be), or `#` when the key has none; a
//! clear answers the mark it cleared, once the clear is in the log (`-`
//! if it could not be recorded).

use std::net::SocketAddr;

use super::conn::who;
use super::tokens::Owner;
use super::Shared;
use crate::proto::{self, printable, Answer};

pub(super) async fn serve(
    shared: &Shared,
    peer: SocketAddr,
    by: Option<&Owner>,
    key: &[u8],
    clear: bool,
) -> Vec<u8> {
    if !clear {
        return match shared.table.mark(key) {
            Some(m) => proto::with_u64(b'+', m).to_vec(),
            None => vec![Answer::Busy.byte()],
        };
    }
    let (had, durable) = shared.table.clear_mark(key);
    let Some(mark) = had else {
        return vec![Answer::Busy.byte()];
    };
    if let Err(e) = durable.wait().await {
        shared.events.error(format_args!(
            "{peer}: clear of the mark of '{}' not recorded in the log: {e}",
            printable(key)
        ));
        return vec![Answer::Fail.byte()];
    }
    shared.events.info(format_args!(
        "{}: cleared the mark of '{}' (it was {mark})",
        who(peer, by),
        printable(key)
    ));
    proto::with_u64(b'+', mark).to_vec()
}
