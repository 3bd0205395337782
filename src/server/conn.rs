//! One client connection: read one request, act on the table, answer one byte.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::metrics::Counters;
use super::table::{Durable, GrantId, LockOutcome, Notice, Withdrawal};
use super::Shared;
use super::{ops, unlock};
use crate::proto::{self, Answer, Decoded, Request, MAX_FIELD};

/// The longest frame: action, two size bytes, two full fields.
const MAX_FRAME: usize = 3 + 2 * MAX_FIELD;

/// Serves one connection.
///
/// A queued waiter is this task parked in [`lock`], so the size of this
/// future is what each waiter costs: the phases that are not waiting (reading
/// the request, answering a grant, the other requests) run in boxed futures,
/// allocated only while they run.
pub async fn handle(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let Some((stream, request)) = Box::pin(read_phase(stream, peer, &shared)).await else {
        return;
    };
    let or_peer = |source: Vec<u8>| {
        if source.is_empty() {
            peer.ip().to_string().into_bytes()
        } else {
            source
        }
    };
    match request {
        Request::Lock { key, source } => lock(stream, peer, &shared, key, or_peer(source)).await,
        other => Box::pin(other_request(stream, peer, &shared, other, or_peer)).await,
    }
}

/// Reads the request within the read deadline; bad input is answered `-`
/// (or the connection closed) and logged here.
async fn read_phase(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
) -> Option<(TcpStream, Request)> {
    stream.set_nodelay(true).ok();
    let read = tokio::time::timeout(shared.options.read_timeout, read_request(&mut stream));
    let request = match read.await {
        Ok(Ok(Some(request))) => request,
        Ok(Ok(None)) => return None, // closed before a whole frame: nothing to answer
        Ok(Err(reason)) => {
            Counters::bump(&shared.counters.refused);
            shared
                .log
                .error(format_args!("{peer}: bad request: {reason}"));
            let _ = stream.write_all(&[Answer::Fail.byte()]).await;
            return None;
        }
        Err(_) => {
            Counters::bump(&shared.counters.refused);
            shared.log.error(format_args!(
                "{peer}: no whole request within {:?}, closing",
                shared.options.read_timeout
            ));
            return None;
        }
    };
    Some((stream, request))
}

/// Every request but Lock: answered at once (after the log, if any).
async fn other_request(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    request: Request,
    or_peer: impl Fn(Vec<u8>) -> Vec<u8>,
) {
    match request {
        Request::Lock { .. } => unreachable!("Lock is served by lock()"),
        Request::TryLock { key, source } => {
            let source = or_peer(source);
            match shared.table.try_lock(&key, &source, peer) {
                Some((id, durable)) => {
                    shared.log.grant(&key, &source, peer);
                    grant(&mut stream, shared, &key, id, durable).await;
                }
                None => {
                    let _ = stream.write_all(&[Answer::Busy.byte()]).await;
                }
            }
        }
        Request::Unlock { key } => {
            let answer = unlock::release(shared, peer, &key, unlock::Frame::Unlock).await;
            let _ = stream.write_all(&[answer.byte()]).await;
        }
        Request::Release { key } => {
            let answer = unlock::release(shared, peer, &key, unlock::Frame::Release).await;
            let _ = stream.write_all(&[answer.byte()]).await;
        }
        Request::ResetByKey { key } => {
            let answer = ops::reset_key(shared, peer, &key).await;
            let _ = stream.write_all(&[answer.byte()]).await;
        }
        Request::ResetBySource { source } => {
            let answer = ops::reset_source(shared, peer, &or_peer(source)).await;
            let _ = stream.write_all(&[answer.byte()]).await;
        }
    }
}

