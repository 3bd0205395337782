//! A key's history on ZooKeeper (`lc-cli history KEY`, docs/history.md).
//!
//! One persistent child of the key's lock node per hold, named after the
//! holder's node: `_c_lc-history-<its 10 sequence digits>` (a lease of
//! `--limit N`: `_c_lc-history-s<digits>`). No lock name is in it, so
//! neither lc-cli nor a Curator recipe takes it for a contender: Curator
//! sorts a child without its lock name by its whole name, after every
//! sequence number (`_` sorts after the digits), as it does the mark. Named
//! after the holder (not sequential), so whoever ends a hold finds its
//! entry without reading any, and a create repeated after a lost
//! connection cannot make a second one.
//!
//! - **Opened** at the grant, by the holder, before its command starts
//!   (one create, awaited: a hold whose command ran has an entry, however
//!   its lc-cli ends): the hold's source, mode, token, grant and fields, no
//!   `ended=`. The oldest entries beyond the cap ([`CAP`]) are deleted
//!   while the command runs (a listing and one transaction).
//! - **Closed** by whoever ends the hold, in the transaction that deletes
//!   the holder's node (so an entry is closed if and only if that
//!   transaction deleted the node): the releasing lc-cli (`released` with
//!   the command's status, `cancelled` by a newer run), `reset` (`reset`,
//!   `by=`), `unlock` of a kept hold (`released`, `by=`).
//! - An entry left open whose holder's node is gone ended in a way nobody
//!   could write: the holder's session ended (lc-cli killed, or lost, or a
//!   kept hold's TTL ran out). Every reader shows it as `freed`, with no
//!   end time; an open entry whose node is still there is a hold that
//!   goes on, and is not listed.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zookeeper_client as zk;

use super::names::{self, NodeData, NodeKind};
use super::session::{connection_lost, Session};
use crate::backend::fields::FieldList;
use crate::backend::history::{Ending, HistoryEntry, DEFAULT_HISTORY};
use crate::backend::LockMode;

/// The start of every entry's name.
pub(super) const PREFIX: &str = "_c_lc-history-";

/// The most entries a writer leaves per key.
pub(super) const CAP: usize = DEFAULT_HISTORY;

const MAGIC: &str = "lc-cli history 1\n";

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The entry's name for the holder node named `name` (None: not a queue
/// node), and whether it is a semaphore's lease.
fn entry_name(name: &str) -> Option<(String, bool)> {
    let (kind, _) = names::parse(name)?;
    let at = name.rfind(kind.lock_name())?;
    let digits = &name[at + kind.lock_name().len()..];
    Some(match kind {
        NodeKind::Lease => (format!("{PREFIX}s{digits}"), true),
        _ => (format!("{PREFIX}{digits}"), false),
    })
}

/// The entry's path for the holder node at `node`: beside the queue, in
/// the key's lock node (a lease's is one level up, beside `leases`).
pub(super) fn entry_path(node: &str) -> Option<String> {
    let (parent, name) = node.rsplit_once('/')?;
    let (entry, lease) = entry_name(name)?;
    let dir = match lease {
        true => parent.rsplit_once('/')?.0,
        false => parent,
    };
    Some(format!("{dir}/{entry}"))
}

/// The order entries are trimmed in: the digits of their holders.
fn age(entry: &str) -> u64 {
    let digits = entry[PREFIX.len()..].trim_start_matches('s');
    digits.parse().unwrap_or(0)
}

/// One entry, as kept in its node's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub source: String,
    pub mode: LockMode,
    pub token: Option<u64>,
    pub granted_ms: Option<u64>,
    pub waited_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    pub ended: Option<String>,
    pub status: Option<i32>,
    pub by: Option<String>,
    /// The request's own field list.
    pub fields: FieldList,
}

impl Record {
    pub(super) fn new(source: &str, mode: LockMode) -> Record {
        Record {
            source: source.to_string(),
            mode,
            token: None,
            granted_ms: None,
            waited_ms: None,
            ended_ms: None,
            ended: None,
            status: None,
            by: None,
            fields: FieldList::default(),
        }
    }

