//! A session hold on lc-cli's own server: the connection of the grant stays
//! open, a keeper task sends a heartbeat on it every quarter of the server's
//! session timeout, reclaims the hold on a new connection if it breaks, and
//! reports a loss: the server's `!` (a reset, someone's unlock), a reclaim
//! refused (the hold expired, or the server restarted without its log), or
//! no word from the server for two thirds of the timeout.
//!
//! The timing rule is ZooKeeper's: the server releases the hold once it has
//! not heard from us for the timeout, and it last heard from us no earlier
//! than `contact` (the send time of our last heartbeat it echoed, or of the
//! reclaim it granted). So SIGTERM goes to the command two thirds of the
//! timeout after `contact`, and it must be gone a twentieth of the timeout
//! before the server can release the key.

use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::dial::{Dialer, LcStream};
use super::LcBackend;

mod release;
use crate::backend::{BackendError, Expiry, HeldLock, LostReason, Result};
use crate::proto::{self, Answer, ReleaseKind, Request, HEARTBEAT, SESSION_LOST};

/// The longest answer to a lock request: a superseded request's rival
/// (two short fields and a field list).
const MAX_ANSWER: usize = 6 + 2 * proto::MAX_FIELD + proto::request::MAX_FIELDS;

/// A `-` followed by nothing for this long is a whole answer.
const UNKNOWN_AFTER: Duration = Duration::from_millis(300);

/// How long after a failed reconnection the next one is tried.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The command may run this long after the server last heard from us.
pub(super) fn term_after_contact(timeout: Duration) -> Duration {
    timeout * 2 / 3
}

/// The command must be gone this long after the server last heard from us.
pub(super) fn kill_after_contact(timeout: Duration) -> Duration {
    timeout - timeout / 20
}

/// A release asked of the keeper: answered on the session's connection, or
/// None when it has none (then it is sent on a new one).
type ReleaseAsk = oneshot::Sender<Option<Result<Answer>>>;

/// A session grant as its answer told it: the fencing token, the server's
/// session timeout and, from a server that took the feature `secret`, the
/// hold's secret (shown again by our reclaims; never printed).
pub(super) struct SessionGrant {
    pub token: u64,
    pub timeout: Duration,
    pub secret: Option<Secret>,
    /// A `--limit N` hold's slot, from a server that took `slots`.
    pub slot: Option<u32>,
}

/// A session hold's secret.
type Secret = [u8; proto::SECRET_LEN];

pub(super) struct LcSession {
    backend: LcBackend,
    key: String,
    token: u64,
    lost: watch::Receiver<Option<LostReason>>,
    /// The keeper's `contact`, for [`HeldLock::expiry`].
    contact: watch::Receiver<Instant>,
    timeout: Duration,
    asks: mpsc::Sender<(Option<proto::Ended>, ReleaseAsk)>,
    keeper: tokio::task::JoinHandle<()>,
    /// How the command ended, for the release (the server raises the
    /// key's mark on a 0); with the request's `--order`.
    ended: Option<proto::Ended>,
    order: Option<u64>,
    /// A `--limit N` hold's slot (`LC_SLOT`).
    slot: Option<u32>,
}

impl LcSession {
    /// Takes over the connection a session grant came on; `sent` is when
    /// the request that got it was sent.
    pub(super) fn start(
        backend: LcBackend,
        key: &str,
        stream: LcStream,
        grant: SessionGrant,
        order: Option<u64>,
    ) -> LcSession {
        let SessionGrant {
            token,
            timeout,
            secret,
            slot,
        } = grant;
        let (lost_tx, lost) = watch::channel(None);
        let (asks, ask_rx) = mpsc::channel(1);
        // The server started its clock at the grant, before we read it;
        // the heartbeat sent at once below gives a true bound within a
        // round trip.
        let (contact_tx, contact) = watch::channel(Instant::now());
        let keeper = Keeper {
            dialer: backend.dialer.clone(),
            connect_timeout: backend.connect_timeout,
            key: key.as_bytes().to_vec(),
            token,
            secret,
            timeout,
            stream: Some(stream),
            contact: contact_tx,
            ping_sent: None,
            lost: lost_tx,
            notice: Vec::new(),
        };
        LcSession {
            backend,
            key: key.to_string(),
            token,
            lost,
            contact,
            timeout,
            asks,
            keeper: tokio::spawn(keeper.run(ask_rx)),
            ended: None,
            order,
            slot,
        }
    }
}

impl Drop for LcSession {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

#[async_trait]
impl HeldLock for LcSession {
    fn token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn slot(&self) -> Option<u32> {
        self.slot
    }

    fn expiry(&self) -> Option<Expiry> {
        let contact = *self.contact.borrow();
        Some(Expiry {
            term_at: (contact + term_after_contact(self.timeout)).into_std(),
            kill_at: (contact + kill_after_contact(self.timeout)).into_std(),
        })
    }

