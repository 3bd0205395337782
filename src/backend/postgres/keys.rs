//! `keys` and `reset` for PostgreSQL: the granted advisory locks of this
//! database (`pg_locks` joined with `pg_stat_activity`), named through the
//! `lc_cli.keys` table lc-cli fills at each grant; `keys --waiters`: the
//! ones not granted, oldest `waitstart` first.
//!
//! A bigint advisory lock shows in `pg_locks` as `classid` (high 32 bits),
//! `objid` (low 32 bits) and `objsubid = 1`.

use std::time::{Duration, UNIX_EPOCH};

use tokio_postgres::error::SqlState;

use std::collections::HashMap;

use super::limit;
use super::session::Session;
use crate::backend::fields::FieldList;
use crate::backend::{BackendError, KeyInfo, LockMode, Result, WaiterInfo};

/// The application name of an lc-cli session: its source after this, cut
/// to the server's 63 bytes.
pub(super) const APP_PREFIX: &str = "lc-cli ";

/// The application name lc-cli sets for `source`.
pub(super) fn app_name(source: &str) -> String {
    let mut name = format!("{APP_PREFIX}{source}");
    while name.len() > 63 {
        name.pop();
    }
    name
}

/// This database's advisory locks (one snapshot), with their sessions.
const LOCKS: &str = "
    WITH l AS MATERIALIZED (
        SELECT pid, objsubid, classid, objid, granted, mode, waitstart,
               (classid::int8 << 32) | objid::int8 AS id
        FROM pg_locks
        WHERE locktype = 'advisory'
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
    SELECT l.pid, l.objsubid, l.classid::int8, l.objid::int8, l.granted, l.mode, l.id,
           a.application_name, host(a.client_addr), a.client_port,
           extract(epoch FROM a.backend_start)::float8,
           extract(epoch FROM l.waitstart)::float8
    FROM l LEFT JOIN pg_stat_activity a ON a.pid = l.pid";

/// One row of [`LOCKS`].
struct Lock {
    pid: i32,
    /// 1: a bigint lock `id`; 2: the two-int lock (`classid`, `objid`).
    subid: i16,
    classid: i64,
    objid: i64,
    granted: bool,
    shared: bool,
    id: i64,
    app: Option<String>,
    addr: Option<String>,
    port: Option<i32>,
    start: Option<f64>,
    /// Since when it waits (PostgreSQL 14's `pg_locks.waitstart`).
    wait_start: Option<f64>,
}

/// A held lock or slot, before its name is known.
struct Holder<'a> {
    /// The id its name is recorded under (a `--limit` key: its marker).
    named: i64,
    lock: &'a Lock,
    waiting: usize,
    mode: LockMode,
}

/// The holders among `locks`: each granted lock of a `-x`/`-s` (or SQL)
/// session, with the requests waiting for its id; each slot of a
/// `--limit N` session (one that holds (`N_CLASS`, N)), with the
/// `--limit` requests of its key that hold no slot. Markers and
/// turnstiles are not holds.
fn holders(locks: &[Lock]) -> Vec<Holder<'_>> {
    let n_of: HashMap<i32, u32> = locks
        .iter()
        .filter(|l| l.subid == 2 && l.classid == i64::from(limit::N_CLASS))
        .map(|l| (l.pid, l.objid as u32))
        .collect();
    // Per --limit key (its marker), the sessions and those with a slot.
    let mut limited: HashMap<i64, (usize, usize)> = HashMap::new();
    for l in locks
        .iter()
        .filter(|l| l.subid == 1 && n_of.contains_key(&l.pid))
    {
        let entry = limited.entry(limit::base_of(l.id)).or_default();
        match limit::part_of(l.id) {
            limit::Part::Marker => entry.0 += 1,
            limit::Part::Slot if l.granted => entry.1 += 1,
            _ => {}
        }
    }
    let mut out = Vec::new();
    for l in locks.iter().filter(|l| l.subid == 1 && l.granted) {
        match n_of.get(&l.pid) {
            Some(n) => {
                if limit::part_of(l.id) != limit::Part::Slot {
                    continue;
                }
                let base = limit::base_of(l.id);
                let (sessions, slots) = limited.get(&base).copied().unwrap_or_default();
                out.push(Holder {
                    named: base,
                    lock: l,
                    waiting: sessions.saturating_sub(slots),
                    mode: LockMode::limit(*n),
                });
            }
            None => out.push(Holder {
                named: l.id,
                lock: l,
                waiting: locks
                    .iter()
                    .filter(|w| w.subid == 1 && !w.granted && w.id == l.id)
                    .count(),
                mode: if l.shared {
                    LockMode::Shared
                } else {
                    LockMode::Exclusive
                },
            }),
        }
    }
    out
}

