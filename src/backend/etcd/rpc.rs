//! One etcd client: requests bounded in time, and etcd errors as backend
//! errors naming what we were doing.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Error, Identity, TlsOptions};
use tokio::time::Instant;

use crate::backend::secret::{Access, Tls};
use crate::backend::{BackendError, Result};

#[derive(Clone)]
pub(super) struct Rpc {
    client: Client,
    /// For messages: `etcd://hosts[/prefix]`.
    pub server: String,
    /// How long one request may take: a silent network path otherwise
    /// leaves it pending for ever.
    pub timeout: Duration,
}

impl Rpc {
    /// Connects and checks that the cluster answers, trying again with a
    /// short backoff for up to `connect_timeout`.
    pub(super) async fn connect(
        endpoints: &[String],
        server: String,
        access: &Access,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Rpc> {
        let scheme = if access.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let urls: Vec<String> = endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
        // etcd's own user and password (etcdctl --user): the client asks
        // for a token at connect time, so a wrong password fails here.
        match (&access.user, &access.password) {
            (Some(user), Some(password)) => {
                // A hold can outlive the token (simple tokens last 5 min).
                options = options
                    .with_user(user.clone(), password.expose().to_string())
                    .with_auto_token_refresh(true)
            }
            (None, Some(_)) => {
                return Err(BackendError::Unavailable {
                    server,
                    reason: format!(
                        "etcd needs a user with the password (etcd://USER:PASSWORD@HOSTS or {})",
                        super::address::USER_ENV
                    ),
                })
            }
            _ => {}
        }
        if let Some(tls) = &access.tls {
            let config = tls_options(tls).map_err(|reason| BackendError::Unavailable {
                server: server.clone(),
                reason,
            })?;
            options = options.with_tls(config);
        }
        let unavailable = |reason: String| BackendError::Unavailable {
            server: server.clone(),
            reason,
        };
        let client = Client::connect(&urls, Some(options)).await.map_err(|e| {
            match refused_credentials(&e) {
                // A wrong password is refused, as PostgreSQL's is (76).
                true => BackendError::Refused {
                    server: server.clone(),
                    reason: e.to_string(),
                },
                false => unavailable(e.to_string()),
            }
        })?;
        let rpc = Rpc {
            client,
            server: server.clone(),
            timeout,
        };
        let deadline = Instant::now() + connect_timeout;
        let mut delay = Duration::from_millis(50);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let probe =
                tokio::time::timeout(left, async { rpc.client.clone().get("\0", None).await });
            let failure = match probe.await {
                Ok(Ok(_)) => return Ok(rpc),
                Ok(Err(e)) if refused_credentials(&e) => {
                    return Err(BackendError::Refused {
                        server: server.clone(),
                        reason: format!("etcd wants a user and password: {e}"),
                    })
                }
                Ok(Err(e)) => match rpc.error("connecting", e) {
                    BackendError::Unavailable { reason, .. } => reason,
                    e => return Err(e),
                },
                Err(_) => "no answer".to_string(),
            };
            if Instant::now() + delay >= deadline {
                return Err(unavailable(format!(
                    "no answer from etcd within {connect_timeout:?} ({failure})"
                )));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    pub(super) fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs one request with a fresh handle, for at most `timeout`; one that
    /// could not reach a member is sent again (another member may answer)
    /// until then. Every request lc-cli sends is safe to repeat.
    pub(super) async fn call<T, F, Fut>(&self, doing: &str, mut op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, Error>>,
    {
        let deadline = Instant::now() + self.timeout;
        let mut delay = Duration::from_millis(20);
        loop {
            let failure = match tokio::time::timeout_at(deadline, op(self.client.clone())).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => match self.error(doing, e) {
                    e @ BackendError::Unavailable { .. } => e,
                    e => return Err(e),
                },
                Err(_) => BackendError::Unavailable {
                    server: self.server.clone(),
                    reason: format!("{doing}: no answer within {:?}", self.timeout),
                },
            };
            if Instant::now() + delay >= deadline {
                return Err(failure);
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    /// An etcd error as a backend error: unreachable (retry-worthy) or
    /// refused.
    pub(super) fn error(&self, doing: &str, e: Error) -> BackendError {
        use tonic::Code;
        let server = self.server.clone();
        let reason = format!("{doing}: {e}");
        match &e {
            Error::GRpcStatus(s) => match s.code() {
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Unknown
                | Code::Aborted => BackendError::Unavailable { server, reason },
                Code::PermissionDenied
                | Code::Unauthenticated
                | Code::ResourceExhausted
                | Code::FailedPrecondition
                | Code::OutOfRange => BackendError::Refused { server, reason },
                _ => BackendError::Protocol { server, reason },
            },
            Error::TransportError(_)
            | Error::IoError(_)
            | Error::LeaseKeepAliveError(_)
            | Error::WatchError(_) => BackendError::Unavailable { server, reason },
            _ => BackendError::Protocol { server, reason },
        }
    }
}

/// TLS as etcdctl's `--cacert`, `--cert`, `--key` set it: the server
/// checked against the CA file, else the system roots.
fn tls_options(tls: &Tls) -> std::result::Result<TlsOptions, String> {
    // One crypto provider for the process (a second install is a no-op).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = TlsOptions::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(Tls::read(ca, "CA file")?)),
        None => config.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        config = config.identity(Identity::from_pem(
            Tls::read(cert, "client certificate")?,
            Tls::read(key, "client key")?,
        ));
    }
    Ok(config)
}

/// etcd's answer to a wrong password (at connect) or to none where
/// authentication is on (on the first request): both InvalidArgument.
fn refused_credentials(e: &Error) -> bool {
    matches!(e, Error::GRpcStatus(s) if s.message().contains("authentication failed")
        || s.message().contains("user name is empty"))
}

/// "lease not found", as mapped by [`Rpc::error`].
pub(super) fn is_not_found(e: &BackendError) -> bool {
    matches!(e, BackendError::Protocol { reason, .. } if reason.contains("not found"))
}

pub(super) fn is_not_found_raw(e: &Error) -> bool {
    matches!(e, Error::GRpcStatus(s) if s.code() == tonic::Code::NotFound)
}
