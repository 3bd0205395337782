//! Reaching the lock port: plain TCP for `lc://`, TLS for `lcs://` (the
//! server's certificate checked against `cacert=FILE` or the system roots,
//! and its name or IP address; a client certificate from `cert=`/`key=`).
//! A TLS failure is one line saying which side is wrong: a plain server, an
//! untrusted certificate, a client certificate missing or refused.
//!
//! Every connection opens with a Hello (action 16) carrying the token, if
//! any: [`LcStream`] puts it in front of the first frame written (one write,
//! no round trip of its own) and takes its answer off the front of what is
//! read, so a caller sees only the answer to its own frame. What the server
//! answered is kept in the dialer's [`Greeting`]: a token refused ends the
//! read with an error (`LcBackend` turns it into the refusal), and a
//! server that answers the Hello `-` (a reference server) gets no more
//! Hellos.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

pub(super) use super::tls_failure::refusal;
use super::tls_failure::{after_handshake, handshake_failure, is_at_limit_alert, TLS_AT_LIMIT};
use crate::backend::secret::Tls;
use crate::proto::{self, HelloAnswer, Request};
use crate::tls_stream::PlainOrTls;

/// How the lock port of one server is reached.
#[derive(Clone)]
pub(super) struct Dialer {
    pub addr: String,
    tls: Option<Arc<ClientTls>>,
    greeting: Arc<Greeting>,
}

/// The Hello every connection of one dialer opens with, and what the
/// server answered the last one.
pub(super) struct Greeting {
    frame: Vec<u8>,
    has_token: bool,
    /// The server answered a Hello `-`: it does not know it (a reference
    /// server, or an lc-cli serve from before Hello); none is sent again.
    unknown: AtomicBool,
    answer: Mutex<Option<HelloAnswer>>,
    /// A connection was refused at one of the server's connection limits
    /// (its `&` answer, or its TLS alert before the handshake): the limit.
    at_limit: Mutex<Option<String>>,
}

impl Greeting {
    fn new(token: Option<&str>) -> Greeting {
        // The version ends in CR LF, as the Ping's key does: a line-based
        // server (Redis, HTTP) sees a whole line before the token and
        // answers it with text at once (see `probe.rs`). The feature
        // `secret` after it: session grants carry the hold's secret, which
        // our reclaims show.
        let client = format!(
            "{} {} {} {} {} {} {}\r\n",
            env!("CARGO_PKG_VERSION"),
            proto::FEATURE_SECRET,
            proto::FEATURE_QUEUES,
            proto::FEATURE_HISTORY,
            proto::FEATURE_SLOTS,
            proto::FEATURE_KEEP,
            proto::FEATURE_GROUP
        );
        let frame = proto::encode(&Request::Hello {
            client: client.into_bytes(),
            token: token.unwrap_or("").as_bytes().to_vec(),
        })
        .expect("a token of at most 127 bytes (checked when the address was parsed)");
        Greeting {
            frame,
            has_token: token.is_some(),
            unknown: AtomicBool::new(false),
            answer: Mutex::new(None),
            at_limit: Mutex::new(None),
        }
    }

    fn record(&self, answer: HelloAnswer) {
        *self.answer.lock().unwrap_or_else(|e| e.into_inner()) = Some(answer);
    }