/// Every held advisory lock of this database, and every `--limit` slot.
/// A key lc-cli never took shows as `id:<lock id>`.
pub(super) async fn list(s: &Session) -> Result<Vec<KeyInfo>> {
    let locks = read_locks(s).await?;
    let held = holders(&locks);
    let names = names(s, held.iter().map(|h| h.named).collect()).await?;
    let (fields, marks) = super::queue::decorations(
        s,
        held.iter().map(|h| h.lock.pid).collect(),
        names.values().cloned().collect(),
    )
    .await?;
    Ok(held
        .into_iter()
        .map(|h| {
            let l = h.lock;
            let key = names
                .get(&h.named)
                .cloned()
                .unwrap_or_else(|| format!("id:{}", h.named));
            KeyInfo {
                identity: None,
                fields: fields_of(&fields, l),
                mark: marks.get(&key).copied(),
                key,
                source: source_of(l.app.as_deref(), l.pid),
                peer: peer_of(l),
                since: l
                    .start
                    .filter(|t| *t > 0.0)
                    .map(|t| UNIX_EPOCH + Duration::from_secs_f64(t)),
                waiting: h.waiting,
                // No hold outlives its session here: an lc-cli holder runs a command.
                kept: l
                    .app
                    .as_deref()
                    .is_some_and(|a| a.starts_with(APP_PREFIX))
                    .then_some(false),
                mode: h.mode,
                token: None,
                expires: None,
            }
        })
        .collect())
}

