//! Reaching the lock port: plain TCP for `lc://`, TLS for `lcs://` (the
//! server's certificate checked against `cacert=FILE` or the system roots,
//! and its name or IP address; a client certificate from `cert=`/`key=`).
//! A TLS failure is one line saying which side is wrong: a plain server, an
//! untrusted certificate, a client certificate missing or refused.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::backend::secret::Tls;

/// How the lock port of one server is reached.
#[derive(Clone)]
pub struct Dialer {
    pub addr: String,
    tls: Option<Arc<ClientTls>>,
}

struct ClientTls {
    connector: TlsConnector,
    name: ServerName<'static>,
    /// What the server's certificate is checked against, for errors.
    trusted_by: String,
}

impl Dialer {
    pub fn plain(addr: &str) -> Dialer {
        Dialer {
            addr: addr.to_string(),
            tls: None,
        }
    }

    /// TLS to `addr`; the files are read now, so a missing one is an error
    /// before anything is sent.
    pub fn tls(addr: &str, t: &Tls) -> Result<Dialer, String> {
        let host = addr
            .rsplit_once(':')
            .map_or(addr, |(h, _)| h)
            .trim_matches(['[', ']']);
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("'{host}' is not a name a certificate can carry: {e}"))?;
        let (roots, trusted_by) = match &t.ca {
            Some(ca) => (
                crate::tls::roots(ca, "CA file (cacert=)")?,
                ca.display().to_string(),
            ),
            None => {
                let mut store = RootCertStore::empty();
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = store.add(cert);
                }
                if store.is_empty() {
                    return Err("no system root certificate to check the server's against: give one with cacert=FILE".into());
                }
                (store, "the system roots".to_string())
            }
        };
        let builder = ClientConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match (&t.cert, &t.key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(
                    crate::tls::certs(cert, "client certificate (cert=)")?,
                    crate::tls::key(key, "client key (key=)")?,
                )
                .map_err(|e| {
                    format!(
                        "cert={} and key={} do not make a key pair: {e}",
                        cert.display(),
                        key.display()
                    )
                })?,
            _ => builder.with_no_client_auth(),
        };
        Ok(Dialer {
            addr: addr.to_string(),
            tls: Some(Arc::new(ClientTls {
                connector: TlsConnector::from(Arc::new(config)),
                name,
                trusted_by,
            })),
        })
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Connects, retrying a refused port for `timeout` (a server
    /// restarting), then does the TLS handshake within what is left of it
    /// (at least a second, so a slow machine still gets its handshake).
    pub async fn connect(&self, timeout: Duration) -> Result<LcStream, String> {
        let started = Instant::now();
        let tcp = crate::backend::tcp::connect(&self.addr, timeout).await?;
        let left = timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1));
        self.secure(tcp, left).await
    }

    /// One attempt, all of it within `budget` (a ping, a probe).
    pub async fn connect_once(&self, budget: Duration) -> Result<LcStream, String> {
        let started = Instant::now();
        let tcp = match tokio::time::timeout(budget, TcpStream::connect(&self.addr)).await {
            Ok(r) => r.map_err(|e| e.to_string())?,
            Err(_) => return Err(format!("no connection within {budget:?}")),
        };
        self.secure(tcp, budget.saturating_sub(started.elapsed()))
            .await
    }

    async fn secure(&self, tcp: TcpStream, within: Duration) -> Result<LcStream, String> {
        tcp.set_nodelay(true).ok();
        let Some(tls) = &self.tls else {
            return Ok(LcStream::Plain(tcp));
        };
        let plain = format!("is it a plain server (lc://{})?", self.addr);
        match tokio::time::timeout(within, tls.connector.connect(tls.name.clone(), tcp)).await {
            Ok(Ok(s)) => Ok(LcStream::Tls(Box::new(s))),
            Ok(Err(e)) => Err(handshake_failure(&e, &tls.trusted_by, &plain)),
            Err(_) => Err(format!(
                "no answer to the TLS handshake within {:.1}s: {plain}",
                within.as_secs_f64()
            )),
        }
    }
}