    /// What the server answered the last Hello (None: none answered yet,
    /// or it does not know Hello).
    pub(super) fn answer(&self) -> Option<HelloAnswer> {
        self.answer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn note_at_limit(&self, limit: String) {
        *self.at_limit.lock().unwrap_or_else(|e| e.into_inner()) = Some(limit);
    }

    /// The limit a connection of this dialer was refused at since the last
    /// call, if one was (`LcBackend::guarded` turns the error it made into
    /// the one line that names it).
    pub(super) fn take_at_limit(&self) -> Option<String> {
        self.at_limit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub(super) fn has_token(&self) -> bool {
        self.has_token
    }

    /// Whether the server's last Hello answer named `feature`.
    pub(super) fn named(&self, feature: &str) -> bool {
        self.answer().is_some_and(|a| names(&a, feature))
    }

    /// Hellos are still sent (the server has not answered one `-`).
    pub(super) fn sends_hello(&self) -> bool {
        !self.unknown.load(Ordering::Relaxed)
    }

    /// Why the server refused the token, as the one line says it; None if
    /// it did not.
    pub(super) fn refusal(&self) -> Option<String> {
        match self.answer()? {
            HelloAnswer::Refused(reason) => Some(match self.has_token {
                true => format!("the server refused the token: {reason}"),
                false => format!(
                    "the server takes only clients with a token ({reason}): set {} (or {}, \
                     or give lc://:TOKEN@HOST:PORT)",
                    super::address::TOKEN_ENV,
                    super::address::TOKEN_FILE_ENV
                ),
            }),
            _ => None,
        }
    }
}

struct ClientTls {
    connector: TlsConnector,
    name: ServerName<'static>,
    /// What the server's certificate is checked against, for errors.
    trusted_by: String,
}

impl Dialer {
    pub(super) fn plain(addr: &str) -> Dialer {
        Dialer {
            addr: addr.to_string(),
            tls: None,
            greeting: Arc::new(Greeting::new(None)),
        }
    }

    /// The same dialer, its Hellos carrying `token`.
    pub(super) fn with_token(mut self, token: Option<&str>) -> Dialer {
        self.greeting = Arc::new(Greeting::new(token));
        self
    }

    pub(super) fn greeting(&self) -> &Greeting {
        &self.greeting
    }

    /// TLS to `addr`; the files are read now, so a missing one is an error
    /// before anything is sent.
    pub(super) fn tls(addr: &str, t: &Tls) -> Result<Dialer, String> {
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
            greeting: Arc::new(Greeting::new(None)),
        })
    }

    pub(super) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Connects, retrying a refused port for `timeout` (a server
    /// restarting), then does the TLS handshake within what is left of it
    /// (at least a second, so a slow machine still gets its handshake).
    pub(super) async fn connect(&self, timeout: Duration) -> Result<LcStream, String> {
        let started = Instant::now();
        let tcp = crate::backend::tcp::connect(&self.addr, timeout).await?;
        let left = timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1));
        self.secure(tcp, left).await
    }

    /// One attempt, all of it within `budget` (a ping, a probe).
    pub(super) async fn connect_once(&self, budget: Duration) -> Result<LcStream, String> {
        let started = Instant::now();
        let tcp = match tokio::time::timeout(budget, TcpStream::connect(&self.addr)).await {
            Ok(r) => r.map_err(|e| e.to_string())?,
            Err(_) => return Err(format!("no connection within {budget:?}")),
        };
        self.secure(tcp, budget.saturating_sub(started.elapsed()))
            .await
    }

    async fn secure(&self, tcp: TcpStream, within: Duration) -> Result<LcStream, String> {
        Ok(LcStream {
            io: self.wrap(tcp, within).await?,
            hello: self.greeting.sends_hello().then(|| {
                Box::new(Pending {
                    out: self.greeting.frame.clone(),
                    got: Vec::new(),
                    parsed: false,
                    greeting: self.greeting.clone(),
                })
            }),
            secret: false,
            queues: false,
            slots: false,
        })
    }

    async fn wrap(&self, tcp: TcpStream, within: Duration) -> Result<Io, String> {
        tcp.set_nodelay(true).ok();
        let Some(tls) = &self.tls else {
            return Ok(Io::Plain(tcp));
        };
        let plain = format!("is it a plain server (lc://{})?", self.addr);
        match tokio::time::timeout(within, tls.connector.connect(tls.name.clone(), tcp)).await {
            Ok(Ok(s)) => Ok(Io::Tls(Box::new(s))),
            Ok(Err(e)) if is_at_limit_alert(&e) => {
                self.greeting.note_at_limit(TLS_AT_LIMIT.to_string());
                Err(AtLimit(TLS_AT_LIMIT.to_string()).to_string())
            }
            Ok(Err(e)) => Err(handshake_failure(&e, &tls.trusted_by, &plain)),
            Err(_) => Err(format!(
                "no answer to the TLS handshake within {:.1}s: {plain}",
                within.as_secs_f64()
            )),
        }
    }
}

