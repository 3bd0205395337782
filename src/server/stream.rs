//! A client's connection to the lock port: plain TCP, or TLS with
//! `serve --tls-cert`. The handlers take a [`Stream`] and do not care
//! which; the two checks that look under the bytes (has the client hung
//! up?) are here, one way per kind; reading and writing are
//! [`PlainOrTls`]'s.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::tls_stream::PlainOrTls;

/// Plain or TLS, as `lcs://` clients have it too (`crate::tls_stream`).
pub(crate) type Stream = PlainOrTls<TlsStream<TcpStream>>;

impl Stream {
    pub(crate) fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.tcp().set_nodelay(on)
    }

    /// Ready once the client has closed its side (or the connection broke);
    /// bytes it sends after its request are read and ignored. For a queued
    /// waiter, polled by hand so that it keeps no buffer across the wait.
    pub(crate) fn poll_hangup(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let closed = match self {
                Stream::Plain(s) => match s.poll_read_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(_)) => true,
                    Poll::Ready(Ok(())) => match s.try_read(&mut [0u8; 32]) {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                        Err(_) => true,
                    },
                },
                Stream::Tls(_) => match self.poll_tls_read(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(closed) => closed,
                },
            };
            if closed {
                return Poll::Ready(());
            }
        }
    }

    /// True if the client has closed its side (or the connection broke).
    /// Bytes it sent after its request are read and ignored. Never blocks.
    pub(crate) fn peer_gone(&mut self) -> bool {
        match self {
            Stream::Plain(s) => tcp_peer_gone(s),
            Stream::Tls(_) => {
                // One look, without waiting: a waker that does nothing.
                let mut cx = Context::from_waker(std::task::Waker::noop());
                // Bounded: a client cannot keep us here by streaming bytes.
                for _ in 0..16 {
                    match self.poll_tls_read(&mut cx) {
                        Poll::Ready(true) => return true,
                        Poll::Ready(false) => continue,
                        Poll::Pending => return false,
                    }
                }
                false
            }
        }
    }

    /// One read of a TLS stream, through rustls (the TCP bytes are TLS
    /// records: a close_notify, a key update): Ready(true) closed or
    /// broken, Ready(false) bytes, ignored.
    fn poll_tls_read(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        let Stream::Tls(s) = self else {
            return Poll::Ready(false);
        };
        let mut sink = [0u8; 64];
        let mut buf = ReadBuf::new(&mut sink);
        match Pin::new(&mut **s).poll_read(cx, &mut buf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) => Poll::Ready(buf.filled().is_empty()),
            Poll::Ready(Err(_)) => Poll::Ready(true),
        }
    }
}

/// A plain socket looked at with `recv(MSG_DONTWAIT)`.
fn tcp_peer_gone(stream: &TcpStream) -> bool {
    use nix::errno::Errno;
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let mut sink = [0u8; 64];
    for _ in 0..16 {
        match recv(fd, &mut sink, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(Errno::EAGAIN | Errno::EINTR) => return false,
            Err(_) => return true,
        }
    }
    false
}
