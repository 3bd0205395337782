//! `keys`, the holder's name and the place in line for the Locking-Center
//! backend: lc-cli's Keys (action 17) on the lock port, so a client needs
//! only the lock address (and its TLS); a server that answers it `-` (a
//! reference server) is asked on its manager port (lock port + 1, or
//! `?manager=`) with `KEYX` instead.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::dial::{Dialer, LcStream};
use crate::backend::{tcp, BackendError, KeyInfo, LockMode, Result, WaiterInfo};
use crate::proto::listing::{Listing, ListingReader, WaiterReport};
use crate::proto::manager::{self, KeyReport};
use crate::proto::{self, Request};

/// The manager port's address for the lock server at `lock_addr`.
pub(super) fn manager_addr(lock_addr: &str) -> Result<String> {
    let bad = || BackendError::Other(format!("cannot derive the manager port from '{lock_addr}'"));
    let (host, port) = lock_addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let port = manager::port_for(port).ok_or_else(bad)?;
    Ok(format!("{host}:{port}"))
}

/// How long naming a holder may take in all (connect and answer, on the
/// lock port and, for a reference server, its manager port): a lookup is
/// best effort and must never hold up the answer it decorates (a `trylock`
/// on a held key answers within 50 ms, named or not), so it dials once,
/// with no retry of a refused port.
pub(super) const HOLDER_LIMIT: Duration = Duration::from_millis(40);
/// Of which the connect to a manager port: a filtered one (SYNs dropped)
/// costs this; a manager that accepts but does not answer costs
/// [`HOLDER_LIMIT`].
const HOLDER_CONNECT_LIMIT: Duration = Duration::from_millis(25);

/// The largest listing read (a million holds of 13-byte keys take 77 MB;
/// this is about three million): a peer that sends more is not believed.
const MAX_LISTING: usize = 256 << 20;

/// How often a waiter at a terminal asks its place in line.
pub(super) const PLACE_EVERY: Duration = Duration::from_secs(1);

/// How a port is dialled: `keys` retries a refused port for the whole
/// `--connect-timeout` (a server restarting); a holder lookup tries once
/// within [`HOLDER_LIMIT`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Dial {
    Retry(Duration),
    Once,
}

/// What the lock port said to Keys.
pub(super) enum Answered {
    Listing(Listing),
    /// `-`: a server without lc-cli's actions (a reference server).
    Unknown,
}

