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
//! - `acquire`: the acquire paths (lc-cli's frames, the classic Lock, the
//!   withdrawal of a cancelled wait); this file keeps the backend, its
//!   requests' plumbing and the other commands.
//! - `dial`: reaching the server, over TCP or TLS; `tls_failure`: a TLS
//!   failure as one line.
//! - `keys`: `keys`, the holder's name and the place in line over the lock
//!   port (lc-cli's Keys, action 17), or the manager port's `KEYX` for a
//!   reference server.
//! - `history`: a key's history (lc-cli's History, action 21).
//! - `probe`: telling a server that does not speak the protocol from one
//!   whose key is just held.
//! - `session`: keeping a session hold, and noticing its loss.

mod acquire;
pub(crate) mod address;
mod dial;
mod history;
mod keys;
mod ping;
mod probe;
mod session;
mod tls_failure;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

pub(crate) use address::LcAddress;
use dial::{Dialer, LcStream};

use super::{
    Acquired, Backend, BackendConfig, BackendError, HeldLock, LockRequest, LostReason, Result,
    WaitProgress, WaiterInfo,
};
use crate::proto::{self, Answer, ReleaseKind, Request};

#[derive(Clone)]
pub(crate) struct LcBackend {
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
    pub(crate) fn new(address: &LcAddress, config: &BackendConfig) -> Result<Self> {
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
                // On a connection without a Hello (it is answered there).
                if let Some(limit) = proto::parse_at_limit(&buf[..n]) {
                    return Err(BackendError::AtLimit {
                        server: self.addr.clone(),
                        limit,
                    });
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
    /// refused, or a connection it closed at one of its connection limits,
    /// is the error, whatever `op` made of the closed connection.
    async fn guarded<'a, T, F, Fut>(&'a self, op: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T>> + 'a,
    {
        let greeting = self.dialer.greeting();
        let hello = greeting.sends_hello();
        // Left by an earlier request (a probe's): not this one's.
        greeting.take_at_limit();
        let mut result = op().await;
        if result.is_err() && hello && !greeting.sends_hello() {
            result = op().await;
        }
        if result.is_err() {
            if let Some(limit) = greeting.take_at_limit() {
                return Err(BackendError::AtLimit {
                    server: self.addr.clone(),
                    limit,
                });
            }
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
                ended: None,
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
            ended: None,
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
    fn held(&self, key: &str, token: Option<u64>, slot: Option<u32>) -> Box<dyn HeldLock> {
        Box::new(LcHeld {
            backend: self.clone(),
            key: key.to_string(),
            token,
            slot,
        })
    }
}

#[async_trait]
impl Backend for LcBackend {
    async fn ping(&self) -> Result<super::ping::PingReport> {
        self.guarded(|| self.ping_server()).await
    }

    /// The feature `group` in the server's Hello answer: one ping (a Hello
    /// and a Ping on a connection of its own) when no Hello was answered.
    async fn grants_together(&self) -> Result<bool> {
        let greeting = self.dialer.greeting();
        if greeting.answer().is_none() && greeting.sends_hello() {
            self.ping().await?;
        }
        Ok(greeting.named(proto::FEATURE_GROUP))
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
        self.keys_under("").await
    }

    /// Listed by the server (a range of its table), or by a server before
    /// listings by prefix in whole and filtered here.
    async fn keys_under(&self, prefix: &str) -> Result<Vec<super::KeyInfo>> {
        self.guarded(|| async {
            let t = self.connect_timeout;
            let dial = keys::Dial::Retry(t);
            if !self.classic_only.load(Ordering::Relaxed) {
                if let keys::Answered::Listing(l) =
                    keys::ask_under(&self.dialer, prefix, false, dial, t).await?
                {
                    return Ok(l.holds.into_iter().map(keys::key_info).collect());
                }
            }
            let mut all = keys::list_manager(&self.addr, self.manager.as_deref(), dial, t).await?;
            all.retain(|k| k.key.starts_with(prefix));
            Ok(all)
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
                    keys::ask(&self.dialer, keys::Which::One(key), false, once, left()).await?
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
        self.waiters_under("").await
    }

    async fn waiters_under(&self, prefix: &str) -> Result<Option<Vec<WaiterInfo>>> {
        self.guarded(|| async {
            let t = self.connect_timeout;
            let dial = keys::Dial::Retry(t);
            match keys::ask_under(&self.dialer, prefix, true, dial, t).await? {
                keys::Answered::Listing(l) => Ok(Some(keys::waiter_infos(l.waiters))),
                keys::Answered::Unknown => Ok(None),
            }
        })
        .await
    }

    async fn history(&self, key: &str, limit: usize) -> Result<Vec<super::history::HistoryEntry>> {
        self.guarded(|| self.read_history(key, limit)).await
    }

    async fn mark(&self, key: &str) -> Result<Option<u64>> {
        self.guarded(|| self.mark_call(key, false)).await
    }

    async fn clear_mark(&self, key: &str) -> Result<bool> {
        self.guarded(|| self.mark_call(key, true))
            .await
            .map(|had| had.is_some())
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
    /// Releases the hold of `key` under `token`, if it is still held
    /// (`#`: not any more, which is as good).
    async fn release_token(&self, key: &str, token: u64) -> Result<()> {
        let release = Request::Release {
            key: key.as_bytes().to_vec(),
            kind: ReleaseKind::Token(token),
            ended: None,
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

    /// Mark (action 20): the key's mark, read or cleared (the mark it had).
    async fn mark_call(&self, key: &str, clear: bool) -> Result<Option<u64>> {
        let request = Request::Mark {
            key: key.as_bytes().to_vec(),
            clear,
        };
        let started = std::time::Instant::now();
        let mut stream = self.send(&request).await?;
        let limit = self.connect_timeout + started.elapsed();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(limit, stream.read_to_end(&mut buf)).await;
        if read.is_err() {
            return Err(probe::silent(&self.addr, limit));
        }
        if let Some(reason) = proto::parse_not_allowed(&buf) {
            return Err(self.refused(reason));
        }
        match buf.as_slice() {
            [b'#'] => Ok(None),
            [b'-'] if clear => Err(self.refused(format!(
                "the clear of the mark of '{key}' could not be recorded, or this server keeps no marks (it answered '-')"
            ))),
            [b'-'] | [] => Err(BackendError::Unsupported {
                server: self.addr.clone(),
                reason: "this server keeps no marks (it answered '-', as a reference Locking-Center server or an lc-cli serve before deploy queues does)".into(),
            }),
            bytes => match proto::parse_u64(bytes, b'+') {
                Some(m) => Ok(Some(m)),
                None => Err(probe::foreign(&self.addr, bytes)),
            },
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
}

/// A request the server named (superseded us, or asks our hold to stop).
fn rival(r: proto::RivalWire) -> super::Rival {
    super::Rival {
        source: String::from_utf8_lossy(&r.source).into_owned(),
        identity: (!r.identity.is_empty())
            .then(|| String::from_utf8_lossy(&r.identity).into_owned()),
        fields: super::fields::FieldList::parse(&r.fields).unwrap_or_default(),
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
    /// Its slot, where the server told one (`--limit N`, feature `slots`).
    slot: Option<u32>,
}

#[async_trait]
impl HeldLock for LcHeld {
    fn slot(&self) -> Option<u32> {
        self.slot
    }

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
