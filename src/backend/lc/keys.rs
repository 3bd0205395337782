//! `keys` for the Locking-Center backend: the manager port (lock port + 1)
//! answers lc-cli's `KEYX` command.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::backend::{tcp, BackendError, KeyInfo, Result};
use crate::proto::manager;

/// The manager port's address for the lock server at `lock_addr`.
pub fn manager_addr(lock_addr: &str) -> Result<String> {
    let bad = || BackendError::Other(format!("cannot derive the manager port from '{lock_addr}'"));
    let (host, port) = lock_addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let port = manager::port_for(port).ok_or_else(bad)?;
    Ok(format!("{host}:{port}"))
}

/// How long naming a holder may take in all (connect and answer): a lookup
/// is best effort and must never hold up the answer it decorates, so it
/// dials once, with no retry of a refused port.
pub const HOLDER_LIMIT: Duration = Duration::from_millis(100);
/// Of which the connect: a filtered manager port (SYNs dropped) costs this,
/// so a conflict's line still comes within 50 ms; a manager that accepts
/// but does not answer costs [`HOLDER_LIMIT`].
const HOLDER_CONNECT_LIMIT: Duration = Duration::from_millis(30);

/// How the manager port is dialled: `keys` retries a refused port for the
/// whole `--connect-timeout` (a server restarting); a holder lookup tries
/// once within [`HOLDER_LIMIT`].
#[derive(Debug, Clone, Copy)]
pub enum Dial {
    Retry(Duration),
    Once,
}

/// `manager`: the address given in the server address (`?manager=`), else
/// the lock port + 1.
pub async fn list(lock_addr: &str, manager: Option<&str>, dial: Dial) -> Result<Vec<KeyInfo>> {
    let timeout = match dial {
        Dial::Retry(t) => t,
        Dial::Once => HOLDER_LIMIT,
    };
    let addr = match manager {
        Some(m) => m.to_string(),
        None => manager_addr(lock_addr)?,
    };
    let derived = manager.is_none();
    let unavailable = |reason: String| BackendError::Unavailable {
        server: format!("{addr} (the manager port of {lock_addr})"),
        reason: if derived {
            format!("{reason} (a manager elsewhere is given as lc://{lock_addr}?manager=HOST:PORT)")
        } else {
            reason
        },
    };
    let started = tokio::time::Instant::now();
    let mut stream = match dial {
        Dial::Retry(t) => tcp::connect(&addr, t).await.map_err(unavailable)?,
        Dial::Once => {
            tokio::time::timeout(HOLDER_CONNECT_LIMIT, tokio::net::TcpStream::connect(&addr))
                .await
                .map_err(|_| unavailable(format!("no connection within {HOLDER_CONNECT_LIMIT:?}")))?
                .map_err(|e| unavailable(e.to_string()))?
        }
    };
    // Once: the whole lookup within the limit; Retry: the answer within the
    // timeout again, as before.
    let timeout = match dial {
        Dial::Retry(t) => t,
        Dial::Once => timeout.saturating_sub(started.elapsed()),
    };
    let exchange = async {
        stream
            .write_all(manager::KEYS_EXTENDED)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        Ok::<_, BackendError>(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| unavailable(format!("no answer within {timeout:?}")))??;
    let reports = manager::decode_keys_extended(&answer).ok_or_else(|| BackendError::Protocol {
        server: addr.clone(),
        reason: format!("malformed KEYX answer ({} bytes)", answer.len()),
    })?;
    Ok(reports
        .into_iter()
        .map(|r| KeyInfo {
            key: String::from_utf8_lossy(&r.key).into_owned(),
            source: String::from_utf8_lossy(&r.source).into_owned(),
            peer: (!r.peer.is_empty()).then(|| String::from_utf8_lossy(&r.peer).into_owned()),
            since: Some(r.since),
            waiting: r.waiting as usize,
            // A server before sessions cannot tell.
            kept: r.session.map(|session| !session),
            token: r.token,
            expires: r.expires,
            mode: r.mode.unwrap_or(crate::backend::LockMode::Exclusive),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_is_the_next_port() {
        assert_eq!(manager_addr("127.0.0.1:22119").unwrap(), "127.0.0.1:22120");
        assert_eq!(manager_addr("[::1]:80").unwrap(), "[::1]:81");
        assert!(manager_addr("h:65535").is_err());
    }
}
