//! A connection over one of the limits (`limits.rs`): counted
//! (`lc_refused_connections_total`), logged at most as `Events::limited`
//! lets it (per address), and, on the lock port, told why before the close,
//! so the client's line names the limit instead of guessing at a closed
//! connection: `&` and the limit on a plain port ([`proto::at_limit`]), the
//! TLS alert [`crate::tls::AT_LIMIT_RECORD`] on a TLS one. Nothing of the
//! request is read or served; the answer is written without waiting (a
//! fresh socket's buffer takes it), so a refusal costs the server a few
//! syscalls and no task.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use nix::sys::socket::{recv, send, MsgFlags};
use tokio::net::TcpStream;

use super::limits::Refusal;
use super::metrics::Counters;
use super::Shared;
use crate::proto;

/// Counts and logs the refusal of the connection from `peer`.
pub(crate) fn note(shared: &Shared, peer: SocketAddr, why: Refusal) {
    Counters::bump(&shared.counters.refused_connections);
    shared.events.limited(
        Some(peer.ip()),
        "connection limit",
        format_args!("{peer}: connection refused: {}", why.reason(peer.ip())),
    );
}

/// Tells the client on the lock port which limit refused it; the caller
/// then drops (closes) `tcp`.
pub(crate) fn tell(tcp: &TcpStream, peer: SocketAddr, why: Refusal, tls: bool) {
    let fd = tcp.as_raw_fd();
    // What the client sent already (lc-cli's Hello and request, a TLS
    // ClientHello) is read and dropped first: closing a socket with bytes
    // unread sends a reset, which may reach the client before it reads the
    // answer. Bounded: a client cannot keep the accept loop here.
    let mut sink = [0u8; 2048];
    for _ in 0..4 {
        match recv(fd, &mut sink, MsgFlags::MSG_DONTWAIT) {
            Ok(n) if n == sink.len() => continue,
            _ => break,
        }
    }
    let plain;
    let answer: &[u8] = if tls {
        &crate::tls::AT_LIMIT_RECORD
    } else {
        plain = proto::at_limit(&why.reason(peer.ip()));
        &plain
    };
    let _ = send(fd, answer, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL);
}
