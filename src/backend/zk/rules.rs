//! Deploy queues on ZooKeeper (issue 44): `--newest`, `--order` and
//! `--cancel-running` on an exclusive request in the queue of `queue.rs`.
//!
//! - A request's fields are lines of its node's data (`NodeData`), written
//!   with the create.
//! - The key's mark is the persistent child `_c_lc-mark` of the lock node
//!   (`names::MARK`): read with the listing before the node is created (the
//!   arrival check), and with every listing while it waits, the grant's
//!   included; each read is sent with the listing, so it adds no round
//!   trip. The releaser of a hold whose command ended with status 0 raises
//!   it with a versioned setData (or creates it) in one transaction with
//!   the deletion of its node.
//! - Supersede: on its first listing a `--newest` request reads the data of
//!   the nodes waiting ahead of it (one round trip, only when some wait).
//!   Outranked by one of them, it leaves at once; else each older `--newest`
//!   waiter gets, in one transaction that also checks that the head of the
//!   queue still exists (so that waiter cannot be holding), a marker naming
//!   the newer request (`_c_lc-superseded-<its id>`, persistent, the newer
//!   request's data) and the deletion of its node. A waiter watches its own
//!   node: deleted with a marker it is superseded (it deletes the marker);
//!   without, it was reset (or its session is gone). A marker left over (its
//!   waiter died first) is deleted by a later `--newest` request that sees
//!   it, once 10 minutes old.
//! - Cancel: a `--cancel-running` request that finds a holder taken with it
//!   creates `_c_lc-cancel-<holder's id>` (ephemeral, its own data); every
//!   `--cancel-running` request sets an existence watch on its own such path
//!   with its first listing, which its hold then waits on.

use std::future::Future;
use std::pin::Pin;

use zookeeper_client as zk;

use super::names::{self, Marker, NodeData, NodeKind, Turn};
use super::session::{connection_lost, Session};
use crate::backend::fields::Extras;
use crate::backend::{Acquired, BackendError, Result, Rival};

type Watch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// A mark node as read: None when there is none, else its value (None: not
/// a number) and its version, for the compare-and-set that raises it.
pub(super) type Found = Option<(Option<u64>, i32)>;

fn value(found: Found) -> Option<u64> {
    found.and_then(|(v, _)| v)
}

/// How many times a request lists again to settle its supersede and
/// cancel notices when the queue moved under them.
const PASSES: u32 = 5;

/// A superseded marker this old (by the server's clock) is left over: its
/// waiter read it long ago or its session is over (no session outlives
/// its timeout without contact), so the next `--newest` request deletes it.
const STALE_MS: i64 = 10 * 60 * 1000;

fn send_delete<'a>(c: &'a zk::Client, path: &'a str) -> super::keys::Reply<'a, ()> {
    Box::pin(c.delete(path, None))
}

/// The path of `dir`'s mark.
pub(super) fn mark_path(dir: &str) -> String {
    format!("{dir}/{}", names::MARK)
}

