//! One client connection: read one request and hand it to the file that
//! serves its action family (`lock`, `trylock`, `unlock`, `reset`, ...).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use super::stream::Stream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::metrics::Counters;
use super::table::Ask;
use super::{hello, lock, reset, session, trylock, unlock, Shared};
use crate::proto::{self, Answer, Decoded, Hold, Request, MAX_FIELD};

/// The longest frame: action, two size bytes, two full fields, and an
/// expiring lock's mode, TTL and wait fields (action 18: 5 + 9 + 2 bytes).
const MAX_FRAME: usize = 3 + 2 * MAX_FIELD + 16;

/// Serves one connection.
///
/// A queued waiter is this task parked in [`lock::serve`], so the size of this
/// future is what each waiter costs: the phases that are not waiting (reading
/// the request, answering a grant, the other requests) run in boxed futures,
/// allocated only while they run.
pub async fn handle(stream: Stream, peer: SocketAddr, shared: Arc<Shared>) {
    let Some((stream, request)) = Box::pin(read_phase(stream, peer, &shared)).await else {
        return;
    };
    if !shared.extensions && request.is_extension() {
        // The test-only reference mode: an action the reference does not know.
        return Box::pin(reply(stream, async { Answer::Fail })).await;
    }
    // The reference's rule: a request without a source is the peer's address.
    let or_peer = |source: Vec<u8>| {
        if source.is_empty() {
            peer.ip().to_string().into_bytes()
        } else {
            source
        }
    };
    match request {
        Request::Lock {
            key,
            source,
            mode,
            hold,
            wait,
        } => {
            let ask = Ask {
                source: or_peer(source),
                peer,
                session: hold == Hold::Session,
                mode,
                expire: None,
            };
            if wait {
                lock::serve(stream, &shared, key, ask, hold).await
            } else {
                Box::pin(trylock::serve(stream, &shared, key, ask, hold)).await
            }
        }
        // Rare: boxed, so a plain waiter's future does not grow for it.
        Request::ExpiringLock {
            key,
            source,
            mode,
            ttl_ms,
            wait,
        } => {
            let ask = Ask {
                source: or_peer(source),
                peer,
                session: false,
                mode,
                expire: Some(Ask::expire_secs(ttl_ms)),
            };
            if wait {
                Box::pin(lock::serve(stream, &shared, key, ask, Hold::Kept)).await
            } else {
                Box::pin(trylock::serve(stream, &shared, key, ask, Hold::Kept)).await
            }
        }
        Request::Release { key, kind } => {
            Box::pin(reply(stream, unlock::release(&shared, peer, &key, kind))).await
        }
        Request::Reclaim { key, token } => {
            Box::pin(session::reclaim(stream, peer, &shared, key, token)).await
        }
        Request::ResetByKey { key } => {
            Box::pin(reply(stream, reset::key(&shared, peer, &key))).await
        }
        Request::ResetBySource { source } => {
            let source = or_peer(source);
            Box::pin(reply(stream, reset::source(&shared, peer, &source))).await
        }
        // A client checking it talks to a lock server (lc-cli's extension).
        Request::Ping => Box::pin(reply(stream, async { Answer::Ok })).await,
        Request::Hello { .. } => Box::pin(hello::serve(stream)).await,
    }
}

/// Answers a request that is served at once (once durable, with a log).
async fn reply(mut stream: Stream, answer: impl Future<Output = Answer>) {
    let answer = answer.await;
    let _ = stream.write_all(&[answer.byte()]).await;
}

/// Reads the request within the read deadline; bad input is answered `-`
/// (or the connection closed) and logged here.
async fn read_phase(
    mut stream: Stream,
    peer: SocketAddr,
    shared: &Shared,
) -> Option<(Stream, Request)> {
    stream.set_nodelay(true).ok();
    let read = tokio::time::timeout(shared.read_timeout, read_request(&mut stream));
    let request = match read.await {
        Ok(Ok(Some(request))) => request,
        Ok(Ok(None)) => return None, // closed before a whole frame: nothing to answer
        Ok(Err(reason)) => {
            Counters::bump(&shared.counters.refused);
            shared
                .events
                .error(format_args!("{peer}: bad request: {reason}"));
            let _ = stream.write_all(&[Answer::Fail.byte()]).await;
            return None;
        }
        Err(_) => {
            Counters::bump(&shared.counters.refused);
            shared.events.error(format_args!(
                "{peer}: no whole request within {:?}, closing",
                shared.read_timeout
            ));
            return None;
        }
    };
    Some((stream, request))
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
enum BadRequest {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed after {0} byte(s) of a frame")]
    Truncated(usize),
    #[error("frame too long")]
    TooLong,
    #[error("{0}")]
    Frame(#[from] proto::FrameError),
}

/// Reads until one whole frame is in; `Ok(None)` if the client closed first.
async fn read_request<R: AsyncRead + Unpin>(stream: &mut R) -> Result<Option<Request>, BadRequest> {
    let mut buf = [0u8; MAX_FRAME];
    let mut len = 0;
    loop {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return if len == 0 {
                Ok(None)
            } else {
                Err(BadRequest::Truncated(len))
            };
        }
        len += n;
        match proto::decode(&buf[..len])? {
            Decoded::Frame(request, _) => return Ok(Some(request)),
            Decoded::Incomplete if len < MAX_FRAME => continue,
            Decoded::Incomplete => return Err(BadRequest::TooLong),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Each queued waiter is one parked `handle` future: keep it small (it
    /// was 1,272 bytes before the non-waiting phases were boxed; ~536 now).
    #[tokio::test]
    async fn a_parked_connection_stays_small() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let c = super::super::stream::Stream::Plain(
            tokio::net::TcpStream::connect(addr).await.unwrap(),
        );
        let shared = std::sync::Arc::new(super::Shared::new(
            super::super::table::Table::new(),
            super::super::events::Events { verbose: false },
            &super::super::ServerOptions::default(),
        ));
        let f = super::handle(c, addr, shared);
        let size = std::mem::size_of_val(&f);
        assert!(size <= 800, "the connection future is {size} bytes");
    }
}
