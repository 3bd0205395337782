//! History (lc-cli's action 21, `lc-cli history KEY`, docs/history.md): a
//! key's last ended holds, newest first, on the lock port. Served only on a
//! connection whose Hello took the feature `history` (else `-`, as an
//! action the server does not know); a `lock` token sees the fencing
//! tokens of its own holds only, as with Keys.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::stream::Stream;
use super::table::Whose;
use super::Shared;
use crate::proto::{history, Answer};

pub(super) async fn serve(
    mut stream: Stream,
    shared: &Shared,
    key: &[u8],
    limit: u32,
    taken: bool,
    viewer: Whose,
) {
    let out = match taken {
        false => vec![Answer::Fail.byte()],
        true => {
            let mut out = vec![Answer::Ok.byte()];
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            shared.table.history_into(key, limit, viewer, &mut out);
            out.extend_from_slice(&history::END);
            out
        }
    };
    let limit = shared.read_timeout.max(Duration::from_secs(1));
    let _ = tokio::time::timeout(limit, stream.write_all(&out)).await;
}
