//! The PostgreSQL backend: session-level advisory locks on a connection of
//! lc-cli's own.
//!
//! The key maps to the lock id `hashtextextended(key, 0)`, computed by the
//! server, so `SELECT pg_advisory_lock(hashtextextended('deploy/prod', 0))`
//! in psql and `lc-cli lock deploy/prod` exclude each other. `lock` waits in
//! the server's lock queue (`pg_advisory_lock`, granted in arrival order);
//! `trylock` is `pg_try_advisory_lock`; a withdrawn wait (`-w`, a signal) is
//! a cancel request, and the wait's own answer confirms it left the queue.
//! `--limit N` is a turnstile and N slots of advisory locks (`limit.rs`);
//! a lock granted on a key used with `--limit` is refused and given back.
//! At each grant lc-cli records the key's name in `lc_cli.keys` (for `keys`)
//! and draws `LC_LOCK_TOKEN` from the sequence `lc_cli.grants`, both
//! created on first use; a role that may not create them gets neither, and
//! its locks work the same.
//!
//! One `PgBackend` serves one acquire on the session opened by `connect`
//! (so a wrong password or database fails before anything else); `keys`,
//! `reset` and the status line's holder use a second session, opened when
//! first needed, as the first may be waiting in the queue.

pub(crate) mod address;
mod held;
mod history;
mod keys;
mod limit;
mod ping;
mod queue;
mod session;
mod tls;

use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

pub(crate) use address::PgAddress;

use super::{
    Acquired, Backend, BackendConfig, BackendError, KeyInfo, LockMode, LockRequest, Result,
    WaitProgress,
};
use held::{PgHeld, Queued};
use session::Session;

pub(crate) struct PgBackend {
    address: PgAddress,
    connect_timeout: Duration,
    /// The lock session, until an acquire takes it (or `admin` does).
    session: std::sync::Mutex<Option<Session>>,
    admin: tokio::sync::OnceCell<Session>,
}

/// Creates what lc-cli keeps in the database, once, under a transaction
/// lock of its own (the two-int form, a space apart from bigint keys).
const SCHEMA: &str = "
    BEGIN;
    SELECT pg_advisory_xact_lock(1819435008, 1);
    CREATE SCHEMA IF NOT EXISTS lc_cli;
    CREATE SEQUENCE IF NOT EXISTS lc_cli.grants;
    CREATE TABLE IF NOT EXISTS lc_cli.keys (id bigint PRIMARY KEY, key text NOT NULL);
    COMMIT;";

/// Whether `e` ends the session (the server's shutdown or a reset's
/// termination, class 57P, sent as the connection closes), not a refusal.
fn ending(s: &Session, e: &tokio_postgres::Error) -> bool {
    s.is_ended() || e.code().is_some_and(|c| c.code().starts_with("57P"))
}

/// Creates lc-cli's schema with the history's tables (a role that may not
/// gets a database error, and locks without them).
async fn create_schema(s: &Session) -> std::result::Result<(), tokio_postgres::Error> {
    s.client.batch_execute(SCHEMA).await?;
    s.client.batch_execute(history::SCHEMA).await
}

/// Records the key's name and draws the grant's token, in one round trip.
const AT_GRANT: &str = "
    WITH named AS (INSERT INTO lc_cli.keys (id, key) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING)
    SELECT nextval('lc_cli.grants')";

impl PgBackend {
    pub(crate) async fn connect(address: &PgAddress, config: &BackendConfig) -> Result<Self> {
        let session = Session::open(address, "lc-cli", config.connect_timeout).await?;
        Ok(PgBackend {
            address: address.clone(),
            connect_timeout: config.connect_timeout,
            session: std::sync::Mutex::new(Some(session)),
            admin: tokio::sync::OnceCell::new(),
        })
    }

    fn take_session(&self) -> Option<Session> {
        self.session.lock().unwrap().take()
    }

    async fn admin(&self) -> Result<&Session> {
        self.admin
            .get_or_try_init(|| async {
                match self.take_session() {
                    Some(s) => Ok(s),
                    None => Session::open(&self.address, "lc-cli", self.connect_timeout).await,
                }
            })
            .await
    }

