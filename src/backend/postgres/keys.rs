//! `keys` and `reset` for PostgreSQL: the granted advisory locks of this
//! database (`pg_locks` joined with `pg_stat_activity`), named through the
//! `lc_cli.keys` table lc-cli fills at each grant.
//!
//! A bigint advisory lock shows in `pg_locks` as `classid` (high 32 bits),
//! `objid` (low 32 bits) and `objsubid = 1`.

use std::time::{Duration, UNIX_EPOCH};

use tokio_postgres::error::SqlState;

use super::session::Session;
use crate::backend::{BackendError, KeyInfo, Result};

/// The application name of an lc-cli session: its source after this, cut
/// to the server's 63 bytes.
pub const APP_PREFIX: &str = "lc-cli ";

/// The application name lc-cli sets for `source`.
pub fn app_name(source: &str) -> String {
    let mut name = format!("{APP_PREFIX}{source}");
    while name.len() > 63 {
        name.pop();
    }
    name
}

const HELD: &str = "
    WITH held AS (
        SELECT l.pid, l.classid, l.objid, l.objsubid, l.database, l.mode,
               (l.classid::int8 << 32) | l.objid::int8 AS id
        FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
    SELECT h.id, {name}, a.application_name, host(a.client_addr), a.client_port,
           extract(epoch FROM a.backend_start)::float8, h.pid,
           (SELECT count(*) FROM pg_locks w
             WHERE w.locktype = 'advisory' AND NOT w.granted AND w.database = h.database
               AND w.classid = h.classid AND w.objid = h.objid AND w.objsubid = 1),
           h.mode
    FROM held h LEFT JOIN pg_stat_activity a ON a.pid = h.pid {join}";

/// Every held advisory lock of this database. A key lc-cli never took
/// shows as `id:<lock id>`.
pub async fn list(s: &Session) -> Result<Vec<KeyInfo>> {
    let named = s
        .client
        .query_one("SELECT to_regclass('lc_cli.keys') IS NOT NULL", &[])
        .await
        .map_err(|e| s.error("looking for lc_cli.keys", e))?
        .get::<_, bool>(0);
    let sql = if named {
        HELD.replace("{name}", "k.key")
            .replace("{join}", "LEFT JOIN lc_cli.keys k ON k.id = h.id")
    } else {
        HELD.replace("NAMES", "NULL::text")
            .replace("JOIN_NAMES", "")
    };
    let rows = match s.client.query(sql.as_str(), &[]).await {
        Ok(rows) => rows,
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            return Err(s.error("reading the key names in lc_cli.keys", e))
        }
        Err(e) => return Err(s.error("listing pg_locks", e)),
    };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let id: i64 = row.get(0);
        let key: Option<String> = row.get(1);
        let app: Option<String> = row.get(2);
        let addr: Option<String> = row.get(3);
        let port: Option<i32> = row.get(4);
        let start: Option<f64> = row.get(5);
        let pid: i32 = row.get(6);
        let waiting: i64 = row.get(7);
        let mode: Option<String> = row.get(8);
        out.push(KeyInfo {
            key: key.unwrap_or_else(|| format!("id:{id}")),
            source: source_of(app.as_deref(), pid),
            peer: addr.map(|a| match port {
                Some(p) if p > 0 => format!("{a}:{p}"),
                _ => a,
            }),
            since: start
                .filter(|t| *t > 0.0)
                .map(|t| UNIX_EPOCH + Duration::from_secs_f64(t)),
            waiting: usize::try_from(waiting).unwrap_or(0),
            // No hold outlives its session here: an lc-cli holder runs a command.
            kept: app
                .as_deref()
                .is_some_and(|a| a.starts_with("lc-cli "))
                .then_some(false),
            mode: match mode.as_deref() {
                Some("ShareLock") => crate::backend::LockMode::Shared,
                _ => crate::backend::LockMode::Exclusive,
            },
            token: None,
        });
    }
    Ok(out)
}

/// lc-cli's source from its application name; another client (psql) by
/// its application name and backend pid.
fn source_of(app: Option<&str>, pid: i32) -> String {
    match app {
        Some(a) if a.starts_with(APP_PREFIX) => a[APP_PREFIX.len()..].to_string(),
        Some(a) if !a.is_empty() => format!("{a} (pid {pid})"),
        _ => format!("pid {pid}"),
    }
}

/// Ends the sessions that `sql` selects (its one parameter given), waiting
/// up to 5 s for each to be gone; their locks go with them.
async fn terminate(
    s: &Session,
    sql: &str,
    arg: &(dyn tokio_postgres::types::ToSql + Sync),
    what: &str,
) -> Result<()> {
    match s.client.query(sql, &[arg]).await {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            Err(BackendError::Refused {
                server: s.server.clone(),
                reason: format!(
                    "not allowed to end the session of {what}: it needs superuser, the pg_signal_backend role, or the holder's own role"
                ),
            })
        }
        Err(e) => Err(s.error(&format!("ending the session of {what}"), e)),
    }
}

/// Terminates the session holding `key` (`pg_terminate_backend`): its
/// waiters keep their places and the first is granted the key.
pub async fn reset_key(s: &Session, key: &str) -> Result<()> {
    let sql = "
        SELECT pg_terminate_backend(l.pid, 5000)
        FROM pg_locks l, (SELECT hashtextextended($1, 0) AS id) k
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = ((k.id >> 32) & 4294967295)::oid
          AND l.objid = (k.id & 4294967295)::oid
          AND l.pid <> pg_backend_pid()";
    terminate(s, sql, &key, &format!("the holder of '{key}'")).await
}

/// Terminates every lc-cli session of `source`, holders and waiters.
pub async fn reset_source(s: &Session, source: &str) -> Result<()> {
    let sql = "
        SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
        WHERE application_name = $1 AND pid <> pg_backend_pid()";
    terminate(s, sql, &app_name(source), &format!("source '{source}'")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_from_application_names() {
        assert_eq!(source_of(Some("lc-cli ci-7"), 1), "ci-7");
        assert_eq!(source_of(Some("psql"), 42), "psql (pid 42)");
        assert_eq!(source_of(None, 42), "pid 42");
        assert_eq!(app_name(&"x".repeat(100)).len(), 63);
    }
}
