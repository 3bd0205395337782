//! One acquire on PostgreSQL: the session named, the lock taken (`-x`/`-s`
//! in the server's queue, `--limit` through its turnstile, a request with
//! fields through `queue.rs`), then, in the grant's own flight, its token,
//! its history row and the key's kept hold read or written (`kept.rs`). A
//! grant that finds another's kept hold gives the key back and, for `lock`,
//! waits for the hold's end and asks again on the same session.

use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::held::{self, PgHeld, Queued};
use super::session::Session;
use super::{history, kept, keys, limit, queue, PgBackend};
use crate::backend::{Acquired, BackendError, LockMode, LockRequest, Result, WaitProgress};

/// What one attempt came to.
pub(super) enum Attempt {
    Done(Acquired),
    /// Granted, but another's hold is kept: given back; the session to
    /// wait on and the key's lock id.
    Kept(Session, i64),
}

impl PgBackend {
    /// `acquire`: attempts until granted with no kept hold of another in
    /// the way (`trylock`: once).
    pub(super) async fn acquire_kept(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        if let LockMode::Limit(n) = request.mode {
            if !request.extras.is_empty() {
                return Err(BackendError::Unsupported {
                    server: self.address.to_string(),
                    reason: format!(
                        "lc-cli's PostgreSQL backend keeps no {} with --limit",
                        request.extras.options()
                    ),
                });
            }
            if n.get() > limit::MAX_N {
                return Err(BackendError::Unsupported {
                    server: self.address.to_string(),
                    reason: format!(
                        "lc-cli's PostgreSQL backend takes --limit up to {}, not {n}",
                        limit::MAX_N
                    ),
                });
            }
        }
        if request.detached && request.mode != LockMode::Exclusive {
            return Err(BackendError::Unsupported {
                server: self.address.to_string(),
                reason: format!(
                    "lc-cli's PostgreSQL backend keeps only exclusive holds without a command, not {}",
                    request.mode
                ),
            });
        }
        let asked = Instant::now();
        let mut s = match self.take_session() {
            Some(s) => s,
            None => Session::open(&self.address, "lc-cli", self.connect_timeout).await?,
        };
        loop {
            let (back, id) = match self.attempt(s, request, &cancel, progress, asked).await? {
                Attempt::Done(a) => return Ok(a),
                Attempt::Kept(back, id) => (back, id),
            };
            if request.nonblock {
                return Ok(Acquired::Busy);
            }
            if !kept::wait(&back, &request.key, id, &cancel).await? {
                return Ok(Acquired::Cancelled);
            }
            s = back;
        }
    }

