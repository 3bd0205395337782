//! One ZooKeeper session: requests with retries on connection loss, error
//! mapping, a heartbeat that tells when the server last answered, a delete
//! that returns only once the server confirmed the node gone (reattaching
//! to the session if the client library gave up on it), and a close.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use zookeeper_client as zk;

use super::address::PASSWORD_ENV as ZK_PASSWORD_ENV;
use crate::backend::secret::Access;
use crate::backend::{BackendError, Result};

/// How long a close waits for the server to confirm.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// A heartbeat request goes out every this fraction of the session
/// timeout, so a healthy session's last contact is never older than about
/// a quarter of it.
const HEARTBEATS_PER_SESSION: u32 = 4;

pub(super) struct Session {
    /// None once closed: dropping the last `Client` is what sends the
    /// CloseSession request.
    client: Arc<Mutex<Option<zk::Client>>>,
    state: zk::StateWatcher,
    /// What it takes to reattach to this session (`delete_confirmed`).
    reattach: Reattach,
    /// For messages: `zk://hosts/root`.
    pub server: String,
    /// The negotiated session timeout. Operations that fail with a
    /// connection loss are retried this long (the session survives a loss
    /// shorter than its timeout).
    pub retry_for: Duration,
    contact: Arc<Contact>,
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    /// The ACL of every node we create: open to all without credentials
    /// (Curator's default, so its clients share the queue); with them, all
    /// rights for our identity and read for the world, so anyone can list
    /// and watch the queue but only that identity can join or delete it.
    pub acls: zk::Acls<'static>,
}

/// The session's id and password and how we reached the ensemble: enough
/// to ask the server, with a new connection, whether the session lives.
struct Reattach {
    info: zk::SessionInfo,
    cluster: String,
    digest: Option<Vec<u8>>,
    connect_timeout: Duration,
}

/// Digest identity: every right; everyone else: read (list, watch, `keys`).
static CREATOR_ALL_ANYONE_READ: [zk::Acl; 2] = [
    zk::Acl::new_const(zk::Permission::ALL, "auth", ""),
    zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
];

/// When we last heard the server, as the send time of the latest request
/// it answered: the server had heard from us by then, so it cannot have
/// started its expiry clock earlier. zookeeper-client does not tell when
/// its own pings were answered, hence our heartbeat.
struct Contact(Mutex<Instant>);

impl Contact {
    fn heard(&self, sent: Instant) {
        let mut last = self.0.lock().unwrap();
        *last = (*last).max(sent);
    }

    fn last(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

/// An answer from the server: a result or one of its error codes. Errors
/// the client library makes up (a connection it gave up on fails every
/// request in flight with its own message) are not.
fn answered<T>(r: &std::result::Result<T, zk::Error>) -> bool {
    matches!(
        r,
        Ok(_)
            | Err(zk::Error::NoNode
                | zk::Error::NodeExists
                | zk::Error::NotEmpty
                | zk::Error::BadVersion
                | zk::Error::NoChildrenForEphemerals
                | zk::Error::NoAuth
                | zk::Error::InvalidAcl
                | zk::Error::QuotaExceeded
                | zk::Error::Throttled
                | zk::Error::NotReadOnly
                | zk::Error::NoWatcher
                | zk::Error::ReconfigDisabled
                | zk::Error::UnexpectedErrorCode(_))
    )
}

/// The connection under the request broke before its answer came: the
/// library's own `ConnectionLoss` (an end of stream), or an I/O error on
/// the socket (a reset by a server that died, "no response from
/// connection"), which it hands every request in flight as a `Custom`
/// error. Either way the session lives on and the library reconnects: the
/// request is worth sending again within the session timeout.
pub(super) fn connection_lost(e: &zk::Error) -> bool {
    matches!(e, zk::Error::ConnectionLoss | zk::Error::Custom(_))
}

/// Sends a cheap read (`exists /`) every `every` and records its send time
/// when it is answered. Holds a client only while a request is out, so the
/// session still closes when the last other handle is dropped.
async fn heartbeat(client: Arc<Mutex<Option<zk::Client>>>, contact: Arc<Contact>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(c) = client.lock().unwrap().clone() else {
            return;
        };
        let sent = Instant::now();
        if let Ok(r) = tokio::time::timeout(every, c.check_stat("/")).await {
            if answered(&r) {
                contact.heard(sent);
            }
        }
    }
}

/// Connects, trying again while the ensemble cannot be reached (refused,
/// or no session within the library's own deadline, the session timeout)
/// with a short backoff, for up to `connect_timeout`. Returns the client
/// and when the successful attempt began (the server's clock for the new
/// session starts after that).
async fn connect_until(
    cluster: &str,
    server: &str,
    digest: Option<&[u8]>,
    session_timeout: Duration,
    connect_timeout: Duration,
) -> Result<(zk::Client, Instant)> {
    let deadline = Instant::now() + connect_timeout;
    let mut delay = Duration::from_millis(50);
    loop {
        let asked = Instant::now();
        let mut connector = zk::Client::connector();
        connector = connector
            .with_session_timeout(session_timeout)
            .with_connection_timeout(connect_timeout.min(session_timeout));
        if let Some(digest) = digest {
            connector = connector.with_auth("digest", digest);
        }
        let attempt = connector.connect(cluster);
        let failure = match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(client)) => return Ok((client, asked)),
            Ok(Err(
                e @ (zk::Error::NoHosts
                | zk::Error::Timeout
                | zk::Error::ConnectionLoss
                | zk::Error::Custom(_)),
            )) => e.to_string(),
            Ok(Err(e)) => {
                return Err(BackendError::Unavailable {
                    server: server.to_string(),
                    reason: e.to_string(),
                })
            }
            Err(_) => "no answer".to_string(),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(BackendError::Unavailable {
                server: server.to_string(),
                reason: format!("no ZooKeeper session within {connect_timeout:?} ({failure})"),
            });
        }
        tokio::time::sleep(delay.min(left)).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// A one-shot watch on our own node: fires when it is deleted (a reset) or
/// the session expires.
pub(super) type OwnWatch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// Why the session can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SessionEnd {
    Expired,
    Closed,
    /// No contact for longer than the session timeout: the server has
    /// expired the session by now even if we cannot hear it say so.
    Silent,
}

