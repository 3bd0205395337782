//! One client connection: read one request (after the Hello that opens
//! it, when there is one), check it against the token's role
//! (`--token-file`), and hand it to the file that serves its action family
//! (`lock`, `trylock`, `unlock`, `reset`, `keys`, ...).
//!
//! Its login (the TLS handshake and the first frame; with `--token-file`,
//! a Hello with a token of the file) must be through within
//! `--login-timeout` of the accept, and the whole request within
//! `--read-timeout` of it; until the login is through the connection counts
//! against `--max-pending-logins` (`limits.rs`). A lock's wait once it is
//! queued is bounded by neither.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::limits::Tracked;
use super::stream::Stream;

use super::hello::Greeted;
use super::metrics::Counters;
use super::table::{Ask, NotYours, Whose};
use super::tokens::{self, Permit, Role};
use super::{
    hello, history, keep, keys, lock, mark, quota, reset, session, tls, trylock, unlock, Shared,
};
use crate::proto::{self, Answer, Decoded, Hold, ReleaseKind, Request, MAX_FIELD};

/// The longest frame: action, two size bytes, two full fields, and an
/// expiring lock's mode, TTL and wait fields (action 18: 5 + 9 + 2 bytes),
/// in an ExtendedLock (its action byte and its field list).
const MAX_FRAME: usize = 1 + 3 + 2 * MAX_FIELD + 16 + 2 + proto::request::MAX_FIELDS;

/// Serves one accepted connection, from the TLS handshake (`serve
/// --tls-cert`) to its end; `tracked` counts it open until then.
///
/// A queued waiter is this task parked on its [`lock::Parked`], so the size
/// of this future is what each waiter costs: everything before the wait
/// (the handshake, reading the request, the token gate, a grant at once,
/// every other request) and after it runs in boxed futures, freed when
/// done, and the wait keeps only the `Parked`.
pub(crate) fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    tls: Option<TlsAcceptor>,
    tracked: Tracked,
) -> impl Future<Output = ()> + Send {
    // Not an async fn: its arguments would stay in its state for good.
    let up_to_the_wait = Box::pin(async move {
        let accepted = Instant::now();
        let login = Deadline::login(accepted, &shared);
        let stream = tls::open(tcp, peer, &shared, tls.as_ref(), login).await?;
        let parked = serve(stream, peer, &shared, &tracked, accepted).await?;
        Some((parked, tracked))
    });
    async move {
        let Some((mut parked, tracked)) = up_to_the_wait.await else {
            return;
        };
        let turn = (&mut parked).await;
        Box::pin(parked.after(turn, tracked.peer())).await;
        drop(tracked);
    }
}

