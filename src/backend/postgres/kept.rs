//! Kept holds on PostgreSQL: a hold that outlives lc-cli's session (`lock
//! KEY` without a command, `--expire D`, the rest of a `--hold-at-least`
//! window) is a row of `lc_cli.kept` (kept.sql), not an advisory lock,
//! since an advisory lock dies with its session.
//!
//! The rules, once:
//! - The hold is kept when the session lets go: at the command's end for
//!   the rest of a `--hold-at-least` window, at once for `lock KEY`
//!   (`--expire D`, or until `unlock`). Its row is written with its deadline
//!   on the server's clock (`clock_timestamp()` + the rest, or `infinity`)
//!   and the lock is given back in the same flight, by a statement that
//!   unlocks only where the row is written: the row commits before the
//!   unlock lets the next grant in, and a row that could not be written
//!   leaves the lock to be given back after, with one line.
//! - Every lc-cli grant of the key reads the row (a statement sent in the
//!   grant's own flight: no round trip of its own) before anything runs.
//!   An unexpired row: the grant is given back; `trylock` is "held" (1);
//!   `lock` listens on `lc_cli_kept_<lock id>`, reads the row, and sleeps
//!   until its deadline (at most [`MAX_NAP`]) or a notification (`unlock`,
//!   `reset`), reading it again until it is gone; then asks for the lock.
//! - `unlock KEY` deletes a row whose session no longer holds the lock;
//!   `reset` deletes the key's (or the source's) rows; both notify.
//! - A SQL client's own `pg_advisory_lock` does not read the row: a kept
//!   hold keeps out lc-cli, not psql.

use std::time::{Duration, UNIX_EPOCH};

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_util::sync::CancellationToken;

use super::session::Session;
use crate::backend::fields::FieldList;
use crate::backend::{BackendError, KeyInfo, LockMode, Result};

/// The table, created by the first hold kept here.
const SCHEMA: &str = include_str!("kept.sql");

/// The notification channel of a key's kept hold: this, then its lock id.
const CHANNEL: &str = "lc_cli_kept_";

/// The longest sleep of a waiter between two reads of a kept hold's row
/// (a row deleted by hand, not by `unlock`, sends no notification).
pub(super) const MAX_NAP: Duration = Duration::from_secs(30);

/// Whether advisory lock `id` is held by session `pid` (`k.pid`, `k.id`).
const HOLDING: &str = "EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.pid = k.pid AND ((l.classid::int8 << 32) | l.objid::int8) = k.id
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))";

/// A kept hold of another, seen at a grant.
#[derive(Debug, Clone)]
pub(super) struct Window {
    /// How long it is still kept, on the server's clock (None: until
    /// `unlock` or `reset`).
    pub left: Option<Duration>,
}

const CHECK: &str = "
    SELECT key, CASE WHEN until = 'infinity' THEN NULL
                     ELSE (extract(epoch FROM until - clock_timestamp()) * 1000)::int8 END
    FROM lc_cli.kept WHERE key = $1 AND until > clock_timestamp()";

/// Writes the row unless another's is unexpired (none can be: we hold the
/// lock, and our grant read it). `$6`: ms kept (NULL: until `unlock`);
/// `$7`: ms since the grant.
const KEEP: &str = "
    INSERT INTO lc_cli.kept AS k (key, id, pid, source, peer, token, fields, granted, until)
    VALUES ($1, $2, pg_backend_pid(), $3, host(inet_client_addr()), $4, $5,
            clock_timestamp() - $7::int8 * interval '1 millisecond',
            CASE WHEN $6::int8 IS NULL THEN 'infinity'::timestamptz
                 ELSE clock_timestamp() + $6::int8 * interval '1 millisecond' END)
    ON CONFLICT (key) DO UPDATE SET
        id = excluded.id, pid = excluded.pid, source = excluded.source, peer = excluded.peer,
        token = excluded.token, fields = excluded.fields, granted = excluded.granted,
        until = excluded.until
    WHERE k.until <= clock_timestamp()
    RETURNING 1";

/// Gives back the lock only where our row is written.
const UNLOCK_KEPT: &str = "
    SELECT pg_advisory_unlock($1) FROM lc_cli.kept
    WHERE key = $2 AND pid = pg_backend_pid() AND id = $1";

