//! Lock and SessionLock: granted at once if the key is free, else queued in
//! arrival order until its turn or until the client hangs up (which
//! withdraws it). A session grant then serves the hold on the same
//! connection (`session.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::grant::{self, Reply};
use super::metrics::Counters;
use super::table::{Grant, LockOutcome, Notice, Withdrawal};
use super::{session, Shared};

/// Serves a Lock on its connection. A queued waiter is this future parked
/// in the wait below, so what it keeps across the wait is what each waiter
/// costs (see `conn::handle`).
pub async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    source: Vec<u8>,
    session: bool,
) {
    let (id, notice) = match shared.table.lock(&key, &source, peer, session) {
        LockOutcome::Granted(g) => {
            shared.events.grant(&key, &source, peer);
            return Box::pin(granted(stream, peer, shared, key, g)).await;
        }
        LockOutcome::Queued(id, notice) => (id, notice),
    };
    shared.events.queued(&key, &source, peer);
    // Wait for the turn or the hang-up, whichever comes first. Written as a
    // poll function so a parked waiter keeps no buffer and no extra future.
    let mut notice = notice;
    let notice = std::future::poll_fn(|cx| {
        if let Poll::Ready(n) = Pin::new(&mut notice).poll(cx) {
            return Poll::Ready(Some(n));
        }
        loop {
            match stream.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(())) => {
                    // Bytes after the request are ignored; EOF is a hang-up.
                    let mut sink = [0u8; 32];
                    match stream.try_read(&mut sink) {
                        Ok(0) => return Poll::Ready(None),
                        Ok(_) => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(_) => return Poll::Ready(None),
                    }
                }
            }
        }
    })
    .await;
    let Some(notice) = notice else {
        match shared.table.withdraw(&key, id) {
            Withdrawal::Dequeued | Withdrawal::Released => {
                Counters::bump(&shared.counters.withdrawals);
                shared.events.withdrawal(&key, &source, peer)
            }
            Withdrawal::Gone => {}
        }
        return;
    };
    match notice {
        Ok(Notice::Granted(g)) => Box::pin(granted(stream, peer, shared, key, g)).await,
        Ok(Notice::Withdrawn) | Err(_) => {
            let reply = match session {
                true => Reply::Session(0),
                false => Reply::Classic,
            };
            let _ = stream.write_all(&[reply.refused()]).await;
        }
    }
}

/// Answers a grant; a delivered session grant is then served as a session.
async fn granted(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    g: Grant,
) {
    let reply = match g.link {
        Some(_) => Reply::Session(g.token),
        None => Reply::Classic,
    };
    let delivered = grant::answer(&mut stream, shared, &key, g.id, g.durable, reply).await;
    if let (true, Some(link)) = (delivered, g.link) {
        session::spawn_hold(stream, peer, shared, key, g.id, link);
    }
}