    /// The same hold, ended now.
    pub(super) fn ended(mut self, how: Ending, status: Option<i32>, by: Option<String>) -> Record {
        self.ended_ms = Some(now_ms());
        self.ended = Some(how.name().to_string());
        self.status = status;
        self.by = by;
        self
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut meta = FieldList::default();
        meta.push("source", &self.source);
        meta.push("mode", &self.mode.word().to_string());
        let numbers = [
            ("token", self.token),
            ("granted", self.granted_ms),
            ("waited", self.waited_ms),
            ("endedat", self.ended_ms),
        ];
        for (name, value) in numbers {
            if let Some(v) = value {
                meta.push(name, &v.to_string());
            }
        }
        if let Some(e) = &self.ended {
            meta.push("ended", e);
        }
        if let Some(s) = self.status {
            meta.push("status", &s.to_string());
        }
        if let Some(b) = &self.by {
            meta.push("by", b);
        }
        format!("{MAGIC}{meta}{}", self.fields).into_bytes()
    }

    /// None for data that is not an entry.
    pub(super) fn decode(data: &[u8]) -> Option<Record> {
        let rest = data.strip_prefix(MAGIC.as_bytes())?;
        let mut r = Record::new("", LockMode::Exclusive);
        for line in rest.split_inclusive(|&b| b == b'\n') {
            let one = FieldList::parse(line).ok()?;
            for (name, value) in one.iter() {
                let number = || value.parse::<u64>().ok();
                match name {
                    "source" => r.source = value.to_string(),
                    "mode" => r.mode = LockMode::from_word(value.parse().ok()?),
                    "token" => r.token = number(),
                    "granted" => r.granted_ms = number(),
                    "waited" => r.waited_ms = number(),
                    "endedat" => r.ended_ms = number(),
                    "ended" => r.ended = Some(value.to_string()),
                    "status" => r.status = value.parse().ok(),
                    "by" => r.by = Some(value.to_string()),
                    // Every other line is the request's own field list.
                    _ => r.fields.push(name, value),
                }
            }
        }
        Some(r)
    }

    /// The entry as `lc-cli history` shows it; an open one (its holder's
    /// node gone, see the module's docs) as `freed`.
    pub(super) fn entry(&self, key: &str) -> HistoryEntry {
        let time = |ms: Option<u64>| ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
        let mut fields = self.fields.clone();
        let ended = self.ended.as_deref().unwrap_or(Ending::Freed.name());
        fields.push("ended", ended);
        if let Some(s) = self.status {
            fields.push("status", &s.to_string());
        }
        if let Some(b) = &self.by {
            fields.push("by", b);
        }
        HistoryEntry {
            key: key.to_string(),
            source: self.source.clone(),
            identity: None,
            peer: None,
            mode: self.mode,
            token: self.token,
            granted: time(self.granted_ms),
            waited: self.waited_ms.map(Duration::from_millis),
            ended_at: time(self.ended_ms),
            fields,
        }
    }
}

/// An entry to write in the transaction that deletes the holder's node:
/// set where it was opened, else created.
#[derive(Debug, Clone)]
pub(super) struct Closing {
    pub path: String,
    pub data: Vec<u8>,
    pub exists: bool,
    /// A `--limit` holder's slot node (`slots.rs`), deleted in the same
    /// transaction as its lease.
    pub slot: Option<String>,
}

impl Closing {
    /// Adds the write to `multi`.
    pub(super) fn add_to(
        &self,
        s: &Session,
        multi: &mut zk::MultiWriter<'_>,
    ) -> Result<(), zk::Error> {
        match self.exists {
            true => multi.add_set_data(&self.path, &self.data, None),
            false => {
                let persistent = zk::CreateMode::Persistent.with_acls(s.acls);
                multi.add_create(&self.path, &self.data, &persistent)
            }
        }
    }
}

