//! Deploy queues on PostgreSQL (issue 44): a request with fields (`--note`,
//! `--order`, `--newest`, `--cancel-running`) keeps them in a row of
//! `lc_cli.requests` (its backend pid, key, field list) beside its advisory
//! lock, and each key's mark in `lc_cli.marks`; the functions of
//! `queue.sql` read and change them, each key's arrivals and grants under a
//! transaction lock of the key, so they are seen one after the other.
//!
//! A request's statements are prepared with the session's naming (no round
//! trip of their own) and sent pipelined, each its own transaction: the
//! arrival, the interrupt of the waiters it superseded (after the arrival's
//! commit, so they find its marker), and the lock call, which waits only
//! if the arrival let it in line and no newer request marked it since.
//! A superseded waiter's lock call is cancelled (`pg_cancel_backend`); it
//! reads the marker in its row and tells it from any other cancel. A holder
//! taken with `--cancel-running` listens on `lc_cli_cancel_<pid>`; a newer
//! such request notifies it there, naming the holder's request id.
//! The release raises the mark in one statement and unlocks in the next,
//! pipelined: the next holder reads the mark once it is committed.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::Statement;
use tokio_util::sync::CancellationToken;

use super::address::PgAddress;
use super::session::Session;
use crate::backend::fields::FieldList;
use crate::backend::{BackendError, LockRequest, Result, Rival};

/// The tables and functions, created on first use.
const SCHEMA: &str = include_str!("queue.sql");

/// The channel of a holder's cancel notices: this, then its backend pid.
pub(super) const CANCEL_CHANNEL: &str = "lc_cli_cancel_";

/// A request's statements, prepared before it asks.
pub(super) struct Statements {
    arrive: Statement,
    interrupt: Statement,
    lock: Statement,
    granted: Statement,
    pub released: Statement,
    pub unlock: Statement,
}

/// What a request with fields came to.
pub(super) enum Outcome {
    /// Granted: its request id (cancel notices name it) and token.
    Held {
        rid: i64,
        token: Option<u64>,
    },
    Busy,
    Cancelled,
    Superseded(Rival),
    Outdated(u64),
}

/// Whether `e` says lc-cli's tables or functions are not there (yet).
fn missing(e: &tokio_postgres::Error) -> bool {
    [
        SqlState::UNDEFINED_TABLE,
        SqlState::INVALID_SCHEMA_NAME,
        SqlState::UNDEFINED_FUNCTION,
        SqlState::UNDEFINED_OBJECT,
    ]
    .iter()
    .any(|c| e.code() == Some(c))
}

/// Prepares a request's statements (no round trip of its own when run
/// alongside the session's naming).
pub(super) async fn prepare(
    s: &Session,
    shared: bool,
    nonblock: bool,
) -> std::result::Result<Statements, tokio_postgres::Error> {
    let take = match (shared, nonblock) {
        (false, false) => "pg_advisory_lock",
        (true, false) => "pg_advisory_lock_shared",
        (false, true) => "pg_try_advisory_lock",
        (true, true) => "pg_try_advisory_lock_shared",
    };
    let give = match shared {
        false => "pg_advisory_unlock",
        true => "pg_advisory_unlock_shared",
    };
    let lock = format!(
        "SELECT {take}(r.id)::text FROM lc_cli.requests r
         WHERE r.pid = pg_backend_pid() AND r.by_pid IS NULL"
    );
    let unlock = format!("SELECT {give}($1)::text");
    let c = &s.client;
    let (arrive, interrupt, lock, granted, released, unlock) = tokio::join!(
        c.prepare("SELECT * FROM lc_cli.arrive_v1($1, $2, $3, $4, $5, $6, $7)"),
        c.prepare("SELECT lc_cli.interrupt_v1($1)"),
        c.prepare(&lock),
        c.prepare("SELECT * FROM lc_cli.granted_v1($1, $2)"),
        c.prepare(
            // A mark already at or above the order is not written again
            // (no row version, no WAL flush: a re-run of the same order
            // costs no disk write); a new one is inserted, a lower raised.
            "WITH gone AS (DELETE FROM lc_cli.requests WHERE pid = pg_backend_pid()),
             raised AS (UPDATE lc_cli.marks SET mark = $2::int8
                        WHERE key = $1::text AND mark < $2::int8 RETURNING 1)
             INSERT INTO lc_cli.marks (key, mark) SELECT $1::text, $2::int8
             WHERE $2::int8 IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM lc_cli.marks WHERE key = $1::text)
             ON CONFLICT (key) DO UPDATE SET mark = greatest(lc_cli.marks.mark, excluded.mark)"
        ),
        c.prepare(&unlock),
    );
    Ok(Statements {
        arrive: arrive?,
        interrupt: interrupt?,
        lock: lock?,
        granted: granted?,
        released: released?,
        unlock: unlock?,
    })
}

