//! The Locking-Center protocol client: one TCP connection per request.
//!
//! Lock waits by keeping its connection open; closing it withdraws the request
//! from the server's queue. A hold is not tied to a connection: the key stays
//! held until an Unlock or a reset, so there is no lease to lose.

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

/// How long the server may take to answer a request that does not wait
/// (TryLock, Unlock, the resets): it answers at once when it is alive.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct LcBackend {
    addr: String,
    connect_timeout: Duration,
}

impl LcBackend {
    pub fn new(config: &BackendConfig) -> Self {
        let ServerSpec::Lc { addr } = &config.server else {
            unreachable!("LcBackend built for {}", config.server)
        };
        LcBackend {
            addr: addr.clone(),
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

    async fn read_answer(&self, stream: &mut TcpStream) -> Result<Answer> {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(0) => Err(self.unavailable("the server closed the connection without an answer")),
            Ok(_) => Answer::from_byte(byte[0])
                .ok_or_else(|| self.protocol(format!("unknown answer byte 0x{:02x}", byte[0]))),
            Err(e) => Err(self.unavailable(e)),
        }
    }

    /// One request, one answer, for the short actions.
    async fn call(&self, request: Request) -> Result<Answer> {
        let mut stream = self.send(&request).await?;
        tokio::time::timeout(ANSWER_TIMEOUT, self.read_answer(&mut stream))
            .await
            .map_err(|_| self.unavailable(format!("no answer within {ANSWER_TIMEOUT:?}")))?
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
        proto::check_source(request.source.as_bytes())
            .map_err(|e| BackendError::Other(e.to_string()))?;
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
        let mut stream = tokio::select! {
            s = self.send(&lock) => s?,
            _ = cancel.cancelled() => return Ok(Acquired::Cancelled),
        };
        progress(WaitProgress::default());
        let answer = tokio::select! {
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
        super::lc_keys::list(&self.addr, self.connect_timeout).await
    }

    async fn reset_source(&self, source: &str) -> Result<()> {
        proto::check_source(source.as_bytes()).map_err(|e| BackendError::Other(e.to_string()))?;
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
