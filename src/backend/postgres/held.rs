//! A key we hold: a session advisory lock on our own connection, watched
//! while the command runs.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::queue;
use super::session::Session;
use crate::backend::{BackendError, HeldLock, LostReason, Result};

/// What a hold gives back at its end.
#[derive(Debug, Clone, Copy)]
pub(super) enum Release {
    /// The exclusive advisory lock on this id.
    Exclusive(i64),
    /// The shared one (`--shared`).
    Shared(i64),
    /// Every advisory lock of the session: a `--limit` slot and its
    /// marks; the head of the line is told (the key's marker id).
    All(i64),
}

/// A hold taken with fields (`queue.rs`): its row goes with the release,
/// which raises the key's mark after a command that ended with status 0.
pub(super) struct Queued {
    pub st: queue::Statements,
    /// The lock id.
    pub id: i64,
    /// The request's id, which a cancel notice names, and our backend pid.
    pub rid: i64,
    pub pid: i32,
    pub order: Option<u64>,
    /// Taken with `--cancel-running`: it listens for a newer one.
    pub cancel: bool,
    /// The command's exit status, once told.
    pub status: Option<i32>,
}

pub(super) struct PgHeld {
    s: Session,
    key: String,
    token: Option<u64>,
    keepalive: Duration,
    release: Release,
    /// When the last answered ping was sent: the server heard from us then.
    last_ok: Instant,
    /// The connection is given up: nothing more is sent on it.
    gone: bool,
    queued: Option<Queued>,
    /// The `--limit` slot held (`LC_SLOT`).
    slot: Option<u32>,
    /// Its row is in `lc_cli.holds`: the release moves it to the history.
    recorded: bool,
    /// The command's exit status, once told.
    status: Option<i32>,
    /// Its request's source and field list, for a kept hold's row.
    source: String,
    fields: String,
    /// When it was granted (a kept hold's row says so).
    since: Instant,
}

/// How often the held session is pinged: a fifth of the keepalive.
pub(super) fn ping_every(keepalive: Duration) -> Duration {
    keepalive / 5
}

/// Unanswered this long after the last answered ping was sent, the session
/// is taken as lost: half the keepalive.
pub(super) fn silent_after(keepalive: Duration) -> Duration {
    keepalive / 2
}

/// How long past the silence deadline a ping's answer is still waited for:
/// long enough for the connection's task to read an answer that came while
/// lc-cli was frozen, a small part of the time left before the server may
/// drop the session (from `silent_after` to `kill_after`).
const LATE_ANSWER: Duration = Duration::from_millis(200);

/// The server drops a silent session no sooner than `keepalive` after it
/// last heard from us; a twentieth (300 ms at least) is left for the kill
/// to land.
pub(super) fn kill_after(keepalive: Duration) -> Duration {
    keepalive - (keepalive / 20).max(Duration::from_millis(300))
}

impl PgHeld {
    pub(super) fn new(
        s: Session,
        key: String,
        token: Option<u64>,
        keepalive: Duration,
        release: Release,
        queued: Option<Queued>,
    ) -> Self {
        PgHeld {
            s,
            key,
            token,
            keepalive,
            release,
            last_ok: Instant::now(),
            gone: false,
            queued,
            slot: None,
            recorded: false,
            status: None,
            source: String::new(),
            fields: String::new(),
            since: Instant::now(),
        }
    }

    /// Its request's source and fields, for a kept hold's row (`kept.rs`).
    pub(super) fn with_request(mut self, request: &crate::backend::LockRequest) -> Self {
        self.source = request.source.clone();
        self.fields = request.extras.encode();
        self
    }

    /// Its grant recorded it for the history (`history.rs`).
    pub(super) fn with_history(mut self, recorded: bool) -> Self {
        self.recorded = recorded;
        self
    }

    /// The `--limit` slot this hold has (`LC_SLOT`).
    pub(super) fn with_slot(mut self, slot: Option<u32>) -> Self {
        self.slot = slot;
        self
    }

