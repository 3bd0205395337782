//! Session holds (lc-cli's actions 8 to 11): a hold that lasts while its
//! holder is heard from. After its grant the connection carries heartbeats
//! (`.` echoed), the holder's SessionRelease, and the server's `!` when the
//! hold is taken away. A holder not heard from for the reclaim grace
//! (connection closed, or silent) loses the key to the next waiter; until
//! then it may Reclaim it on a new connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::stream::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::conn::{not_allowed, who};
use super::events::as_identity;
use super::events::now_held_by;
use super::hello::Greeted;
use super::keep;
use super::metrics::Counters;
use super::table::{End, Expiry, GrantId, LinkEnd, LinkState, NotYours, ReclaimRefused, Whose};
use super::tokens;
use super::unlock;
use super::Shared;
use crate::backend::history::Ending;
use crate::proto::printable;
use crate::proto::{self, Decoded, ReleaseKind, Request, HEARTBEAT, SESSION_LOST};

/// How soon an expiry the log could not record (a full disk) is tried
/// again (at most the reclaim grace).
const EXPIRY_RETRY: Duration = Duration::from_secs(1);

/// The refusal of a Reclaim that does not show the hold's secret.
pub(super) const NO_SECRET: &str =
    "the hold was granted with a secret, which only its holder has: a reclaim must show it";

/// Serves session hold `id` of `key` on `stream` until it ends: released by
/// the holder, taken away (`!` is sent), expired, or moved to another
/// connection by a reclaim.
///
/// Runs as a task of its own (see [`spawn_hold`]), so a held session costs
/// this future and not also the connection's.
pub(super) async fn hold(
    mut stream: Stream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    key: Vec<u8>,
    id: GrantId,
    mut link: LinkEnd,
) {
    let timeout = shared.reclaim_grace;
    let mut due = Instant::now() + timeout;
    // Heartbeats and one SessionRelease frame: action, key, token field
    // (with the command's status and order, and `--hold-at-least`'s keep).
    let mut buf = [0u8; 3 + proto::MAX_FIELD + 28];
    let mut len = 0;
    let mut connected = true;
    let mut failures = 0;
    loop {
        tokio::select! {
            changed = &mut link.changed => {
                if changed.is_ok() {
                    // A newer `--cancel-running` request asks the command
                    // to stop: told, and the hold goes on. (Only a hold
                    // asked with an ExtendedLock can be asked to stop: its
                    // client took the feature `queues`, and reads `>`.)
                    if connected {
                        Box::pin(tell_cancel(&mut stream, &shared, &key, id)).await;
                    }
                    match shared.table.rearm(&key, id, link.gen) {
                        Some(rx) => {
                            link.changed = rx;
                            continue;
                        }
                        None => return,
                    }
                }
                if shared.table.link_state(&key, id, link.gen) != LinkState::Moved && connected {
                    // Taken away (a reset, someone's Unlock): say so.
                    let _ = Box::pin(stream.write_all(&[SESSION_LOST])).await;
                }
                return;
            }
            _ = tokio::time::sleep_until(due.into()) => {
                // Boxed, as below.
                match Box::pin(check_expiry(&shared, &key, id, link.gen, connected, &mut failures)).await {
                    Some(at) => due = at,
                    None => return,
                }
            }
            read = stream.read(&mut buf[len..]), if connected => {
                let n = match read {
                    Ok(0) | Err(_) => 0,
                    Ok(n) => n,
                };
                if n == 0 {
                    // The holder may reclaim it within the timeout.
                    connected = false;
                    shared.events.session(format_args!(
                        "{peer}: connection of the session hold of '{}' ended; released {timeout:?} after it was last heard from unless reclaimed",
                        printable(&key)
                    ));
                    continue;
                }
                len += n;
                // Boxed: what runs only now and then stays out of the
                // future every held session keeps.
                let request =
                    Box::pin(take_requests(&mut stream, &shared, &key, id, link.gen, &mut buf, &mut len)).await;
                match request {
                    Some(Next::Release(asked)) => {
                        let Released { key: k, token, ended } = *asked;
                        // With tokens, the holds of this session's token only.
                        let owner = shared.table.owner_of(&key, id);
                        let whose = match (&shared.tokens, &owner) {
                            (Some(_), Some(o)) => Whose::Only(o.fingerprint),
                            _ => Whose::Any,
                        };
                        // `--hold-at-least`: kept for the rest of its window instead.
                        let answer = match ended.and_then(|e| e.keep_ms) {
                            Some(ms) => Box::pin(keep::keep(&shared, peer, &k, token, whose, ms)).await,
                            None => Box::pin(unlock::release_by(&shared, peer, &k, ReleaseKind::Token(token), whose, owner.as_ref(), ended)).await,
                        };
                        let _ = match answer {
                            Ok(answer) => stream.write_all(&[answer.byte()]).await,
                            Err(NotYours) => stream.write_all(&proto::not_allowed(tokens::NOT_YOURS)).await,
                        };
                        // The connection's part in the session is over. A
                        // hold released ends this task at the next turn (its
                        // link is dropped); one the log could not release
                        // (`-`) stays, and its holder, who exits now, was
                        // heard: it expires as any other, a timeout from now.
                        shared.table.heard(&key, id, link.gen);
                        connected = false;
                    }
                    Some(Next::Stop) => connected = false,
                    None => {}
                }
            }
        }
    }
}