/// The grant's read of the key's row: sent when first polled, so that the
/// caller sends the grant's other statement in the same flight.
pub(super) async fn check(
    s: &Session,
    key: &str,
) -> std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    s.client.query_typed(CHECK, &[(&key, Type::TEXT)]).await
}

fn missing(e: &tokio_postgres::Error) -> bool {
    [SqlState::UNDEFINED_TABLE, SqlState::INVALID_SCHEMA_NAME]
        .iter()
        .any(|c| e.code() == Some(c))
}

fn window_of(rows: &[tokio_postgres::Row]) -> Option<Window> {
    rows.first().map(|r| Window {
        left: r
            .get::<_, Option<i64>>(1)
            .map(|ms| Duration::from_millis(ms.max(0) as u64)),
    })
}

/// Settles the grant's read: None when the command may run (no row, no
/// table: nobody ever kept a hold here); the window of the kept hold
/// otherwise. A role that may not read the table, where it exists, is
/// refused (76): it cannot tell whether the key is kept (where it does not
/// exist, the catalog says so, and no hold is kept). On Err and on Some the
/// caller gives the key back.
pub(super) async fn settle(
    s: &Session,
    key: &str,
    read: std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>,
) -> Result<Option<Window>> {
    const IN_CATALOG: &str = "SELECT EXISTS (SELECT 1 FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'lc_cli' AND c.relname = 'kept')";
    match read {
        Ok(rows) => Ok(window_of(&rows)),
        Err(e) if missing(&e) => Ok(None),
        Err(e) if e.as_db_error().is_none() || super::ending(s, &e) => {
            Err(s.error(&format!("after the grant of '{key}'"), e))
        }
        Err(e)
            if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE)
                && s.client
                    .query_typed(IN_CATALOG, &[])
                    .await
                    .is_ok_and(|rows| rows.first().is_some_and(|r| !r.get::<_, bool>(0))) =>
        {
            Ok(None)
        }
        Err(e) => Err(BackendError::Unsupported {
            server: s.server.clone(),
            reason: format!(
                "'{key}': every grant reads the key's kept hold (--hold-at-least, `lock KEY` without a command) in the table lc_cli.kept, and this role may not ({}): it needs USAGE on the schema lc_cli and SELECT on lc_cli.kept",
                super::session::describe(&e)
            ),
        }),
    }
}

/// The hold to keep as a row.
pub(super) struct Keep<'a> {
    pub key: &'a str,
    pub id: i64,
    pub source: &'a str,
    pub token: Option<u64>,
    pub fields: &'a str,
    /// Kept this long from now (None: until `unlock`).
    pub rest: Option<Duration>,
    /// How long ago it was granted.
    pub held: Duration,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

async fn write(s: &Session, k: &Keep<'_>) -> std::result::Result<bool, tokio_postgres::Error> {
    let token = k.token.map(|t| t as i64);
    let rest = k.rest.map(ms);
    let held = ms(k.held);
    let rows = s
        .client
        .query_typed(
            KEEP,
            &[
                (&k.key, Type::TEXT),
                (&k.id, Type::INT8),
                (&k.source, Type::TEXT),
                (&token, Type::INT8),
                (&k.fields, Type::TEXT),
                (&rest, Type::INT8),
                (&held, Type::INT8),
            ],
        )
        .await?;
    Ok(!rows.is_empty())
}

/// Whether the lock was given back behind our written row.
async fn unlock_kept(
    s: &Session,
    k: &Keep<'_>,
) -> std::result::Result<bool, tokio_postgres::Error> {
    let rows = s
        .client
        .query_typed(UNLOCK_KEPT, &[(&k.id, Type::INT8), (&k.key, Type::TEXT)])
        .await?;
    Ok(rows.first().is_some_and(|r| r.get::<_, bool>(0)))
}