/// The statements `first` prepared or, where lc-cli's tables are missing,
/// creates them (once: any request with fields does) and prepares again;
/// a role that may not create them, or use them, is refused with one line
/// (76) naming the privilege.
pub(super) async fn ready(
    s: &Session,
    a: &PgAddress,
    request: &LockRequest,
    first: std::result::Result<Statements, tokio_postgres::Error>,
) -> Result<Statements> {
    let refused = |what: String| {
        BackendError::Unsupported {
        server: s.server.clone(),
        reason: format!(
            "lc-cli's PostgreSQL backend keeps {} in the tables lc_cli.requests and lc_cli.marks, and {what}",
            request.extras.options()
        ),
    }
    };
    let shared = request.mode == crate::backend::LockMode::Shared;
    let mut got = first;
    for attempt in 0..2 {
        match got {
            Ok(st) => return Ok(st),
            Err(e) if e.as_db_error().is_none() => return Err(s.error("preparing the request", e)),
            Err(e) if attempt == 0 && missing(&e) => {
                if let Err(e) = s.client.batch_execute(SCHEMA).await {
                    if e.as_db_error().is_none() {
                        return Err(s.error("creating lc-cli's tables", e));
                    }
                    let _ = s.client.batch_execute("ROLLBACK").await;
                    return Err(refused(format!(
                        "role '{}' may not create them ({}): it needs the CREATE privilege on database '{}' (and on the schema lc_cli if it exists), or a role that has it makes them once (any request with --note or --order does)",
                        a.user,
                        super::session::describe(&e),
                        a.db
                    )));
                }
                got = prepare(s, shared, request.nonblock).await;
            }
            Err(e) => return Err(may_not_use(s, a, request, &e)),
        }
    }
    Err(refused("they could not be prepared".into()))
}

/// The refusal of a role that may not use lc-cli's tables.
pub(super) fn may_not_use(
    s: &Session,
    a: &PgAddress,
    request: &LockRequest,
    e: &tokio_postgres::Error,
) -> BackendError {
    BackendError::Unsupported {
        server: s.server.clone(),
        reason: format!(
            "lc-cli's PostgreSQL backend keeps {} in the tables lc_cli.requests and lc_cli.marks, and role '{}' may not use them ({}): it needs USAGE on the schema lc_cli, SELECT, INSERT, UPDATE and DELETE on its tables, and USAGE on its sequences",
            request.extras.options(),
            a.user,
            super::session::describe(e)
        ),
    }
}

/// Polls `f` once, so that the request it makes is sent now, ahead of the
/// next one; its output if it is already done.
pub(super) async fn send_now<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *f).poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    })
    .await
}

/// The answer of a future [`send_now`] polled: what that poll gave, else
/// the rest of the wait.
pub(super) async fn answer_of<F: Future + Unpin>(f: F, sent: Option<F::Output>) -> F::Output {
    match sent {
        Some(v) => v,
        None => f.await,
    }
}

/// The rival a marker or a verdict names.
fn rival(source: Option<String>, fields: Option<String>) -> Rival {
    Rival {
        source: source.unwrap_or_default(),
        identity: None,
        fields: FieldList::parse(fields.unwrap_or_default().as_bytes()).unwrap_or_default(),
    }
}

/// The marker in our own row, if a newer request superseded us.
async fn marker(s: &Session) -> Option<Rival> {
    let row = s
        .client
        .query_opt(
            "SELECT by_source, by_fields FROM lc_cli.requests
             WHERE pid = pg_backend_pid() AND by_pid IS NOT NULL",
            &[],
        )
        .await
        .ok()??;
    Some(rival(row.get(0), row.get(1)))
}

/// Leaves the line and gives back whatever was taken (bounded).
async fn leave(s: &Session, bound: Duration) {
    let free = s.client.batch_execute(
        "SELECT pg_advisory_unlock_all(); DELETE FROM lc_cli.requests WHERE pid = pg_backend_pid()",
    );
    let _ = tokio::time::timeout(bound, free).await;
}