/// The line for a failed handshake.
fn handshake_failure(e: &io::Error, trusted_by: &str, plain: &str) -> String {
    use rustls::{CertificateError, Error};
    match rustls_error(e) {
        Some(
            err @ Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ),
        ) => format!("its certificate is not for this address: {err}"),
        Some(err @ Error::InvalidCertificate(_)) => {
            format!("its certificate is not trusted by {trusted_by}: {err}")
        }
        Some(Error::AlertReceived(alert)) => refused(*alert),
        Some(
            err @ (Error::InvalidMessage(_)
            | Error::InappropriateHandshakeMessage { .. }
            | Error::InappropriateMessage { .. }),
        ) => {
            format!("it did not answer the TLS handshake: {plain} ({err})")
        }
        Some(err) => format!("TLS handshake failed: {err}"),
        None => match e.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe => {
                format!("it closed the connection during the TLS handshake: {plain}")
            }
            _ => format!("TLS handshake failed: {e}"),
        },
    }
}

fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// The server's alert: under TLS 1.3 a client certificate is judged after
/// our side of the handshake is done, so this comes on the first read.
fn refused(alert: AlertDescription) -> String {
    match alert {
        AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure => format!(
            "it refused the TLS connection ({alert:?}): it wants a client certificate signed by its CA (cert=FILE&key=FILE)"
        ),
        AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::CertificateUnknown
        | AlertDescription::CertificateExpired
        | AlertDescription::CertificateRevoked
        | AlertDescription::UnsupportedCertificate
        | AlertDescription::AccessDenied
        | AlertDescription::DecryptError => format!(
            "it did not accept our client certificate ({alert:?}): it wants one signed by its CA (--tls-client-ca)"
        ),
        other => format!("it ended the TLS connection ({other:?})"),
    }
}

/// A connection to the lock port.
pub enum LcStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for LcStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LcStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            LcStream::Tls(s) => Pin::new(&mut **s)
                .poll_read(cx, buf)
                .map_err(after_handshake),
        }
    }
}

/// A read or write error of a TLS connection, as one clear reason.
fn after_handshake(e: io::Error) -> io::Error {
    match rustls_error(&e) {
        Some(rustls::Error::AlertReceived(alert)) => io::Error::other(Refusal(refused(*alert))),
        _ => e,
    }
}

/// The server ended a TLS connection with an alert (see [`refused`]).
#[derive(Debug)]
struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// The reason, if `e` is the server refusing our TLS connection (which a
/// reader must not take for a plain hang-up).
pub fn refusal(e: &io::Error) -> Option<String> {
    e.get_ref()?.downcast_ref::<Refusal>().map(|r| r.0.clone())
}

impl AsyncWrite for LcStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LcStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            // tokio-rustls writes the records through as far as the socket
            // takes them: a frame needs no separate flush.
            LcStream::Tls(s) => Pin::new(&mut **s)
                .poll_write(cx, buf)
                .map_err(after_handshake),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LcStream::Plain(s) => Pin::new(s).poll_flush(cx),
            LcStream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LcStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            // close_notify, then the TCP half-close: the server reads it as
            // the hang-up that withdraws a wait.
            LcStream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_named() {
        let t = Tls {
            ca: Some("/nonexistent/ca.pem".into()),
            ..Tls::default()
        };
        let e = Dialer::tls("127.0.0.1:1", &t).err().unwrap();
        assert!(
            e.contains("cannot read the CA file (cacert=) /nonexistent/ca.pem"),
            "{e}"
        );
    }

    #[test]
    fn alerts_say_which_side_to_fix() {
        assert!(refused(AlertDescription::CertificateRequired).contains("cert=FILE&key=FILE"));
        assert!(
            refused(AlertDescription::UnknownCA).contains("did not accept our client certificate")
        );
    }
}