    /// One attempt on session `s`.
    async fn attempt(
        &self,
        s: Session,
        request: &LockRequest,
        cancel: &CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
        asked: Instant,
    ) -> Result<Attempt> {
        let key = request.key.as_str();
        let app = keys::app_name(&request.source);
        // trylock --limit waits a moment for the turnstile (see limit.rs).
        let try_limit = request.nonblock && matches!(request.mode, LockMode::Limit(_));
        let sql = format!(
            "SELECT {}, set_config('application_name', $2, false), pg_backend_pid(){}",
            limit::HASHES,
            if try_limit {
                format!(
                    ", set_config('lock_timeout', '{}', false)",
                    limit::TRY_TURNSTILE
                )
            } else {
                String::new()
            }
        );
        // A request with fields prepares its statements alongside.
        let naming_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&key, &app];
        let naming = s.client.query_one(sql.as_str(), &naming_params);
        let (row, statements) = match request.extras.is_empty() {
            true => (naming.await, None),
            false => {
                let shared = request.mode == LockMode::Shared;
                let prepared = queue::prepare(&s, shared, request.nonblock);
                let (row, st) = tokio::join!(naming, prepared);
                (row, Some(st))
            }
        };
        let row = row.map_err(|e| s.error("naming the session", e))?;
        let statements = match statements {
            Some(st) => Some(queue::ready(&s, &self.address, request, st).await?),
            None => None,
        };
        let ids = limit::Ids::from_hashes(row.get(0), row.get(1));
        let mut slot = None;
        let release = match request.mode {
            LockMode::Limit(n) => {
                let want = limit::Want {
                    key,
                    n: n.get(),
                    ids,
                    nonblock: request.nonblock,
                };
                // The place in line needs a second session: only for a
                // status line (a terminal), as the holder's lookup.
                let place = match !request.nonblock && crate::terminal::stderr_is_terminal() {
                    true => self.admin().await.ok().map(|a| (a, row.get::<_, i32>(3))),
                    false => None,
                };
                let got =
                    limit::acquire(&s, want, cancel, self.connect_timeout, place, progress).await;
                if !matches!(got, Ok(limit::Outcome::Slot(_))) {
                    self.give_back(&s).await;
                }
                match got? {
                    limit::Outcome::Slot(i) => {
                        slot = Some(i);
                        held::Release::All(ids.base)
                    }
                    limit::Outcome::Busy => return Ok(Attempt::Done(Acquired::Busy)),
                    limit::Outcome::Cancelled => return Ok(Attempt::Done(Acquired::Cancelled)),
                }
            }
            mode => {
                let shared = mode == LockMode::Shared;
                if let Some(st) = statements {
                    let pid: i32 = row.get(3);
                    return self
                        .acquire_queued(s, st, request, (ids, pid, asked), cancel)
                        .await;
                }
                if !self
                    .lock(&s, key, ids.lock, shared, request.nonblock, cancel)
                    .await?
                {
                    return Ok(Attempt::Done(if cancel.is_cancelled() {
                        Acquired::Cancelled
                    } else {
                        Acquired::Busy
                    }));
                }
                // Refused if the key is used with --limit: the lock is
                // given back before the refusal is told.
                if let Err(e) = limit::check_lock(&s, key, mode, ids).await {
                    self.give_back(&s).await;
                    return Err(e);
                }
                if shared {
                    held::Release::Shared(ids.lock)
                } else {
                    held::Release::Exclusive(ids.lock)
                }
            }
        };
        let named = match request.mode {
            LockMode::Limit(_) => ids.base,
            _ => ids.lock,
        };
        let lock_id = match (request.mode, slot) {
            (LockMode::Limit(_), Some(i)) => ids.slot(i),
            _ => ids.lock,
        };
        let mut record = history::Record::new(request, lock_id, asked.elapsed());
        record.slot = slot;
        // Unanswered as long as a held session's ping may be, the grant is
        // given up (the session's end frees the key): nothing was run.
        let bound = held::silent_after(self.address.keepalive);
        // The key's kept hold is read (or ours written) in the same flight.
        let mut step = Box::pin(kept::check(&s, key));
        let sent = queue::send_now(&mut step).await;
        let (token, recorded) = tokio::time::timeout(bound, Self::at_grant(&s, named, &record))
            .await
            .map_err(|_| BackendError::Unavailable {
                server: self.address.to_string(),
                reason: format!("no answer after the grant of '{key}' for {bound:?}"),
            })??;
        let answer = queue::answer_of(step, sent).await;
        if self.settle(&s, key, answer).await?.is_some() {
            return Ok(Attempt::Kept(s, ids.lock));
        }
        Ok(Attempt::Done(Acquired::Held(Box::new(
            PgHeld::new(
                s,
                key.to_string(),
                token,
                self.address.keepalive,
                release,
                None,
            )
            .with_slot(slot)
            .with_history(recorded)
            .with_request(request),
        ))))
    }

    /// The kept step's answer: None when the command may run; the window
    /// of another's kept hold (the key given back) otherwise; an error
    /// gives the key back too.
    async fn settle(
        &self,
        s: &Session,
        key: &str,
        read: std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>,
    ) -> Result<Option<kept::Window>> {
        let settled = kept::settle(s, key, read).await;
        if !matches!(settled, Ok(None)) {
            kept::give_back(s, key, self.connect_timeout).await;
        }
        settled
    }

    /// A `-x`/`-s` request with fields (`queue.rs`), its statements
    /// prepared; `pid` our backend's, `asked` when lc-cli asked.
    async fn acquire_queued(
        &self,
        s: Session,
        st: queue::Statements,
        request: &LockRequest,
        (ids, pid, asked): (limit::Ids, i32, std::time::Instant),
        cancel: &CancellationToken,
    ) -> Result<Attempt> {
        let key = request.key.as_str();
        let got = queue::acquire(
            &s,
            &self.address,
            &st,
            request,
            ids.lock,
            self.connect_timeout,
            cancel,
        )
        .await?;
        let (rid, token) = match got {
            queue::Outcome::Held { rid, token } => (rid, token),
            queue::Outcome::Busy => return Ok(Attempt::Done(Acquired::Busy)),
            queue::Outcome::Cancelled => return Ok(Attempt::Done(Acquired::Cancelled)),
            queue::Outcome::Superseded(by) => return Ok(Attempt::Done(Acquired::Superseded(by))),
            queue::Outcome::Outdated(mark) => {
                return Ok(Attempt::Done(Acquired::Outdated { mark }))
            }
        };
        if let Err(e) = limit::check_lock(&s, key, request.mode, ids).await {
            self.give_back(&s).await;
            return Err(e);
        }
        let record = history::Record::new(request, ids.lock, asked.elapsed());
        let bound = held::silent_after(self.address.keepalive);
        // The key's kept hold is read (or ours written) in the same flight.
        let mut step = Box::pin(kept::check(&s, key));
        let sent = queue::send_now(&mut step).await;
        let recorded = tokio::time::timeout(bound, Self::record(&s, &record, token))
            .await
            .unwrap_or(false);
        let answer = queue::answer_of(step, sent).await;
        if self.settle(&s, key, answer).await?.is_some() {
            return Ok(Attempt::Kept(s, ids.lock));
        }
        let release = match request.mode {
            LockMode::Shared => held::Release::Shared(ids.lock),
            _ => held::Release::Exclusive(ids.lock),
        };
        let queued = Queued {
            st,
            id: ids.lock,
            rid,
            pid,
            order: request.extras.order,
            cancel: request.extras.cancel,
            status: None,
        };
        Ok(Attempt::Done(Acquired::Held(Box::new(
            PgHeld::new(
                s,
                key.to_string(),
                token,
                self.address.keepalive,
                release,
                Some(queued),
            )
            .with_history(recorded)
            .with_request(request),
        ))))
    }
}