    /// A newer `--cancel-running` request's notice to this hold, if one came.
    fn cancelled(&self) -> Option<LostReason> {
        let q = self.queued.as_ref().filter(|q| q.cancel)?;
        queue::cancel_notice(&self.s, q.pid, q.rid).map(LostReason::cancelled)
    }

    /// The connection ended: the server ended the session (a restart, a
    /// reset) or will see it end, and frees the key with it, maybe now.
    fn ended(&mut self, why: String) -> LostReason {
        self.gone = true;
        LostReason::kill_by(
            format!(
                "the connection to PostgreSQL ended ({why}): the session and its lock on '{}' are gone",
                self.key
            ),
            std::time::Instant::now(),
        )
    }

    fn silent(&mut self) -> LostReason {
        self.gone = true;
        LostReason::kill_by(
            format!(
                "PostgreSQL did not answer for {:?}: the server may drop the session and free '{}' from {:?} after it last heard from us",
                silent_after(self.keepalive),
                self.key,
                self.keepalive
            ),
            (self.last_ok + kill_after(self.keepalive)).into_std(),
        )
    }
}

#[async_trait]
impl HeldLock for PgHeld {
    fn token(&self) -> Option<u64> {
        self.token
    }

    fn slot(&self) -> Option<u32> {
        self.slot
    }