    /// `-x`/`-s`: waits in the server's queue for the lock `id` (or only
    /// tries). False when not taken: busy, or withdrawn (`cancel`), the
    /// wait's own answer confirming it left the queue.
    async fn lock(
        &self,
        s: &Session,
        key: &str,
        id: i64,
        shared: bool,
        nonblock: bool,
        cancel: &CancellationToken,
    ) -> Result<bool> {
        let (lock_fn, try_fn, unlock_fn) = if shared {
            (
                "pg_advisory_lock_shared",
                "pg_try_advisory_lock_shared",
                "pg_advisory_unlock_shared",
            )
        } else {
            (
                "pg_advisory_lock",
                "pg_try_advisory_lock",
                "pg_advisory_unlock",
            )
        };
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
        if nonblock {
            return Ok(s
                .client
                .query_one(&format!("SELECT {try_fn}($1)"), &params)
                .await
                .map_err(|e| s.error(&format!("trying '{key}'"), e))?
                .get(0));
        }
        let lock_sql = format!("SELECT {lock_fn}($1)");
        let wait = s.client.query_one(lock_sql.as_str(), &params);
        tokio::pin!(wait);
        let granted = tokio::select! {
            r = &mut wait => Some(r),
            _ = cancel.cancelled() => None,
        };
        match granted {
            Some(r) => {
                r.map_err(|e| s.error(&format!("waiting for '{key}'"), e))?;
                Ok(true)
            }
            None => {
                // Ask the server to cancel the wait; its answer tells
                // whether we left the queue or were granted meanwhile.
                let _ = tokio::time::timeout(self.connect_timeout, s.cancel()).await;
                if let Ok(Ok(_)) = tokio::time::timeout(self.connect_timeout, wait).await {
                    let unlock_sql = format!("SELECT {unlock_fn}($1)");
                    let give_back = s.client.query_one(unlock_sql.as_str(), &params);
                    let _ = tokio::time::timeout(self.connect_timeout, give_back).await;
                }
                // Whatever is left ends with the connection.
                Ok(false)
            }
        }
    }

    /// Frees every advisory lock a request that ends without a hold took
    /// on `s` (a refused lock, a shown marker and N), and waits for the
    /// server to confirm it. The session's end frees them too, but only once
    /// the server has seen the close, which may come after lc-cli has
    /// exited and the next lc-cli has asked: it would find them still held
    /// and be refused. Bounded by the connect timeout; a broken connection
    /// leaves them to its end.
    async fn give_back(&self, s: &Session) {
        let free = s.client.batch_execute("SELECT pg_advisory_unlock_all()");
        let _ = tokio::time::timeout(self.connect_timeout, free).await;
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
    ) -> Result<Acquired> {
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
            queue::Outcome::Busy => return Ok(Acquired::Busy),
            queue::Outcome::Cancelled => return Ok(Acquired::Cancelled),
            queue::Outcome::Superseded(by) => return Ok(Acquired::Superseded(by)),
            queue::Outcome::Outdated(mark) => return Ok(Acquired::Outdated { mark }),
        };
        if let Err(e) = limit::check_lock(&s, key, request.mode, ids).await {
            self.give_back(&s).await;
            return Err(e);
        }
        let record = history::Record::new(request, ids.lock, asked.elapsed());
        let bound = held::silent_after(self.address.keepalive);
        let recorded = tokio::time::timeout(bound, Self::record(&s, &record, token))
            .await
            .unwrap_or(false);
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
        Ok(Acquired::Held(Box::new(
            PgHeld::new(
                s,
                key.to_string(),
                token,
                self.address.keepalive,
                release,
                Some(queued),
            )
            .with_history(recorded),
        )))
    }

    /// Records a hold granted with `token` for the history (one round trip;
    /// the tables created if missing): whether it is recorded.
    async fn record(s: &Session, record: &history::Record, token: Option<u64>) -> bool {
        for attempt in 0..2 {
            match history::hold(s, record, None, token, false).await {
                Ok(_) => return true,
                Err(e) if e.as_db_error().is_none() || ending(s, &e) => return false,
                Err(e) if attempt == 0 && history::missing(&e) => {
                    if let Err(e) = create_schema(s).await {
                        let _ = s.client.batch_execute("ROLLBACK").await;
                        history::not_kept(&record.key, &e);
                        return false;
                    }
                }
                Err(e) => {
                    history::not_kept(&record.key, &e);
                    return false;
                }
            }
        }
        false
    }

    /// The grant's token, its key's name and its hold recorded for the
    /// history (`history.rs`), in one statement; where the history cannot
    /// be kept (a role that may not create or use its tables: told in one
    /// line), the token alone. The token, and whether the hold is recorded.
    async fn at_grant(
        s: &Session,
        named: i64,
        record: &history::Record,
    ) -> Result<(Option<u64>, bool)> {
        let key = record.key.as_str();
        for attempt in 0..2 {
            match history::hold(s, record, Some(named), None, false).await {
                Ok(token) => return Ok((token, true)),
                Err(e) if e.as_db_error().is_none() => {
                    return Err(s.error(&format!("after the grant of '{key}'"), e))
                }
                Err(e) if attempt == 0 && history::missing(&e) => match create_schema(s).await {
                    Ok(()) => continue,
                    Err(e) if e.as_db_error().is_none() => {
                        return Err(s.error("creating the schema lc_cli", e))
                    }
                    Err(e) => {
                        let _ = s.client.batch_execute("ROLLBACK").await;
                        history::not_kept(key, &e);
                        break;
                    }
                },
                Err(e) if ending(s, &e) => {
                    return Err(s.error(&format!("after the grant of '{key}'"), e))
                }
                Err(e) => {
                    history::not_kept(key, &e);
                    break;
                }
            }
        }
        Ok((Self::token(s, named, key).await?, false))
    }

    /// The grant's token, or None where lc-cli may not keep its sequence.
    async fn token(s: &Session, id: i64, key: &str) -> Result<Option<u64>> {
        for attempt in 0..2 {
            match s.client.query_one(AT_GRANT, &[&id, &key]).await {
                Ok(row) => return Ok(u64::try_from(row.get::<_, i64>(0)).ok()),
                Err(e) if e.as_db_error().is_none() => {
                    return Err(s.error(&format!("after the grant of '{key}'"), e))
                }
                Err(e)
                    if attempt == 0
                        && (e.code() == Some(&SqlState::UNDEFINED_TABLE)
                            || e.code() == Some(&SqlState::INVALID_SCHEMA_NAME)) =>
                {
                    if let Err(e) = create_schema(s).await {
                        if e.as_db_error().is_none() {
                            return Err(s.error("creating the schema lc_cli", e));
                        }
                        // Refused (no CREATE privilege): no token.
                        let _ = s.client.batch_execute("ROLLBACK").await;
                        return Ok(None);
                    }
                }
                // Not allowed, a read-only standby: the lock works without.
                Err(_) => return Ok(None),
            }
        }
        Ok(None)
    }
}

