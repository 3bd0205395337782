//! One connection to PostgreSQL: the options that bound how long a dead
//! peer goes unnoticed on either side, the task that drives it, and the
//! news of its end.

use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::error::SqlState;

use super::address::{password_for, PgAddress, SslMode};
use crate::backend::{BackendError, Result};

pub struct Session {
    pub client: tokio_postgres::Client,
    /// Some(why) once the connection has ended.
    ended: watch::Receiver<Option<String>>,
    /// The displayed address, for errors.
    pub server: String,
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

impl Session {
    pub async fn open(a: &PgAddress, app: &str, connect_timeout: Duration) -> Result<Session> {
        let server = a.to_string();
        let mut c = tokio_postgres::Config::new();
        c.user(&a.user)
            .dbname(&a.db)
            .host(&a.host)
            .port(a.port)
            .application_name(app)
            .connect_timeout(connect_timeout)
            // Our side notices a silent server while we wait in its queue.
            .keepalives(true)
            .keepalives_idle(a.keepalive / 2)
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(a.keepalive / 2)
            .options(server_options(a.keepalive));
        if let Some(pw) = password_for(a) {
            c.password(pw);
        }
        c.ssl_mode(match a.sslmode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
        });
        let tls = super::tls::connector(a).map_err(|reason| BackendError::Unavailable {
            server: server.clone(),
            reason,
        })?;
        let connected = tokio::time::timeout(connect_timeout, c.connect(tls)).await;
        let (client, connection) = match connected {
            Err(_) => {
                return Err(BackendError::Unavailable {
                    server,
                    reason: format!("no connection within {connect_timeout:?}"),
                })
            }
            Ok(Err(e)) => return Err(connect_error(&server, a, e)),
            Ok(Ok(pair)) => pair,
        };
        let (tx, ended) = watch::channel(None);
        tokio::spawn(async move {
            let why = match connection.await {
                Ok(()) => "the server closed the connection".to_string(),
                Err(e) => describe(&e),
            };
            let _ = tx.send(Some(why));
        });
        Ok(Session {
            client,
            ended,
            server,
        })
    }

    /// Resolves when the connection has ended, with why.
    pub async fn ended(&self) -> String {
        let mut rx = self.ended.clone();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => "the connection task ended".into(),
        };
        why
    }

    pub fn is_ended(&self) -> bool {
        self.ended.borrow().is_some() || self.client.is_closed()
    }

    /// A query's error as a backend error: the connection's loss is
    /// Unavailable, anything the server said is Refused.
    pub fn error(&self, doing: &str, e: tokio_postgres::Error) -> BackendError {
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
pub fn describe(e: &tokio_postgres::Error) -> String {
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
