//! One connection to PostgreSQL: the options that bound how long a dead
//! peer goes unnoticed on either side, the task that drives it, and the
//! news of its end.

use std::time::Duration;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use std::sync::Arc;
use tokio::net::TcpStream;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, NoTls};

use super::address::{password_for, PgAddress, SslMode};
use crate::backend::{tcp, BackendError, Result};

pub(super) struct Session {
    pub client: tokio_postgres::Client,
    /// Some(why) once the connection has ended.
    ended: watch::Receiver<Option<String>>,
    /// Woken by each notification the server sends (a `LISTEN` of ours).
    notified: Arc<Notify>,
    /// The cancel notices received (`queue.rs`): channel and payload.
    notes: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    /// The displayed address, for errors.
    pub server: String,
    host_port: String,
    connect_timeout: Duration,
    /// A copy of the connection's socket, for the guardian.
    socket: OwnedFd,
}

/// `HOST:PORT`, an IPv6 address in brackets, as `tcp::connect` takes it.
fn host_port(a: &PgAddress) -> String {
    if a.host.contains(':') {
        format!("[{}]:{}", a.host, a.port)
    } else {
        format!("{}:{}", a.host, a.port)
    }
}

/// Our side's bounds on a dead peer (noticed while we wait in its queue),
/// as tokio-postgres sets them on a socket of its own; and a copy of the
/// socket.
fn tune(stream: &TcpStream, keepalive: Duration) -> std::io::Result<OwnedFd> {
    stream.set_nodelay(true)?;
    let half = keepalive / 2;
    let set = |level: i32, name: i32, value: i32| -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: an int option, read from a live int for the call.
        let r = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                level,
                name,
                (&value as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(half) as i32)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)?;
    set(
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        half.as_millis() as i32,
    )?;
    // CLOEXEC, as every descriptor of ours: only the guardian gets a copy.
    stream.as_fd().try_clone_to_owned()
}

/// Whole seconds, at least one, as the server's settings take them.
fn secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}

/// The server-side settings of our session, sent in the startup packet
/// (all settable by any user, PostgreSQL 14 or newer):
/// - TCP keepalives and `tcp_user_timeout` of `keepalive`: the server drops
///   the session, and frees its locks, no sooner than `keepalive` after it
///   last heard from us, and soon after when our machine is gone;
/// - `client_connection_check_interval`: a waiter whose client died leaves
///   the queue within a second, instead of being granted the key first.
fn server_options(keepalive: Duration) -> String {
    let k = secs(keepalive);
    format!(
        "-c tcp_keepalives_idle={k} -c tcp_keepalives_interval={} -c tcp_keepalives_count=3 \
         -c tcp_user_timeout={} -c client_connection_check_interval=1000",
        (k / 5).max(1),
        k * 1000
    )
}

/// The most cancel notices kept unread (a holder reads the first).
const MAX_NOTES: usize = 16;

/// The first pause before trying again a server that is starting up; it
/// doubles up to the last (the refused connection's rule, in `tcp`).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_millis(500);