/// The server closed the connection unread: it is over one of its
/// connection limits (the reason names it).
#[derive(Debug)]
pub(crate) struct AtLimit(pub String);

impl std::fmt::Display for AtLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "it is at its connection limit ({})", self.0)
    }
}

impl std::error::Error for AtLimit {}

/// A connection to the lock port, with the Hello in front of what is
/// written first and its answer taken off what is read.
pub(super) struct LcStream {
    io: Io,
    /// Until the Hello's answer is read (None: no Hello on it).
    hello: Option<Box<Pending>>,
    /// The server took the feature `secret` (its Hello answer named it):
    /// session grants on this connection carry the hold's secret.
    secret: bool,
    /// The server took the feature `queues` (issue 44).
    queues: bool,
    /// The server took the feature `slots` (issue 45): its `=` answers
    /// end with the hold's slot field.
    slots: bool,
}

/// Plain or TLS, as the server has it too (`crate::tls_stream`); its read
/// and write errors pass through [`after_handshake`] (see [`read`] and
/// [`write`]).
type Io = PlainOrTls<TlsStream<TcpStream>>;

impl LcStream {
    /// The local address of the connection: the peer the server records.
    pub(super) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.io.tcp().local_addr().ok()
    }

    /// Whether the server took the feature `queues` on this connection
    /// (known once its first bytes after the Hello's answer are read).
    pub(super) fn took_queues(&self) -> bool {
        self.queues
    }

    /// What follows the token and timeout of an `=` on this connection
    /// (known once its first bytes after the Hello's answer are read).
    pub(super) fn grant_tail(&self) -> proto::grant::Tail {
        proto::grant::Tail {
            secret: self.secret,
            slot: self.slots,
        }
    }

    /// Reads until the Hello's answer is parsed (Ready(Ok) at once when
    /// there is none, or it is parsed already).
    fn poll_hello(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Some(h) = self.hello.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            if h.parsed {
                return Poll::Ready(Ok(()));
            }
            let mut tmp = [0u8; 2 + 2 * proto::MAX_FIELD];
            let mut more = ReadBuf::new(&mut tmp);
            let closed = match ready(read(&mut self.io, cx, &mut more)) {
                None => return Poll::Pending,
                Some(Ok(())) => more.filled().is_empty(),
                // A reset after the reference's `-`, or after part of an
                // answer: judged on what came.
                Some(Err(_)) if !h.got.is_empty() => true,
                Some(Err(e)) => return Poll::Ready(Err(e)),
            };
            h.got.extend_from_slice(more.filled());
            let Some((answer, used)) = proto::parse_hello(&h.got, closed) else {
                continue;
            };
            match answer {
                HelloAnswer::Unknown => {
                    h.greeting.unknown.store(true, Ordering::Relaxed);
                    self.hello = None;
                    return Poll::Ready(Err(io::Error::other(HelloUnknown)));
                }
                HelloAnswer::AtLimit(limit) => {
                    h.greeting.note_at_limit(limit.clone());
                    self.hello = None;
                    return Poll::Ready(Err(io::Error::other(AtLimit(limit))));
                }
                HelloAnswer::Refused(_) => {
                    h.greeting.record(answer);
                    let why = h.greeting.refusal().unwrap_or_default();
                    self.hello = None;
                    return Poll::Ready(Err(io::Error::other(TokenRefused(why))));
                }
                // Not an answer to a Hello: the caller judges the bytes.
                HelloAnswer::Foreign => {}
                HelloAnswer::Unchecked { .. } | HelloAnswer::Accepted { .. } => {
                    self.secret = names(&answer, proto::FEATURE_SECRET);
                    self.queues = names(&answer, proto::FEATURE_QUEUES);
                    self.slots = names(&answer, proto::FEATURE_SLOTS);
                    h.greeting.record(answer);
                    h.got.drain(..used);
                }
            }
            h.parsed = true;
        }
    }
}

