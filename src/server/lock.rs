//! Lock, SessionLock and the mode locks (12, 14): granted at once if the
//! request may hold the key now, else queued in arrival order until its turn
//! or until the client hangs up (which withdraws it). A session grant then
//! serves the hold on the same connection (`session.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::stream::Stream;
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

use super::grant;
use super::metrics::Counters;
use super::table::{Ask, GrantId, Left, LockOutcome, Notice, Withdrawal};
use super::Shared;
use crate::proto::{self, Hold};

/// How a lock request's grant is answered: by its hold, and with the
/// hold's secret field when its connection took the feature `secret`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Answering {
    pub hold: Hold,
    pub secret: bool,
    /// The connection took the feature `queues`: a queued request is
    /// told its ticket (`@`).
    pub queues: bool,
    /// The connection took the feature `slots`: the grant ends with the
    /// hold's slot field.
    pub slots: bool,
}

/// Serves a Lock up to its wait: a grant at once or a refusal is answered
/// here; a queued request is returned as its [`Parked`] waiter.
pub(super) async fn serve(
    mut stream: Stream,
    shared: &Arc<Shared>,
    key: Vec<u8>,
    ask: Ask,
    answer: Answering,
) -> Option<Parked> {
    let peer = ask.peer;
    match shared.table.lock(&key, &ask) {
        LockOutcome::Granted(g) => {
            shared
                .events
                .grant(&key, &ask.source, peer, ask.owner.as_ref());
            grant::hand_over(stream, peer, shared, key, g, answer).await;
            None
        }
        LockOutcome::Queued(id, notice, ticket) => {
            shared
                .events
                .queued(&key, &ask.source, peer, ask.owner.as_ref());
            if answer.queues {
                let _ = stream
                    .write_all(&proto::with_u64(proto::TICKET, ticket))
                    .await;
            }
            Some(Parked {
                stream,
                shared: shared.clone(),
                names: Names::new(&key, &ask.source),
                id,
                notice,
                answer,
            })
        }
        LockOutcome::Conflict(theirs) => {
            let _ = stream.write_all(&answer.hold.conflict(theirs)).await;
            None
        }
        LockOutcome::Superseded(by) => {
            shared
                .events
                .superseded(&key, &ask.source, peer, &by.source);
            let _ = stream
                .write_all(&proto::rival_answer(proto::SUPERSEDED, &by))
                .await;
            None
        }
        LockOutcome::Outdated(mark) => {
            shared.events.outdated(&key, &ask.source, peer, mark);
            let _ = stream
                .write_all(&proto::with_u64(proto::OUTDATED, mark))
                .await;
            None
        }
        LockOutcome::OverWaits(cap) => {
            let owner = ask.owner.as_ref();
            let reason = super::quota::over_waits(owner.map_or("", |o| &o.name), cap);
            super::conn::not_allowed(stream, peer, shared, owner, &reason).await;
            None
        }
    }
}

/// A queued waiter: what its connection keeps until its turn or its
/// hang-up, and nothing more (each waiter costs this and its task; the
/// table keeps the rest of its request, the connection its peer).
pub(super) struct Parked {
    stream: Stream,
    shared: Arc<Shared>,
    /// The key, and the source for the event log's lines.
    names: Names,
    id: GrantId,
    notice: oneshot::Receiver<Notice>,
    answer: Answering,
}

/// What a waiter's wait ends in: its turn (a notice from the table, or the
/// table dropped it) or, with None, its client hanging up.
pub(super) type Turn = Option<Result<Notice, oneshot::error::RecvError>>;

/// The wait, written by hand: a parked waiter keeps no buffer and no
/// future state of its own, only the [`Parked`].
impl Future for Parked {
    type Output = Turn;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn> {
        if let Poll::Ready(n) = Pin::new(&mut self.notice).poll(cx) {
            return Poll::Ready(Some(n));
        }
        // Bytes after the request are ignored; EOF is a hang-up.
        self.stream.poll_hangup(cx).map(|()| None)
    }
}

impl Parked {
    /// Serves how the wait ended (boxed by the caller: it may write and
    /// serve a session for long); `peer` is the client's address.
    pub(super) async fn after(self, turn: Turn, peer: SocketAddr) {
        match turn {
            Some(notice) => self.turn(notice, peer).await,
            None => self.hung_up(peer),
        }
    }

    /// The client left the line: withdrawn. Waiters it stood in front of
    /// and who may hold now are told by the table, and log their own grants.
    fn hung_up(self, peer: SocketAddr) {
        let Parked {
            shared, names, id, ..
        } = self;
        let (key, source) = names.split();
        match shared.table.withdraw(key, id).0 {
            Withdrawal::Dequeued | Withdrawal::Released => {
                Counters::bump(&shared.counters.withdrawals);
                shared.events.withdrawal(key, source, peer)
            }
            Withdrawal::Gone => {}
        }
    }

    async fn turn(self, notice: Result<Notice, oneshot::error::RecvError>, peer: SocketAddr) {
        let Parked {
            mut stream,
            shared,
            names,
            answer,
            id,
            ..
        } = self;
        let (key, source) = names.split();
        match notice {
            Ok(Notice::Granted(g)) => {
                // A hand-off: logged here, by the one it went to.
                shared.events.grant(key, source, peer, g.owner.as_ref());
                grant::hand_over(stream, peer, &shared, key.to_vec(), *g, answer).await
            }
            Ok(Notice::Withdrawn) => match shared.table.take_left(id) {
                Some(Left::Superseded(by)) => {
                    shared.events.superseded(key, source, peer, &by.source);
                    let _ = stream
                        .write_all(&proto::rival_answer(proto::SUPERSEDED, &by))
                        .await;
                }
                Some(Left::Outdated(mark)) => {
                    shared.events.outdated(key, source, peer, mark);
                    let _ = stream
                        .write_all(&proto::with_u64(proto::OUTDATED, mark))
                        .await;
                }
                None => {
                    let _ = stream.write_all(&[answer.hold.refused()]).await;
                }
            },
            Err(_) => {
                let _ = stream.write_all(&[answer.hold.refused()]).await;
            }
        }
    }
}

/// A waiter's key and source in one allocation: `[key][source]`, with the
/// key's length (a field is at most 255 bytes).
struct Names {
    bytes: Box<[u8]>,
    key_len: u8,
}

impl Names {
    fn new(key: &[u8], source: &[u8]) -> Names {
        let key_len = u8::try_from(key.len()).expect("a key is at most 255 bytes");
        Names {
            bytes: [key, source].concat().into_boxed_slice(),
            key_len,
        }
    }

    /// The key and the source.
    fn split(&self) -> (&[u8], &[u8]) {
        self.bytes.split_at(usize::from(self.key_len))
    }
}