impl Session {
    /// Connects within `connect_timeout`: a refused connection (a server
    /// not up yet, restarting) and a server still starting up are tried
    /// again, as every backend does; a refusal of the server's (password,
    /// database) is not.
    pub(super) async fn open(
        a: &PgAddress,
        app: &str,
        connect_timeout: Duration,
    ) -> Result<Session> {
        let server = a.to_string();
        let mut c = tokio_postgres::Config::new();
        c.user(&a.user)
            .dbname(&a.db)
            .host(&a.host)
            .port(a.port)
            .application_name(app)
            .options(server_options(a.keepalive));
        if let Some(pw) = password_for(a) {
            c.password(pw);
        }
        c.ssl_mode(match a.sslmode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
        });
        let mut tls = super::tls::connector(a).map_err(|reason| BackendError::Unavailable {
            server: server.clone(),
            reason,
        })?;
        let deadline = Instant::now() + connect_timeout;
        let mut backoff = FIRST_BACKOFF;
        let (client, connection, socket) = loop {
            let left = match backoff {
                FIRST_BACKOFF => connect_timeout,
                _ => deadline.saturating_duration_since(Instant::now()),
            };
            let stream = tcp::connect(&host_port(a), left).await.map_err(|reason| {
                BackendError::Unavailable {
                    server: server.clone(),
                    reason,
                }
            })?;
            let socket = tune(&stream, a.keepalive).map_err(|e| BackendError::Unavailable {
                server: server.clone(),
                reason: format!("setting up the connection: {e}"),
            })?;
            let tls = match MakeTlsConnect::<TcpStream>::make_tls_connect(&mut tls, &a.host) {
                Ok(t) => t,
                Err(never) => match never {},
            };
            let error = match tokio::time::timeout_at(deadline, c.connect_raw(stream, tls)).await {
                Err(_) => {
                    return Err(BackendError::Unavailable {
                        server,
                        reason: format!("no connection within {connect_timeout:?}"),
                    })
                }
                Ok(Ok((client, connection))) => break (client, connection, socket),
                Ok(Err(e)) => e,
            };
            let starting = error.code() == Some(&SqlState::CANNOT_CONNECT_NOW);
            if !starting || Instant::now() + backoff >= deadline {
                return Err(connect_error(&server, a, error));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        let (tx, ended) = watch::channel(None);
        let notified = Arc::new(Notify::new());
        let wake = notified.clone();
        let notes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = notes.clone();
        tokio::spawn(async move {
            let mut connection = connection;
            let why = loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        if n.channel().starts_with(super::queue::CANCEL_CHANNEL) {
                            let mut notes = kept.lock().unwrap();
                            if notes.len() < MAX_NOTES {
                                notes.push((n.channel().to_string(), n.payload().to_string()));
                            }
                        }
                        wake.notify_one()
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break describe(&e),
                    None => break "the server closed the connection".to_string(),
                }
            };
            let _ = tx.send(Some(why));
        });
        Ok(Session {
            client,
            ended,
            notified,
            notes,
            server,
            host_port: host_port(a),
            connect_timeout,
            socket,
        })
    }

    /// Asks the server to cancel the running query, on a new connection.
    pub(super) async fn cancel(&self) -> Result<()> {
        let unavailable = |reason: String| BackendError::Unavailable {
            server: self.server.clone(),
            reason,
        };
        let stream = tcp::connect(&self.host_port, self.connect_timeout)
            .await
            .map_err(unavailable)?;
        self.client
            .cancel_token()
            .cancel_query_raw(stream, NoTls)
            .await
            .map_err(|e| unavailable(describe(&e)))
    }

    /// The connection's socket (a copy of it), whose end ends the session.
    pub(super) fn socket(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Resolves when the connection has ended, with why.
    pub(super) async fn ended(&self) -> String {
        let mut rx = self.ended.clone();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => "the connection task ended".into(),
        };
        why
    }

    /// Resolves at the next notification (or at once if one came since
    /// the last call).
    pub(super) async fn notified(&self) {
        self.notified.notified().await
    }

    /// The payloads of the notices received on `channel` so far, taken.
    pub(super) fn take_notes(&self, channel: &str) -> Vec<String> {
        let mut notes = self.notes.lock().unwrap();
        let (ours, others) = notes.drain(..).partition(|(c, _)| c == channel);
        *notes = others;
        ours.into_iter().map(|(_, p)| p).collect()
    }

    pub(super) fn is_ended(&self) -> bool {
        self.ended.borrow().is_some() || self.client.is_closed()
    }

    /// A query's error as a backend error: the connection's loss is
    /// Unavailable, anything the server said is Refused.
    pub(super) fn error(&self, doing: &str, e: tokio_postgres::Error) -> BackendError {
        if e.as_db_error().is_none() {
            BackendError::Unavailable {
                server: self.server.clone(),
                reason: format!("{doing}: {}", describe(&e)),
            }
        } else {
            BackendError::Refused {
                server: self.server.clone(),
                reason: format!("{doing}: {}", describe(&e)),
            }
        }
    }
}

/// The server's own message where there is one (it never holds the
/// password), else the client's.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => match std::error::Error::source(e) {
            Some(cause) if !e.to_string().contains(&cause.to_string()) => format!("{e}: {cause}"),
            _ => e.to_string(),
        },
    }
}

/// Why a connection could not be made: the server down is Unavailable
/// (69); a server that answered and refused us (password, database, role)
/// is Refused (76), because trying again will not help.
fn connect_error(server: &str, a: &PgAddress, e: tokio_postgres::Error) -> BackendError {
    let refused = |reason: String| BackendError::Refused {
        server: server.to_string(),
        reason,
    };
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            refused(format!(
                "authentication failed for user '{}': {}",
                a.user,
                describe(&e)
            ))
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => refused(describe(&e)),
        Some(c) if *c == SqlState::TOO_MANY_CONNECTIONS || *c == SqlState::CANNOT_CONNECT_NOW => {
            BackendError::Unavailable {
                server: server.to_string(),
                reason: describe(&e),
            }
        }
        Some(_) => refused(describe(&e)),
        None if describe(&e).contains("password missing") => refused(format!(
            "the server asks a password for '{}': give it in the URL, PGPASSWORD or ~/.pgpass",
            a.user
        )),
        None => BackendError::Unavailable {
            server: server.to_string(),
            reason: describe(&e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_side_bounds_follow_the_keepalive() {
        let o = server_options(Duration::from_secs(10));
        assert!(o.contains("tcp_keepalives_idle=10 "), "{o}");
        assert!(o.contains("tcp_keepalives_interval=2 "), "{o}");
        assert!(o.contains("tcp_user_timeout=10000 "), "{o}");
    }
}
