//! TryLock (and SessionTryLock): the key if nobody holds it, else `#` at
//! once; it never queues.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::grant::{self, Reply};
use super::{session, Shared};
use crate::proto::Answer;

pub async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    source: &[u8],
    session: bool,
) {
    let Some(g) = shared.table.try_lock(&key, source, peer, session) else {
        let _ = stream.write_all(&[Answer::Busy.byte()]).await;
        return;
    };
    shared.events.grant(&key, source, peer);
    let reply = match session {
        true => Reply::Session(g.token),
        false => Reply::Classic,
    };
    let delivered = grant::answer(&mut stream, shared, &key, g.id, g.durable, reply).await;
    if let (true, Some(link)) = (delivered, g.link) {
        session::spawn_hold(stream, peer, shared, key, g.id, link);
    }
}