/// Tells the holder of hold `id` that a newer `--cancel-running` request
/// asks its command to stop: `>` and who (boxed by the caller: rare).
async fn tell_cancel(stream: &mut Stream, shared: &Shared, key: &[u8], id: GrantId) {
    if let Some(by) = shared.table.cancel_notice(key, id) {
        let notice = proto::rival_answer(proto::CANCEL_NOTICE, &by);
        let _ = stream.write_all(&notice).await;
    }
}

/// A SessionRelease on a session's connection: the key, the token, and
/// how the command ended (feature `queues`).
struct Released {
    key: Vec<u8>,
    token: u64,
    ended: Option<proto::Ended>,
}

/// What a session's connection asks after its heartbeats (kept small: it is
/// part of every held session's future).
enum Next {
    /// Boxed: rare, and this is part of every held session's future.
    Release(Box<Released>),
    /// Anything but a SessionRelease ends the connection's part in the
    /// session: it is not the protocol.
    Stop,
}

/// Answers the heartbeats at the start of `buf`; returns what the first
/// whole request after them asks.
async fn take_requests(
    stream: &mut Stream,
    shared: &Shared,
    key: &[u8],
    id: GrantId,
    gen: u64,
    buf: &mut [u8],
    len: &mut usize,
) -> Option<Next> {
    let beats = buf[..*len].iter().take_while(|&&b| b == HEARTBEAT).count();
    if beats > 0 {
        shared.table.heard(key, id, gen);
        buf.copy_within(beats..*len, 0);
        *len -= beats;
        let _ = stream.write_all(&[HEARTBEAT]).await;
    }
    if *len == 0 {
        return None;
    }
    match proto::decode(&buf[..*len]) {
        Ok(Decoded::Frame(
            Request::Release {
                key,
                kind: ReleaseKind::Token(token),
                ended,
            },
            _,
        )) => Some(Next::Release(Box::new(Released { key, token, ended }))),
        Ok(Decoded::Incomplete) if *len < buf.len() => None,
        _ => Some(Next::Stop),
    }
}

/// Expires session hold `id` if its holder has been silent for the
/// reclaim grace; when to check again, or None once the hold is gone.
///
/// The key passes on only once the expiry is in the log. If the log cannot
/// record it (a full disk) the hold stays, in memory as in the log, and the
/// expiry is tried again every [`EXPIRY_RETRY`] until it is recorded (or the
/// hold ends otherwise: a reset, a reclaim); `failures` counts the tries
/// that failed, so the error is logged once, not every second.
/// `connected`: its connection is still open (the hold is kept in the
/// key's history as `lost`: its holder was there but silent), else
/// `freed` (its holder went away and did not reclaim it).
async fn check_expiry(
    shared: &Shared,
    key: &[u8],
    id: GrantId,
    gen: u64,
    connected: bool,
    failures: &mut u32,
) -> Option<Instant> {
    let timeout = shared.reclaim_grace;
    let durable = match shared.table.expire(key, id, gen, timeout) {
        Expiry::NotYet(at) => return Some(at),
        Expiry::Gone => return None,
        Expiry::Due(durable) => durable,
    };
    if let Err(e) = durable.wait().await {
        if *failures == 0 {
            Counters::bump(&shared.counters.refused);
            shared.events.error(format_args!(
                "expiry of the session hold of '{}' (not heard from for {timeout:?}) not recorded in the log, the key stays held until it is (tried every {:?}): {e}",
                printable(key),
                EXPIRY_RETRY.min(timeout)
            ));
        }
        *failures = failures.saturating_add(1);
        return Some(Instant::now() + EXPIRY_RETRY.min(timeout));
    }
    // None: a reset released it meanwhile (as durably).
    let end = End::new(match connected {
        true => Ending::Lost,
        false => Ending::Freed,
    });
    let (holder, next) = shared.table.finish_release(key, id, end)?;
    Counters::bump(&shared.counters.releases);
    let late = match *failures {
        0 => String::new(),
        n => format!(", recorded at try {}", n + 1),
    };
    shared.events.session(format_args!(
        "{}: session hold of '{}' by '{}'{} expired (not heard from for {timeout:?}{late}){}",
        holder.peer,
        printable(key),
        printable(&holder.source),
        as_identity(holder.owner.as_ref()),
        now_held_by(&next)
    ));
    None
}

/// What a Reclaim shows: the hold's token and secret, which holds the
/// caller may take back (`whose`: with tokens, a `lock` token its own),
/// and what its Hello said (its identity, which an ownerless hold takes).
pub(super) struct Claim<'a> {
    pub token: u64,
    pub secret: Option<[u8; proto::SECRET_LEN]>,
    pub whose: Whose,
    pub greeted: &'a Greeted,
}