    async fn lost(&mut self) -> LostReason {
        let lost = match self.lost.wait_for(|l| l.is_some()).await {
            Ok(l) => l.clone(),
            Err(_) => None,
        };
        match lost {
            Some(reason) => reason,
            // The keeper is gone (only after a release): nothing to lose.
            None => std::future::pending().await,
        }
    }

    fn command_ended(&mut self, status: i32) {
        self.ended = Some(proto::Ended {
            status,
            order: self.order,
            keep_ms: None,
        });
    }

    async fn release(&mut self) -> Result<()> {
        let again = self
            .ended
            .filter(|_| self.backend.dialer.greeting().named(proto::FEATURE_QUEUES));
        match self.ask_release(self.ended, again).await? {
            // `#`: not held under our token (taken away): it is not ours to free.
            Answer::Ok | Answer::Busy => Ok(()),
            Answer::Fail => Err(BackendError::NotReleased {
                server: self.backend.addr.clone(),
                key: self.key.clone(),
                reason: "it answered '-' (it could not record the release; the key is still held)"
                    .to_string(),
            }),
        }
    }

    /// `--hold-at-least` (`expire`: the rest of the window): see `session/release.rs`.
    /// Without `expire` never asked for: a detached hold is a classic one.
    async fn detach(mut self: Box<Self>, expire: Option<std::time::Duration>) -> Result<()> {
        match expire {
            Some(rest) => self.keep(rest).await,
            None => Ok(()),
        }
    }
}

struct Keeper {
    dialer: Dialer,
    connect_timeout: Duration,
    key: Vec<u8>,
    token: u64,
    /// The hold's secret, for reclaims (None: the server sent none).
    secret: Option<Secret>,
    timeout: Duration,
    /// None while the connection is broken and not yet reclaimed.
    stream: Option<LcStream>,
    /// The server last heard from us no earlier than this (shared with the
    /// session, for the guardian's deadlines).
    contact: watch::Sender<Instant>,
    /// The send time of the oldest heartbeat not yet echoed.
    ping_sent: Option<Instant>,
    lost: watch::Sender<Option<LostReason>>,
    /// A cancel notice (`>`) read in part.
    notice: Vec<u8>,
}

impl Keeper {
    async fn run(mut self, mut asks: mpsc::Receiver<(Option<proto::Ended>, ReleaseAsk)>) {
        let every = self.timeout / 4;
        let mut next_ping = Instant::now();
        let mut reconnect_at = Instant::now();
        let mut buf = [0u8; 64];
        while self.lost.borrow().is_none() {
            let term_at = self.contact() + term_after_contact(self.timeout);
            let connected = self.stream.is_some();
            tokio::select! {
                ask = asks.recv() => {
                    if let Some((ended, ask)) = ask {
                        let _ = ask.send(self.release_here(ended).await);
                    }
                    return;
                }
                _ = tokio::time::sleep_until(term_at) => self.silent(),
                _ = tokio::time::sleep_until(next_ping), if connected => {
                    next_ping = Instant::now() + every;
                    self.ping().await;
                }
                read = read_some(&mut self.stream, &mut buf), if connected => match read {
                    Some(n) => self.heard(&buf[..n]),
                    None => {
                        self.stream = None;
                        reconnect_at = Instant::now();
                    }
                },
                _ = tokio::time::sleep_until(reconnect_at), if !connected => {
                    let deadline = term_at;
                    if !matches!(tokio::time::timeout_at(deadline, self.reclaim()).await, Ok(true)) {
                        reconnect_at = Instant::now() + RECONNECT_PAUSE;
                    } else {
                        next_ping = Instant::now() + every;
                    }
                }
            }
        }
        // Lost: nothing more to keep; a release goes on a new connection.
        self.stream = None;
        if let Some((_, ask)) = asks.recv().await {
            let _ = ask.send(None);
        }
    }

    fn contact(&self) -> Instant {
        *self.contact.borrow()
    }

    /// The server heard from us at `sent` (it answered what we sent then).
    fn heard_at(&mut self, sent: Instant) {
        self.contact.send_if_modified(|c| {
            let later = sent > *c;
            *c = (*c).max(sent);
            later
        });
    }

    fn lose(&mut self, reason: LostReason) {
        self.stream = None;
        let _ = self.lost.send(Some(reason));
    }

    fn silent(&mut self) {
        let reason = format!(
            "no word from the server for two thirds of its session timeout ({:?}), after which it releases the hold",
            self.timeout
        );
        let by = self.contact() + kill_after_contact(self.timeout);
        self.lose(LostReason::kill_by(reason, by.into_std()));
    }

