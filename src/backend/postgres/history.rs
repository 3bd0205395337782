//! A key's history on PostgreSQL (`lc-cli history`, docs/history.md): each
//! hold is a row of `lc_cli.holds` from its grant (written by the statement
//! that draws its token: no round trip of its own), moved to
//! `lc_cli.history` when it ends (history.sql):
//! - released: by the releasing lc-cli, with the command's status, in a
//!   statement pipelined ahead of the unlock (no round trip of its own);
//! - reset: by `lc-cli reset`, after it ended the holder's session;
//! - lost: by the lc-cli that lost it, once it reaches the server again
//!   (bounded by the connect timeout; if it cannot, the next one sweeps);
//! - freed: by whoever next finds the row's session no longer holding its
//!   lock (a grant of the key, `history`): a killed lc-cli, a session the
//!   server ended, a server restart; the end time is when it was found.
//!
//! The tables are created with lc-cli's others on first use; a role that
//! may not create them (or use them) locks as before, without a history,
//! and is told so in one line.

use std::time::{Duration, SystemTime};

use tokio_postgres::types::Type;

use super::session::Session;
use crate::backend::fields::FieldList;
use crate::backend::history::HistoryEntry;
use crate::backend::{LockMode, LockRequest, Result};

/// The tables and functions, created on first use (with the schema's).
pub(super) const SCHEMA: &str = include_str!("history.sql");

/// What a grant records of its hold (`lc_cli.hold_v1`).
pub(super) struct Record {
    pub key: String,
    /// The advisory lock held: the key's, or its `--limit` slot's.
    pub lock_id: i64,
    pub source: String,
    pub mode: LockMode,
    pub slot: Option<u32>,
    pub waited: Duration,
    pub fields: String,
}

impl Record {
    pub(super) fn new(request: &LockRequest, lock_id: i64, waited: Duration) -> Record {
        Record {
            key: request.key.clone(),
            lock_id,
            source: request.source.clone(),
            mode: request.mode,
            slot: None,
            waited,
            fields: request.extras.encode(),
        }
    }
}

/// Records the hold and draws its token (or takes `token`, or, with
/// `current`, the one the session drew last); with `named`, the key's name
/// is recorded under that id in the same statement (the grant's own, for
/// `keys`). The token (None where the session holds nothing now).
pub(super) async fn hold(
    s: &Session,
    r: &Record,
    named: Option<i64>,
    token: Option<u64>,
    current: bool,
) -> std::result::Result<Option<u64>, tokio_postgres::Error> {
    const HOLD: &str = "SELECT lc_cli.hold_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)";
    const NAMED_HOLD: &str = "WITH named AS (INSERT INTO lc_cli.keys (id, key) VALUES ($10, $1)
                                             ON CONFLICT (id) DO NOTHING)
         SELECT lc_cli.hold_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)";
    let mode = i64::from(r.mode.word());
    let token = token.map(|t| t as i64);
    let slot = r.slot.map(|s| s as i32);
    let waited = r.waited.as_millis() as i64;
    let id = named.unwrap_or_default();
    let mut params: Vec<(&(dyn tokio_postgres::types::ToSql + Sync), Type)> = vec![
        (&r.key, Type::TEXT),
        (&r.lock_id, Type::INT8),
        (&r.source, Type::TEXT),
        (&mode, Type::INT8),
        (&token, Type::INT8),
        (&current, Type::BOOL),
        (&slot, Type::INT4),
        (&waited, Type::INT8),
        (&r.fields, Type::TEXT),
    ];
    let sql = match named {
        Some(_) => {
            params.push((&id, Type::INT8));
            NAMED_HOLD
        }
        None => HOLD,
    };
    let rows = s.client.query_typed(sql, &params).await?;
    Ok(rows
        .first()
        .and_then(|row| row.get::<_, Option<i64>>(0))
        .map(|t| t as u64))
}

