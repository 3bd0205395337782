//! The manager port (`--manager`, default the lock port + 1): the reference
//! server's `KEYS`, `RSET` and `RSBS`, byte for byte, plus lc-cli's `KEYX`.
//! The layouts are in [`crate::proto::manager`]. One command per connection; the
//! whole request must arrive within the read deadline (`--read-timeout`,
//! or `--login-timeout` if shorter); anything wrong is
//! answered `-` and touches only that connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::metrics::Counters;
use super::{reset, Shared};
use crate::proto::manager;
use crate::proto::Answer;

/// Why a request ended without its final `+`.
enum Stop {
    /// Nothing more to send: close.
    Quiet,
    /// The client closed before sending a byte of this field.
    Closed,
    /// Answer `-` (if the connection still takes it) and log why.
    Fail(String),
}

/// Serves one manager connection.
pub(crate) async fn handle(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    stream.set_nodelay(true).ok();
    let deadline = Instant::now() + request_limit(&shared);
    let mut command = [0u8; 4];
    match read_exact(&mut stream, &mut command, deadline, &shared).await {
        Ok(()) => {}
        Err(Stop::Quiet | Stop::Closed) => return,
        // The reference closes without an answer when the command itself
        // cannot be read.
        Err(Stop::Fail(reason)) => {
            Counters::bump(&shared.counters.refused);
            shared.events.limited(
                Some(peer.ip()),
                "bad manager command",
                format_args!("{peer}: manager: bad command: {reason}"),
            );
            return;
        }
    }
    let result = serve(&mut stream, peer, &shared, &command, deadline).await;
    let last = match result {
        Ok(()) => Answer::Ok,
        Err(Stop::Quiet) => return,
        Err(Stop::Closed) => fail(&shared, peer, &command, "the connection closed early"),
        Err(Stop::Fail(reason)) => fail(&shared, peer, &command, &reason),
    };
    let _ = write(&mut stream, &[last.byte()], &shared).await;
}

fn fail(shared: &Shared, peer: SocketAddr, command: &[u8], reason: &str) -> Answer {
    Counters::bump(&shared.counters.refused);
    shared.events.error(format_args!(
        "{peer}: manager: {} refused: {reason}",
        String::from_utf8_lossy(command).escape_debug()
    ));
    Answer::Fail
}

async fn serve(
    stream: &mut TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    command: &[u8; 4],
    deadline: Instant,
) -> Result<(), Stop> {
    match command {
        manager::KEYS | manager::KEYS_EXTENDED => {
            let reports = shared.table.held();
            let mut answer = if command == manager::KEYS {
                manager::encode_keys(&reports)
            } else {
                manager::encode_keys_extended(&reports)
            };
            // The encoders end with the final `+`; the caller writes it.
            answer.pop();
            write(stream, &answer, shared).await
        }
        manager::RESET_KEYS | manager::RESET_SOURCES => {
            let by_key = command == manager::RESET_KEYS;
            let mut count = [0u8; 4];
            read_exact(stream, &mut count, deadline, shared).await?;
            let count = u32::from_le_bytes(count);
            if !by_key && count == 0 {
                // As the reference: the caller's IP address is the source.
                let source = peer.ip().to_string().into_bytes();
                return reset(stream, peer, shared, false, &source).await;
            }
            for _ in 0..count {
                let mut len = [0u8; 1];
                read_exact(stream, &mut len, deadline, shared).await?;
                let mut name = vec![0u8; len[0] as usize];
                read_exact(stream, &mut name, deadline, shared).await?;
                reset(stream, peer, shared, by_key, &name).await?;
            }
            Ok(())
        }
        other => Err(Stop::Fail(format!(
            "unknown command {:?}",
            String::from_utf8_lossy(other)
        ))),
    }
}

/// One reset through the same path as the lock protocol's, answered `+`.
async fn reset(
    stream: &mut TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    by_key: bool,
    name: &[u8],
) -> Result<(), Stop> {
    let answer = if by_key {
        reset::key(shared, peer, None, name).await
    } else {
        reset::source(shared, peer, None, name).await
    };
    match answer {
        Answer::Ok => write(stream, b"+", shared).await,
        // Already logged and counted by the reset path.
        _ => {
            let _ = write(stream, b"-", shared).await;
            Err(Stop::Quiet)
        }
    }
}

/// How long a manager request may take: a connection to this port never
/// logs in (it counts against --max-pending-logins throughout), so
/// --login-timeout bounds it too.
fn request_limit(shared: &Shared) -> Duration {
    shared.read_timeout.min(shared.login_timeout)
}

async fn read_exact(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
    shared: &Shared,
) -> Result<(), Stop> {
    let mut got = 0;
    while got < buf.len() {
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buf[got..])).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(Stop::Fail(e.to_string())),
            Err(_) => {
                return Err(Stop::Fail(format!(
                    "no whole request within {:?}",
                    request_limit(shared)
                )))
            }
        };
        if n == 0 && got == 0 {
            return Err(Stop::Closed);
        }
        if n == 0 {
            return Err(Stop::Fail(format!(
                "connection closed {got} byte(s) into a {}-byte field",
                buf.len()
            )));
        }
        got += n;
    }
    Ok(())
}

/// Writes within the read timeout: a client that does not read its answer
/// cannot keep the task forever.
async fn write(stream: &mut TcpStream, bytes: &[u8], shared: &Shared) -> Result<(), Stop> {
    let limit = shared.read_timeout.max(Duration::from_secs(1));
    match tokio::time::timeout(limit, stream.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) | Err(_) => Err(Stop::Quiet),
    }
}
