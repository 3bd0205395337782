//! `--limit N` on PostgreSQL: a first-come-first-served semaphore made of
//! session advisory locks, all on the lock session, so the server frees
//! every part of it when the session ends.
//!
//! The ids of a key share the high 40 bits of `hashtextextended(KEY, 1)`;
//! the low 24 bits say what each is:
//! - 0, the marker (shared): held by every `--limit` request of the key,
//!   waiting or holding, so other requests see the key is used that way;
//! - 1, the turnstile (exclusive): the server's lock queue, which grants in
//!   arrival order; its holder is the head of the line;
//! - 2 + i, slot i (exclusive), i < N: a holder holds one.
//!
//! The head takes the first free slot, then leaves the turnstile, so slots
//! go in the turnstile's order. A release notifies the head (`LISTEN`);
//! a slot freed by a dead session sends no word, so the head also looks
//! for one every [`POLL_MIN`] to [`POLL_MAX`].
//!
//! Each request also holds the two-int lock (`N_CLASS`, N), shared: which
//! N it uses. A request first shows itself (a `--limit` request its marker
//! and N; a lock request its entry on `hashtextextended(KEY, 0)`, waiting
//! or granted), then looks for the others (a lock request once granted):
//! of two requests that disagree, at least one sees the other and refuses.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_util::sync::CancellationToken;

use super::session::Session;
use crate::backend::{BackendError, LockMode, Result, WaitProgress};

/// The low bits of a key's ids: what each id is.
pub(super) const LOW: i64 = 0xFF_FFFF;
/// The high bits, as an int8 mask (`~LOW`).
pub(super) const HIGH: i64 = !LOW;
/// The most slots the low bits leave room for.
pub(super) const MAX_N: u32 = (LOW - 1) as u32;
/// The first int of the two-int lock that tells a request's N (the second).
pub(super) const N_CLASS: i32 = 1819435009;

/// How long the head waits between looks for a free slot, at first and at
/// most: a slot freed by a dead session is taken within `POLL_MAX`.
const POLL_MIN: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(100);

/// Where a slot's release is told (its marker id the payload), so the
/// head takes it at once; a dead holder's is found by polling.
pub(super) const CHANNEL: &str = "lc_cli_slots";

/// The release of a slot, and its word to the head of the line.
pub(super) const RELEASE: &str =
    "SELECT pg_advisory_unlock_all()::text, pg_notify('lc_cli_slots', $1)";

/// How long `trylock --limit` waits for the turnstile: another request's
/// grant passes it within a round trip; a head waiting for a slot does
/// not, and then the set is full.
pub(super) const TRY_TURNSTILE: &str = "100ms";

/// The ids of one key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ids {
    /// The lock id of `-x`/`-s` (`hashtextextended(KEY, 0)`).
    pub lock: i64,
    /// The marker; with the low bits, the turnstile and the slots.
    pub base: i64,
}

impl Ids {
    pub(super) fn from_hashes(lock: i64, limit_hash: i64) -> Ids {
        Ids {
            lock,
            base: limit_hash & HIGH,
        }
    }

    pub(super) fn turnstile(self) -> i64 {
        self.base | 1
    }

    pub(super) fn slot(self, i: u32) -> i64 {
        self.base | (2 + i as i64)
    }
}

/// The SQL of both hashes of `$1`, for [`Ids::from_hashes`].
pub(super) const HASHES: &str = "hashtextextended($1, 0), hashtextextended($1, 1)";

/// What an id is, from its low bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Marker,
    Turnstile,
    Slot,
}

pub(super) fn base_of(id: i64) -> i64 {
    id & HIGH
}

pub(super) fn part_of(id: i64) -> Part {
    match id & LOW {
        0 => Part::Marker,
        1 => Part::Turnstile,
        _ => Part::Slot,
    }
}

/// This database's advisory locks, read once (one snapshot of the lock table).
const LOCKS: &str = "
    WITH l AS MATERIALIZED (
        SELECT pid, objsubid, classid, objid, granted, (classid::int8 << 32) | objid::int8 AS id
        FROM pg_locks
        WHERE locktype = 'advisory'
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))";

/// How a key is used now, from one snapshot of the lock table.
struct Usage {
    /// Some session holds or waits for the lock id (`-x`/`-s`, or SQL).
    as_lock: bool,
    /// Some session holds the marker (a `--limit` request).
    limited: bool,
    /// The N of a `--limit` request other than `not`, if any.
    other_n: Option<i64>,
}