/// Which keys Keys asks for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Which<'a> {
    All,
    One(&'a str),
    /// Every key that starts with it (flags bit 2).
    Under(&'a str),
}

/// Keys for every key that starts with `prefix` (every key when it is
/// empty): listed by the server (a range of its table, whatever else it
/// holds), or, from a server before listings by prefix (its listing names
/// no prefix: it listed the one key so named), the whole listing again,
/// filtered here.
pub(super) async fn ask_under(
    dialer: &Dialer,
    prefix: &str,
    waiters: bool,
    dial: Dial,
    within: Duration,
) -> Result<Answered> {
    if prefix.is_empty() {
        return ask(dialer, Which::All, waiters, dial, within).await;
    }
    match ask(dialer, Which::Under(prefix), waiters, dial, within).await? {
        Answered::Listing(l) if l.prefix.is_none() => {
            let mut l = match ask(dialer, Which::All, waiters, dial, within).await? {
                Answered::Listing(l) => l,
                Answered::Unknown => return Ok(Answered::Unknown),
            };
            let p = prefix.as_bytes();
            l.holds.retain(|h| h.key.starts_with(p));
            l.waiters.retain(|w| w.key.starts_with(p));
            Ok(Answered::Listing(l))
        }
        answered => Ok(answered),
    }
}

/// Asks Keys on the lock port, through the same dialer as every other
/// request; all of it within `within` after the connection (`Dial::Once`:
/// the connection too).
pub(super) async fn ask(
    dialer: &Dialer,
    which: Which<'_>,
    waiters: bool,
    dial: Dial,
    within: Duration,
) -> Result<Answered> {
    let addr = dialer.addr.as_str();
    let unavailable = |reason: String| BackendError::Unavailable {
        server: addr.to_string(),
        reason,
    };
    let (key, prefix) = match which {
        Which::All => ("", false),
        Which::One(key) => (key, false),
        Which::Under(prefix) => (prefix, true),
    };
    let frame = proto::encode(&Request::Keys {
        key: key.as_bytes().to_vec(),
        waiters,
        // Field lists and marks: a server before them ignores the bit.
        fields: true,
        prefix,
    })
    .map_err(|e| BackendError::Other(e.to_string()))?;
    let started = Instant::now();
    let mut stream = match dial {
        Dial::Retry(t) => dialer.connect(t).await,
        Dial::Once => dialer.connect_once(within).await,
    }
    .map_err(unavailable)?;
    let left = match dial {
        Dial::Retry(_) => within,
        Dial::Once => within.saturating_sub(started.elapsed()),
    };
    let exchange = async {
        stream
            .write_all(&frame)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        read_listing(&mut stream, addr).await
    };
    tokio::time::timeout(left, exchange)
        .await
        .map_err(|_| unavailable(format!("no whole listing within {left:?}")))?
}

async fn read_listing(stream: &mut LcStream, addr: &str) -> Result<Answered> {
    let protocol = |reason: String| BackendError::Protocol {
        server: addr.to_string(),
        reason,
    };
    let mut reader = ListingReader::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| BackendError::Unavailable {
                server: addr.to_string(),
                reason: format!("reading the listing: {e}"),
            })?;
        if n == 0 {
            return match reader.total {
                0 => Err(BackendError::Unavailable {
                    server: addr.to_string(),
                    reason: "the server closed the connection without an answer".into(),
                }),
                got => Err(protocol(format!(
                    "the listing ended after {got} bytes, before its end record"
                ))),
            };
        }
        if reader.total == 0 && buf[..n] == [b'-'] {
            return Ok(Answered::Unknown);
        }
        if let Err(e) = reader.feed(&buf[..n]) {
            return Err(match reader.total {
                // Not a listing at all: a peer of another protocol.
                t if t == n && buf[0] != b'+' => super::probe::foreign(addr, &buf[..n]),
                _ => protocol(format!("a malformed listing: {e}")),
            });
        }
        if reader.done {
            return Ok(Answered::Listing(std::mem::take(&mut reader.listing)));
        }
        if reader.total > MAX_LISTING {
            return Err(protocol(format!(
                "a listing of more than {} MiB",
                MAX_LISTING >> 20
            )));
        }
    }
}

/// Our place in `key`'s line: how many live waiters are ahead of the one
/// whose peer is `us` (None when it is not among them: granted meanwhile,
/// or the server sees another address, behind a proxy or NAT).
pub(super) fn place_of(listing: &Listing, key: &str, us: SocketAddr) -> Option<usize> {
    let us = us.to_string();
    listing
        .waiters
        .iter()
        .filter(|w| w.key == key.as_bytes())
        .position(|w| w.peer == us.as_bytes())
}

