//! Reaching a TCP service within `--connect-timeout`: "how long to keep
//! trying", so a refused connection (a server restarting) is tried again
//! with a short backoff until the time is up, not given up at once.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// The first pause after a refusal; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Connects to `addr`, retrying refused connections until `timeout` has
/// passed. The error says why the last attempt failed, and that time ran
/// out if it did.
pub(crate) async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, String> {
    let deadline = Instant::now() + timeout;
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0u32;
    let mut last: Option<io::Error> = None;
    loop {
        attempts += 1;
        let error = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => e,
            Err(_) => {
                return Err(match last {
                    Some(e) => format!("{e} ({} attempts within {timeout:?})", attempts - 1),
                    None => format!("no connection within {timeout:?}"),
                })
            }
        };
        if !retried(&error) {
            return Err(error.to_string());
        }
        if Instant::now() >= deadline {
            return Err(format!("{error} ({attempts} attempts within {timeout:?})"));
        }
        last = Some(error);
        tokio::time::sleep_until((Instant::now() + backoff).min(deadline)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Errors of a server that is not there yet (or restarting), as opposed to
/// an address that can never work.
fn retried(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_port_is_tried_until_the_timeout() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let addr = format!("127.0.0.1:{port}");
        let started = std::time::Instant::now();
        let err = connect(&addr, Duration::from_millis(400))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}: {err}");
        assert!(took < Duration::from_millis(1500), "{took:?}: {err}");
        assert!(err.contains("attempts"), "{err}");
    }
}