    fn session_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.s.socket())
    }

    /// Pings the session (`SELECT 1`) every fifth of the keepalive; lost
    /// when the connection ends or no ping is answered for half of it.
    async fn lost(&mut self) -> LostReason {
        loop {
            if let Some(lost) = self.cancelled() {
                return lost;
            }
            let deadline = self.last_ok + silent_after(self.keepalive);
            let sent = Instant::now();
            let answer: std::result::Result<_, String> = {
                let query = self.s.client.simple_query("SELECT 1");
                tokio::pin!(query);
                tokio::select! {
                    r = &mut query => Ok(Some(r)),
                    why = self.s.ended() => Err(why),
                    // A lc-cli woken from a freeze (SIGSTOP, a debugger)
                    // finds the deadline past and, in its socket, the
                    // answer: the session answered, so it and its lock
                    // never ended. Only no answer at all is a loss.
                    _ = tokio::time::sleep_until(deadline) => {
                        Ok(tokio::time::timeout(LATE_ANSWER, &mut query).await.ok())
                    }
                }
            };
            match answer {
                Ok(Some(Ok(_))) => self.last_ok = sent,
                Ok(Some(Err(e))) => return self.ended(super::session::describe(&e)),
                Ok(None) => return self.silent(),
                Err(why) => return self.ended(why),
            }
            let next = Instant::now() + ping_every(self.keepalive);
            loop {
                tokio::select! {
                    why = self.s.ended() => return self.ended(why),
                    _ = tokio::time::sleep_until(next) => break,
                    _ = self.s.notified() => match self.cancelled() {
                        Some(lost) => return lost,
                        None => continue,
                    },
                }
            }
        }
    }

    /// `pg_advisory_unlock` (all of the session's for a slot, telling the
    /// head of the line), then the connection is closed. A session whose
    /// connection has ended holds nothing: the server ends it, and with it
    /// the lock.
    fn command_ended(&mut self, status: i32) {
        self.status = Some(status);
        if let Some(q) = &mut self.queued {
            q.status = Some(status);
        }
    }

    async fn release(&mut self) -> Result<()> {
        if self.gone || self.s.is_ended() {
            return Ok(());
        }
        // The history's entry, sent ahead of the unlock (no round trip of
        // its own; its answer is not awaited): if it fails, the row stays
        // for the next grant or `history` to find, as freed.
        if self.recorded {
            let mut ended = Box::pin(super::history::released(&self.s, &self.key, self.status));
            let _ = super::queue::send_now(&mut ended).await;
        }
        if let Some(q) = &self.queued {
            // The mark rises only after a command that ended with status 0.
            let mark = q.order.filter(|_| q.status == Some(0));
            let done = queue::release(&self.s, &q.st, &self.key, q.id, mark);
            return match tokio::time::timeout(silent_after(self.keepalive), done).await {
                Ok(Ok(None)) => Ok(()),
                Ok(Ok(Some(why))) => {
                    self.gone = true;
                    eprintln!(
                        "lc-cli: released '{}', but its mark could not be raised to {}: {why}",
                        self.key,
                        mark.unwrap_or_default()
                    );
                    Ok(())
                }
                Ok(Err(_)) if self.s.is_ended() => Ok(()),
                Ok(Err(e)) => Err(self.s.error(&format!("releasing '{}'", self.key), e)),
                Err(_) => Err(BackendError::Unavailable {
                    server: self.s.server.clone(),
                    reason: format!("no answer to the release of '{}'", self.key),
                }),
            };
        }
        let (sql, id, word) = match self.release {
            Release::Exclusive(id) => ("SELECT pg_advisory_unlock($1)::text", id, None),
            Release::Shared(id) => ("SELECT pg_advisory_unlock_shared($1)::text", id, None),
            Release::All(base) => (super::limit::RELEASE, base, Some(base.to_string())),
        };
        let id_param: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
        let word_param: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&word];
        let params: &[&(dyn tokio_postgres::types::ToSql + Sync)] = match word {
            Some(_) => &word_param,
            None => &id_param,
        };
        let unlock = self.s.client.query_one(sql, params);
        match tokio::time::timeout(silent_after(self.keepalive), unlock).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if self.s.is_ended() => {
                let _ = e;
                Ok(())
            }
            Ok(Err(e)) => Err(self.s.error(&format!("releasing '{}'", self.key), e)),
            Err(_) => Err(BackendError::Unavailable {
                server: self.s.server.clone(),
                reason: format!("no answer to the release of '{}'", self.key),
            }),
        }
    }

    /// Keeps the hold as a row of `lc_cli.kept` (`kept.rs`) for `rest` on
    /// the server's clock (None: until `unlock`), and gives back the lock
    /// behind it, in one flight with the history's entry and the request's
    /// row: the round trip a release costs.
    async fn detach(self: Box<Self>, rest: Option<std::time::Duration>) -> Result<()> {
        let mut this = self;
        let Release::Exclusive(id) = this.release else {
            this.release().await?;
            return Err(BackendError::Unsupported {
                server: this.s.server.clone(),
                reason: format!(
                    "'{}' was released, not kept: lc-cli's PostgreSQL backend keeps only exclusive holds after their command",
                    this.key
                ),
            });
        };
        if this.gone || this.s.is_ended() {
            return Err(BackendError::Unavailable {
                server: this.s.server.clone(),
                reason: format!("the session of '{}' ended: it is not kept", this.key),
            });
        }
        if this.recorded {
            let mut ended = Box::pin(super::history::released(&this.s, &this.key, this.status));
            let _ = super::queue::send_now(&mut ended).await;
        }
        if this.queued.is_some() {
            let mut gone = Box::pin(this.s.client.query_typed(
                "DELETE FROM lc_cli.requests WHERE pid = pg_backend_pid()",
                &[],
            ));
            let _ = super::queue::send_now(&mut gone).await;
        }
        let keep = super::kept::Keep {
            key: &this.key,
            id,
            source: &this.source,
            token: this.token,
            fields: &this.fields,
            rest,
            held: this.since.elapsed(),
        };
        let kept = super::kept::keep(&this.s, &keep);
        match tokio::time::timeout(silent_after(this.keepalive), kept).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Unavailable {
                server: this.s.server.clone(),
                reason: format!("no answer when keeping '{}'", this.key),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_stopped_before_the_server_can_drop_the_session() {
        let k = Duration::from_secs(10);
        assert!(ping_every(k) < silent_after(k));
        assert!(silent_after(k) + Duration::from_secs(4) <= kill_after(k));
        assert!(kill_after(k) < k);
        let k = Duration::from_secs(2);
        assert_eq!(kill_after(k), Duration::from_millis(1700));
        assert!(silent_after(k) < kill_after(k));
    }
}