/// `manager`: the address given in the server address (`?manager=`), else
/// the lock port + 1. `within`: how long in all (`Dial::Once`).
pub(super) async fn list_manager(
    lock_addr: &str,
    manager: Option<&str>,
    dial: Dial,
    within: Duration,
) -> Result<Vec<KeyInfo>> {
    let addr = match manager {
        Some(m) => m.to_string(),
        None => manager_addr(lock_addr)?,
    };
    let derived = manager.is_none();
    let unavailable = |reason: String| BackendError::Unavailable {
        server: format!("{addr} (the manager port of {lock_addr}, a server without lc-cli's Keys)"),
        reason: if derived {
            format!("{reason} (a manager elsewhere is given as lc://{lock_addr}?manager=HOST:PORT)")
        } else {
            reason
        },
    };
    let started = Instant::now();
    let mut stream = match dial {
        Dial::Retry(t) => tcp::connect(&addr, t).await.map_err(unavailable)?,
        Dial::Once => {
            let connect = HOLDER_CONNECT_LIMIT.min(within);
            tokio::time::timeout(connect, tokio::net::TcpStream::connect(&addr))
                .await
                .map_err(|_| unavailable(format!("no connection within {connect:?}")))?
                .map_err(|e| unavailable(e.to_string()))?
        }
    };
    // Once: the whole lookup within the limit; Retry: the answer within the
    // timeout again.
    let timeout = match dial {
        Dial::Retry(t) => t,
        Dial::Once => within.saturating_sub(started.elapsed()),
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
    Ok(reports.into_iter().map(key_info).collect())
}

/// A hold as `keys` shows it.
pub(super) fn key_info(r: KeyReport) -> KeyInfo {
    let mut fields = field_list(r.fields);
    // What the server adds to a grant: its slot (docs/request-fields.md).
    if let Some(slot) = r.slot {
        fields.push("slot", &slot.to_string());
    }
    KeyInfo {
        identity: r.identity.map(text),
        key: text(r.key),
        source: text(r.source),
        peer: (!r.peer.is_empty()).then(|| text(r.peer)),
        since: Some(r.since),
        waiting: r.waiting as usize,
        // A server before sessions cannot tell.
        kept: r.session.map(|session| !session),
        token: r.token,
        expires: r.expires,
        mode: r.mode.unwrap_or(LockMode::Exclusive),
        fields,
        mark: r.mark,
    }
}

/// A field list as a listing carries it (a list that does not parse is
/// shown as none).
fn field_list(bytes: Option<Vec<u8>>) -> crate::backend::fields::FieldList {
    bytes
        .and_then(|b| crate::backend::fields::FieldList::parse(&b).ok())
        .unwrap_or_default()
}

/// The bytes as text, moved (not copied) when they are UTF-8, as nearly
/// every key is; others with U+FFFD for what is not.
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The waiters of a listing, each with its place in its key's line.
pub(super) fn waiter_infos(waiters: Vec<WaiterReport>) -> Vec<WaiterInfo> {
    let mut out: Vec<WaiterInfo> = Vec::with_capacity(waiters.len());
    for w in waiters {
        let key = String::from_utf8_lossy(&w.key).into_owned();
        let place = match out.last() {
            Some(prev) if prev.key == key => prev.place + 1,
            _ => 0,
        };
        out.push(WaiterInfo {
            key,
            source: String::from_utf8_lossy(&w.source).into_owned(),
            peer: (!w.peer.is_empty()).then(|| String::from_utf8_lossy(&w.peer).into_owned()),
            since: Some(w.since),
            mode: w.mode,
            place,
            kept: Some(!w.session),
            identity: w
                .identity
                .filter(|i| !i.is_empty())
                .map(|i| String::from_utf8_lossy(&i).into_owned()),
            fields: field_list(w.fields),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn manager_is_the_next_port() {
        assert_eq!(manager_addr("127.0.0.1:22119").unwrap(), "127.0.0.1:22120");
        assert_eq!(manager_addr("[::1]:80").unwrap(), "[::1]:81");
        assert!(manager_addr("h:65535").is_err());
    }

    fn w(key: &str, peer: &str) -> WaiterReport {
        WaiterReport {
            key: key.into(),
            source: b"s".to_vec(),
            peer: peer.into(),
            since: SystemTime::UNIX_EPOCH,
            mode: LockMode::Exclusive,
            session: true,
            identity: None,
            fields: None,
        }
    }

    #[test]
    fn places_count_within_each_key() {
        let listing = Listing {
            holds: vec![],
            waiters: vec![
                w("a", "10.0.0.1:1"),
                w("b", "10.0.0.1:2"),
                w("b", "10.0.0.1:3"),
                w("b", "10.0.0.1:4"),
            ],
            prefix: None,
        };
        let us: SocketAddr = "10.0.0.1:4".parse().unwrap();
        assert_eq!(place_of(&listing, "b", us), Some(2));
        assert_eq!(place_of(&listing, "a", us), None);
        let places: Vec<(String, usize)> = waiter_infos(listing.waiters)
            .into_iter()
            .map(|i| (i.key, i.place))
            .collect();
        assert_eq!(
            places,
            [
                ("a".into(), 0),
                ("b".into(), 0),
                ("b".into(), 1),
                ("b".into(), 2)
            ]
        );
    }
}