async fn usage(s: &Session, key: &str, ids: Ids, not: i64) -> Result<Usage> {
    let sql = format!(
        "{LOCKS}
        SELECT EXISTS (SELECT 1 FROM l WHERE objsubid = 1 AND id = $1),
               EXISTS (SELECT 1 FROM l WHERE objsubid = 1 AND id = $2),
               (SELECT min(n.objid::int8) FROM l m JOIN l n
                  ON n.pid = m.pid AND n.objsubid = 2 AND n.classid = {N_CLASS}::oid
                WHERE m.objsubid = 1 AND m.id = $2 AND n.objid::int8 <> $3)"
    );
    let row = s
        .client
        .query_one(sql.as_str(), &[&ids.lock, &ids.base, &not])
        .await
        .map_err(|e| s.error(&format!("checking how '{key}' is used"), e))?;
    Ok(Usage {
        as_lock: row.get(0),
        limited: row.get(1),
        other_n: row.get(2),
    })
}

/// After a lock request (`-x`/`-s`) was granted: refused if the key is
/// used with `--limit` (the lock goes with the session).
pub(super) async fn check_lock(s: &Session, key: &str, ours: LockMode, ids: Ids) -> Result<()> {
    let u = usage(s, key, ids, 0).await?;
    if !u.limited {
        return Ok(());
    }
    Err(BackendError::ModeConflict {
        key: key.to_string(),
        ours: ours.phrase(),
        theirs: match u.other_n {
            Some(n) => LockMode::limit(n as u32).phrase(),
            // Still showing itself: it will see us and refuse too.
            None => "with --limit".to_string(),
        },
    })
}

/// Shows this `--limit n` request (its N and marker), then refuses it if
/// the key is used as a lock or with another N.
async fn show_and_check(s: &Session, key: &str, n: u32, ids: Ids) -> Result<()> {
    let n_word = n as i32;
    s.client
        .query_one(
            &format!("SELECT pg_advisory_lock_shared({N_CLASS}, $2), pg_advisory_lock_shared($1)"),
            &[&ids.base, &n_word],
        )
        .await
        .map_err(|e| s.error(&format!("joining the line for '{key}'"), e))?;
    let ours = LockMode::limit(n);
    let u = usage(s, key, ids, n as i64).await?;
    if u.as_lock {
        return Err(ours.conflict(key, LockMode::Exclusive));
    }
    if let Some(other) = u.other_n {
        return Err(ours.conflict(key, LockMode::limit(other as u32)));
    }
    Ok(())
}

/// The slots of `ids` held now (by anyone), as indexes below `n`.
async fn held_slots(s: &Session, key: &str, ids: Ids, n: u32) -> Result<Vec<u32>> {
    let sql = format!(
        "{LOCKS}
        SELECT id & {LOW} FROM l WHERE objsubid = 1 AND granted AND (id & {HIGH}) = $1"
    );
    let rows = s
        .client
        .query(sql.as_str(), &[&ids.base])
        .await
        .map_err(|e| s.error(&format!("looking for a free slot of '{key}'"), e))?;
    Ok(rows
        .iter()
        .map(|r| r.get::<_, i64>(0))
        .filter(|low| *low >= 2 && *low - 2 < n as i64)
        .map(|low| (low - 2) as u32)
        .collect())
}

/// The first indexes below `n` not in `held`, at most `most`.
fn free_slots(held: &[u32], n: u32, most: usize) -> Vec<u32> {
    (0..n).filter(|i| !held.contains(i)).take(most).collect()
}