/// Serves the connection's request, but for the wait of a queued Lock: that
/// is returned, for [`serve_connection`] to wait in.
async fn serve(
    stream: Stream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    tracked: &Tracked,
    accepted: Instant,
) -> Option<lock::Parked> {
    // Boxed: its buffer is freed before a waiter takes its place in line.
    let reading = read_phase(stream, peer, shared, tracked, accepted);
    let (stream, request, greeted) = Box::pin(reading).await?;
    let caller = greeted.caller.as_ref();
    if !shared.extensions && request.is_extension() {
        // The test-only reference mode: an action the reference does not know.
        reply(stream, async { Answer::Fail }).await;
        return None;
    }
    // The token gate (with --token-file): what the Hello's role may do.
    let whose = match caller.map(|c| (c, tokens::allowed(c.role, &request))) {
        None | Some((_, Permit::Yes)) => Whose::Any,
        Some((c, Permit::OwnHolds)) => Whose::Only(c.owner.fingerprint),
        Some((c, Permit::No(reason))) => {
            not_allowed(stream, peer, shared, Some(&c.owner), reason).await;
            return None;
        }
    };
    // The token's keys= (with --token-file): a key outside them is refused.
    if let Some((c, keys)) = caller.and_then(|c| Some((c, c.keys.as_ref()?))) {
        if quota::key_taken(&request).is_some_and(|k| !keys.matches(k)) {
            let reason = quota::outside(&c.owner.name, keys);
            not_allowed(stream, peer, shared, Some(&c.owner), &reason).await;
            return None;
        }
    }
    // The token's held= (with --token-file): no new hold beyond it.
    if let Some(c) = caller.filter(|_| quota::takes_hold(&request)) {
        if shared.table.held_by(c.owner.fingerprint) >= c.held {
            let reason = quota::over_held(&c.owner.name, c.held);
            not_allowed(stream, peer, shared, Some(&c.owner), &reason).await;
            return None;
        }
    }
    // `--max-log-bytes`: no new hold while the log is full.
    if let Some(full) = shared
        .log_cap
        .as_ref()
        .filter(|_| quota::takes_hold(&request))
    {
        if let Some(reason) = full.full() {
            not_allowed(stream, peer, shared, caller.map(|c| &c.owner), &reason).await;
            return None;
        }
    }
    // An ExtendedLock: the lock inside, with its field list (a ticket in
    // it taken out: a waiter's place, shown again after a restart).
    let (request, fields, ticket) = match request {
        Request::Extended { lock, fields } => match queue_fields(&fields) {
            Some((fields, ticket)) => (*lock, fields, ticket),
            None => {
                reply(stream, async { Answer::Fail }).await;
                return None;
            }
        },
        other => (other, None, None),
    };
    let (key, source, mode, hold, wait, expire) = match request {
        Request::Lock {
            key,
            source,
            mode,
            hold,
            wait,
        } => (key, source, mode, hold, wait, None),
        Request::ExpiringLock {
            key,
            source,
            mode,
            ttl_ms,
            wait,
        } => {
            let expire = Some(Ask::expire_secs(ttl_ms));
            (key, source, mode, Hold::Kept, wait, expire)
        }
        other => {
            serve_short(stream, peer, shared, other, whose, &greeted).await;
            return None;
        }
    };
    let ask = Ask {
        source: or_peer(source, peer),
        peer,
        session: hold == Hold::Session,
        mode,
        owner: caller.map(|c| c.owner.clone()),
        waits: caller.map(|c| c.waits),
        secret: greeted.secret && hold == Hold::Session,
        expire,
        fields,
        ticket,
    };
    // The grant's answer carries a secret field (the feature `secret`).
    let answer = lock::Answering {
        hold,
        secret: greeted.secret,
        queues: greeted.queues,
        slots: greeted.slots,
    };
    if wait {
        lock::serve(stream, shared, key, ask, answer).await
    } else {
        trylock::serve(stream, shared, key, ask, answer).await;
        None
    }
}

/// An ExtendedLock's field list, checked (None: it does not parse), as
/// the table keeps it (None when empty), and the ticket it showed.
#[allow(clippy::type_complexity)]
fn queue_fields(bytes: &[u8]) -> Option<(Option<Arc<[u8]>>, Option<u64>)> {
    let list = crate::backend::fields::FieldList::parse(bytes).ok()?;
    let ticket = list.get("ticket").and_then(|t| t.parse().ok());
    // Its lines but the ticket's, as sent (a line is `name=value\n`).
    let kept: Vec<u8> = bytes
        .split_inclusive(|&b| b == b'\n')
        .filter(|line| !line.starts_with(b"ticket="))
        .flatten()
        .copied()
        .collect();
    let fields = (!kept.is_empty()).then(|| Arc::from(kept));
    Some((fields, ticket))
}

/// The reference's rule: a request without a source is the peer's address.
fn or_peer(source: Vec<u8>, peer: SocketAddr) -> Vec<u8> {
    if source.is_empty() {
        peer.ip().to_string().into_bytes()
    } else {
        source
    }
}

