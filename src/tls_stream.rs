//! A connection to the lock port that is plain TCP or TLS over it, written
//! once for both of its ends: the server's (`server::stream`, with
//! tokio-rustls's server stream) and an `lcs://` client's
//! (`backend::lc::dial`, with its client stream). Reads and writes go
//! straight through to whichever it is; what each end adds (the server's
//! hang-up checks, the client's Hello and its TLS errors) stays with it.
//! A leaf: it knows no other module of the crate.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// tokio-rustls's client or server stream over TCP.
pub(crate) trait TlsOverTcp: AsyncRead + AsyncWrite + Unpin {
    /// The TCP connection under it.
    fn tcp(&self) -> &TcpStream;
}

impl TlsOverTcp for tokio_rustls::client::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

impl TlsOverTcp for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// Plain TCP, or TLS (`T`: one end's tokio-rustls stream) over it.
pub(crate) enum PlainOrTls<T> {
    Plain(TcpStream),
    /// Boxed: a rustls connection is about a kilobyte, and a parked waiter
    /// (see `server::conn::handle`) should not carry it inline.
    Tls(Box<T>),
}

impl<T: TlsOverTcp> PlainOrTls<T> {
    /// The TCP connection, under TLS or not.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            PlainOrTls::Plain(s) => s,
            PlainOrTls::Tls(s) => s.tcp(),
        }
    }
}

impl<T: TlsOverTcp> AsyncRead for PlainOrTls<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PlainOrTls::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl<T: TlsOverTcp> AsyncWrite for PlainOrTls<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            // tokio-rustls writes the records through as far as the socket
            // takes them, so a frame or an answer needs no separate flush.
            PlainOrTls::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_flush(cx),
            PlainOrTls::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            // close_notify, then the TCP half-close: the server reads a
            // client's as the hang-up that withdraws a wait.
            PlainOrTls::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
