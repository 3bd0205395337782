//! The Locking-Center protocol client: one TCP connection per request.
//!
//! Lock waits by keeping its connection open; closing it withdraws the request
//! from the server's queue. A classic hold is not tied to a connection: the
//! key stays held until an Unlock or a reset, so there is no lease to lose.
//! A hold for a command is asked as a session (lc-cli's own SessionLock):
//! tied to its connection, with a fencing token; a kept hold, or a hold in
//! another mode (shared, `--limit N`), with lc-cli's mode actions. A server
//! that answers `-` to them (a reference server) is asked the classic way
//! instead, for an exclusive lock; it cannot take the other modes.
//!
//! - `keys`: `keys`, the holder's name and the place in line over the lock
//!   port (lc-cli's Keys, action 17), or the manager port's `KEYX` for a
//!   reference server.
//! - `probe`: telling a server that does not speak the protocol from one
//!   whose key is just held.
//! - `session`: keeping a session hold, and noticing its loss.

pub mod address;
mod dial;
mod keys;
mod ping;
mod probe;
mod session;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

pub use address::LcAddress;
use dial::{Dialer, LcStream};

use super::{
    Acquired, Backend, BackendConfig, BackendError, HeldLock, LockMode, LockRequest, LostReason,
    Result, WaitProgress, WaiterInfo,
};
use crate::proto::{self, Answer, Hold, ReleaseKind, Request};

/// How long a cancelled Lock waits for the server to confirm the withdrawal
/// (lc-cli's server closes at once; a reference server may never confirm).
const WITHDRAW_GRACE: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct LcBackend {
    addr: String,
    /// Plain TCP (`lc://`) or TLS (`lcs://`) to `addr`.
    dialer: Dialer,
    manager: Option<String>,
    connect_timeout: Duration,
    verbose: bool,
    /// The server answered `-` to a session frame: classic frames only.
    classic_only: Arc<AtomicBool>,
}

impl LcBackend {
    /// Fails only when a TLS file cannot be used (read now, before
    /// anything is sent).
    pub fn new(address: &LcAddress, config: &BackendConfig) -> Result<Self> {
        let dialer = match &config.access.tls {
            None => Dialer::plain(&address.addr),
            Some(t) => {
                Dialer::tls(&address.addr, t).map_err(|reason| BackendError::Unavailable {
                    server: address.to_string(),
                    reason,
                })?
            }
        };
        let token = config.access.password.as_ref().map(|t| t.expose());
        let dialer = dialer.with_token(token);
        Ok(LcBackend {
            dialer,
            addr: address.addr.clone(),
            manager: address.manager.clone(),
            connect_timeout: config.connect_timeout,
            verbose: config.verbose,
            classic_only: Arc::new(AtomicBool::new(false)),
        })
    }