/// Every request but a Lock: served at once.
async fn serve_short(
    stream: Stream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    request: Request,
    whose: Whose,
    greeted: &Greeted,
) {
    let caller = greeted.caller.as_ref();
    let by = caller.map(|c| &c.owner);
    match request {
        Request::Lock { .. } | Request::ExpiringLock { .. } | Request::Extended { .. } => {
            unreachable!("served by serve")
        }
        Request::Mark { key, clear } => {
            let answer = mark::serve(shared, peer, by, &key, clear).await;
            let mut stream = stream;
            let _ = Box::pin(stream.write_all(&answer)).await;
        }
        Request::Release { key, kind, ended } => {
            let answer = match (kind, ended.and_then(|e| e.keep_ms)) {
                (ReleaseKind::Token(token), Some(ms)) if greeted.keep => {
                    Box::pin(keep::keep(shared, peer, &key, token, whose, ms)).await
                }
                _ => unlock::release_by(shared, peer, &key, kind, whose, by, ended).await,
            };
            match answer {
                Ok(answer) => reply(stream, async { answer }).await,
                Err(NotYours) => {
                    not_allowed(
                        stream,
                        peer,
                        shared,
                        caller.map(|c| &c.owner),
                        tokens::NOT_YOURS,
                    )
                    .await
                }
            }
        }
        Request::Reclaim { key, token, secret } => {
            let claim = session::Claim {
                token,
                secret,
                whose,
                greeted,
            };
            session::reclaim(stream, peer, shared, key, claim).await
        }
        Request::ResetByKey { key } => reply(stream, reset::key(shared, peer, by, &key)).await,
        Request::ResetBySource { source } => {
            let source = or_peer(source, peer);
            reply(stream, reset::source(shared, peer, by, &source)).await
        }
        // A client checking it talks to a lock server (lc-cli's extension).
        Request::Ping => reply(stream, async { Answer::Ok }).await,
        Request::Hello { .. } => hello::serve(stream, greeted).await,
        Request::Keys {
            key,
            waiters,
            fields,
            prefix,
        } => {
            // A lock token sees the fencing tokens of its own holds only.
            let viewer = match caller {
                Some(c) if c.role == Role::Lock => Whose::Only(c.owner.fingerprint),
                _ => Whose::Any,
            };
            let what = keys::What { waiters, fields };
            keys::serve(stream, shared, keys::Which::of(key, prefix), what, viewer).await
        }
        Request::History { key, limit } => {
            let viewer = match caller {
                Some(c) if c.role == Role::Lock => Whose::Only(c.owner.fingerprint),
                _ => Whose::Any,
            };
            history::serve(stream, shared, &key, limit, greeted.history, viewer).await
        }
    }
}

/// A request the token's role may not make: `%` and why, logged with the
/// caller's identity.
pub(super) async fn not_allowed(
    mut stream: Stream,
    peer: SocketAddr,
    shared: &Shared,
    by: Option<&tokens::Owner>,
    reason: &str,
) {
    Counters::bump(&shared.counters.refused);
    shared.events.limited(
        Some(peer.ip()),
        "refusal",
        format_args!("{}: refused: {reason}", who(peer, by)),
    );
    let _ = stream.write_all(&proto::not_allowed(reason)).await;
}

/// `PEER`, or `PEER as 'IDENTITY'` for a caller with a token: how the log
/// names who asked.
pub(super) fn who(peer: SocketAddr, by: Option<&tokens::Owner>) -> String {
    match by {
        Some(o) => format!("{peer} as '{}'", crate::proto::printable(o.name.as_bytes())),
        None => peer.to_string(),
    }
}

/// Answers a request that is served at once (once durable, with a log).
async fn reply(mut stream: Stream, answer: impl Future<Output = Answer>) {
    let answer = answer.await;
    let _ = stream.write_all(&[answer.byte()]).await;
}

/// When a frame must be in, counted from the accept, and the option that
/// says so (for the log line).
#[derive(Clone, Copy)]
pub(crate) struct Deadline {
    pub at: Instant,
    pub after: Duration,
    pub option: &'static str,
}

impl Deadline {
    /// The login's: `--login-timeout`, or `--read-timeout` if it is shorter.
    pub(crate) fn login(accepted: Instant, shared: &Shared) -> Deadline {
        match shared.login_timeout <= shared.read_timeout {
            true => Deadline {
                at: accepted + shared.login_timeout,
                after: shared.login_timeout,
                option: "--login-timeout",
            },
            false => Deadline::request(accepted, shared),
        }
    }

    /// The whole request's: `--read-timeout`.
    fn request(accepted: Instant, shared: &Shared) -> Deadline {
        Deadline {
            at: accepted + shared.read_timeout,
            after: shared.read_timeout,
            option: "--read-timeout",
        }
    }
}