/// As the head (holding the turnstile): takes a free slot and leaves the
/// turnstile in the same statement. Some(slot), or None when the set is full.
async fn take_slot(s: &Session, key: &str, ids: Ids, n: u32) -> Result<Option<u32>> {
    let held = held_slots(s, key, ids, n).await?;
    // A free one may be taken from outside meanwhile: a few tries.
    for i in free_slots(&held, n, 4) {
        let got: bool = s
            .client
            .query_one(
                "SELECT CASE WHEN pg_try_advisory_lock($1) THEN pg_advisory_unlock($2) ELSE false END",
                &[&ids.slot(i), &ids.turnstile()],
            )
            .await
            .map_err(|e| s.error(&format!("taking a slot of '{key}'"), e))?
            .get(0);
        if got {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// What a `--limit` request came to.
pub(super) enum Outcome {
    /// Holds this slot (and the marker); the turnstile is left.
    Slot(u32),
    /// `nonblock`, and the set is full or others wait.
    Busy,
    /// Withdrawn; whatever is left ends with the connection.
    Cancelled,
}

/// A `--limit` request.
pub(super) struct Want<'a> {
    pub key: &'a str,
    pub n: u32,
    pub ids: Ids,
    /// trylock: only if a slot is free and nobody waits.
    pub nonblock: bool,
}

/// How often a waiter asks its place in line, from another session.
const PLACE_EVERY: Duration = Duration::from_secs(1);

/// How many are ahead of the session `pid` in the turnstile's line: those
/// the server says block it (the head, and the waiters before it).
async fn ahead_of(other: &Session, pid: i32) -> Option<usize> {
    let row = other
        .client
        .query_one("SELECT cardinality(pg_blocking_pids($1))", &[&pid])
        .await
        .ok()?;
    usize::try_from(row.get::<_, i32>(0)).ok()
}

/// Waits in line for a slot (or only tries, with `nonblock`); `place`, a
/// second session and our pid, to tell the place in line.
pub(super) async fn acquire(
    s: &Session,
    want: Want<'_>,
    cancel: &CancellationToken,
    connect_timeout: Duration,
    place: Option<(&Session, i32)>,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Outcome> {
    let Want {
        key,
        n,
        ids,
        nonblock,
    } = want;
    show_and_check(s, key, n, ids).await?;
    let turnstile = ids.turnstile();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&turnstile];
    let wait = s.client.query_one("SELECT pg_advisory_lock($1)", &params);
    tokio::pin!(wait);
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PLACE_EVERY / 4, PLACE_EVERY);
    let entered = loop {
        tokio::select! {
            r = &mut wait => break Some(r),
            _ = cancel.cancelled() => break None,
            _ = tick.tick(), if place.is_some() => {
                if let Some((other, pid)) = place {
                    if let Some(ahead) = ahead_of(other, pid).await {
                        progress(WaitProgress { ahead: Some(ahead) });
                    }
                }
            }
        }
    };
    match entered {
        Some(Ok(_)) => {}
        // trylock's bounded wait ran out: someone is at the head, waiting.
        Some(Err(e)) if nonblock && e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
            return Ok(Outcome::Busy)
        }
        Some(Err(e)) => return Err(s.error(&format!("waiting for '{key}'"), e)),
        None => {
            // The wait's own answer tells we left the queue (or were let in,
            // which the connection's end undoes).
            let _ = tokio::time::timeout(connect_timeout, s.cancel()).await;
            let _ = tokio::time::timeout(connect_timeout, wait).await;
            return Ok(Outcome::Cancelled);
        }
    }
    progress(WaitProgress { ahead: Some(0) });
    // A holder's release notifies; listening before the first look, none is missed.
    if !nonblock {
        s.client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await
            .map_err(|e| s.error(&format!("waiting for a slot of '{key}'"), e))?;
    }
    let mut pause = POLL_MIN;
    loop {
        if let Some(i) = take_slot(s, key, ids, n).await? {
            return Ok(Outcome::Slot(i));
        }
        if nonblock {
            return Ok(Outcome::Busy);
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = s.notified() => pause = POLL_MIN,
            _ = cancel.cancelled() => return Ok(Outcome::Cancelled),
            why = s.ended() => {
                return Err(BackendError::Unavailable {
                    server: s.server.clone(),
                    reason: format!("waiting for a slot of '{key}': {why}"),
                })
            }
        }
        pause = (pause * 2).min(POLL_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_share_the_high_bits_and_tell_their_part() {
        let ids = Ids::from_hashes(7, -1);
        assert_eq!(ids.base & LOW, 0);
        for id in [ids.base, ids.turnstile(), ids.slot(0), ids.slot(MAX_N - 1)] {
            assert_eq!(base_of(id), ids.base);
        }
        assert_eq!(part_of(ids.base), Part::Marker);
        assert_eq!(part_of(ids.turnstile()), Part::Turnstile);
        assert_eq!(part_of(ids.slot(0)), Part::Slot);
        assert_eq!(part_of(ids.slot(MAX_N - 1)), Part::Slot);
        assert_eq!(ids.slot(MAX_N - 1) & LOW, LOW);
    }

    #[test]
    fn free_slots_are_the_lowest_not_held() {
        assert_eq!(free_slots(&[0, 2], 4, 4), [1, 3]);
        assert_eq!(free_slots(&[0, 1, 2], 3, 4), Vec::<u32>::new());
        assert_eq!(free_slots(&[], 10, 2), [0, 1]);
    }
}