/// Opens the entry at `path` (see the module's docs): true once it exists.
/// Awaited before the command starts (so a hold whose command ran has an
/// entry, whenever its lc-cli dies): one create; the oldest entries past
/// the cap are deleted afterwards, in the background ([`trim`]: its task,
/// which the release awaits). A failure leaves the hold without an entry
/// (its release then creates one), never touches the lock.
pub(super) async fn open(s: &Arc<Session>, path: &str, record: &Record) -> Opened {
    let Some((dir, name)) = path.rsplit_once('/') else {
        return (false, None);
    };
    let data = record.encode();
    let persistent = zk::CreateMode::Persistent.with_acls(s.acls);
    let mut created = false;
    for _ in 0..5 {
        let Ok(client) = s.client() else {
            return (false, None);
        };
        match client.create(path, &data, &persistent).await {
            // There already: created by our attempt whose answer was lost.
            Ok(_) | Err(zk::Error::NodeExists) => {
                created = true;
                break;
            }
            Err(e) if connection_lost(&e) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(_) => return (false, None),
        }
    }
    let (s, dir, name) = (s.clone(), dir.to_string(), name.to_string());
    let trimming = created.then(|| tokio::spawn(async move { trim(&s, &dir, &name).await }));
    (created, trimming)
}

/// Whether the entry was created, and the trim's task.
pub(super) type Opened = (bool, Option<tokio::task::JoinHandle<()>>);

/// Deletes the oldest entries of `dir` past the cap (`ours` counted): one
/// listing and one transaction, sent while the command runs. Best effort:
/// another writer's trim, or the next, does what this one could not.
async fn trim(s: &Session, dir: &str, ours: &str) {
    let Ok(children) = s.retry(|c| async move { c.list_children(dir).await }).await else {
        return;
    };
    let mut older: Vec<String> = children
        .into_iter()
        .filter(|c| c.starts_with(PREFIX) && c != ours)
        .collect();
    older.sort_by_key(|c| age(c));
    let excess = older.len().saturating_sub(CAP - 1);
    if excess == 0 {
        return;
    }
    let Ok(client) = s.client() else { return };
    let mut multi = client.new_multi_writer();
    let doomed = older[..excess].iter().map(|c| format!("{dir}/{c}"));
    if doomed
        .into_iter()
        .try_for_each(|d| multi.add_delete(&d, None))
        .is_ok()
    {
        let _ = multi.commit().await;
    }
}

/// The outcome of a transaction that closes an entry and deletes the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Closed {
    /// Both done.
    Done,
    /// The node was not there: nothing ended here.
    NoNode,
    /// Not done (the entry could not be written, or the session is gone):
    /// the caller deletes the node alone.
    Failed,
    /// No answer within the session timeout (ZooKeeper away): not known
    /// to be done; worth another attempt later.
    Unreached,
}