/// The Hello of one connection: what is not yet written of it, and what
/// is read of its answer.
struct Pending {
    out: Vec<u8>,
    /// Read so far: the Hello's answer, then (once `parsed`) the bytes
    /// after it, for the caller.
    got: Vec<u8>,
    parsed: bool,
    greeting: Arc<Greeting>,
}

/// The server refused the Hello's token (the reason: [`Greeting::refusal`]).
#[derive(Debug)]
pub(super) struct TokenRefused(pub String);

impl std::fmt::Display for TokenRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TokenRefused {}

/// The server answered the Hello `-`: it does not know it (the request
/// behind it was not served; ask again, without a Hello).
#[derive(Debug)]
pub(super) struct HelloUnknown;

impl std::fmt::Display for HelloUnknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("it answered '-' to lc-cli's Hello (a reference Locking-Center server)")
    }
}

impl std::error::Error for HelloUnknown {}

/// Whether `e` is [`HelloUnknown`].
pub(super) fn hello_unknown(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|r| r.is::<HelloUnknown>())
}

/// A read of the connection, a TLS alert made one clear reason.
fn read(io: &mut Io, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
    Pin::new(io).poll_read(cx, buf).map_err(after_handshake)
}

/// A write to the connection, a TLS alert made one clear reason.
fn write(io: &mut Io, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    Pin::new(io).poll_write(cx, buf).map_err(after_handshake)
}

impl AsyncRead for LcStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = ready!(this.poll_hello(cx)) {
            return Poll::Ready(Err(e));
        }
        // The bytes read after the Hello's answer first.
        if let Some(h) = this.hello.as_mut() {
            if !h.got.is_empty() {
                let n = h.got.len().min(buf.remaining());
                buf.put_slice(&h.got[..n]);
                h.got.drain(..n);
                return Poll::Ready(Ok(()));
            }
            this.hello = None;
        }
        read(&mut this.io, cx, buf)
    }
}

/// Whether a server's Hello answer names the feature `secret` after its
/// version (a server before it names none).
fn names(answer: &HelloAnswer, feature: &str) -> bool {
    let version = match answer {
        HelloAnswer::Unchecked { version } | HelloAnswer::Accepted { version, .. } => version,
        _ => return false,
    };
    version
        .split_ascii_whitespace()
        .skip(1)
        .any(|w| w == feature)
}

/// `Poll` as an option, so the arms above read as a match on the result.
fn ready<T>(p: Poll<T>) -> Option<T> {
    match p {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

impl AsyncWrite for LcStream {
    /// The first write carries the Hello in front of the caller's bytes,
    /// in one write to the socket (one segment, one TLS record).
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(h) = this.hello.as_mut().filter(|h| !h.out.is_empty()) {
            let hello = h.out.len();
            let mut joined = std::mem::take(&mut h.out);
            joined.extend_from_slice(buf);
            let written = write(&mut this.io, cx, &joined);
            joined.truncate(hello);
            match written {
                Poll::Ready(Ok(n)) if n > hello => return Poll::Ready(Ok(n - hello)),
                Poll::Ready(Ok(0)) => {
                    h.out = joined;
                    return Poll::Ready(Ok(0));
                }
                Poll::Ready(Ok(n)) => {
                    joined.drain(..n);
                    h.out = joined;
                    if !h.out.is_empty() {
                        // Part of the Hello went: ask to be called again.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                other => {
                    h.out = joined;
                    return other.map(|r| r.map(|_| 0));
                }
            }
        }
        write(&mut this.io, cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
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
}