/// Keeps the hold: the row, then the unlock behind it, in one flight (the
/// statements `ahead` were sent before). Where the row could not be
/// written, the lock is given back all the same and the error says why
/// the hold is not kept (a role that may not create or use the table:
/// 76); where the table is missing, it is created first (once).
pub(super) async fn keep(s: &Session, k: &Keep<'_>) -> Result<()> {
    let mut written = Box::pin(write(s, k));
    let sent = super::queue::send_now(&mut written).await;
    let unlocked = unlock_kept(s, k).await;
    let written = super::queue::answer_of(written, sent).await;
    if let Ok(true) = unlocked {
        return Ok(());
    }
    let written = match written {
        Err(e) if missing(&e) => match s.client.batch_execute(SCHEMA).await {
            Ok(()) => match write(s, k).await {
                Ok(true) => match unlock_kept(s, k).await {
                    Ok(true) => return Ok(()),
                    other => other.map(|_| true),
                },
                other => other,
            },
            Err(e) => {
                let _ = s.client.batch_execute("ROLLBACK").await;
                Err(e)
            }
        },
        other => other,
    };
    // Not kept behind a written row: given back now.
    let freed = s
        .client
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .await;
    match written {
        // Another's row covers the key, or ours expired already.
        Ok(_) => freed.map_err(|e| s.error(&format!("releasing '{}'", k.key), e)),
        Err(e) if e.as_db_error().is_none() || super::ending(s, &e) => {
            Err(s.error(&format!("keeping '{}'", k.key), e))
        }
        Err(e) => Err(BackendError::Unsupported {
            server: s.server.clone(),
            reason: format!(
                "'{}' was released, not kept: lc-cli's PostgreSQL backend keeps a hold after its command (--hold-at-least, `lock KEY` without a command) in the table lc_cli.kept, and this role may not create or use it ({}): it needs CREATE on the database once (or a role that has it keeps a hold once), then USAGE on the schema lc_cli and SELECT, INSERT, UPDATE, DELETE on lc_cli.kept",
                k.key,
                super::session::describe(&e)
            ),
        }),
    }
}

/// Gives back a grant that found a kept hold (or failed on it): every
/// advisory lock of the session, and the rows its grant wrote (its history
/// row, its request's row), bounded.
pub(super) async fn give_back(s: &Session, key: &str, bound: Duration) {
    let free = async {
        let _ = s
            .client
            .batch_execute("SELECT pg_advisory_unlock_all()")
            .await;
        for sql in [
            "DELETE FROM lc_cli.holds WHERE pid = pg_backend_pid() AND key = $1",
            "DELETE FROM lc_cli.requests WHERE pid = pg_backend_pid() AND key = $1",
        ] {
            let _ = s.client.query_typed(sql, &[(&key, Type::TEXT)]).await;
        }
    };
    let _ = tokio::time::timeout(bound, free).await;
}

/// Waits until the key's kept hold has ended (its deadline passed, or
/// `unlock`/`reset` deleted it and notified): `LISTEN` on the key's
/// channel first, then a read of the row (so no notification is missed
/// after it), a sleep until the row's deadline or a notification (at most
/// [`MAX_NAP`]: a row deleted by hand sends none), and so on. Only reads:
/// the lock is asked for again once the row is gone. False when withdrawn.
pub(super) async fn wait(
    s: &Session,
    key: &str,
    id: i64,
    cancel: &CancellationToken,
) -> Result<bool> {
    s.client
        .batch_execute(&format!("LISTEN \"{CHANNEL}{id}\""))
        .await
        .map_err(|e| s.error("waiting for a kept hold", e))?;
    for _ in 0..u32::MAX {
        let read = check(s, key).await;
        let Some(window) = settle(s, key, read).await? else {
            return Ok(true);
        };
        // A few ms past the deadline: the next read finds it expired.
        let nap = window
            .left
            .map_or(MAX_NAP, |l| (l + Duration::from_millis(5)).min(MAX_NAP));
        tokio::select! {
            _ = tokio::time::sleep(nap) => {}
            _ = s.notified() => {}
            _ = cancel.cancelled() => return Ok(false),
            why = s.ended() => return Err(BackendError::Unavailable {
                server: s.server.clone(),
                reason: format!("lost the connection while waiting: {why}"),
            }),
        }
    }
    Ok(true)
}

/// Whether `lc_cli.kept` is there (none: no hold was ever kept).
async fn table(s: &Session) -> Result<bool> {
    Ok(s.client
        .query_one("SELECT to_regclass('lc_cli.kept') IS NOT NULL", &[])
        .await
        .map_err(|e| s.error("looking for lc_cli.kept", e))?
        .get(0))
}