/// Closes `closing` and deletes `node` in one transaction, sent again
/// while the connection is lost, for up to the session timeout.
pub(super) async fn close(s: &Session, node: &str, closing: &mut Closing) -> Closed {
    let deadline = tokio::time::Instant::now() + s.retry_for;
    let mut delay = Duration::from_millis(50);
    // Each round is a transaction answered or lost; a handful of answered
    // rounds at most (the entry's create and set swapped once).
    for _ in 0..1000 {
        let Ok(client) = s.client() else {
            return Closed::Failed;
        };
        let mut multi = client.new_multi_writer();
        let added = closing
            .add_to(s, &mut multi)
            .and_then(|_| multi.add_delete(node, None))
            .and_then(|_| match &closing.slot {
                Some(slot) => multi.add_delete(slot, None),
                None => Ok(()),
            });
        if added.is_err() {
            return Closed::Failed;
        }
        match multi.commit().await {
            Ok(_) => return Closed::Done,
            // Created meanwhile, or trimmed: the other write.
            Err(zk::MultiWriteError::OperationFailed {
                index: 0,
                source: zk::Error::NodeExists | zk::Error::NoNode,
            }) => closing.exists = !closing.exists,
            Err(zk::MultiWriteError::OperationFailed {
                index: 1,
                source: zk::Error::NoNode,
            }) => return Closed::NoNode,
            // The slot node deleted already (by hand): the lease alone.
            Err(zk::MultiWriteError::OperationFailed {
                index: 2,
                source: zk::Error::NoNode,
            }) => closing.slot = None,
            Err(zk::MultiWriteError::RequestFailed { source }) if connection_lost(&source) => {
                if tokio::time::Instant::now() >= deadline {
                    return Closed::Unreached;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
            Err(_) => return Closed::Failed,
        }
    }
    Closed::Failed
}

/// Ends the hold of `node` from outside (reset, unlock): its entry closed
/// as `how` by [`by_whom`] and the node deleted, in one transaction. A
/// node without an entry gets one from its own data when `create` (a
/// holder: a Curator client's, or one whose entry was never opened), none
/// otherwise (a waiter). Whatever cannot be written, the node is still
/// deleted. True when this deleted the node.
pub(super) async fn end_from_outside(
    s: &Session,
    node: &str,
    how: Ending,
    create: bool,
) -> crate::backend::Result<bool> {
    if let Some(deleted) = close_from_outside(s, node, how, create).await {
        return Ok(deleted);
    }
    super::slots::delete_with_slot(s, node).await
}

/// The transaction of [`end_from_outside`]: Some(whether it deleted the
/// node); None when the entry cannot be written (no entry and not
/// `create`, a read failed, the transaction failed).
async fn close_from_outside(s: &Session, node: &str, how: Ending, create: bool) -> Option<bool> {
    let path = entry_path(node)?;
    let p = path.as_str();
    let lease = matches!(
        node.rsplit('/').next().and_then(names::parse),
        Some((NodeKind::Lease, _))
    );
    // The entry, and a lease's own data (its slot) or a holder's without
    // an entry, asked at once.
    let (entry, own) = tokio::join!(s.retry(|c| async move { c.get_data(p).await }), async {
        match lease || create {
            true => Some(s.retry(|c| async move { c.get_data(node).await }).await),
            false => None,
        }
    });
    let (record, exists) = match (entry, &own) {
        (Ok((data, _)), _) => (Record::decode(&data)?, true),
        (Err(zk::Error::NoNode), Some(own)) if create => match own {
            Ok((data, stat)) => (of_node(node, data, stat), false),
            Err(zk::Error::NoNode) => return Some(false),
            Err(_) => return None,
        },
        _ => return None,
    };
    let slot = match (lease, &own) {
        (true, Some(Ok((data, _)))) => super::slots::of_node(s, node, data).await,
        _ => None,
    };
    let data = record
        .ended(how, None, Some(crate::backend::history::operator()))
        .encode();
    let mut closing = Closing {
        path,
        data,
        exists,
        slot,
    };
    match close(s, node, &mut closing).await {
        Closed::Done => Some(true),
        Closed::NoNode => Some(false),
        Closed::Failed | Closed::Unreached => None,
    }
}

/// The entry of a holder that opened none, from its node: lc-cli's data,
/// or a Curator client's as text.
fn of_node(node: &str, data: &[u8], stat: &zk::Stat) -> Record {
    let name = node.rsplit('/').next().unwrap_or_default();
    let kind = names::parse(name).map(|(k, _)| k);
    let mode = match kind {
        Some(NodeKind::Read) => LockMode::Shared,
        _ => LockMode::Exclusive,
    };
    let mut r = match NodeData::decode(data) {
        Some(d) => {
            let mode = match (kind, d.limit) {
                (Some(NodeKind::Lease), Some(n)) => LockMode::limit(n.max(2)),
                _ => mode,
            };
            let mut r = Record::new(&d.source, mode);
            r.fields = d.fields;
            r.granted_ms = (d.mode == names::Mode::Detached).then_some(d.since_ms);
            r
        }
        None => Record::new(&String::from_utf8_lossy(data), mode),
    };
    r.token = u64::try_from(stat.czxid).ok();
    r.granted_ms = r.granted_ms.or(u64::try_from(stat.ctime).ok());
    r
}

/// The last `limit` ended holds of the key whose lock node is `dir`,
/// newest first (by the entries' creation on the server).
pub(super) async fn read(
    s: &Session,
    dir: &str,
    key: &str,
    limit: usize,
) -> crate::backend::Result<Vec<HistoryEntry>> {
    let children = match s.retry(|c| async move { c.list_children(dir).await }).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
    };
    // The entries of holds that go on: those named after a node there now.
    let mut live: Vec<String> = children
        .iter()
        .filter_map(|c| entry_name(c).map(|(e, _)| e))
        .collect();
    if names::semaphore_parts(&children) {
        let leases = format!("{dir}/{}", names::SEMAPHORE_LEASES);
        let l = leases.as_str();
        match s.retry(|c| async move { c.list_children(l).await }).await {
            Ok(found) => live.extend(found.iter().filter_map(|c| entry_name(c).map(|(e, _)| e))),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(s.error(&format!("listing {leases}"), e)),
        }
    }
    let paths: Vec<String> = children
        .iter()
        .filter(|c| c.starts_with(PREFIX))
        .map(|c| format!("{dir}/{c}"))
        .collect();
    let got = super::keys::pipelined(s, &paths, super::keys::send_get, "reading").await?;
    let mut found: Vec<(i64, Record)> = paths
        .iter()
        .zip(got)
        .filter_map(|(path, got)| {
            let (data, stat) = got?;
            let record = Record::decode(&data)?;
            let name = &path[dir.len() + 1..];
            let open = record.ended.is_none();
            (!(open && live.iter().any(|l| l == name))).then_some((stat.czxid, record))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(found
        .into_iter()
        .take(limit)
        .map(|(_, r)| r.entry(key))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_named_after_their_holders() {
        assert_eq!(
            entry_path("/lc-cli/k/_c_0f8f-lock-0000000012").as_deref(),
            Some("/lc-cli/k/_c_lc-history-0000000012")
        );
        assert_eq!(
            entry_path("/lc-cli/a/b/_c_0f8f-__READ__0000000003").as_deref(),
            Some("/lc-cli/a/b/_c_lc-history-0000000003")
        );
        assert_eq!(
            entry_path("/lc-cli/k/leases/_c_0f8f-lease-0000000007").as_deref(),
            Some("/lc-cli/k/_c_lc-history-s0000000007")
        );
        assert_eq!(entry_path("/lc-cli/k/_c_lc-mark"), None);
        // No contender for lc-cli (nor, by its lock names, for Curator).
        for name in ["_c_lc-history-0000000012", "_c_lc-history-s0000000007"] {
            assert_eq!(names::sequence_of(name), None, "{name}");
            assert!(names::is_extra(name));
            assert!(names::key_problem(name).is_some());
        }
        assert!(age("_c_lc-history-0000000012") > age("_c_lc-history-s0000000007"));
    }

    #[test]
    fn records_round_trip() {
        let mut r = Record::new("ci-7", LockMode::limit(3));
        r.token = Some(42);
        r.granted_ms = Some(1_700_000_000_000);
        r.waited_ms = Some(15);
        r.fields.push("note", "deploy\nv2 50%");
        r.fields.push("order", "9");
        assert_eq!(Record::decode(&r.encode()), Some(r.clone()));
        let open = r.entry("k");
        assert_eq!(open.ending(), Some(Ending::Freed));
        assert_eq!(open.ended_at, None);
        let closed = r.ended(Ending::Released, Some(3), None);
        let back = Record::decode(&closed.encode()).unwrap();
        assert_eq!(back, closed);
        let e = back.entry("k");
        assert_eq!(e.ending(), Some(Ending::Released));
        assert_eq!(e.status(), Some(3));
        assert_eq!(e.fields.get("note"), Some("deploy\nv2 50%"));
        assert_eq!(e.mode, LockMode::limit(3));
        assert_eq!(e.token, Some(42));
        assert!(e.ended_at.is_some());
        assert_eq!(Record::decode(b"lc-cli 1\nsource=x"), None);
    }
}