/// The arrival, the interrupts and the lock call, pipelined; then, once
/// granted, the grant's check (the caller then checks the key's mode).
pub(super) async fn acquire(
    s: &Session,
    a: &PgAddress,
    st: &Statements,
    request: &LockRequest,
    id: i64,
    bound: Duration,
    cancel: &CancellationToken,
) -> Result<Outcome> {
    let key = request.key.as_str();
    let x = &request.extras;
    let fields = x.encode();
    let ord = x.order.map(|o| o as i64);
    let c = &s.client;
    type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
    let arrive_params: [Param; 7] = [
        &id,
        &key,
        &request.source,
        &fields,
        &ord,
        &x.newest,
        &x.cancel,
    ];
    let id_param: [Param; 1] = [&id];
    let mut arrive = Box::pin(c.query_one(&st.arrive, &arrive_params));
    let arrived = send_now(&mut arrive).await;
    let mut interrupt = Box::pin(c.query_one(&st.interrupt, &id_param));
    if x.newest {
        let _ = send_now(&mut interrupt).await;
    }
    let mut lock = Box::pin(c.query(&st.lock, &[]));
    let locked = send_now(&mut lock).await;
    let arrived = answer_of(arrive, arrived).await.map_err(|e| {
        match e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
            true => may_not_use(s, a, request, &e),
            false => s.error(&format!("joining the line for '{key}'"), e),
        }
    })?;
    let verdict: String = arrived.get(0);
    if x.newest {
        // Without the right to signal them, the superseded leave at their turn.
        let _ = interrupt.await;
    }
    match verdict.as_str() {
        "go" => {}
        "outdated" => {
            let _ = lock.await;
            return Ok(Outcome::Outdated(arrived.get::<_, i64>(1) as u64));
        }
        _ => {
            let _ = lock.await;
            return Ok(Outcome::Superseded(rival(arrived.get(2), arrived.get(3))));
        }
    }
    let rid: i64 = arrived.get(4);
    let answer = match locked {
        Some(r) => Some(r),
        None => tokio::select! {
            r = &mut lock => Some(r),
            _ = cancel.cancelled() => None,
        },
    };
    let rows = match answer {
        Some(Ok(rows)) => rows,
        Some(Err(e)) if e.code() == Some(&SqlState::QUERY_CANCELED) => {
            return match marker(s).await {
                Some(by) => {
                    leave(s, bound).await;
                    Ok(Outcome::Superseded(by))
                }
                None => Err(s.error(&format!("waiting for '{key}'"), e)),
            };
        }
        Some(Err(e)) => return Err(s.error(&format!("waiting for '{key}'"), e)),
        None => {
            // Withdrawn: the wait's own answer tells we left the queue (or
            // were granted meanwhile: given back).
            let _ = tokio::time::timeout(bound, s.cancel()).await;
            let _ = tokio::time::timeout(bound, lock).await;
            leave(s, bound).await;
            return Ok(Outcome::Cancelled);
        }
    };
    let Some(row) = rows.first() else {
        // Marked before our lock call ran: it never waited.
        let by = marker(s).await.unwrap_or_default();
        leave(s, bound).await;
        return Ok(Outcome::Superseded(by));
    };
    if row.get::<_, Option<String>>(0).as_deref() == Some("false") {
        leave(s, bound).await;
        return Ok(Outcome::Busy);
    }
    granted(s, st, key, id, rid, bound).await
}

/// The grant's check: superseded meanwhile, or outdated, gives the key back
/// at once (in the same statement); else the token.
async fn granted(
    s: &Session,
    st: &Statements,
    key: &str,
    id: i64,
    rid: i64,
    bound: Duration,
) -> Result<Outcome> {
    let row = match s.client.query_one(&st.granted, &[&id, &key]).await {
        Ok(row) => row,
        // A newer request's interrupt that came as we were granted.
        Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => {
            let by = marker(s).await;
            leave(s, bound).await;
            return match by {
                Some(by) => Ok(Outcome::Superseded(by)),
                None => Err(s.error(&format!("after the grant of '{key}'"), e)),
            };
        }
        Err(e) => {
            leave(s, bound).await;
            return Err(s.error(&format!("after the grant of '{key}'"), e));
        }
    };
    let verdict: String = row.get(0);
    match verdict.as_str() {
        "held" => Ok(Outcome::Held {
            rid,
            token: row.get::<_, Option<i64>>(4).map(|t| t as u64),
        }),
        "outdated" => Ok(Outcome::Outdated(
            row.get::<_, Option<i64>>(1).unwrap_or_default() as u64,
        )),
        _ => Ok(Outcome::Superseded(rival(row.get(2), row.get(3)))),
    }
}

