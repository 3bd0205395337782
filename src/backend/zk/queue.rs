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
use super::rules::{self, Rules, Step};
use super::session::{connection_lost, OwnWatch, Session, SessionEnd};
use super::Recipe;
use crate::backend::settle::{settle, QueueEntry};
use crate::backend::{
    Acquired, BackendError, HeldLock, LockMode, LockRequest, Result, WaitProgress,
};

/// An exclusive or shared request (`--limit N` is `semaphore.rs`); with
/// queue rules (`--order`, `--newest`, `--cancel-running`), `rules.rs`.
pub(super) async fn acquire(
    s: &Arc<Session>,
    root: &str,
    recipe: Recipe,
    request: &LockRequest,
    cancel: CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Acquired> {
    let dir = names::lock_dir(root, &request.key);
    let fields = request.extras.encode();
    let node_data = NodeData::new(Mode::Queue, &request.source).with_fields(&fields);
    let data = node_data.encode();
    // The arrival check, with the listing that picks our node's kind:
    // below the mark, no node is made.
    let order = request.extras.order;
    let created = match kind_for(s, &dir, request.mode, recipe, order.is_some()).await {
        Ok((_, mark)) if rules::outdated(order, mark).is_some() => {
            s.close().await;
            let mark = mark.unwrap_or_default();
            return Ok(Acquired::Outdated { mark });
        }
        Ok((kind, _)) => create_node(s, &dir, &data, kind).await,
        Err(e) => Err(e),
    };
    let name = match created {
        Ok(name) => name,
        Err(e) => {
            s.close().await;
            return Err(e);
        }
    };
    let mut rules = Rules::new(&request.extras, &data, &dir, &name);
    let place = QueueNode::new(dir, name);
    let check = Some((request.key.as_str(), request.mode));
    let waited = wait_turn(
        s,
        &place,
        request.nonblock,
        &cancel,
        progress,
        check,
        rules.as_mut(),
    )
    .await;
    if let Some(outcome) = rules.as_mut().and_then(|r| r.outcome.take()) {
        // Superseded (our node is gone already) or outdated: we leave.
        withdraw(s, &place.path).await;
        return Ok(outcome);
    }
    // The history entry is opened before the command starts (a hold whose
    // command ran has one, however its lc-cli ends).
    let waited = match waited {
        Ok(Some((czxid, own_watch))) if !cancel.is_cancelled() => {
            let mut held = ZkHeld::new(
                s.clone(),
                place.path.clone(),
                czxid,
                own_watch,
                request.source.clone(),
            );
            held.fields = fields;
            held.open_history(request.mode, node_data.since_ms).await;
            Ok(Some(Granted::Held(Box::new(held))))
        }
        Ok(Some(grant)) => Ok(Some(Granted::Bare(grant))),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    let entry = Entry {
        s: s.clone(),
        node: place.path,
        rules,
    };
    settle(entry, waited, &cancel).await
}

/// A grant: the hold with its history entry opened, or (cancelled as it
/// came) bare, to be given back.
enum Granted {
    Held(Box<ZkHeld>),
    Bare((i64, OwnWatch)),
}

/// Our node in a lock's queue, while its wait is settled.
struct Entry {
    s: Arc<Session>,
    node: String,
    rules: Option<Rules>,
}

#[async_trait]
impl QueueEntry for Entry {
    type Grant = Granted;

    fn hold(self, grant: Granted) -> Box<dyn HeldLock> {
        let mut held = match grant {
            Granted::Held(held) => held,
            // Not reached: a bare grant is one cancelled, given back.
            Granted::Bare((czxid, own_watch)) => Box::new(ZkHeld::new(
                self.s,
                self.node,
                czxid,
                own_watch,
                String::new(),
            )),
        };
        if let Some(mut rules) = self.rules {
            held.order = rules.order();
            held.cancel = rules.cancel.take();
        }
        held
    }

    /// Said so when not confirmed: the key may still be held. An entry
    /// opened for it goes first (nothing ran).
    async fn give_back(self, grant: Granted) -> Result<()> {
        if let Granted::Held(held) = &grant {
            if let Some(entry) = held.opened_entry() {
                let e = entry.as_str();
                let _ = self
                    .s
                    .retry(|c| async move { c.delete(e, None).await })
                    .await;
            }
        }
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
/// locks) names it. With `mark`, the key's mark too, read with the listing
/// (one round trip; a request of `recipe=rwlock` reads it alone).
async fn kind_for(
    s: &Session,
    dir: &str,
    mode: LockMode,
    recipe: Recipe,
    mark: bool,
) -> Result<(NodeKind, Option<u64>)> {
    let mark_path = rules::mark_path(dir);
    if mode == LockMode::Shared || recipe == Recipe::RwLock {
        let mark = match mark {
            true => rules::read_mark(s, &mark_path).await?,
            false => None,
        };
        // Decided before any node exists: a Curator reader arriving at an
        // empty key must see us as a writer.
        let kind = match mode {
            LockMode::Shared => NodeKind::Read,
            _ => NodeKind::Write,
        };
        return Ok((kind, mark));
    }
    let m = mark.then_some(mark_path.as_str());
    match rules::list(s, dir, m, None).await {
        Ok((children, mark, _)) if names::read_write_in_use(&children) => {
            Ok((NodeKind::Write, mark.and_then(|(v, _)| v)))
        }
        Ok((_, mark, _)) => Ok((NodeKind::Mutex, mark.and_then(|(v, _)| v))),
        Err(zk::Error::NoNode) => Ok((NodeKind::Mutex, None)),
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
            Err(e) if connection_lost(&e) && tokio::time::Instant::now() < deadline => {
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
/// also refuses a key that a semaphore uses. With `rules` (`rules.rs`),
/// None also when the request left by them (`rules.outcome` says why).
pub(super) async fn wait_turn(
    s: &Session,
    place: &QueueNode,
    nonblock: bool,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
    mut check: Option<(&str, LockMode)>,
    mut rules: Option<&mut Rules>,
) -> Result<Option<(i64, OwnWatch)>> {
    let (dir, name, node) = (place.dir.as_str(), place.name.as_str(), place.path.as_str());
    let Some((stat, mut own_watch)) = s.watch_own(node).await? else {
        return left(s, node, rules).await;
    };
    if let Some(r) = rules.as_deref_mut() {
        r.born_ms = stat.ctime;
    }
    loop {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        let listed = match rules.as_deref_mut() {
            Some(r) => r.list(s).await,
            None => s
                .retry(|c| async move { c.list_children(dir).await })
                .await
                .map(|children| (children, None)),
        };
        let (children, mark) = match listed {
            Ok(listed) => listed,
            Err(zk::Error::NoNode) => return left(s, node, rules).await,
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
            return left(s, node, rules).await;
        };
        let kinds: Vec<NodeKind> = queue
            .iter()
            .map(|n| names::parse(n).map_or(NodeKind::Mutex, |(k, _)| k))
            .collect();
        if let Some(r) = rules.as_deref_mut() {
            match r.on_listing(s, &queue, &kinds, ours, mark).await? {
                Step::Go => {}
                Step::Left => return Ok(None),
                Step::Relist => continue,
            }
        }
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
                    zk::EventType::NodeDeleted => return left(s, node, rules).await,
                    zk::EventType::Session => return Err(expired(s)),
                    _ => match s.watch_own(node).await? {
                        Some((_, w)) => own_watch = w,
                        None => return left(s, node, rules).await,
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

/// Our node is gone while we wait: superseded (a marker says so: we
/// leave, `rules.outcome` set), else reset or our session's end.
async fn left<T>(s: &Session, node: &str, rules: Option<&mut Rules>) -> Result<Option<T>> {
    if let Some(r) = rules {
        if let Some(by) = r.superseded(s).await {
            r.outcome = Some(Acquired::Superseded(by));
            return Ok(None);
        }
    }
    Err(gone(s, node))
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