    async fn ping(&mut self) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        let sent = Instant::now();
        if stream.write_all(&[HEARTBEAT]).await.is_err() {
            self.stream = None;
            return;
        }
        self.ping_sent.get_or_insert(sent);
    }

    fn heard(&mut self, bytes: &[u8]) {
        if !self.notice.is_empty() {
            self.notice.extend_from_slice(bytes);
            return self.take_notice();
        }
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                proto::CANCEL_NOTICE => {
                    self.notice.extend_from_slice(&bytes[i..]);
                    return self.take_notice();
                }
                HEARTBEAT => {
                    if let Some(sent) = self.ping_sent.take() {
                        self.heard_at(sent);
                    }
                }
                SESSION_LOST => {
                    return self.lose(LostReason::new(
                        "the server took the hold away (a reset, or someone's unlock)",
                    ))
                }
                _ => {
                    // Not the protocol: drop the connection and reclaim.
                    self.stream = None;
                    return;
                }
            }
        }
    }

    /// A whole cancel notice: a newer `--cancel-running` request asks the
    /// command to stop (the hold is still ours, released as usual).
    fn take_notice(&mut self) {
        match proto::parse_rival(&self.notice) {
            None => {}
            Some(Ok((by, _))) => {
                self.notice.clear();
                self.lose(LostReason::cancelled(super::rival(by)));
            }
            Some(Err(())) => {
                // Not the protocol: drop the connection and reclaim.
                self.notice.clear();
                self.stream = None;
            }
        }
    }

    /// One attempt to take the hold back on a new connection. True if the
    /// session goes on; a refusal is a loss.
    async fn reclaim(&mut self) -> bool {
        let sent = Instant::now();
        let frame = proto::encode(&Request::Reclaim {
            key: self.key.clone(),
            token: self.token,
            secret: self.secret,
        })
        .expect("the key was checked before the grant");
        let Ok(mut stream) = self.dialer.connect(self.connect_timeout).await else {
            return false;
        };
        if stream.write_all(&frame).await.is_err() {
            return false;
        }
        match read_grant(&mut stream).await {
            Some(Granted::Session(..)) => {
                self.heard_at(sent);
                self.ping_sent = None;
                self.stream = Some(stream);
                true
            }
            Some(Granted::Lost) => {
                self.lose(LostReason::new(format!(
                    "the server no longer holds it under token {}: it was released after the connection had been gone for its session timeout ({:?}), reset, or the server restarted without --data",
                    self.token, self.timeout
                )));
                false
            }
            Some(Granted::NotAllowed(reason)) => {
                self.lose(LostReason::new(format!(
                    "the server refused to give it back: {reason}"
                )));
                false
            }
            _ => {
                // A token rotated out (SIGHUP) while the connection was down.
                if let Some(reason) = self.dialer.greeting().refusal() {
                    self.lose(LostReason::new(format!(
                        "the server refused the reconnection: {reason}"
                    )));
                }
                false
            }
        }
    }

    /// The release, on the session's connection if it has one.
    async fn release_here(&mut self, ended: Option<proto::Ended>) -> Option<Result<Answer>> {
        let stream = self.stream.as_mut()?;
        let frame = proto::encode(&Request::Release {
            key: self.key.clone(),
            kind: ReleaseKind::Token(self.token),
            ended: ended.filter(|e| e.keep_ms.is_some() || stream.took_queues()),
        })
        .expect("the key was checked before the grant");
        stream.write_all(&frame).await.ok()?;
        let limit = self.connect_timeout + Duration::from_secs(1);
        let answer = tokio::time::timeout(limit, async {
            let mut b = [0u8; 1];
            loop {
                match stream.read(&mut b).await {
                    Ok(1) if b[0] == HEARTBEAT => continue,
                    Ok(1) if b[0] == SESSION_LOST => return Some(Answer::Busy),
                    Ok(1) => return Answer::from_byte(b[0]),
                    _ => return None,
                }
            }
        });
        answer.await.ok().flatten().map(Ok)
    }
}

/// Some bytes from the connection; None when it ended or broke.
async fn read_some(stream: &mut Option<LcStream>, buf: &mut [u8]) -> Option<usize> {
    match stream.as_mut()?.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// What a session frame was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Granted {
    /// `=`: the token, the server's session timeout and, from a server
    /// that took the features `secret` and `slots`, a session hold's
    /// secret and a `--limit N` hold's slot.
    Session(proto::grant::GrantAnswer),
    /// `!`: refused (withdrawn, not recorded, not held any more).
    Lost,
    /// `#`: a SessionTryLock found the key held.
    Busy,
    /// `~`: the key is held or waited for in this mode, which ours cannot
    /// join.
    Conflict(crate::mode::LockMode),
    /// `-` alone: the server does not know the action (a reference server).
    Unknown,
    /// Anything else: not the protocol.
    Foreign(Vec<u8>),
    /// The server refused our TLS connection (a client certificate it
    /// does not take): the reason.
    Refused(String),
    /// `%`: the token's role may not (a reclaim of another token's hold).
    NotAllowed(String),
    /// `^`: `--newest`, superseded by a newer request (who).
    Superseded(proto::RivalWire),
    /// `<`: `--order` below the key's mark (the mark).
    Outdated(u64),
    /// `@`: queued, with this ticket (the answer is still to come).
    Ticket(u64),
}

