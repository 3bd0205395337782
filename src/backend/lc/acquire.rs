//! The acquire paths: lc-cli's own frames (a session for a command, a kept
//! hold, the shared and limited modes, with the place in line while
//! waiting), the classic Lock a reference server takes instead, and the
//! withdrawal of a wait that is cancelled.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::dial::LcStream;
use super::{address, keys, probe, session, LcBackend};
use crate::backend::{Acquired, BackendError, LockMode, LockRequest, Result, WaitProgress};
use crate::proto::{Answer, Hold, Request};

/// How long a cancelled Lock waits for the server to confirm the withdrawal
/// (lc-cli's server closes at once; a reference server may never confirm).
const WITHDRAW_GRACE: Duration = Duration::from_secs(1);

impl LcBackend {
    /// A lock: with lc-cli's actions, else (a server that answered `-` to
    /// them) the classic ones.
    pub(super) async fn acquire_any(
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
    /// for an exclusive hold of a command, else a mode lock (12 to 15);
    /// with fields (issue 44), or a ticket to show again, inside an
    /// ExtendedLock (19).
    fn extended_frame(request: &LockRequest, ticket: Option<u64>) -> Request {
        let lock = Self::lock_frame(request);
        if request.extras.is_empty() && ticket.is_none() {
            return lock;
        }
        let mut fields = request.extras.encode();
        if let Some(t) = ticket {
            fields.push_str(&format!("ticket={t}\n"));
        }
        Request::Extended {
            lock: Box::new(lock),
            fields: fields.into_bytes(),
        }
    }

    fn lock_frame(request: &LockRequest) -> Request {
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
        let lock = Self::extended_frame(request, None);
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
        let mut budget = self.connect_timeout + started.elapsed();
        // Our place in line, handed to us when we joined it (a server
        // that took the feature `queues`).
        let mut ticket = None;
        loop {
            // Our place in line, at a terminal (the status line shows it).
            let us = stream
                .local_addr()
                .filter(|_| crate::terminal::stderr_is_terminal());
            let answer = tokio::select! {
                e = probe::watch(&self.dialer, probe::PROBE_AFTER.min(budget / 4), budget) => return Err(e),
                never = self.watch_place(&request.key, us, progress) => match never {},
                a = session::read_grant_noting(&mut stream, &mut ticket) => a,
                _ = cancel.cancelled() => return self.withdraw_session(stream, &request.key).await.map(Some),
            };
            // The server went away while we waited (a restart): our place
            // is taken back with the ticket, on a new connection, within
            // the connect timeout (issue 44, item 7).
            if let (None, Some(t)) = (&answer, ticket) {
                let rejoin = Self::extended_frame(request, Some(t));
                let again = std::time::Instant::now();
                stream = tokio::select! {
                    s = self.send(&rejoin) => s?,
                    _ = cancel.cancelled() => return Ok(Some(Acquired::Cancelled)),
                };
                budget = self.connect_timeout + again.elapsed();
                if self.verbose {
                    eprintln!(
                        "lc-cli: the connection to {} ended while waiting for '{}': asked again for our place in line (ticket {t})",
                        self.addr, request.key
                    );
                }
                continue;
            }
            return self.session_answer(answer, stream, request);
        }
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
                match keys::ask(
                    &self.dialer,
                    keys::Which::One(key),
                    true,
                    keys::Dial::Once,
                    t,
                )
                .await
                {
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
        // A request with fields that the server did not take: one line.
        if !request.extras.is_empty()
            && matches!(answer, Some(Granted::Unknown) | Some(Granted::Foreign(_)))
        {
            return Err(BackendError::Unsupported {
                server: self.addr.clone(),
                reason: format!(
                    "this server takes no --newest/--order/--cancel-running/--note (asked for {}; it answered '-', as a reference Locking-Center server or an lc-cli serve before deploy queues does)",
                    request.extras.options()
                ),
            });
        }
        match answer {
            Some(Granted::Superseded(by)) => Ok(Some(Acquired::Superseded(super::rival(by)))),
            Some(Granted::Outdated(mark)) => Ok(Some(Acquired::Outdated { mark })),
            Some(Granted::Ticket(_)) => Err(self.protocol("a ticket where an answer was due")),
            // A kept hold's grant carries its token too.
            Some(Granted::Session(g)) if request.detached => {
                Ok(Some(Acquired::Held(self.held(key, Some(g.token), g.slot))))
            }
            Some(Granted::Session(g)) => {
                let grant = session::SessionGrant {
                    token: g.token,
                    timeout: g.timeout,
                    secret: g.secret,
                    slot: g.slot,
                };
                Ok(Some(Acquired::Held(Box::new(session::LcSession::start(
                    self.clone(),
                    key,
                    stream,
                    grant,
                    request.extras.order,
                )))))
            }
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
        if let Ok(Some(session::Granted::Session(g))) = answer {
            self.release_token(key, g.token).await?;
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
                Answer::Ok => Ok(Acquired::Held(self.held(&request.key, None, None))),
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
            Answer::Ok => Ok(Acquired::Held(self.held(&request.key, None, None))),
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