async fn lock(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    key: Vec<u8>,
    source: Vec<u8>,
) {
    let (id, notice) = match shared.table.lock(&key, &source, peer) {
        LockOutcome::Granted(id, durable) => {
            shared.log.grant(&key, &source, peer);
            return Box::pin(grant(&mut stream, shared, &key, id, durable)).await;
        }
        LockOutcome::Queued(id, notice) => (id, notice),
    };
    shared.log.queued(&key, &source, peer);
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
                shared.log.withdrawal(&key, &source, peer)
            }
            Withdrawal::Gone => {}
        }
        return;
    };
    match notice {
        Ok(Notice::Granted(durable)) => {
            Box::pin(grant(&mut stream, shared, &key, id, durable)).await
        }
        Ok(Notice::Withdrawn) | Err(_) => {
            let _ = stream.write_all(&[Answer::Fail.byte()]).await;
        }
    }
}

/// Waits until the grant is durable, then answers it; if the log failed, the
/// key is released again and the client told `-`.
async fn grant(stream: &mut TcpStream, shared: &Shared, key: &[u8], id: GrantId, durable: Durable) {
    if let Err(e) = durable.wait().await {
        Counters::bump(&shared.counters.refused);
        shared.table.release_grant(key, id);
        shared.log.error(format_args!(
            "grant of '{}' not recorded in the log, refused: {e}",
            show(key)
        ));
        let _ = stream.write_all(&[Answer::Fail.byte()]).await;
        return;
    }
    answer_grant(stream, shared, key, id).await;
}

/// Sends `+` for a grant; a grant that cannot be delivered is released again,
/// so a closed connection never keeps a key.
///
/// A write to a socket whose peer has already closed usually succeeds (the
/// peer answers with a reset later), so the connection is checked for a
/// hang-up first: a client that went away before its `+` could be written is
/// never left holding the key.
async fn answer_grant(stream: &mut TcpStream, shared: &Shared, key: &[u8], id: GrantId) {
    let delivered = !peer_gone(stream) && stream.write_all(&[Answer::Ok.byte()]).await.is_ok();
    if !delivered && shared.table.release_grant(key, id) {
        shared.log.error(format_args!(
            "could not deliver the grant of '{}': the client hung up, released it again",
            show(key)
        ));
    }
}

/// True if the client has closed its side (or the connection broke). Bytes it
/// sent after its request are read and ignored. Never blocks.
fn peer_gone(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let mut sink = [0u8; 64];
    // Bounded: a client cannot keep us here by streaming bytes.
    for _ in 0..16 {
        // SAFETY: `sink` is a valid buffer of the given length; `fd` is open
        // for as long as `stream` is borrowed.
        let n = unsafe { libc::recv(fd, sink.as_mut_ptr().cast(), sink.len(), libc::MSG_DONTWAIT) };
        match n {
            0 => return true,
            n if n > 0 => continue,
            _ => {
                let err = std::io::Error::last_os_error();
                return !matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                );
            }
        }
    }
    false
}

/// Reads until one whole frame is in; `Ok(None)` if the client closed first.
async fn read_request<R: AsyncRead + Unpin>(stream: &mut R) -> Result<Option<Request>, String> {
    let mut buf = [0u8; MAX_FRAME];
    let mut len = 0;
    loop {
        let n = stream
            .read(&mut buf[len..])
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return if len == 0 {
                Ok(None)
            } else {
                Err(format!("connection closed after {len} byte(s) of a frame"))
            };
        }
        len += n;
        match proto::decode(&buf[..len]) {
            Ok(Decoded::Frame(request, _)) => return Ok(Some(request)),
            Ok(Decoded::Incomplete) if len < MAX_FRAME => continue,
            Ok(Decoded::Incomplete) => return Err("frame too long".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// A key or source for a log line: bytes shown as text where they are text.
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    /// Each queued waiter is one parked `handle` future: keep it small (it
    /// was 1,272 bytes before the non-waiting phases were boxed; ~536 now).
    #[tokio::test]
    async fn a_parked_connection_stays_small() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let shared = std::sync::Arc::new(super::Shared::new(
            super::super::table::Table::new(),
            super::super::log::Log { verbose: false },
            Default::default(),
        ));
        let f = super::handle(c, addr, shared);
        let size = std::mem::size_of_val(&f);
        assert!(size <= 800, "the connection future is {size} bytes");
    }
}