/// The mark at `path` (None: no mark).
pub(super) async fn read_mark(s: &Session, path: &str) -> Result<Option<u64>> {
    match s.retry(|c| async move { c.get_data(path).await }).await {
        Ok((data, _)) => Ok(names::parse_mark(&data)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(s.error(&format!("reading {path}"), e)),
    }
}

/// Deletes the mark at `path`; false when there was none.
pub(super) async fn clear_mark(s: &Session, path: &str) -> Result<bool> {
    match s.retry(|c| async move { c.delete(path, None).await }).await {
        Ok(()) => Ok(true),
        Err(zk::Error::NoNode) => Ok(false),
        Err(e) => Err(s.error(&format!("deleting {path}"), e)),
    }
}

/// Lists `dir`, sending with it the read of the mark at `mark` and the
/// existence watch on `watch` (when given): one round trip. The watch
/// comes with whether the path exists.
#[allow(clippy::type_complexity)]
pub(super) async fn list(
    s: &Session,
    dir: &str,
    mark: Option<&str>,
    watch: Option<&str>,
) -> std::result::Result<(Vec<String>, Found, Option<(bool, Watch)>), zk::Error> {
    s.retry(|c| async move {
        let listed = c.list_children(dir);
        let marked = mark.map(|m| c.get_data(m));
        let watched = watch.map(|w| c.check_and_watch_stat(w));
        let children = listed.await;
        let mark = match marked {
            Some(f) => match f.await {
                Ok((data, stat)) => Some((names::parse_mark(&data), stat.version)),
                Err(zk::Error::NoNode) => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let watch = match watched {
            Some(f) => {
                let (stat, w) = f.await?;
                Some((stat.is_some(), Box::pin(w.changed()) as Watch))
            }
            None => None,
        };
        Ok((children?, mark, watch))
    })
    .await
}

/// Whether a request of `order` is outdated by `mark`: the mark, if so.
pub(super) fn outdated(order: Option<u64>, mark: Option<u64>) -> Option<u64> {
    match (order, mark) {
        (Some(order), Some(mark)) if order < mark => Some(mark),
        _ => None,
    }
}

/// Whether a `--newest` request `ours` that came after the waiting `theirs`
/// supersedes it (true) or is superseded by it (false): the later arrival
/// wins, unless both have an order and ours is lower.
pub(super) fn supersedes(ours: Option<u64>, theirs: Option<u64>) -> bool {
    !matches!((ours, theirs), (Some(o), Some(t)) if o < t)
}

/// Whether a `--cancel-running` request of order `ours` stops a holder of
/// order `theirs` that took the key with the flag.
pub(super) fn cancels(ours: Option<u64>, theirs: Option<u64>) -> bool {
    supersedes(ours, theirs)
}

/// What a listing leads to.
pub(super) enum Step {
    /// Wait (or hold) as usual.
    Go,
    /// The request leaves: `outcome` says why.
    Left,
    /// The queue moved under a notice: list again now.
    Relist,
}

/// The queue rules of one request, from its first listing to its grant.
pub(super) struct Rules {
    extras: Extras,
    /// Our node's data, which every marker we write carries.
    data: Vec<u8>,
    dir: String,
    /// Our node's name.
    name: String,
    mark: String,
    /// The supersede and cancel notices are done.
    joined: bool,
    /// When our node was made, by the server's clock (ms).
    pub born_ms: i64,
    /// The superseded markers the last listing showed.
    markers: Vec<String>,
    passes: u32,
    /// The mark as the last listing read it: the grant's, for the
    /// release's compare-and-set (no read then).
    pub seen: Found,
    /// Why the request left, when it did.
    pub outcome: Option<Acquired>,
    /// Our cancel marker's watch (`--cancel-running`), armed with the first
    /// listing and handed to the hold.
    pub cancel: Option<CancelWatch>,
}

impl Rules {
    /// None for a request without queue rules (a note alone costs nothing).
    pub(super) fn new(extras: &Extras, data: &[u8], dir: &str, name: &str) -> Option<Rules> {
        extras.queued().then(|| Rules {
            extras: extras.clone(),
            data: data.to_vec(),
            dir: dir.to_string(),
            name: name.to_string(),
            mark: mark_path(dir),
            joined: false,
            born_ms: 0,
            markers: Vec::new(),
            passes: 0,
            seen: None,
            outcome: None,
            cancel: None,
        })
    }

    fn marker(&self, kind: Marker, name: &str) -> Option<String> {
        names::marker(kind, name).map(|m| format!("{}/{m}", self.dir))
    }

    /// Lists the queue, the mark and (the first time, with
    /// `--cancel-running`) the watch on our cancel marker, in one round trip.
    pub(super) async fn list(
        &mut self,
        s: &Session,
    ) -> std::result::Result<(Vec<String>, Option<u64>), zk::Error> {
        let mark = self.extras.order.map(|_| self.mark.clone());
        let watch = match (self.extras.cancel, &self.cancel) {
            (true, None) => self.marker(Marker::Cancel, &self.name),
            _ => None,
        };
        let (children, mark, watched) =
            list(s, &self.dir, mark.as_deref(), watch.as_deref()).await?;
        self.seen = mark;
        let mark = value(mark);
        let prefix = format!("{}superseded-", names::EXTRA_PREFIX);
        self.markers = children
            .iter()
            .filter(|c| c.starts_with(&prefix))
            .map(|c| format!("{}/{c}", self.dir))
            .collect();
        if let (Some(path), Some((exists, watch))) = (watch, watched) {
            self.cancel = Some(CancelWatch {
                path,
                watch: (!exists).then_some(watch),
                fired: exists,
            });
        }
        Ok((children, mark))
    }

    /// After a listing: outdated by the mark, superseded by a waiter ahead,
    /// or the notices to the waiters and the holder ahead.
    pub(super) async fn on_listing(
        &mut self,
        s: &Session,
        queue: &[String],
        kinds: &[NodeKind],
        ours: usize,
        mark: Option<u64>,
    ) -> Result<Step> {
        if let Some(mark) = outdated(self.extras.order, mark) {
            self.outcome = Some(Acquired::Outdated { mark });
            return Ok(Step::Left);
        }
        if self.joined || ours == 0 || !(self.extras.newest || self.extras.cancel) {
            return Ok(Step::Go);
        }
        self.joined = true;
        // The holders ahead (a cancel notice's target) and the waiters
        // ahead (a supersede's), as lc-cli's nodes say.
        let ahead: Vec<usize> = (0..ours).collect();
        let mut paths: Vec<String> = ahead
            .iter()
            .map(|&i| format!("{}/{}", self.dir, queue[i]))
            .collect();
        // With them, the superseded markers a `--newest` request sees, for
        // their age: a left-over one is deleted.
        let markers = match self.extras.newest {
            true => std::mem::take(&mut self.markers),
            false => Vec::new(),
        };
        paths.extend(markers.iter().cloned());
        let mut read = super::keys::pipelined(s, &paths, super::keys::send_get, "reading").await?;
        let stale: Vec<String> = markers
            .into_iter()
            .zip(read.split_off(ahead.len()))
            .filter_map(|(m, got)| {
                let (_, stat) = got?;
                (self.born_ms - stat.ctime > STALE_MS).then_some(m)
            })
            .collect();
        if !stale.is_empty() {
            let _ = super::keys::pipelined(s, &stale, send_delete, "deleting").await;
        }
        paths.truncate(ahead.len());
        let mut holders = Vec::new();
        let mut waiters = Vec::new();
        for ((&i, path), got) in ahead.iter().zip(&paths).zip(read) {
            let Some(data) = got.and_then(|(data, _)| NodeData::decode(&data)) else {
                continue;
            };
            let theirs = Extras::from_list(&data.fields);
            let entry = (i, path.clone(), theirs, data);
            if names::turn(kinds, i) == Turn::Holds {
                holders.push(entry);
            } else {
                waiters.push(entry);
            }
        }
        let mut relist = false;
        if self.extras.newest {
            let newest = waiters.iter().filter(|w| w.2.newest);
            // Outranked by a waiting one: we leave, naming the highest.
            let above = newest
                .clone()
                .filter(|w| !supersedes(self.extras.order, w.2.order))
                .max_by_key(|w| w.2.order);
            if let Some((_, _, _, data)) = above {
                self.outcome = Some(Acquired::Superseded(rival(data)));
                return Ok(Step::Left);
            }
            let head = format!("{}/{}", self.dir, queue[0]);
            for (_, path, _, _) in newest {
                let name = &path[self.dir.len() + 1..];
                let Some(marker) = self.marker(Marker::Superseded, name) else {
                    continue;
                };
                relist |= supersede(s, &self.data, &head, &marker, path).await?;
            }
        }
        if self.extras.cancel {
            for (_, path, theirs, _) in &holders {
                if !theirs.cancel || !cancels(self.extras.order, theirs.order) {
                    continue;
                }
                let name = &path[self.dir.len() + 1..];
                if let Some(marker) = self.marker(Marker::Cancel, name) {
                    notify(s, &self.data, &marker).await;
                }
            }
        }
        if relist && self.passes < PASSES {
            self.passes += 1;
            self.joined = false;
            return Ok(Step::Relist);
        }
        Ok(Step::Go)
    }

    /// Our node is gone: the newer request that superseded us, if its
    /// marker says so (read, then deleted); None: reset, or our session
    /// is gone.
    pub(super) async fn superseded(&mut self, s: &Session) -> Option<Rival> {
        if !self.extras.newest {
            return None;
        }
        let marker = self.marker(Marker::Superseded, &self.name)?;
        let m = marker.as_str();
        let (data, _) = s.retry(|c| async move { c.get_data(m).await }).await.ok()?;
        let _ = s.retry(|c| async move { c.delete(m, None).await }).await;
        Some(NodeData::decode(&data).map_or_else(
            || Rival {
                source: String::from_utf8_lossy(&data).into_owned(),
                ..Rival::default()
            },
            |d| rival(&d),
        ))
    }

    /// What a hold raises the mark with: the order, the mark's path and
    /// the mark as the grant read it.
    pub(super) fn order(&self) -> Option<Raise> {
        self.extras.order.map(|order| Raise {
            order,
            mark: self.mark.clone(),
            seen: Some(self.seen),
        })
    }
}

/// Supersedes the waiter at `target`: the marker and the deletion in one
/// transaction that checks `head` still exists. True when the queue
/// moved (the head left) or the outcome is unknown: list again.
async fn supersede(
    s: &Session,
    data: &[u8],
    head: &str,
    marker: &str,
    target: &str,
) -> Result<bool> {
    let client = s.client()?;
    let persistent = zk::CreateMode::Persistent.with_acls(s.acls);
    let mut multi = client.new_multi_writer();
    let added = multi
        .add_check_version(head, -1)
        .and_then(|_| multi.add_create(marker, data, &persistent))
        .and_then(|_| multi.add_delete(target, None));
    if let Err(e) = added {
        return Err(s.error(&format!("superseding {target}"), e));
    }
    match multi.commit().await {
        Ok(_) => Ok(false),
        // The head left: the target may hold now.
        Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) => Ok(true),
        // Superseded by another already, or gone.
        Err(zk::MultiWriteError::OperationFailed { .. }) => Ok(false),
        Err(zk::MultiWriteError::RequestFailed { source }) if connection_lost(&source) => Ok(true),
        Err(zk::MultiWriteError::RequestFailed { source }) => {
            Err(s.error(&format!("superseding {target}"), source))
        }
    }
}

/// Creates the cancel marker `marker` (there already: fine). Best
/// effort: the holder is asked once.
async fn notify(s: &Session, data: &[u8], marker: &str) {
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(s.acls);
    let options = &ephemeral;
    let _ = s
        .retry(|c| async move { c.create(marker, data, options).await })
        .await;
}

fn rival(data: &NodeData) -> Rival {
    Rival {
        source: data.source.clone(),
        identity: None,
        fields: data.fields.clone(),
    }
}

/// A hold's watch on its cancel marker (`--cancel-running`).
pub(super) struct CancelWatch {
    path: String,
    /// Polled in place, so `lost` can be cancelled and called again.
    watch: Option<Watch>,
    fired: bool,
}

impl CancelWatch {
    /// Resolves once a newer `--cancel-running` request created our
    /// marker: who it is. Cancel-safe.
    pub(super) async fn notice(&mut self, s: &Session) -> Rival {
        let path = self.path.as_str();
        while !self.fired {
            match &mut self.watch {
                Some(w) => {
                    let event = w.as_mut().await;
                    self.watch = None;
                    match event.event_type {
                        zk::EventType::NodeCreated | zk::EventType::NodeDataChanged => {
                            self.fired = true
                        }
                        // The session's end is the own watch's to report.
                        zk::EventType::Session
                            if event.session_state == zk::SessionState::Expired =>
                        {
                            std::future::pending::<()>().await
                        }
                        _ => {}
                    }
                }
                None => match s
                    .retry(|c| async move { c.check_and_watch_stat(path).await })
                    .await
                {
                    Ok((Some(_), _)) => self.fired = true,
                    Ok((None, w)) => self.watch = Some(Box::pin(w.changed())),
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
                },
            }
        }
        match s.retry(|c| async move { c.get_data(path).await }).await {
            Ok((data, _)) => match NodeData::decode(&data) {
                Some(d) => rival(&d),
                None => Rival {
                    source: String::from_utf8_lossy(&data).into_owned(),
                    ..Rival::default()
                },
            },
            // Its requester left meanwhile (the marker is its ephemeral).
            Err(_) => Rival {
                source: "a newer --cancel-running request (gone since)".into(),
                ..Rival::default()
            },
        }
    }

    /// Deletes a marker that came (best effort): it is the newer request's
    /// and would otherwise stay as long as its session.
    pub(super) async fn clear(&mut self, s: &Session) {
        if self.fired {
            let p = self.path.as_str();
            let _ = s.retry(|c| async move { c.delete(p, None).await }).await;
        }
    }
}

/// What the release of a hold with `--order` does when its command ended
/// with status 0.
pub(super) struct Raise {
    pub order: u64,
    /// The mark's path.
    pub mark: String,
    /// The mark as last read (at the grant), tried first; None once that
    /// turned out stale.
    pub seen: Option<Found>,
}

/// Raises the mark to the order (unless it is that high already) and
/// deletes our `node` (and writes `closing`, the hold's history entry), in
/// one transaction, the mark's version compared
/// (from the grant's read: no read of its own unless the mark changed
/// since): true when done; false when our node or session is gone (nothing
/// raised: the caller deletes as usual).
pub(super) async fn raise_mark(
    s: &Session,
    raise: &mut Raise,
    node: &str,
    mut closing: Option<&mut super::history::Closing>,
) -> Result<bool> {
    let (order, mark) = (raise.order, raise.mark.as_str());
    let value = order.to_string();
    let persistent = zk::CreateMode::Persistent.with_acls(s.acls);
    for _ in 0..10 {
        let found = match raise.seen.take() {
            Some(found) => found,
            None => match s.retry(|c| async move { c.get_data(mark).await }).await {
                Ok((data, stat)) => Some((names::parse_mark(&data), stat.version)),
                Err(zk::Error::NoNode) => None,
                Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return Ok(false),
                Err(e) => return Err(s.error(&format!("reading {mark}"), e)),
            },
        };
        let client = s.client()?;
        let mut multi = client.new_multi_writer();
        let added = match found {
            // High enough already: still compared, in case it was cleared.
            Some((Some(m), version)) if m >= order => multi.add_check_version(mark, version),
            Some((_, version)) => multi.add_set_data(mark, value.as_bytes(), Some(version)),
            None => multi.add_create(mark, value.as_bytes(), &persistent),
        }
        .and_then(|_| multi.add_delete(node, None))
        .and_then(|_| match closing.as_deref() {
            Some(c) => c.add_to(s, &mut multi),
            None => Ok(()),
        });
        if let Err(e) = added {
            return Err(s.error(&format!("raising {mark}"), e));
        }
        match multi.commit().await {
            Ok(_) => return Ok(true),
            // Our node is gone: the hold was not ours to end well.
            Err(zk::MultiWriteError::OperationFailed { index: 1, .. }) => return Ok(false),
            // The history entry: created meanwhile, or trimmed.
            Err(zk::MultiWriteError::OperationFailed { index: 2, .. }) => {
                if let Some(c) = closing.as_deref_mut() {
                    c.exists = !c.exists;
                }
            }
            // Changed, created or deleted meanwhile: read it again.
            Err(zk::MultiWriteError::OperationFailed { .. }) => {}
            Err(zk::MultiWriteError::RequestFailed { source }) if connection_lost(&source) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            Err(zk::MultiWriteError::RequestFailed {
                source: zk::Error::SessionExpired | zk::Error::ClientClosed,
            }) => return Ok(false),
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                return Err(s.error(&format!("raising {mark}"), source))
            }
        }
    }
    Err(BackendError::Unavailable {
        server: s.server.clone(),
        reason: format!("raising the mark {mark}: it kept changing; try again"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks() {
        assert_eq!(outdated(Some(3), Some(4)), Some(4));
        assert_eq!(outdated(Some(4), Some(4)), None);
        assert_eq!(outdated(None, Some(4)), None);
        assert_eq!(outdated(Some(1), None), None);
        // The later arrival wins, unless both have orders and it is lower.
        assert!(supersedes(None, None));
        assert!(supersedes(Some(1), None));
        assert!(supersedes(None, Some(9)));
        assert!(supersedes(Some(7), Some(7)));
        assert!(supersedes(Some(8), Some(7)));
        assert!(!supersedes(Some(6), Some(7)));
        assert!(!cancels(Some(6), Some(7)));
        assert!(cancels(None, Some(7)));
    }
}