/// Reclaim: a holder whose connection broke takes its hold back on this
/// one; `!` if it is not held under that token any more.
///
/// A hold granted with a secret is given back only to a Reclaim that
/// shows it; with tokens, another token's hold is refused too. Either
/// refusal is `%` and its reason to a connection that began with a Hello
/// (`!` to one that did not), and logged with the caller's identity.
pub(super) async fn reclaim(
    mut stream: Stream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    claim: Claim<'_>,
) {
    let Claim {
        token,
        secret,
        whose,
        greeted,
    } = claim;
    let caller = greeted.caller.as_ref();
    let owner = caller.map(|c| c.owner.clone());
    let refused = match shared
        .table
        .reclaim_by(&key, token, secret.as_ref(), whose, owner)
    {
        Ok(Some(g)) => Ok(g),
        Ok(None) => {
            let _ = stream.write_all(&[SESSION_LOST]).await;
            return;
        }
        Err(ReclaimRefused::NotYours) => Err(tokens::NOT_YOURS),
        Err(ReclaimRefused::Secret) => Err(NO_SECRET),
    };
    let g = match refused {
        Ok(g) => g,
        Err(reason) if greeted.hello => {
            let why = format!("{reason} (reclaim of '{}')", printable(&key));
            not_allowed(stream, peer, shared, caller.map(|c| &c.owner), &why).await;
            return;
        }
        Err(reason) => {
            Counters::bump(&shared.counters.refused);
            shared.events.limited(
                Some(peer.ip()),
                "refusal",
                format_args!(
                    "{peer}: refused: {reason} (reclaim of '{}')",
                    printable(&key)
                ),
            );
            let _ = stream.write_all(&[SESSION_LOST]).await;
            return;
        }
    };
    shared.events.session(format_args!(
        "{}: reclaimed the session hold of '{}' (token {token}){}",
        who(peer, caller.map(|c| &c.owner)),
        printable(&key),
        match g.owner.as_ref() {
            Some(o) if caller.is_none_or(|c| c.owner.fingerprint != o.fingerprint) =>
                format!(", held{}", as_identity(Some(o))),
            _ => String::new(),
        }
    ));
    // Nothing new to log: the hold is the one the log has. If the answer
    // cannot be delivered the hold stays, and this task still expires it.
    // The secret is not sent again: its holder has it.
    let mut answer = match greeted.secret {
        true => proto::session_grant_with_secret(token, shared.reclaim_grace, &[]),
        false => proto::session_grant(token, shared.reclaim_grace).to_vec(),
    };
    // The hold's slot, kept across the reclaim (the feature `slots`).
    if greeted.slots {
        proto::grant::push_slot(&mut answer, g.slot);
    }
    let _ = stream.write_all(&answer).await;
    if let Some(link) = g.link {
        spawn_hold(stream, peer, shared, key, g.id, link);
    }
}

/// Serves a session hold in a task of its own; the connection's task ends.
pub(super) fn spawn_hold(
    stream: Stream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    id: GrantId,
    link: LinkEnd,
) {
    // The connection stays counted against the limits while its hold runs.
    let tracked = shared.limits.again(peer);
    let work = hold(stream, peer, shared.clone(), key, id, link);
    tokio::spawn(async move {
        let _tracked = tracked;
        work.await
    });
}

/// Expires a session hold restored from the log unless its holder reclaims
/// it within the reclaim grace.
pub(super) async fn orphan(shared: Arc<Shared>, key: Vec<u8>, id: GrantId, mut link: LinkEnd) {
    let timeout = shared.reclaim_grace;
    let mut due = Instant::now() + timeout;
    let mut failures = 0;
    loop {
        tokio::select! {
            changed = &mut link.changed => match changed {
                // A cancel notice: its holder hears it when it reclaims.
                Ok(()) => match shared.table.rearm(&key, id, link.gen) {
                    Some(rx) => link.changed = rx,
                    None => return,
                },
                Err(_) => return,
            },
            _ = tokio::time::sleep_until(due.into()) => {
                match check_expiry(&shared, &key, id, link.gen, false, &mut failures).await {
                    Some(at) => due = at,
                    None => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// Each held session is one parked `hold` future (boxed, behind the
    /// connection's own): keep it small, it is what 10,000 holders cost.
    #[tokio::test]
    async fn a_held_session_stays_small() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let c = super::super::stream::Stream::Plain(
            tokio::net::TcpStream::connect(addr).await.unwrap(),
        );
        let shared = std::sync::Arc::new(super::super::Shared::new(
            super::super::table::Table::new(),
            super::super::events::Events::new(false),
            &super::super::ServerOptions::default(),
        ));
        let (_tx, rx) = tokio::sync::oneshot::channel();
        let link = super::LinkEnd {
            gen: 0,
            changed: rx,
        };
        let f = super::hold(c, addr, shared, b"k".to_vec(), 1, link);
        let size = std::mem::size_of_val(&f);
        eprintln!("hold future: {size} bytes");
        assert!(size <= 700, "the session future is {size} bytes");
    }
}