/// The release of a hold with fields: its row goes and, after a command
/// that ended with status 0, the key's mark rises to its order; then, in
/// the same round trip, the unlock. Err when the unlock was not confirmed;
/// Ok(Some(why)) when the key is free but the mark could not be raised.
pub(super) async fn release(
    s: &Session,
    st: &Statements,
    key: &str,
    id: i64,
    mark: Option<u64>,
) -> std::result::Result<Option<String>, tokio_postgres::Error> {
    let mark = mark.map(|m| m as i64);
    type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);
    let raise_params: [Param; 2] = [&key, &mark];
    let id_param: [Param; 1] = [&id];
    let mut raise = Box::pin(s.client.execute(&st.released, &raise_params));
    let raised = send_now(&mut raise).await;
    let unlock = s.client.query_one(&st.unlock, &id_param);
    // Read in the order the answers come (the connection waits for each).
    let (raised, unlocked) = tokio::join!(answer_of(raise, raised), unlock);
    unlocked?;
    Ok(raised.err().map(|e| super::session::describe(&e)))
}

/// The rival a cancel notice for request `rid` names, if one came.
pub(super) fn cancel_notice(s: &Session, pid: i32, rid: i64) -> Option<Rival> {
    let ours = rid.to_string();
    s.take_notes(&format!("{CANCEL_CHANNEL}{pid}"))
        .into_iter()
        .find_map(|payload| {
            let mut parts = payload.splitn(3, '\n');
            (parts.next()? == ours).then(|| {
                rival(
                    parts.next().map(str::to_string),
                    parts.next().map(str::to_string),
                )
            })
        })
}

/// Whether lc-cli's queue tables exist here (a listing without them has
/// no fields and no marks).
async fn tables(s: &Session) -> Result<bool> {
    Ok(s
        .client
        .query_one(
            "SELECT to_regclass('lc_cli.requests') IS NOT NULL AND to_regclass('lc_cli.marks') IS NOT NULL",
            &[],
        )
        .await
        .map_err(|e| s.error("looking for lc_cli.requests", e))?
        .get(0))
}

/// The field lists of the sessions `pids` (each with the lock id its row
/// is for), and the marks of `keys`, for `keys`.
pub(super) async fn decorations(
    s: &Session,
    pids: Vec<i32>,
    keys: Vec<String>,
) -> Result<(
    std::collections::HashMap<i32, (i64, String)>,
    std::collections::HashMap<String, u64>,
)> {
    if !tables(s).await? {
        return Ok(Default::default());
    }
    let rows = s
        .client
        .query(
            "SELECT pid, id, fields FROM lc_cli.requests WHERE pid = ANY($1)",
            &[&pids],
        )
        .await
        .map_err(|e| s.error("reading lc_cli.requests", e))?;
    let fields = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let rows = s
        .client
        .query(
            "SELECT key, mark FROM lc_cli.marks WHERE key = ANY($1)",
            &[&keys],
        )
        .await
        .map_err(|e| s.error("reading lc_cli.marks", e))?;
    let marks = rows
        .iter()
        .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
        .collect();
    Ok((fields, marks))
}

/// The key's mark (None: none, or no table yet).
pub(super) async fn mark(s: &Session, key: &str) -> Result<Option<u64>> {
    if !tables(s).await? {
        return Ok(None);
    }
    let row = s
        .client
        .query_opt("SELECT mark FROM lc_cli.marks WHERE key = $1", &[&key])
        .await
        .map_err(|e| s.error(&format!("reading the mark of '{key}'"), e))?;
    Ok(row.map(|r| r.get::<_, i64>(0) as u64))
}

/// Clears the key's mark; false when it had none.
pub(super) async fn clear_mark(s: &Session, key: &str) -> Result<bool> {
    if !tables(s).await? {
        return Ok(false);
    }
    let n = s
        .client
        .execute("DELETE FROM lc_cli.marks WHERE key = $1", &[&key])
        .await
        .map_err(|e| s.error(&format!("clearing the mark of '{key}'"), e))?;
    Ok(n > 0)
}