/// The released hold's statement, sent ahead of the unlock on the holder's
/// own session.
pub(super) async fn released(
    s: &Session,
    key: &str,
    status: Option<i32>,
) -> std::result::Result<(), tokio_postgres::Error> {
    s.client
        .query_typed(
            "SELECT lc_cli.ended_v1($1, ARRAY[pg_backend_pid()], 'released', $2, NULL)",
            &[(&key, Type::TEXT), (&status, Type::INT4)],
        )
        .await
        .map(|_| ())
}

/// Says once, in one line, that this hold goes without a history: the
/// role may not create or use its tables (the lock itself is taken).
pub(super) fn not_kept(key: &str, e: &tokio_postgres::Error) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "lc-cli: no history of '{key}' is kept: {} (the role needs CREATE on the database once, then USAGE on the schema lc_cli, INSERT, SELECT, DELETE on lc_cli.holds and lc_cli.history and USAGE on their sequences; docs/backends/postgresql.md)",
            super::session::describe(e)
        )
    });
}

/// Whether `e` says the history's tables or functions are not there.
pub(super) fn missing(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    [
        SqlState::UNDEFINED_TABLE,
        SqlState::INVALID_SCHEMA_NAME,
        SqlState::UNDEFINED_FUNCTION,
    ]
    .iter()
    .any(|c| e.code() == Some(c))
}

/// The last `limit` ended holds of `key`, newest first; the dead holds of
/// the key found first (as freed). Empty where no history was ever kept.
pub(super) async fn read(s: &Session, key: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
    if let Err(e) = s
        .client
        .query_typed("SELECT lc_cli.sweep_v1($1)", &[(&key, Type::TEXT)])
        .await
    {
        return match missing(&e) {
            true => Ok(Vec::new()),
            false => Err(s.error(&format!("reading the history of '{key}'"), e)),
        };
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = s
        .client
        .query_typed(
            "SELECT source, ident, peer, mode, token, slot,
                    (extract(epoch FROM granted) * 1000)::int8, waited_ms,
                    (extract(epoch FROM ended_at) * 1000)::int8, ended, status, by, fields
             FROM lc_cli.history WHERE key = $1 ORDER BY seq DESC LIMIT $2",
            &[(&key, Type::TEXT), (&limit, Type::INT8)],
        )
        .await
        .map_err(|e| s.error(&format!("reading the history of '{key}'"), e))?;
    Ok(rows.iter().map(|row| entry(key, row)).collect())
}

fn at(ms: Option<i64>) -> Option<SystemTime> {
    ms.and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// One row as an entry: the request's field list, then the ending's.
fn entry(key: &str, row: &tokio_postgres::Row) -> HistoryEntry {
    let text: String = row.get(12);
    let mut fields = FieldList::parse(text.as_bytes()).unwrap_or_default();
    if let Some(slot) = row.get::<_, Option<i32>>(5) {
        fields.push("slot", &slot.to_string());
    }
    fields.push("ended", row.get::<_, &str>(9));
    if let Some(status) = row.get::<_, Option<i32>>(10) {
        fields.push("status", &status.to_string());
    }
    if let Some(by) = row.get::<_, Option<&str>>(11) {
        fields.push("by", by);
    }
    HistoryEntry {
        key: key.to_string(),
        source: row.get(0),
        identity: row.get(1),
        peer: row.get(2),
        mode: LockMode::from_word(row.get::<_, i64>(3) as u32),
        token: row.get::<_, Option<i64>>(4).map(|t| t as u64),
        granted: at(row.get(6)),
        waited: row
            .get::<_, Option<i64>>(7)
            .and_then(|w| u64::try_from(w).ok())
            .map(Duration::from_millis),
        ended_at: at(row.get(8)),
        fields,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_the_documented_default() {
        let offset = format!(
            "OFFSET {} LIMIT 1",
            crate::backend::history::DEFAULT_HISTORY - 1
        );
        assert!(SCHEMA.contains(&offset), "history.sql must keep {offset}");
    }
}
