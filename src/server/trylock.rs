//! TryLock: the key if nobody holds it, else `#` at once; it never queues.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::grant;
use super::Shared;
use crate::proto::Answer;

pub async fn serve(
    stream: &mut TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    key: &[u8],
    source: &[u8],
) {
    match shared.table.try_lock(key, source, peer) {
        Some((id, durable)) => {
            shared.events.grant(key, source, peer);
            grant::answer(stream, shared, key, id, durable).await;
        }
        None => {
            let _ = stream.write_all(&[Answer::Busy.byte()]).await;
        }
    }
}
