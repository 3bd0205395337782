//! Hello (lc-cli's action 16): the server says what it is, for `lc-cli
//! ping`. The client's version and token are read and not yet used: issue
//! 22's tokens will be checked here, before the answer.

use super::stream::Stream;
use tokio::io::AsyncWriteExt;

use crate::proto;

/// Answers `+` and this server's version.
pub async fn serve(mut stream: Stream) {
    let version = env!("CARGO_PKG_VERSION").as_bytes();
    let _ = stream.write_all(&proto::hello_answer(version)).await;
}