    fn unavailable(&self, reason: impl ToString) -> BackendError {
        BackendError::Unavailable {
            server: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    fn protocol(&self, reason: impl ToString) -> BackendError {
        BackendError::Protocol {
            server: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    /// Opens a connection and sends one request frame.
    async fn send(&self, request: &Request) -> Result<LcStream> {
        let frame = proto::encode(request).map_err(|e| BackendError::Other(e.to_string()))?;
        let mut stream = self
            .dialer
            .connect(self.connect_timeout)
            .await
            .map_err(|e| self.unavailable(e))?;
        stream
            .write_all(&frame)
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(stream)
    }

    /// The answer byte; more than one byte, or another byte, is a peer that
    /// does not speak the protocol (see `probe.rs`). A `%` and its reason is
    /// a request the token's role may not make.
    async fn read_answer(&self, stream: &mut LcStream) -> Result<Answer> {
        let mut buf = [0u8; 2 + proto::MAX_FIELD];
        match stream.read(&mut buf).await {
            Ok(0) => Err(self.unavailable("the server closed the connection without an answer")),
            Ok(n) => {
                if let Some(reason) = proto::parse_not_allowed(&buf[..n]) {
                    return Err(self.refused(reason));
                }
                match probe::classify(&buf[..n]) {
                    probe::Reply::Answer(a) => Ok(a),
                    probe::Reply::Foreign(bytes) => Err(probe::foreign(&self.addr, &bytes)),
                }
            }
            Err(e) => Err(self.unavailable(dial::refusal(&e).unwrap_or(e.to_string()))),
        }
    }

    fn refused(&self, reason: impl ToString) -> BackendError {
        BackendError::Refused {
            server: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    /// Runs `op`, the whole of one client request, under the Hello's rules:
    /// a server that answered the Hello `-` (a reference server) served
    /// nothing, so `op` runs once more without one; a token the server
    /// refused is the error, whatever `op` made of the closed connection.
    async fn guarded<'a, T, F, Fut>(&'a self, op: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>> + 'a,
    {
        let greeting = self.dialer.greeting();
        let hello = greeting.sends_hello();
        let mut result = op().await;
        if result.is_err() && hello && !greeting.sends_hello() {
            result = op().await;
        }
        match (result, greeting.refusal()) {
            (Err(_), Some(reason)) => Err(self.refused(reason)),
            (result, _) => result,
        }
    }

    /// One request, one answer, for the short actions: a live server answers
    /// at once, so within the connect timeout plus the round trip measured
    /// by the connect.
    async fn call(&self, request: Request) -> Result<Answer> {
        let started = std::time::Instant::now();
        let mut stream = self.send(&request).await?;
        let limit = self.connect_timeout + started.elapsed();
        tokio::time::timeout(limit, self.read_answer(&mut stream))
            .await
            .map_err(|_| probe::silent(&self.addr, limit))?
    }

    /// Releases `key`: true if it was held, false if not. Asks with the
    /// Release extension first; a `-` to it is either a reference server
    /// that does not know the action, or lc-cli's server unable to record the
    /// release, so the classic Unlock is asked next. Its `+` means released
    /// or not held (a reference server cannot tell us which: reported as
    /// released); its `-` means not released.
    async fn unlock_key(&self, key: &str) -> Result<bool> {
        let key_bytes = key.as_bytes().to_vec();
        match self
            .call(Request::Release {
                key: key_bytes.clone(),
                kind: ReleaseKind::Release,
            })
            .await?
        {
            Answer::Ok => return Ok(true),
            Answer::Busy => return Ok(false),
            Answer::Fail => {}
        }
        let unlock = Request::Release {
            key: key_bytes,
            kind: ReleaseKind::Unlock,
        };
        match self.call(unlock).await? {
            Answer::Ok => Ok(true),
            Answer::Fail => Err(BackendError::NotReleased {
                server: self.addr.clone(),
                key: key.to_string(),
                reason: "it answered '-' (it could not record the release; the key is still held)"
                    .to_string(),
            }),
            Answer::Busy => Err(self.protocol("'#' to an Unlock")),
        }
    }

    /// A kept hold; with its token, released under it.
    fn held(&self, key: &str, token: Option<u64>) -> Box<dyn HeldLock> {
        Box::new(LcHeld {
            backend: self.clone(),
            key: key.to_string(),
            token,
        })
    }
}

#[async_trait]
impl Backend for LcBackend {
    async fn ping(&self) -> Result<super::ping::PingReport> {
        self.guarded(|| self.ping_server()).await
    }

    async fn acquire(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        check_source(&request.source)?;
        self.guarded(|| self.acquire_any(request, cancel.clone(), progress))
            .await
    }

    async fn unlock(&self, key: &str) -> Result<bool> {
        self.guarded(|| self.unlock_key(key)).await
    }

    async fn reset_key(&self, key: &str) -> Result<()> {
        self.guarded(|| {
            self.expect_ok(Request::ResetByKey {
                key: key.as_bytes().to_vec(),
            })
        })
        .await
    }

    async fn keys(&self) -> Result<Vec<super::KeyInfo>> {
        self.guarded(|| async {
            let t = self.connect_timeout;
            let dial = keys::Dial::Retry(t);
            if !self.classic_only.load(Ordering::Relaxed) {
                if let keys::Answered::Listing(l) =
                    keys::ask(&self.dialer, None, false, dial, t).await?
                {
                    return Ok(l.holds.into_iter().map(keys::key_info).collect());
                }
            }
            keys::list_manager(&self.addr, self.manager.as_deref(), dial, t).await
        })
        .await
    }

    /// Best effort, within [`keys::HOLDER_LIMIT`] in all, one attempt each:
    /// Keys for this key on the lock port; from a reference server (`-`),
    /// its manager port with what is left. A port that is refused, filtered
    /// or silent leaves the holder unnamed rather than delaying the answer.
    async fn holder(&self, key: &str) -> Result<Option<super::KeyInfo>> {
        let started = std::time::Instant::now();
        let once = keys::Dial::Once;
        let left = || keys::HOLDER_LIMIT.saturating_sub(started.elapsed());
        self.guarded(|| async {
            if !self.classic_only.load(Ordering::Relaxed) {
                if let keys::Answered::Listing(l) =
                    keys::ask(&self.dialer, Some(key), false, once, left()).await?
                {
                    let hold = l.holds.into_iter().find(|h| h.key == key.as_bytes());
                    return Ok(hold.map(keys::key_info));
                }
            }
            let all = keys::list_manager(&self.addr, self.manager.as_deref(), once, left()).await?;
            Ok(all.into_iter().find(|k| k.key == key))
        })
        .await
    }

    /// Keys with its waiters, on the lock port; a reference server does
    /// not say who waits.
    async fn waiters(&self) -> Result<Option<Vec<WaiterInfo>>> {
        self.guarded(|| async {
            let t = self.connect_timeout;
            let dial = keys::Dial::Retry(t);
            match keys::ask(&self.dialer, None, true, dial, t).await? {
                keys::Answered::Listing(l) => Ok(Some(keys::waiter_infos(l.waiters))),
                keys::Answered::Unknown => Ok(None),
            }
        })
        .await
    }

    async fn reset_source(&self, source: &str) -> Result<()> {
        check_source(source)?;
        self.guarded(|| {
            self.expect_ok(Request::ResetBySource {
                source: source.as_bytes().to_vec(),
            })
        })
        .await
    }
}

impl LcBackend {
    /// A lock: with lc-cli's actions, else (a server that answered `-` to
    /// them) the classic ones.
    async fn acquire_any(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        if !self.classic_only.load(Ordering::Relaxed) {
            if let Some(acquired) = self.acquire_extended(request, &cancel, progress).await? {
                return Ok(acquired);
            }
            self.classic_only.store(true, Ordering::Relaxed);
            if self.verbose && request.mode == LockMode::Exclusive {
                eprintln!(
                    "lc-cli: {} does not know session locks (it answered '-', as a reference Locking-Center server does): holding '{}' the classic way, without loss detection or a fencing token",
                    self.addr, request.key
                );
            }
        }
        // Never a hold that does not expire in place of one that does.
        if let Some(ttl) = request.expire {
            return Err(BackendError::Unsupported {
                server: self.addr.clone(),
                reason: format!(
                    "this server cannot keep holds that expire (asked for --expire {}{})",
                    humantime::format_duration(ttl),
                    address::REFERENCE_CAPS.why
                ),
            });
        }
        // Never an exclusive lock in place of the mode asked for.
        if let Some(reason) = address::REFERENCE_CAPS.refusal("this server", request.mode) {
            return Err(BackendError::Unsupported {
                server: self.addr.clone(),
                reason,
            });
        }
        self.acquire_classic(request, cancel, progress).await
    }

    /// The frame of a request with lc-cli's actions: a session lock (8, 9)
    /// for an exclusive hold of a command, else a mode lock (12 to 15).
    fn extended_frame(request: &LockRequest) -> Request {
        let key = request.key.as_bytes().to_vec();
        let source = request.source.as_bytes().to_vec();
        if let (true, Some(ttl)) = (request.detached, request.expire) {
            return Request::ExpiringLock {
                key,
                source,
                mode: request.mode,
                ttl_ms: ttl.as_millis().min(u64::MAX as u128) as u64,
                wait: !request.nonblock,
            };
        }
        let hold = if request.detached {
            Hold::Kept
        } else {
            Hold::Session
        };
        Request::Lock {
            key,
            source,
            mode: request.mode,
            hold,
            wait: !request.nonblock,
        }
    }

    /// A lock with lc-cli's actions; None if the server does not know them.
    async fn acquire_extended(
        &self,
        request: &LockRequest,
        cancel: &CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Option<Acquired>> {
        let started = std::time::Instant::now();
        let lock = Self::extended_frame(request);
        if request.nonblock {
            let mut stream = self.send(&lock).await?;
            let limit = self.connect_timeout + started.elapsed();
            let answer = tokio::time::timeout(limit, session::read_grant(&mut stream))
                .await
                .map_err(|_| probe::silent(&self.addr, limit))?;
            return self.session_answer(answer, stream, request);
        }
        let mut stream = tokio::select! {
            s = self.send(&lock) => s?,
            _ = cancel.cancelled() => return Ok(Some(Acquired::Cancelled)),
        };
        progress(WaitProgress::default());
        let budget = self.connect_timeout + started.elapsed();
        // Our place in line, at a terminal (the status line shows it).
        let us = stream
            .local_addr()
            .filter(|_| crate::terminal::stderr_is_terminal());
        let answer = tokio::select! {
            e = probe::watch(&self.dialer, probe::PROBE_AFTER.min(budget / 4), budget) => return Err(e),
            never = self.watch_place(&request.key, us, progress) => match never {},
            a = session::read_grant(&mut stream) => a,
            _ = cancel.cancelled() => return self.withdraw_session(stream, &request.key).await.map(Some),
        };
        self.session_answer(answer, stream, request)
    }

    /// Tells `progress` our place in `key`'s line every
    /// [`keys::PLACE_EVERY`], from Keys on a side connection (each within
    /// the connect timeout); `us` is the waiting connection's address, as
    /// the server sees its peer. Never resolves: the wait it decorates
    /// ends it. Without `us`, or once the server does not answer Keys, it
    /// only waits.
    async fn watch_place(
        &self,
        key: &str,
        us: Option<std::net::SocketAddr>,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> std::convert::Infallible {
        if let Some(us) = us {
            let mut shown = None;
            let t = self.connect_timeout;
            loop {
                tokio::time::sleep(keys::PLACE_EVERY).await;
                match keys::ask(&self.dialer, Some(key), true, keys::Dial::Once, t).await {
                    Ok(keys::Answered::Listing(l)) => {
                        let ahead = keys::place_of(&l, key, us);
                        if ahead.is_some() && ahead != shown {
                            shown = ahead;
                            progress(WaitProgress { ahead });
                        }
                    }
                    Ok(keys::Answered::Unknown) => break,
                    // Best effort: the wait itself notices a server gone.
                    Err(_) => {}
                }
            }
        }
        std::future::pending().await
    }

    fn session_answer(
        &self,
        answer: Option<session::Granted>,
        stream: LcStream,
        request: &LockRequest,
    ) -> Result<Option<Acquired>> {
        use session::Granted;
        let key = &request.key;
        match answer {
            // A kept hold's grant carries its token too.
            Some(Granted::Session(token, _)) if request.detached => {
                Ok(Some(Acquired::Held(self.held(key, Some(token)))))
            }
            Some(Granted::Session(token, timeout)) => Ok(Some(Acquired::Held(Box::new(
                session::LcSession::start(self.clone(), key, stream, token, timeout),
            )))),
            Some(Granted::Busy) => Ok(Some(Acquired::Busy)),
            Some(Granted::Conflict(theirs)) => Err(request.mode.conflict(key, theirs)),
            Some(Granted::Unknown) => Ok(None),
            Some(Granted::Lost) => Err(BackendError::Refused {
                server: self.addr.clone(),
                reason: format!(
                    "the wait for '{key}' was withdrawn (a reset by source, or the server could not record the grant)"
                ),
            }),
            Some(Granted::Foreign(bytes)) => Err(probe::foreign(&self.addr, &bytes)),
            Some(Granted::Refused(reason)) => Err(self.unavailable(reason)),
            Some(Granted::NotAllowed(reason)) => Err(self.refused(reason)),
            None => Err(self.unavailable(
                "lost the connection while waiting: the server closed it without an answer",
            )),
        }
    }

    /// Half-closes a waiting session request; a grant that crossed it is
    /// given back under its token.
    async fn withdraw_session(&self, mut stream: LcStream, key: &str) -> Result<Acquired> {
        let _ = stream.shutdown().await;
        let answer = tokio::time::timeout(WITHDRAW_GRACE, session::read_grant(&mut stream)).await;
        drop(stream);
        if let Ok(Some(session::Granted::Session(token, _))) = answer {
            self.release_token(key, token).await?;
        }
        // Not confirmed in time: a grant that comes later goes to a closed
        // connection, and the server frees a session hold whose holder is gone.
        Ok(Acquired::Cancelled)
    }

    async fn acquire_classic(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        let key = request.key.as_bytes().to_vec();
        let source = request.source.as_bytes().to_vec();
        if request.nonblock {
            let try_lock = Request::Lock {
                key,
                source,
                mode: LockMode::Exclusive,
                hold: Hold::Classic,
                wait: false,
            };
            return match self.call(try_lock).await? {
                Answer::Ok => Ok(Acquired::Held(self.held(&request.key, None))),
                Answer::Busy => Ok(Acquired::Busy),
                Answer::Fail => Err(BackendError::Refused {
                    server: self.addr.clone(),
                    reason: format!("TryLock of '{}' answered '-'", request.key),
                }),
            };
        }
        let lock = Request::Lock {
            key,
            source,
            mode: LockMode::Exclusive,
            hold: Hold::Classic,
            wait: true,
        };
        let started = std::time::Instant::now();
        let mut stream = tokio::select! {
            s = self.send(&lock) => s?,
            _ = cancel.cancelled() => return Ok(Acquired::Cancelled),
        };
        progress(WaitProgress::default());
        // No answer for a moment: check on the side that the peer is a lock
        // server at all, within the connect timeout plus a round trip.
        let budget = self.connect_timeout + started.elapsed();
        let answer = tokio::select! {
            e = probe::watch(&self.dialer, probe::PROBE_AFTER.min(budget / 4), budget) => return Err(e),
            a = self.read_answer(&mut stream) => a.map_err(|e| match e {
                BackendError::Unavailable { server, reason } => BackendError::Unavailable {
                    server,
                    reason: format!("lost the connection while waiting: {reason}"),
                },
                other => other,
            })?,
            _ = cancel.cancelled() => return self.withdraw(stream, &request.key).await,
        };
        match answer {
            Answer::Ok => Ok(Acquired::Held(self.held(&request.key, None))),
            Answer::Fail => Err(BackendError::Refused {
                server: self.addr.clone(),
                reason: format!(
                    "the wait for '{}' was withdrawn (a reset by source, or the server could not record the grant)",
                    request.key
                ),
            }),
            Answer::Busy => Err(self.protocol("'#' to a Lock")),
        }
    }

    /// Releases the hold of `key` under `token`, if it is still held
    /// (`#`: not any more, which is as good).
    async fn release_token(&self, key: &str, token: u64) -> Result<()> {
        let release = Request::Release {
            key: key.as_bytes().to_vec(),
            kind: ReleaseKind::Token(token),
        };
        match self.call(release).await? {
            Answer::Ok | Answer::Busy => Ok(()),
            Answer::Fail => Err(BackendError::NotReleased {
                server: self.addr.clone(),
                key: key.to_string(),
                reason: "it answered '-' (it could not record the release; the key is still held)"
                    .to_string(),
            }),
        }
    }

    async fn expect_ok(&self, request: Request) -> Result<()> {
        match self.call(request).await? {
            Answer::Ok => Ok(()),
            other => Err(BackendError::Refused {
                server: self.addr.clone(),
                reason: format!("answered '{}'", other.byte() as char),
            }),
        }
    }

    /// Half-closes the waiting connection so the server withdraws us, then
    /// reads what it says: a `+` that crossed our close means we were granted
    /// the key after all, and must give it back.
    async fn withdraw(&self, mut stream: LcStream, key: &str) -> Result<Acquired> {
        let _ = stream.shutdown().await;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(WITHDRAW_GRACE, stream.read(&mut byte)).await;
        drop(stream);
        match read {
            Ok(Ok(1)) if byte[0] == b'+' => {
                self.unlock_key(key).await?;
            }
            Ok(_) => {}
            Err(_) if self.verbose => eprintln!(
                "lc-cli: {} did not confirm the withdrawal of the wait for '{key}' within {WITHDRAW_GRACE:?}; gave up waiting. If it grants the key to the closed request later, the key stays held: `lc-cli --server {} unlock {key}` clears it",
                self.addr, self.addr
            ),
            Err(_) => {}
        }
        Ok(Acquired::Cancelled)
    }
}

/// A source the protocol cannot carry is the caller's mistake (64), not ours.
fn check_source(source: &str) -> Result<()> {
    proto::check_source(source.as_bytes()).map_err(|e| BackendError::BadSource {
        source_name: source.to_string(),
        reason: e.to_string(),
    })
}

/// A kept hold: it stays until an Unlock or a reset, so there is no loss
/// to notice.
struct LcHeld {
    backend: LcBackend,
    key: String,
    /// The hold's token, where the server gave one (lc-cli's own server).
    token: Option<u64>,
}

#[async_trait]
impl HeldLock for LcHeld {
    async fn lost(&mut self) -> LostReason {
        std::future::pending().await
    }

    async fn release(&mut self) -> Result<()> {
        // Not held any more (an operator reset it): free either way.
        match self.token {
            Some(token) => self.backend.release_token(&self.key, token).await,
            None => self.backend.unlock_key(&self.key).await.map(|_| ()),
        }
    }

    async fn detach(self: Box<Self>, _expire: Option<std::time::Duration>) -> Result<()> {
        Ok(())
    }
}