/// Reads the answer to a session or mode frame; None if the connection
/// ended or broke first.
pub(super) async fn read_grant(stream: &mut LcStream) -> Option<Granted> {
    read_grant_noting(stream, &mut None).await
}

/// [`read_grant`], a waiter's ticket (`@`, before its answer) noted in
/// `ticket` on the way.
pub(super) async fn read_grant_noting(
    stream: &mut LcStream,
    ticket: &mut Option<u64>,
) -> Option<Granted> {
    let mut buf = [0u8; MAX_ANSWER];
    let mut len = 0;
    loop {
        let only_dash = buf[..len] == [b'-'];
        let read = stream.read(&mut buf[len..]);
        let n = if only_dash {
            // A `-` alone and nothing more for a moment: the reference's.
            // (A reset instead of a close, from a server that closed with
            // bytes unread, is that too.)
            match tokio::time::timeout(UNKNOWN_AFTER, read).await {
                Ok(Ok(n)) => n,
                Ok(Err(_)) | Err(_) => return Some(Granted::Unknown),
            }
        } else {
            match read.await {
                Ok(n) => n,
                Err(e) => return super::dial::refusal(&e).map(Granted::Refused),
            }
        };
        if n == 0 {
            return match &buf[..len] {
                [] => None,
                [b'-'] => Some(Granted::Unknown),
                other => Some(Granted::Foreign(other.to_vec())),
            };
        }
        len += n;
        // The ticket first: noted, and the bytes after it are the answer.
        if len >= proto::TICKET_LEN && buf[0] == proto::TICKET {
            *ticket = proto::parse_u64(&buf[..proto::TICKET_LEN], proto::TICKET);
            buf.copy_within(proto::TICKET_LEN..len, 0);
            len -= proto::TICKET_LEN;
        }
        if len == 0 || (buf[0] == proto::TICKET) {
            continue;
        }
        if let Some(answer) = judge(stream, &buf[..len]) {
            return Some(answer);
        }
    }
}

/// The answer `buf` (the bytes read so far) is, or None while more are
/// needed.
fn judge(stream: &LcStream, buf: &[u8]) -> Option<Granted> {
    let len = buf.len();
    let foreign = || Some(Granted::Foreign(buf.to_vec()));
    match buf[0] {
        proto::SESSION_GRANTED => {
            // The Hello's answer (read before these bytes) said whether
            // a secret field and a slot field follow.
            let tail = stream.grant_tail();
            let whole = match proto::grant::grant_len(buf, tail) {
                Some(whole) if whole > MAX_ANSWER => return foreign(),
                Some(whole) if len >= whole => whole,
                _ => return None,
            };
            match proto::grant::parse_grant(&buf[..whole], tail) {
                Some(g) if whole == len => Some(Granted::Session(g)),
                _ => foreign(),
            }
        }
        proto::MODE_CONFLICT if len < proto::MODE_CONFLICT_LEN => None,
        proto::MODE_CONFLICT => match proto::parse_mode_conflict(buf) {
            Some(theirs) => Some(Granted::Conflict(theirs)),
            None => foreign(),
        },
        proto::NOT_ALLOWED => match proto::parse_hello(buf, false) {
            None => None,
            Some((proto::HelloAnswer::Refused(reason), _)) => Some(Granted::NotAllowed(reason)),
            Some(_) => foreign(),
        },
        proto::TICKET | proto::OUTDATED if len < proto::TICKET_LEN => None,
        proto::TICKET | proto::OUTDATED => match proto::parse_u64(buf, buf[0]) {
            Some(n) if buf[0] == proto::TICKET => Some(Granted::Ticket(n)),
            Some(n) => Some(Granted::Outdated(n)),
            None => foreign(),
        },
        proto::SUPERSEDED => match proto::parse_rival(buf) {
            None => None,
            Some(Ok((by, used))) if used == len => Some(Granted::Superseded(by)),
            Some(_) => foreign(),
        },
        SESSION_LOST if len == 1 => Some(Granted::Lost),
        b'#' if len == 1 => Some(Granted::Busy),
        // A reference server closes after its `-`: wait for the close,
        // so a `-ERR ...` line is not taken for it.
        b'-' if len == 1 => None,
        _ => foreign(),
    }
}
