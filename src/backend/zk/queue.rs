//! The fair queue: an ephemeral sequential node per waiter, served in
//! sequence order, each waiter watching one node: a writer (exclusive) the
//! node just ahead of it, a reader (`--shared`) the nearest writer ahead
//! (`names::turn`). Readers and writers share one queue, as Curator's
//! `InterProcessReadWriteLock` does. `--limit N` is `semaphore.rs`, which
//! reuses this queue for its acquirers (`mod.rs` picks between them).

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::held::ZkHeld;
use super::names::{self, Mode, NodeData, NodeKind, Turn};
use super::session::{OwnWatch, Session, SessionEnd};
use super::Recipe;
use crate::backend::settle::{settle, QueueEntry};
use crate::backend::{
    Acquired, BackendError, HeldLock, LockMode, LockRequest, Result, WaitProgress,
};

/// An exclusive or shared request (`--limit N` is `semaphore.rs`).
pub(super) async fn acquire(
    s: &Arc<Session>,
    root: &str,
    recipe: Recipe,
    request: &LockRequest,
    cancel: CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Acquired> {
    let dir = names::lock_dir(root, &request.key);
    let data = NodeData::new(Mode::Queue, &request.source).encode();
    let created = match kind_for(s, &dir, request.mode, recipe).await {
        Ok(kind) => create_node(s, &dir, &data, kind).await,
        Err(e) => Err(e),
    };
    let name = match created {
        Ok(name) => name,
        Err(e) => {
            s.close().await;
            return Err(e);
        }
    };
    let place = QueueNode::new(dir, name);
    let check = Some((request.key.as_str(), request.mode));
    let waited = wait_turn(s, &place, request.nonblock, &cancel, progress, check).await;
    let entry = Entry {
        s: s.clone(),
        node: place.path,
        source: request.source.clone(),
    };
    settle(entry, waited, &cancel).await
}

/// Our node in a lock's queue, while its wait is settled.
struct Entry {
    s: Arc<Session>,
    node: String,
    source: String,
}

#[async_trait]
impl QueueEntry for Entry {
    type Grant = (i64, OwnWatch);

    fn hold(self, (czxid, own_watch): (i64, OwnWatch)) -> Box<dyn HeldLock> {
        Box::new(ZkHeld::new(
            self.s,
            self.node,
            czxid,
            own_watch,
            self.source,
        ))
    }

    /// Said so when not confirmed: the key may still be held.
    async fn give_back(self, _: (i64, OwnWatch)) -> Result<()> {
        if withdraw(&self.s, &self.node).await {
            return Ok(());
        }
        Err(BackendError::Unavailable {
            server: self.s.server.clone(),
            reason: format!(
                "granted as the wait ended, and giving {} back was not confirmed: \
                 it may hold the key until ZooKeeper expires the session ({:?})",
                self.node, self.s.retry_for
            ),
        })
    }

    async fn withdraw(self) {
        withdraw(&self.s, &self.node).await;
    }
}

/// The node a lock request creates: a reader's for `--shared`; for an
/// exclusive one, a read-write lock's writer with `recipe=rwlock` or where
/// readers or writers queue (so Curator's read-write lock sees it), else a
/// mutex node as Curator's `InterProcessMutex` (and lc-cli before shared
/// locks) names it.
async fn kind_for(s: &Session, dir: &str, mode: LockMode, recipe: Recipe) -> Result<NodeKind> {
    if mode == LockMode::Shared {
        return Ok(NodeKind::Read);
    }
    // Decided before any node exists: a Curator reader arriving at an
    // empty key must see us as a writer.
    if recipe == Recipe::RwLock {
        return Ok(NodeKind::Write);
    }
    match s.retry(|c| async move { c.list_children(dir).await }).await {
        Ok(children) if names::read_write_in_use(&children) => Ok(NodeKind::Write),
        Ok(_) | Err(zk::Error::NoNode) => Ok(NodeKind::Mutex),
        Err(e) => Err(s.error(&format!("listing {dir}"), e)),
    }
}

/// Creates our queue node (and the lock node and its ancestors, as
/// containers, as Curator does). After a connection loss the node is looked
/// for by its unique prefix before creating another. Returns its name.
pub(super) async fn create_node(
    s: &Session,
    dir: &str,
    data: &[u8],
    kind: NodeKind,
) -> Result<String> {
    let prefix = names::new_prefix(kind);
    let path = format!("{dir}/{prefix}");
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(s.acls);
    let container = zk::CreateMode::Container.with_acls(s.acls);
    let deadline = tokio::time::Instant::now() + s.retry_for;
    // Each round either creates, finds, or makes the parents: bounded, since
    // a container reaped under us is the only way to see NoNode twice.
    for _ in 0..1000 {
        let client = s.client()?;
        match client.create(&path, data, &ephemeral).await {
            Ok((_stat, seq)) => return Ok(format!("{prefix}{seq}")),
            Err(zk::Error::NoNode) => {
                if let Err(e) = s
                    .retry(|c| {
                        let container = container.clone();
                        async move { c.mkdir(dir, &container).await }
                    })
                    .await
                {
                    return Err(s.error(&format!("creating {dir}"), e));
                }
            }
            Err(zk::Error::ConnectionLoss) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                match s.retry(|c| async move { c.list_children(dir).await }).await {
                    Ok(children) => {
                        if let Some(found) = children.into_iter().find(|c| c.starts_with(&prefix)) {
                            return Ok(found);
                        }
                    }
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
                }
            }
            Err(e) => return Err(s.error(&format!("creating a node in {dir}"), e)),
        }
    }
    Err(BackendError::Other(format!(
        "could not create a node in {dir}"
    )))
}

