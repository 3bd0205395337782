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
//! its locks work the same. A hold kept after lc-cli (`lock KEY`,
//! `--expire`, the rest of a `--hold-at-least` window) is a row of
//! `lc_cli.kept` that every grant reads (`kept.rs`); `acquire.rs` takes
//! the lock and reads it.
//!
//! One `PgBackend` serves one acquire on the session opened by `connect`
//! (so a wrong password or database fails before anything else); `keys`,
//! `reset` and the status line's holder use a second session, opened when
//! first needed, as the first may be waiting in the queue.

mod acquire;
pub(crate) mod address;
mod held;
mod history;
mod kept;
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

use super::{Acquired, Backend, BackendConfig, KeyInfo, LockRequest, Result, WaitProgress};
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
        self.acquire_kept(request, cancel, progress).await
    }

    /// Deletes the key's kept hold (`kept.rs`); a key held by a running
    /// session is refused: only `reset` ends that.
    async fn unlock(&self, key: &str) -> Result<bool> {
        kept::unlock(self.admin().await?, key).await
    }

    /// Ends the sessions holding the key, then deletes its kept hold.
    async fn reset_key(&self, key: &str) -> Result<()> {
        let s = self.admin().await?;
        keys::reset_key(s, key).await?;
        kept::clear(s, Some(key), None).await
    }

    async fn reset_source(&self, source: &str) -> Result<()> {
        let s = self.admin().await?;
        keys::reset_source(s, source).await?;
        kept::clear(s, None, Some(source)).await
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

    /// The sessions' holds, then the kept holds no session holds.
    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        let s = self.admin().await?;
        let mut all = keys::list(s).await?;
        all.extend(kept::list(s).await?);
        Ok(all)
    }

    /// The sessions waiting in `pg_locks` (`keys.rs`).
    async fn waiters(&self) -> Result<Option<Vec<super::WaiterInfo>>> {
        keys::waiters(self.admin().await?).await.map(Some)
    }
}