#[async_trait]
impl Backend for PgBackend {
    async fn ping(&self) -> Result<crate::backend::ping::PingReport> {
        self.ping_server().await
    }

    async fn acquire(
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
        let asked = std::time::Instant::now();
        let s = match self.take_session() {
            Some(s) => s,
            None => Session::open(&self.address, "lc-cli", self.connect_timeout).await?,
        };
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
                    limit::acquire(&s, want, &cancel, self.connect_timeout, place, progress).await;
                if !matches!(got, Ok(limit::Outcome::Slot(_))) {
                    self.give_back(&s).await;
                }
                match got? {
                    limit::Outcome::Slot(i) => {
                        slot = Some(i);
                        held::Release::All(ids.base)
                    }
                    limit::Outcome::Busy => return Ok(Acquired::Busy),
                    limit::Outcome::Cancelled => return Ok(Acquired::Cancelled),
                }
            }
            mode => {
                let shared = mode == LockMode::Shared;
                if let Some(st) = statements {
                    let pid: i32 = row.get(3);
                    return self
                        .acquire_queued(s, st, request, (ids, pid, asked), &cancel)
                        .await;
                }
                if !self
                    .lock(&s, key, ids.lock, shared, request.nonblock, &cancel)
                    .await?
                {
                    return Ok(if cancel.is_cancelled() {
                        Acquired::Cancelled
                    } else {
                        Acquired::Busy
                    });
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
        let (token, recorded) = tokio::time::timeout(bound, Self::at_grant(&s, named, &record))
            .await
            .map_err(|_| BackendError::Unavailable {
                server: self.address.to_string(),
                reason: format!("no answer after the grant of '{key}' for {bound:?}"),
            })??;
        Ok(Acquired::Held(Box::new(
            PgHeld::new(
                s,
                key.to_string(),
                token,
                self.address.keepalive,
                release,
                None,
            )
            .with_slot(slot)
            .with_history(recorded),
        )))
    }

    /// A session lock has no holder but its session: nothing to unlock
    /// from outside (`lc-cli unlock` refuses before connecting; this says
    /// the same to any other caller).
    async fn unlock(&self, key: &str) -> Result<bool> {
        Err(BackendError::Refused {
            server: self.address.to_string(),
            reason: format!(
                "'{key}' can be held only by a running session; end its holder with `lc-cli reset`"
            ),
        })
    }

    async fn reset_key(&self, key: &str) -> Result<()> {
        keys::reset_key(self.admin().await?, key).await
    }

    async fn reset_source(&self, source: &str) -> Result<()> {
        keys::reset_source(self.admin().await?, source).await
    }

    async fn history(&self, key: &str, limit: usize) -> Result<Vec<super::history::HistoryEntry>> {
        history::read(self.admin().await?, key, limit).await
    }

    async fn mark(&self, key: &str) -> Result<Option<u64>> {
        queue::mark(self.admin().await?, key).await
    }

    async fn clear_mark(&self, key: &str) -> Result<bool> {
        queue::clear_mark(self.admin().await?, key).await
    }

    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        keys::list(self.admin().await?).await
    }

    /// The sessions waiting in `pg_locks` (`keys.rs`).
    async fn waiters(&self) -> Result<Option<Vec<super::WaiterInfo>>> {
        keys::waiters(self.admin().await?).await.map(Some)
    }
}
