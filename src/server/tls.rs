//! TLS on the lock port (`serve --tls-cert FILE --tls-key FILE
//! [--tls-client-ca FILE]`): the acceptor, made once at start-up so a bad
//! file stops the server before it listens, and the handshake of each
//! connection, bounded by the login's deadline (`--login-timeout`) with the
//! first frame.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::conn::Deadline;
use super::metrics::Counters;
use super::stream::Stream;
use super::Shared;

/// The files of `--tls-cert`, `--tls-key` and `--tls-client-ca`.
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With it, a client must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// The acceptor for `files`; the error names the file and what is wrong.
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let provider = crate::tls::provider();
    let certs = crate::tls::certs(&files.cert, "certificate (--tls-cert)")?;
    let key = crate::tls::key(&files.key, "key (--tls-key)")?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = crate::tls::roots(ca, "client CA (--tls-client-ca)")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("--tls-client-ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "--tls-cert {} and --tls-key {} do not make a key pair: {e}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// How soon before its end a certificate draws a warning.
const EXPIRES_SOON: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// A warning if the first certificate of `path` has expired or expires
/// within [`EXPIRES_SOON`] (clients refuse an expired one): said at start
/// and at each SIGHUP. Nothing if it cannot be read or parsed (the start
/// itself reports a bad file).
pub(crate) fn expiry_warning(path: &std::path::Path) -> Option<String> {
    use x509_cert::der::Decode;
    let certs = crate::tls::certs(path, "certificate (--tls-cert)").ok()?;
    let cert = x509_cert::Certificate::from_der(certs.first()?.as_ref()).ok()?;
    let end = cert.tbs_certificate.validity.not_after.to_system_time();
    let now = std::time::SystemTime::now();
    let when = humantime::format_rfc3339_seconds(end);
    match end.duration_since(now) {
        Err(_) => Some(format!(
            "the certificate {} expired at {when}: clients refuse it; replace it",
            path.display()
        )),
        Ok(left) if left < EXPIRES_SOON => Some(format!(
            "the certificate {} expires at {when} (in {}): replace it before then",
            path.display(),
            humantime::format_duration(std::time::Duration::from_secs(
                left.as_secs() / 3600 * 3600
            ))
        )),
        Ok(_) => None,
    }
}

/// The connection as the handlers see it: plain, or TLS once its handshake
/// is done within the login's deadline (the first frame must follow within
/// it too: `conn.rs`). None (logged) if the handshake failed:
/// a plain client (`lc://`) on a TLS port, an untrusted or missing client
/// certificate.
pub(crate) async fn open(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    tls: Option<&TlsAcceptor>,
    login: Deadline,
) -> Option<Stream> {
    let Some(acceptor) = tls else {
        return Some(Stream::Plain(tcp));
    };
    tcp.set_nodelay(true).ok();
    let why = match tokio::time::timeout_at(login.at, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => return Some(Stream::Tls(Box::new(s))),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!(
            "no handshake within {:?} of the connection ({})",
            login.after, login.option
        ),
    };
    Counters::bump(&shared.counters.refused);
    shared.events.limited(
        Some(peer.ip()),
        "TLS handshake",
        format_args!("{peer}: TLS handshake failed, closing: {why}"),
    );
    None
}