impl Session {
    pub(super) async fn connect(
        hosts: &[String],
        server: String,
        access: &Access,
        session_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Session> {
        let cluster = hosts.join(",");
        // `digest` is `USER:PASSWORD`, as zkCli's `addauth digest` takes it.
        let digest = match (&access.user, &access.password) {
            (Some(user), Some(password)) => Some(format!("{user}:{}", password.expose())),
            _ => None,
        };
        let acls = match digest {
            Some(_) => zk::Acls::new(&CREATOR_ALL_ANYONE_READ),
            None => zk::Acls::anyone_all(),
        };
        let (client, asked) = connect_until(
            &cluster,
            &server,
            digest.as_deref().map(str::as_bytes),
            session_timeout,
            connect_timeout,
        )
        .await?;
        let state = client.state_watcher();
        let retry_for = client.session_timeout();
        let reattach = Reattach {
            info: client.session().clone(),
            cluster,
            digest: digest.map(String::into_bytes),
            connect_timeout,
        };
        let client = Arc::new(Mutex::new(Some(client)));
        let contact = Arc::new(Contact(Mutex::new(asked)));
        let beat = tokio::spawn(heartbeat(
            client.clone(),
            contact.clone(),
            retry_for / HEARTBEATS_PER_SESSION,
        ));
        Ok(Session {
            client,
            state,
            reattach,
            server,
            retry_for,
            contact,
            heartbeat: Mutex::new(Some(beat)),
            acls,
        })
    }

    /// The send time of the latest request the server answered (see
    /// [`Contact`]).
    pub(super) fn last_contact(&self) -> Instant {
        self.contact.last()
    }

    /// A handle for requests; an error once the session is closed.
    pub(super) fn client(&self) -> Result<zk::Client> {
        self.client
            .lock()
            .unwrap()
            .clone()
            .ok_or_else(|| BackendError::Other(format!("the session to {} is closed", self.server)))
    }

    pub(super) fn is_expired(&self) -> bool {
        self.state.peek_state() == zk::SessionState::Expired
    }

    /// Resolves when the session is over: expired, closed, or no contact
    /// for longer than the session timeout. Cancel-safe.
    pub(super) async fn until_gone(&self) -> SessionEnd {
        let mut watcher = self.state.clone();
        loop {
            match watcher.state() {
                zk::SessionState::Expired => return SessionEnd::Expired,
                zk::SessionState::Closed | zk::SessionState::AuthFailed => {
                    return SessionEnd::Closed
                }
                _ => {}
            }
            let deadline = self.last_contact() + self.retry_for;
            if Instant::now() >= deadline {
                return SessionEnd::Silent;
            }
            tokio::select! {
                _ = watcher.changed() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Deletes `node`; Ok only once the server confirmed that it is gone:
    /// deleted now, absent, or taken with our session, which the server
    /// says has expired or closed. The client library's own "expired" (it
    /// gives up 1.4 session timeouts after its last reply) is no such word:
    /// a server restarted from its dataDir brings the session and the node
    /// back. Then (or once closed) the session is asked for again on a new
    /// connection. Unconfirmed: `Unavailable`, worth another attempt.
    pub(super) async fn delete_confirmed(&self, node: &str) -> Result<()> {
        match self
            .retry(|c| async move { c.delete(node, None).await })
            .await
        {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => {
                self.delete_reattached(node).await
            }
            Err(e) => Err(self.error(&format!("deleting {node}"), e)),
        }
    }

    /// Reattaches to our session (its id and password) and deletes `node`
    /// there. The answer "no such session" is the server's word that the
    /// session, and with it our ephemeral node, is gone. Only called once
    /// our own client has given up, so two clients never share the session.
    async fn delete_reattached(&self, node: &str) -> Result<()> {
        let r = &self.reattach;
        let unconfirmed = |why: String| BackendError::Unavailable {
            server: self.server.clone(),
            reason: format!("deleting {node}: not confirmed by ZooKeeper ({why})"),
        };
        let mut connector = zk::Client::connector()
            .with_session(r.info.clone())
            .with_session_timeout(self.retry_for)
            .with_connection_timeout(r.connect_timeout.min(self.retry_for));
        if let Some(digest) = &r.digest {
            connector = connector.with_auth("digest", digest);
        }
        let client = match tokio::time::timeout(self.retry_for, connector.connect(&r.cluster)).await
        {
            Ok(Ok(client)) => client,
            Ok(Err(zk::Error::SessionExpired)) => return Ok(()),
            Ok(Err(e)) => return Err(unconfirmed(e.to_string())),
            Err(_) => return Err(unconfirmed("no session".into())),
        };
        let deleted = tokio::time::timeout(self.retry_for, client.delete(node, None)).await;
        let mut state = client.state_watcher();
        drop(client);
        // The node is what matters; the close of this second handle is
        // waited for only briefly.
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            while !state.state().is_terminated() {
                state.changed().await;
            }
        })
        .await;
        match deleted {
            // (An expiry here is asked about again by the next attempt.)
            Ok(Ok(()) | Err(zk::Error::NoNode)) => Ok(()),
            Ok(Err(e)) => Err(match self.error(&format!("deleting {node}"), e) {
                BackendError::Unavailable { reason, .. } => unconfirmed(reason),
                other => other,
            }),
            Err(_) => Err(unconfirmed("no answer".into())),
        }
    }

    /// Ends the session and waits (boundedly) until it is over. Best effort:
    /// the library cannot tell the server's confirmation from its own
    /// timeout, so whoever needs a node gone confirms that with
    /// `delete_confirmed` first. Safe to call again.
    pub(super) async fn close(&self) {
        let beat = self.heartbeat.lock().unwrap().take();
        if let Some(beat) = beat {
            // Its request in flight holds a client: gone before ours is dropped.
            beat.abort();
            let _ = beat.await;
        }
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

    /// Runs `op` again while it fails with a connection loss
    /// ([`connection_lost`]), for at most `retry_for`.
    pub(super) async fn retry<T, F, Fut>(&self, mut op: F) -> std::result::Result<T, zk::Error>
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
            let sent = Instant::now();
            let r = op(client).await;
            if answered(&r) {
                self.contact.heard(sent);
            }
            match r {
                Err(e) if connection_lost(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    /// Arms the watch on our own node; None when the node is already gone.
    pub(super) async fn watch_own(&self, node: &str) -> Result<Option<(zk::Stat, OwnWatch)>> {
        match self
            .retry(|c| async move { c.check_and_watch_stat(node).await })
            .await
        {
            Ok((Some(stat), watch)) => Ok(Some((stat, Box::pin(watch.changed())))),
            // An existence watch on a missing node waits for its creation:
            // dropping it removes it.
            Ok((None, _)) => Ok(None),
            Err(e) => Err(self.error(&format!("watching {node}"), e)),
        }
    }

    /// A ZooKeeper error as a backend error, naming what we were doing.
    pub(super) fn error(&self, doing: &str, e: zk::Error) -> BackendError {
        let reason = match e {
            zk::Error::NoAuth => format!(
                "{doing}: not allowed by the node's ACL (its lock nodes belong to another \
                 identity: give it as zk://USER:PASSWORD@HOSTS or {ZK_PASSWORD_ENV})"
            ),
            _ => format!("{doing}: {e}"),
        };
        let server = self.server.clone();
        match e {
            zk::Error::ConnectionLoss
            | zk::Error::Custom(_)
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

impl Drop for Session {
    fn drop(&mut self) {
        // The heartbeat owns a handle to the client: without this, a
        // session dropped unclosed would live on.
        if let Some(beat) = self.heartbeat.get_mut().unwrap().take() {
            beat.abort();
        }
    }
}
