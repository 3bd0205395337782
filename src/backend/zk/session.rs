//! One ZooKeeper session: requests with retries on connection loss, error
//! mapping, and a close that waits until the server has ended the session
//! (only then are our ephemeral nodes gone for sure).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use zookeeper_client as zk;

use crate::backend::{BackendError, Result};

/// How long a close waits for the server to confirm.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

pub struct Session {
    /// None once closed: dropping the last `Client` is what sends the
    /// CloseSession request.
    client: Mutex<Option<zk::Client>>,
    state: zk::StateWatcher,
    /// For messages: `zk://hosts/root`.
    pub server: String,
    /// Operations that fail with a connection loss are retried this long
    /// (the session survives a loss shorter than its timeout).
    pub retry_for: Duration,
    /// When we last saw the connection drop, while it stays down.
    disconnected_since: Mutex<Option<Instant>>,
}

/// Why the session can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Expired,
    Closed,
    /// Disconnected for longer than the session timeout: the server has
    /// expired the session by now even if we cannot hear it say so.
    Silent,
}

impl Session {
    pub async fn connect(
        hosts: &[String],
        server: String,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Session> {
        let connector = zk::Client::connector()
            .with_session_timeout(session_timeout)
            .with_connection_timeout(connect_timeout.min(session_timeout));
        let cluster = hosts.join(",");
        let client = match tokio::time::timeout(connect_timeout, connector.connect(&cluster)).await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(BackendError::Unavailable {
                    server,
                    reason: e.to_string(),
                })
            }
            Err(_) => {
                return Err(BackendError::Unavailable {
                    server,
                    reason: format!("no ZooKeeper session within {connect_timeout:?}"),
                })
            }
        };
        let state = client.state_watcher();
        let retry_for = client.session_timeout();
        Ok(Session {
            client: Mutex::new(Some(client)),
            state,
            server,
            retry_for,
            disconnected_since: Mutex::new(None),
        })
    }

    /// A handle for requests; an error once the session is closed.
    pub fn client(&self) -> Result<zk::Client> {
        self.client
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| BackendError::Other(format!("the session to {} is closed", self.server)))
    }

    pub fn is_expired(&self) -> bool {
        self.state.peek_state() == zk::SessionState::Expired
    }

    /// Resolves when the session is over: expired, closed, or disconnected
    /// for longer than the session timeout. A disconnection that recovers
    /// sooner is not an end. Cancel-safe: the start of a disconnection is
    /// remembered across calls.
    pub async fn until_gone(&self) -> Gone {
        let mut watcher = self.state.clone();
        loop {
            let state = watcher.state();
            let deadline = match state {
                zk::SessionState::Expired => return Gone::Expired,
                zk::SessionState::Closed | zk::SessionState::AuthFailed => return Gone::Closed,
                zk::SessionState::Disconnected => {
                    let mut since = self.disconnected_since.lock().unwrap();
                    Some(*since.get_or_insert_with(Instant::now) + self.retry_for)
                }
                _ => {
                    *self.disconnected_since.lock().unwrap() = None;
                    None
                }
            };
            tokio::select! {
                _ = watcher.changed() => {}
                _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    return Gone::Silent
                }
            }
        }
    }

    /// Ends the session and waits (boundedly) until the server confirmed it,
    /// so our ephemeral nodes are gone when this returns. Safe to call again.
    pub async fn close(&self) {
        let client = self.client.lock().unwrap().take();
        let Some(client) = client else { return };
        drop(client);
        let mut state = self.state.clone();
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            loop {
                if state.state().is_terminated() {
                    return;
                }
                state.changed().await;
            }
        })
        .await;
    }

    /// Runs `op` again while it fails with a connection loss, for at most
    /// `retry_for`.
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> std::result::Result<T, zk::Error>
    where
        F: FnMut(zk::Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, zk::Error>>,
    {
        let deadline = Instant::now() + self.retry_for;
        let mut delay = Duration::from_millis(20);
        loop {
            let client = match self.client() {
                Ok(c) => c,
                Err(_) => return Err(zk::Error::ClientClosed),
            };
            match op(client).await {
                Err(zk::Error::ConnectionLoss) if Instant::now() < deadline => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    /// A ZooKeeper error as a backend error, naming what we were doing.
    pub fn error(&self, doing: &str, e: zk::Error) -> BackendError {
        let reason = format!("{doing}: {e}");
        let server = self.server.clone();
        match e {
            zk::Error::ConnectionLoss
            | zk::Error::SessionExpired
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::ClientClosed
            | zk::Error::SessionMoved => BackendError::Unavailable { server, reason },
            zk::Error::NoAuth
            | zk::Error::AuthFailed
            | zk::Error::InvalidAcl
            | zk::Error::QuotaExceeded
            | zk::Error::Throttled
            | zk::Error::NotReadOnly
            | zk::Error::NoChildrenForEphemerals => BackendError::Refused { server, reason },
            _ => BackendError::Protocol { server, reason },
        }
    }
}