/// Reads the request within its deadlines; bad input is answered `-`
/// (or the connection closed) and logged here. A Hello first is answered
/// (`hello.rs`) and the request behind it read next; with `--token-file`
/// it must come first, and says who the caller is. The first frame ends
/// the login (with tokens, a Hello whose token is taken): `tracked` then
/// no longer counts against `--max-pending-logins`.
async fn read_phase(
    mut stream: Stream,
    peer: SocketAddr,
    shared: &Shared,
    tracked: &Tracked,
    accepted: Instant,
) -> Option<(Stream, Request, Greeted)> {
    stream.set_nodelay(true).ok();
    let login = Deadline::login(accepted, shared);
    let mut frames = Frames::default();
    let first = read_within(&mut stream, &mut frames, login, peer, shared).await?;
    let (client, token) = match first {
        Request::Hello { client, token } if shared.extensions => (client, token),
        other if shared.tokens.is_some() => {
            hello::refuse_unannounced(&mut stream, peer, shared, &other).await;
            return None;
        }
        other => {
            tracked.logged_in();
            return Some((stream, other, Greeted::default()));
        }
    };
    let greeted = hello::greet(&mut stream, peer, shared, &client, &token).await?;
    tracked.logged_in();
    // Closed after the Hello (`lc-cli ping` asks no more): nothing to answer.
    let deadline = Deadline::request(accepted, shared);
    let request = read_within(&mut stream, &mut frames, deadline, peer, shared).await?;
    Some((stream, request, greeted))
}

/// The next frame within the deadline; None (answered and logged where
/// there is something to say) if there is none.
async fn read_within(
    stream: &mut Stream,
    frames: &mut Frames,
    deadline: Deadline,
    peer: SocketAddr,
    shared: &Shared,
) -> Option<Request> {
    match tokio::time::timeout_at(deadline.at, frames.next(stream)).await {
        Ok(Ok(Some(request))) => Some(request),
        Ok(Ok(None)) => None, // closed before a whole frame: nothing to answer
        Ok(Err(reason)) => {
            Counters::bump(&shared.counters.refused);
            shared.events.limited(
                Some(peer.ip()),
                "bad request",
                format_args!("{peer}: bad request: {reason}"),
            );
            let _ = stream.write_all(&[Answer::Fail.byte()]).await;
            None
        }
        Err(_) => {
            Counters::bump(&shared.counters.refused);
            shared.events.limited(
                Some(peer.ip()),
                "slow request",
                format_args!(
                    "{peer}: no whole request within {:?} ({}), closing",
                    deadline.after, deadline.option
                ),
            );
            None
        }
    }
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

/// The frames that open a connection: a Hello and the request behind it
/// may come in one read. Bytes after the last frame taken are ignored.
struct Frames {
    buf: [u8; 2 * MAX_FRAME],
    /// The bytes not yet taken are `buf[start..len]`.
    start: usize,
    len: usize,
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            buf: [0; 2 * MAX_FRAME],
            start: 0,
            len: 0,
        }
    }
}

impl Frames {
    /// Reads until one whole frame is in; `Ok(None)` if the client closed
    /// first.
    async fn next<R: AsyncRead + Unpin>(
        &mut self,
        stream: &mut R,
    ) -> Result<Option<Request>, BadRequest> {
        loop {
            let have = self.len - self.start;
            if have > 0 {
                match proto::decode(&self.buf[self.start..self.len])? {
                    Decoded::Frame(request, used) => {
                        self.start += used;
                        return Ok(Some(request));
                    }
                    Decoded::Incomplete if have < MAX_FRAME => {}
                    Decoded::Incomplete => return Err(BadRequest::TooLong),
                }
            }
            if self.len == self.buf.len() {
                self.buf.copy_within(self.start..self.len, 0);
                self.len = have;
                self.start = 0;
            }
            let n = stream.read(&mut self.buf[self.len..]).await?;
            if n == 0 {
                return if have == 0 {
                    Ok(None)
                } else {
                    Err(BadRequest::Truncated(have))
                };
            }
            self.len += n;
        }
    }
}

#[cfg(test)]
mod tests {
    /// Each queued waiter is one parked connection task: keep its future
    /// small (1,272 bytes before the non-waiting phases were boxed; 760
    /// with the token gate, inside a spawned block with more; 152 since
    /// the wait is a [`super::lock::Parked`] polled by hand). Tokio adds
    /// 104 bytes and rounds the task up to a multiple of 128: at most 152
    /// keeps it at 256.
    #[tokio::test]
    async fn a_parked_connection_stays_small() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let shared = std::sync::Arc::new(super::Shared::new(
            super::super::table::Table::new(),
            super::super::events::Events::new(false),
            &super::super::ServerOptions::default(),
        ));
        let tracked = shared.limits.admit(addr).ok().unwrap();
        let f = super::serve_connection(tcp, addr, shared, None, tracked);
        let size = std::mem::size_of_val(&f);
        assert!(size <= 152, "the connection future is {size} bytes");
    }
}