/// `lc-cli unlock KEY`: deletes its kept hold (one whose session no longer
/// holds the lock) and wakes its waiters. False when none was kept; a key
/// held by a running command is refused (only `reset` ends that).
pub(super) async fn unlock(s: &Session, key: &str) -> Result<bool> {
    if table(s).await? {
        let sql = format!(
            "WITH d AS (DELETE FROM lc_cli.kept k WHERE k.key = $1 AND NOT {HOLDING}
                        RETURNING k.id, k.until > clock_timestamp() AS live),
                  n AS (SELECT pg_notify('{CHANNEL}' || d.id, '') FROM d)
             SELECT coalesce(bool_or(d.live), false), (SELECT count(*) FROM n) FROM d"
        );
        let row = s
            .client
            .query_one(sql.as_str(), &[&key])
            .await
            .map_err(|e| s.error(&format!("unlocking '{key}'"), e))?;
        if row.get::<_, bool>(0) {
            return Ok(true);
        }
    }
    let held: bool = s
        .client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks
                            WHERE locktype = 'advisory' AND granted AND objsubid = 1
                              AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)
                              AND database = (SELECT oid FROM pg_database
                                              WHERE datname = current_database()))",
            &[&key],
        )
        .await
        .map_err(|e| s.error(&format!("unlocking '{key}'"), e))?
        .get(0);
    match held {
        true => Err(BackendError::Refused {
            server: s.server.clone(),
            reason: format!(
                "'{key}' is held by a running session (its command runs), not kept; end its holder with `lc-cli reset`"
            ),
        }),
        false => Ok(false),
    }
}

/// `reset`: deletes the kept holds of `key`, or of `source`, and wakes
/// their waiters.
pub(super) async fn clear(s: &Session, key: Option<&str>, source: Option<&str>) -> Result<()> {
    if !table(s).await? {
        return Ok(());
    }
    let sql = format!(
        "WITH d AS (DELETE FROM lc_cli.kept
                    WHERE ($1::text IS NULL OR key = $1) AND ($2::text IS NULL OR source = $2)
                    RETURNING id),
              n AS (SELECT pg_notify('{CHANNEL}' || d.id, '') FROM d)
         SELECT (SELECT count(*) FROM n)"
    );
    s.client
        .query_typed(sql.as_str(), &[(&key, Type::TEXT), (&source, Type::TEXT)])
        .await
        .map_err(|e| s.error("clearing kept holds in lc_cli.kept", e))?;
    Ok(())
}

/// The unexpired kept holds whose session no longer holds the lock (a
/// running holder is listed from `pg_locks`), for `keys`. None readable
/// (no table, no right to read it): none listed.
pub(super) async fn list(s: &Session) -> Result<Vec<KeyInfo>> {
    if !table(s).await.unwrap_or(false) {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT k.key, k.source, k.peer, k.token, k.fields,
                extract(epoch FROM k.granted)::float8,
                CASE WHEN k.until = 'infinity' THEN NULL
                     ELSE extract(epoch FROM k.until)::float8 END
         FROM lc_cli.kept k WHERE k.until > clock_timestamp() AND NOT {HOLDING}
         ORDER BY k.key"
    );
    let Ok(rows) = s.client.query(sql.as_str(), &[]).await else {
        return Ok(Vec::new());
    };
    let at = |t: Option<f64>| {
        t.filter(|t| *t > 0.0)
            .map(|t| UNIX_EPOCH + Duration::from_secs_f64(t))
    };
    Ok(rows
        .iter()
        .map(|r| KeyInfo {
            key: r.get(0),
            source: r.get(1),
            peer: r.get(2),
            since: at(r.get(5)),
            waiting: 0,
            kept: Some(true),
            mode: LockMode::Exclusive,
            token: r.get::<_, Option<i64>>(3).map(|t| t as u64),
            expires: at(r.get(6)),
            identity: None,
            fields: FieldList::parse(r.get::<_, String>(4).as_bytes()).unwrap_or_default(),
            mark: None,
        })
        .collect())
}
