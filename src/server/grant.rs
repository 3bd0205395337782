//! Answering a grant (of a Lock or a TryLock): only once it is durable, and
//! only to a client still there to take it; otherwise the key is released
//! again, so neither a failed log write nor a closed connection keeps a key.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::metrics::Counters;
use super::show::show;
use super::table::{Durable, GrantId, Token};
use super::Shared;
use crate::proto::{self, Answer};

/// How a grant is answered: the classic `+`, or a session's `=` with its
/// token and the session timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Classic,
    Session(Token),
}

impl Reply {
    /// The answer of a request that got no grant.
    pub fn refused(self) -> u8 {
        match self {
            Reply::Classic => Answer::Fail.byte(),
            Reply::Session(_) => proto::SESSION_LOST,
        }
    }
}

/// Waits until the grant is durable, then answers it; if the log failed, the
/// key is released again and the client refused. True if the grant was
/// delivered (the client holds the key).
pub async fn answer(
    stream: &mut TcpStream,
    shared: &Shared,
    key: &[u8],
    id: GrantId,
    durable: Durable,
    reply: Reply,
) -> bool {
    if let Err(e) = durable.wait().await {
        Counters::bump(&shared.counters.refused);
        shared.table.release_grant(key, id);
        shared.events.error(format_args!(
            "grant of '{}' not recorded in the log, refused: {e}",
            show(key)
        ));
        let _ = stream.write_all(&[reply.refused()]).await;
        return false;
    }
    answer_grant(stream, shared, key, id, reply).await
}

/// Sends `+` for a grant; a grant that cannot be delivered is released again,
/// so a closed connection never keeps a key.
///
/// A write to a socket whose peer has already closed usually succeeds (the
/// peer answers with a reset later), so the connection is checked for a
/// hang-up first: a client that went away before its `+` could be written is
/// never left holding the key.
async fn answer_grant(
    stream: &mut TcpStream,
    shared: &Shared,
    key: &[u8],
    id: GrantId,
    reply: Reply,
) -> bool {
    let session;
    let bytes: &[u8] = match reply {
        Reply::Classic => b"+",
        Reply::Session(token) => {
            session = proto::session_grant(token, shared.session_timeout);
            &session
        }
    };
    let delivered = !peer_gone(stream) && stream.write_all(bytes).await.is_ok();
    if !delivered && shared.table.release_grant(key, id) {
        shared.events.error(format_args!(
            "could not deliver the grant of '{}': the client hung up, released it again",
            show(key)
        ));
    }
    delivered
}

/// True if the client has closed its side (or the connection broke). Bytes it
/// sent after its request are read and ignored. Never blocks.
fn peer_gone(stream: &TcpStream) -> bool {
    use nix::errno::Errno;
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let mut sink = [0u8; 64];
    // Bounded: a client cannot keep us here by streaming bytes.
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