/// The sessions waiting among `locks`, each key's oldest wait first: each
/// ungranted lock of a `-x`/`-s` (or SQL) session, and each `--limit N`
/// session that holds its key's marker but no slot (in its turnstile's
/// line, or at its head waiting for a slot).
fn waiting(locks: &[Lock]) -> Vec<(i64, &Lock, LockMode, Option<f64>)> {
    let n_of: HashMap<i32, u32> = locks
        .iter()
        .filter(|l| l.subid == 2 && l.classid == i64::from(limit::N_CLASS))
        .map(|l| (l.pid, l.objid as u32))
        .collect();
    let mut out = Vec::new();
    for l in locks.iter().filter(|l| l.subid == 1) {
        match n_of.get(&l.pid) {
            None if !l.granted => {
                let mode = match l.shared {
                    true => LockMode::Shared,
                    false => LockMode::Exclusive,
                };
                out.push((l.id, l, mode, l.wait_start));
            }
            None => {}
            Some(&n) if limit::part_of(l.id) == limit::Part::Marker => {
                let base = limit::base_of(l.id);
                let of_base =
                    |w: &&Lock| w.pid == l.pid && w.subid == 1 && limit::base_of(w.id) == base;
                let slotted = locks
                    .iter()
                    .filter(of_base)
                    .any(|w| w.granted && limit::part_of(w.id) == limit::Part::Slot);
                if slotted {
                    continue;
                }
                let since = locks
                    .iter()
                    .filter(of_base)
                    .find(|w| !w.granted)
                    .and_then(|w| w.wait_start);
                out.push((base, l, LockMode::limit(n.max(2)), since));
            }
            Some(_) => {}
        }
    }
    out.sort_by(|a, b| {
        let at = |t: Option<f64>| t.unwrap_or(f64::MAX);
        (a.0, at(a.3), a.1.pid)
            .partial_cmp(&(b.0, at(b.3), b.1.pid))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    out
}

/// Every session waiting for an advisory lock of this database
/// (`pg_locks` rows not granted), by key in line order, oldest wait
/// first (PostgreSQL grants in arrival order).
pub(super) async fn waiters(s: &Session) -> Result<Vec<WaiterInfo>> {
    let locks = read_locks(s).await?;
    let waiting = waiting(&locks);
    let names = names(s, waiting.iter().map(|w| w.0).collect()).await?;
    let pids = waiting.iter().map(|w| w.1.pid).collect();
    let (fields, _) = super::queue::decorations(s, pids, Vec::new()).await?;
    let mut out: Vec<WaiterInfo> = Vec::with_capacity(waiting.len());
    for (id, l, mode, since) in waiting {
        let key = names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("id:{id}"));
        let place = match out.last() {
            Some(prev) if prev.key == key => prev.place + 1,
            _ => 0,
        };
        out.push(WaiterInfo {
            key,
            source: source_of(l.app.as_deref(), l.pid),
            peer: peer_of(l),
            since: since
                .filter(|t| *t > 0.0)
                .map(|t| UNIX_EPOCH + Duration::from_secs_f64(t)),
            mode,
            place,
            // No hold outlives its session here.
            kept: None,
            identity: None,
            fields: fields_of(&fields, l),
        });
    }
    Ok(out)
}

/// The field list lc-cli keeps for the session of `l`, for that lock.
fn fields_of(fields: &HashMap<i32, (i64, String)>, l: &Lock) -> FieldList {
    match fields.get(&l.pid) {
        Some((id, list)) if *id == l.id => FieldList::parse(list.as_bytes()).unwrap_or_default(),
        _ => FieldList::default(),
    }
}

fn peer_of(l: &Lock) -> Option<String> {
    l.addr.clone().map(|a| match l.port {
        Some(p) if p > 0 => format!("{a}:{p}"),
        _ => a,
    })
}

async fn read_locks(s: &Session) -> Result<Vec<Lock>> {
    let rows = s
        .client
        .query(LOCKS, &[])
        .await
        .map_err(|e| s.error("listing pg_locks", e))?;
    Ok(rows
        .iter()
        .map(|r| Lock {
            pid: r.get(0),
            subid: r.get(1),
            classid: r.get(2),
            objid: r.get(3),
            granted: r.get(4),
            shared: r.get::<_, Option<String>>(5).as_deref() == Some("ShareLock"),
            id: r.get(6),
            app: r.get(7),
            addr: r.get(8),
            port: r.get(9),
            start: r.get(10),
            wait_start: r.get(11),
        })
        .collect())
}

/// The names lc-cli recorded for `ids` at their grants (none where the
/// table is missing).
async fn names(s: &Session, ids: Vec<i64>) -> Result<HashMap<i64, String>> {
    let named = s
        .client
        .query_one("SELECT to_regclass('lc_cli.keys') IS NOT NULL", &[])
        .await
        .map_err(|e| s.error("looking for lc_cli.keys", e))?
        .get::<_, bool>(0);
    if !named || ids.is_empty() {
        return Ok(HashMap::new());
    }
    match s
        .client
        .query(
            "SELECT id, key FROM lc_cli.keys WHERE id = ANY($1)",
            &[&ids],
        )
        .await
    {
        Ok(rows) => Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect()),
        Err(e) => Err(s.error("reading the key names in lc_cli.keys", e)),
    }
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

/// Ends the sessions that `sql` selects (its one parameter given; columns
/// `pid` and `ok`), waiting up to 5 s for each to be gone; their locks go
/// with them. Their holds of `key` (None: of every key) are moved to the
/// history as reset by this host (`LC_SOURCE` where set) in the same
/// statement, so that the next holder's grant, which sweeps dead holds,
/// does not take them for freed;
/// where the history's tables cannot be used, the sessions are ended alone.
async fn terminate(
    s: &Session,
    sql: &str,
    arg: &(dyn tokio_postgres::types::ToSql + Sync),
    key: Option<&str>,
    what: &str,
) -> Result<()> {
    let by = crate::backend::history::operator();
    let recorded = format!(
        "WITH t AS MATERIALIZED ({sql}),
              h AS (SELECT lc_cli.ended_v1($2::text, ARRAY(SELECT pid FROM t WHERE ok),
                                           'reset', NULL, $3::text))
         SELECT t.pid, t.ok FROM t CROSS JOIN h"
    );
    let mut answer = s.client.query(recorded.as_str(), &[arg, &key, &by]).await;
    if let Err(e) = &answer {
        if super::history::missing(e) || e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
            answer = s.client.query(sql, &[arg]).await;
        }
    }
    match answer {
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

/// Terminates the sessions holding `key` (`pg_terminate_backend`), its
/// lock or its `--limit` slots: its waiters keep their places and the
/// first that fits is granted.
pub(super) async fn reset_key(s: &Session, key: &str) -> Result<()> {
    let sql = format!(
        "
        SELECT l.pid, pg_terminate_backend(l.pid, 5000) AS ok
        FROM (SELECT pid, granted, objsubid, (classid::int8 << 32) | objid::int8 AS id
              FROM pg_locks
              WHERE locktype = 'advisory'
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) l,
             (SELECT {}) k (lock, lim)
        WHERE l.granted AND l.objsubid = 1 AND l.pid <> pg_backend_pid()
          AND (l.id = k.lock OR (l.id & {}) = (k.lim & {}) AND (l.id & {}) >= 2)",
        limit::HASHES,
        limit::HIGH,
        limit::HIGH,
        limit::LOW
    );
    terminate(s, &sql, &key, Some(key), &format!("the holder of '{key}'")).await
}

/// Terminates every lc-cli session of `source`, holders and waiters.
pub(super) async fn reset_source(s: &Session, source: &str) -> Result<()> {
    let sql = "
        SELECT pid, pg_terminate_backend(pid, 5000) AS ok FROM pg_stat_activity
        WHERE application_name = $1 AND pid <> pg_backend_pid()";
    let what = format!("source '{source}'");
    terminate(s, sql, &app_name(source), None, &what).await
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