/// Our node in the queue: the lock node it is under, its name there, and
/// its full path.
pub(super) struct QueueNode {
    pub dir: String,
    pub name: String,
    pub path: String,
}

impl QueueNode {
    pub(super) fn new(dir: String, name: String) -> QueueNode {
        let path = format!("{dir}/{name}");
        QueueNode { dir, name, path }
    }
}

/// Waits until our node holds (`names::turn`). Some((czxid, own watch))
/// when it does; None when we must leave (cancelled, or `nonblock` and it
/// does not hold). With `check` (the key and our mode), the first listing
/// also refuses a key that a semaphore uses.
pub(super) async fn wait_turn(
    s: &Session,
    place: &QueueNode,
    nonblock: bool,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
    mut check: Option<(&str, LockMode)>,
) -> Result<Option<(i64, OwnWatch)>> {
    let (dir, name, node) = (place.dir.as_str(), place.name.as_str(), place.path.as_str());
    let Some((stat, mut own_watch)) = s.watch_own(node).await? else {
        return Err(gone(s, node));
    };
    loop {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        let children = match s.retry(|c| async move { c.list_children(dir).await }).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Err(gone(s, node)),
            Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
        };
        // After our node exists: of two disagreeing requests that race,
        // at least one sees the other.
        if let Some((key, mode)) = check.take() {
            if names::semaphore_parts(&children) {
                refuse_if_semaphore(s, dir, key, mode).await?;
            }
        }
        let queue = names::queue(children);
        let Some(ours) = queue.iter().position(|n| n == name) else {
            return Err(gone(s, node));
        };
        let kinds: Vec<NodeKind> = queue
            .iter()
            .map(|n| names::parse(n).map_or(NodeKind::Mutex, |(k, _)| k))
            .collect();
        let watch = match names::turn(&kinds, ours) {
            Turn::Holds => {
                progress(WaitProgress { ahead: Some(0) });
                return Ok(Some((stat.czxid, own_watch)));
            }
            Turn::Waits { watch, ahead } => {
                progress(WaitProgress { ahead: Some(ahead) });
                watch
            }
        };
        if nonblock {
            return Ok(None);
        }
        // One request both registers the watch and checks that the
        // predecessor still exists: a deletion in between cannot be missed.
        let predecessor = format!("{dir}/{}", queue[watch]);
        let pred = predecessor.as_str();
        let watch = match s
            .retry(|c| async move { c.get_and_watch_data(pred).await })
            .await
        {
            Ok((_, _, watch)) => watch,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(s.error(&format!("watching {predecessor}"), e)),
        };
        tokio::select! {
            event = watch.changed() => {
                if event.session_state == zk::SessionState::Expired {
                    return Err(expired(s));
                }
            }
            event = &mut own_watch => {
                match event.event_type {
                    zk::EventType::NodeDeleted => return Err(gone(s, node)),
                    zk::EventType::Session => return Err(expired(s)),
                    _ => match s.watch_own(node).await? {
                        Some((_, w)) => own_watch = w,
                        None => return Err(gone(s, node)),
                    },
                }
            }
            _ = cancel.cancelled() => return Ok(None),
            gone = s.until_gone() => return Err(lost_while_waiting(s, gone)),
        }
    }
}

/// A lock request on a key whose znode has a semaphore's parts: refused
/// when a lease or an acquirer is there (an empty container left behind is
/// no user).
async fn refuse_if_semaphore(s: &Session, dir: &str, key: &str, mode: LockMode) -> Result<()> {
    for part in [names::SEMAPHORE_LEASES, names::SEMAPHORE_LOCKS] {
        let path = format!("{dir}/{part}");
        let p = path.as_str();
        let children = match s.retry(|c| async move { c.list_children(p).await }).await {
            Ok(children) => names::queue(children),
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(s.error(&format!("listing {path}"), e)),
        };
        let Some(first) = children.first() else {
            continue;
        };
        let node = format!("{path}/{first}");
        let n = node.as_str();
        let limit = match s.retry(|c| async move { c.get_data(n).await }).await {
            Ok((data, _)) => NodeData::decode(&data).and_then(|d| d.limit),
            Err(_) => None,
        };
        return Err(BackendError::ModeConflict {
            key: key.to_string(),
            ours: mode.phrase(),
            theirs: match limit {
                Some(n) => format!("with --limit {n}"),
                None => "as a semaphore (a Curator InterProcessSemaphoreV2)".into(),
            },
        });
    }
    Ok(())
}

pub(super) fn gone(s: &Session, node: &str) -> BackendError {
    if s.is_expired() {
        return expired(s);
    }
    BackendError::Refused {
        server: s.server.clone(),
        reason: format!("our place in the queue ({node}) was deleted (a reset by source?)"),
    }
}

/// The error for a session gone while its request waited in line.
pub(super) fn lost_while_waiting(s: &Session, gone: SessionEnd) -> BackendError {
    match gone {
        SessionEnd::Expired => expired(s),
        _ => BackendError::Unavailable {
            server: s.server.clone(),
            reason: format!(
                "no contact with ZooKeeper for longer than the session timeout ({:?}) while waiting",
                s.retry_for
            ),
        },
    }
}

pub(super) fn expired(s: &Session) -> BackendError {
    BackendError::Unavailable {
        server: s.server.clone(),
        reason: "the ZooKeeper session expired while waiting".into(),
    }
}

/// Leaves the queue: deletes our node, waiting (for at most a session
/// timeout) for the server to confirm it, and ends the session. False when
/// unconfirmed: the node then goes when ZooKeeper expires the session.
pub(super) async fn withdraw(s: &Session, node: &str) -> bool {
    let deleted = tokio::time::timeout(s.retry_for, s.delete_confirmed(node)).await;
    s.close().await;
    matches!(deleted, Ok(Ok(())))
}
