//! The Locking-Center protocol client: one TCP connection per request.
//!
//! Lock waits by keeping its connection open; closing it withdraws the request
//! from the server's queue. A hold is not tied to a connection: the key stays
//! held until an Unlock or a reset, so there is no lease to lose.
//!
//! - `keys`: `keys` over the manager port (lc-cli's `KEYX`).
//! - `probe`: telling a server that does not speak the protocol from one
//!   whose key is just held.

mod keys;
mod probe;

use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::{
    Acquired, Backend, BackendConfig, BackendError, HeldLock, LockRequest, LostReason, Result,
    ServerSpec, WaitProgress,
};
use crate::proto::{self, Answer, Request};

/// How long a cancelled Lock waits for the server to confirm the withdrawal.
const WITHDRAW_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct LcBackend {
    addr: String,
    manager: Option<String>,
    connect_timeout: Duration,
}

impl LcBackend {
    pub fn new(config: &BackendConfig) -> Self {
        let ServerSpec::Lc { addr, manager } = &config.server else {
            unreachable!("LcBackend built for {}", config.server)
        };
        LcBackend {
            addr: addr.clone(),
            manager: manager.clone(),
            connect_timeout: config.connect_timeout,
        }
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
    async fn send(&self, request: &Request) -> Result<TcpStream> {
        let frame = proto::encode(request).map_err(|e| BackendError::Other(e.to_string()))?;
        let mut stream = super::tcp::connect(&self.addr, self.connect_timeout)
            .await
            .map_err(|e| self.unavailable(e))?;
        stream.set_nodelay(true).ok();
        stream
            .write_all(&frame)
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(stream)
    }

    /// The answer byte; more than one byte, or another byte, is a peer that
    /// does not speak the protocol (see `probe.rs`).
    async fn read_answer(&self, stream: &mut TcpStream) -> Result<Answer> {
        let mut buf = [0u8; 48];
        match stream.read(&mut buf).await {
            Ok(0) => Err(self.unavailable("the server closed the connection without an answer")),
            Ok(n) => match probe::classify(&buf[..n]) {
                probe::Reply::Answer(a) => Ok(a),
                probe::Reply::Foreign(bytes) => Err(probe::foreign(&self.addr, &bytes)),
            },
            Err(e) => Err(self.unavailable(e)),
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
            })
            .await?
        {
            Answer::Ok => return Ok(true),
            Answer::Busy => return Ok(false),
            Answer::Fail => {}
        }
        match self.call(Request::Unlock { key: key_bytes }).await? {
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

    fn held(&self, key: &str) -> Box<dyn HeldLock> {
        Box::new(LcHeld {
            backend: self.clone(),
            key: key.to_string(),
        })
    }
}

#[async_trait]
impl Backend for LcBackend {
    fn check_key(&self, key: &str) -> Result<()> {
        super::check_key_limits(key)
    }

    async fn acquire(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        self.check_key(&request.key)?;
        check_source(&request.source)?;
        // The one spot that tells the built-in protocol's modes apart.
        request
            .mode
            .exclusive_only(&self.addr, "this server (the built-in protocol)")?;
        let key = request.key.as_bytes().to_vec();
        let source = request.source.as_bytes().to_vec();
        if request.nonblock {
            return match self.call(Request::TryLock { key, source }).await? {
                Answer::Ok => Ok(Acquired::Held(self.held(&request.key))),
                Answer::Busy => Ok(Acquired::Busy),
                Answer::Fail => Err(BackendError::Refused {
                    server: self.addr.clone(),
                    reason: format!("TryLock of '{}' answered '-'", request.key),
                }),
            };
        }
        let lock = Request::Lock { key, source };
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
            e = probe::watch(&self.addr, probe::PROBE_AFTER.min(budget / 4), budget) => return Err(e),
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
            Answer::Ok => Ok(Acquired::Held(self.held(&request.key))),
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

    async fn unlock(&self, key: &str) -> Result<bool> {
        self.check_key(key)?;
        self.unlock_key(key).await
    }

    async fn reset_key(&self, key: &str) -> Result<()> {
        self.check_key(key)?;
        self.expect_ok(Request::ResetByKey {
            key: key.as_bytes().to_vec(),
        })
        .await
    }

    async fn keys(&self) -> Result<Vec<super::KeyInfo>> {
        keys::list(&self.addr, self.manager.as_deref(), self.connect_timeout).await
    }

    async fn reset_source(&self, source: &str) -> Result<()> {
        check_source(source)?;
        self.expect_ok(Request::ResetBySource {
            source: source.as_bytes().to_vec(),
        })
        .await
    }
}

impl LcBackend {
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
    async fn withdraw(&self, mut stream: TcpStream, key: &str) -> Result<Acquired> {
        let _ = stream.shutdown().await;
        let mut byte = [0u8; 1];
        let granted = matches!(
            tokio::time::timeout(WITHDRAW_GRACE, stream.read(&mut byte)).await,
            Ok(Ok(1)) if byte[0] == b'+'
        );
        drop(stream);
        if granted {
            self.unlock_key(key).await?;
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

struct LcHeld {
    backend: LcBackend,
    key: String,
}

#[async_trait]
impl HeldLock for LcHeld {
    async fn lost(&mut self) -> LostReason {
        std::future::pending().await
    }

    async fn release(&mut self) -> Result<()> {
        // Not held any more (an operator reset it): free either way.
        self.backend.unlock_key(&self.key).await.map(|_| ())
    }

    async fn detach(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
