//! `--limit N` on ZooKeeper: Curator's `InterProcessSemaphoreV2`, so a Java
//! service using it and lc-cli on the same path share the N leases.
//!
//! The key's znode has two children: `locks`, an `InterProcessMutex` queue
//! that serialises the acquirers (first come, first served: each waits
//! watching the node just ahead), and `leases`, one ephemeral sequential
//! node per holder. The acquirer that holds the mutex creates its lease,
//! then lists `leases` with a watch until there are at most N of them, and
//! only then gives the mutex to the next. So only that one acquirer watches
//! the leases: a release wakes it alone, and it is the one granted. lc-cli
//! gives the mutex back in the transaction that claims its slot
//! (`LC_SLOT`, `slots.rs`), a child of the key's node beside `locks` and
//! `leases`, where no Curator client looks.
//!
//! Curator stores no N: each participant passes its own. lc-cli writes its
//! N into its nodes' data (`limit=N`) and, holding the mutex, refuses when
//! a current lc-cli lease says another N; every lease is created under the
//! mutex after that check, so all lc-cli leases agree and reading one is
//! enough. Before waiting, the first lease and the first acquirer are read
//! too, so a disagreeing request is refused at once rather than at its
//! turn. A Curator participant's N cannot be read: agreeing with it is the
//! operator's job (README).

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::held::ZkHeld;
use super::names::{self, Mode, NodeData, NodeKind};
use super::queue::{self, create_node, wait_turn, QueueNode};
use super::session::Session;
use super::slots::{self, Claimed};
use crate::backend::settle::{settle, QueueEntry};
use crate::backend::{Acquired, HeldLock, LockMode, LockRequest, Result, WaitProgress};

pub(super) async fn acquire(
    s: &Arc<Session>,
    root: &str,
    request: &LockRequest,
    n: u32,
    cancel: CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Acquired> {
    let dir = names::lock_dir(root, &request.key);
    let locks = format!("{dir}/{}", names::SEMAPHORE_LOCKS);
    let node_data = NodeData::new(Mode::Queue, &request.source)
        .with_limit(Some(n))
        .with_fields(&request.extras.encode());
    let data = node_data.encode();
    let name = match create_node(s, &locks, &data, NodeKind::Mutex).await {
        Ok(name) => name,
        Err(e) => {
            s.close().await;
            return Err(e);
        }
    };
    let mutex = QueueNode::new(locks, name);
    let mut waited = in_turn(s, &dir, &mutex, request, n, &node_data, &cancel, progress).await;
    // The history entry is opened before the command starts.
    if let (Ok(Some(held)), false) = (&mut waited, cancel.is_cancelled()) {
        held.open_history(request.mode, node_data.since_ms).await;
    }
    let entry = Entry {
        s: s.clone(),
        mutex: mutex.path,
    };
    settle(entry, waited, &cancel).await
}

/// Our node in the acquirers' mutex queue, while the wait is settled; a
/// grant is the lease itself (the mutex node already given back).
struct Entry {
    s: Arc<Session>,
    mutex: String,
}

#[async_trait]
impl QueueEntry for Entry {
    type Grant = ZkHeld;

    fn hold(self, held: ZkHeld) -> Box<dyn HeldLock> {
        Box::new(held)
    }

    async fn give_back(self, mut held: ZkHeld) -> Result<()> {
        held.release().await
    }

    /// Only a waiter's node: unconfirmed, it goes with the session.
    async fn withdraw(self) {
        queue::withdraw(&self.s, &self.mutex).await;
    }
}

/// The checks, the mutex, the lease. Some(hold) once our lease is one of
/// the first N (the mutex given back); None when we must leave.
#[allow(clippy::too_many_arguments)]
async fn in_turn(
    s: &Arc<Session>,
    dir: &str,
    mutex: &QueueNode,
    request: &LockRequest,
    n: u32,
    node_data: &NodeData,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Option<ZkHeld>> {
    let data = &node_data.encode();
    let key = request.key.as_str();
    let leases = format!("{dir}/{}", names::SEMAPHORE_LEASES);
    // After our node exists: a lock request racing with us sees it, or we
    // see its node here.
    refuse_if_lock(s, dir, key, n).await?;
    check_limit(s, &leases, key, n).await?;
    check_limit(s, &mutex.dir, key, n).await?;
    if wait_turn(s, mutex, request.nonblock, cancel, progress, None, None)
        .await?
        .is_none()
    {
        return Ok(None);
    }
    // Ours: the leases cannot change N under us now.
    check_limit(s, &leases, key, n).await?;
    let lease = QueueNode::new(
        leases.clone(),
        create_node(s, &leases, data, NodeKind::Lease).await?,
    );
    let room = wait_for_room(s, dir, &lease, n, request.nonblock, cancel, progress).await;
    // Room: our slot, claimed in the transaction that gives the mutex to
    // the next acquirer (`slots.rs`).
    let claim = slots::Claim {
        dir,
        lease: &lease,
        data: node_data,
        mutex: &mutex.path,
    };
    let claimed = match room {
        Ok(Some(room)) => slots::claim(s, &claim, n, room.children, &room.leases)
            .await
            .map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    let granted = match claimed {
        Ok(Some(Claimed::Slot(i))) => s.watch_own(&lease.path).await.map(|w| w.map(|w| (w, i))),
        Ok(Some(Claimed::LeaseGone)) => Err(queue::gone(s, &lease.path)),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    let (own, slot) = match granted {
        Ok(Some(own)) => own,
        other => {
            // Our slot node, if claimed, goes with the session, which the
            // caller's withdrawal closes.
            let l = lease.path.as_str();
            let _ = s.retry(|c| async move { c.delete(l, None).await }).await;
            return match other {
                Err(e) => Err(e),
                _ => Ok(None),
            };
        }
    };
    let (stat, watch) = own;
    let mut held = ZkHeld::new(
        s.clone(),
        lease.path.clone(),
        stat.czxid,
        watch,
        request.source.clone(),
    );
    let mut fields = request.extras.encode();
    fields.push_str(&format!("slot={slot}\n"));
    held.fields = fields;
    held.slot = Some((slot, slots::path(dir, slot)));
    Ok(Some(held))
}

/// What the leases' listing that found room saw: the leases, and the
/// key's lock node's children (its slot nodes among them), listed with it.
struct Room {
    leases: Vec<String>,
    children: Vec<String>,
}

/// Holding the mutex: lists the leases with a watch until ours is among at
/// most N (as Curator counts them: every child). None when we must leave.
/// With each listing, the key's lock node `key_dir` is listed too (sent at
/// once, no round trip of its own): its slot nodes, for the claim.
async fn wait_for_room(
    s: &Session,
    key_dir: &str,
    lease: &QueueNode,
    n: u32,
    nonblock: bool,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Option<Room>> {
    let dir = lease.dir.as_str();
    loop {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        let (listed, beside) = tokio::join!(
            s.retry(|c| async move { c.list_and_watch_children(dir).await }),
            s.retry(|c| async move { c.list_children(key_dir).await }),
        );
        let (children, watch) = match listed {
            Ok(got) => got,
            Err(zk::Error::NoNode) => return Err(queue::gone(s, &lease.path)),
            Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
        };
        if !children.contains(&lease.name) {
            return Err(queue::gone(s, &lease.path));
        }
        if children.len() <= n as usize {
            let beside = match beside {
                Ok(beside) => beside,
                Err(e) => return Err(s.error(&format!("listing {key_dir}"), e)),
            };
            return Ok(Some(Room {
                leases: children,
                children: beside,
            }));
        }
        progress(WaitProgress { ahead: Some(0) });
        if nonblock {
            return Ok(None);
        }
        tokio::select! {
            event = watch.changed() => {
                if event.session_state == zk::SessionState::Expired {
                    return Err(queue::expired(s));
                }
            }
            _ = cancel.cancelled() => return Ok(None),
            gone = s.until_gone() => return Err(queue::lost_while_waiting(s, gone)),
        }
    }
}

/// Refuses when the first lc-cli node among `dir`'s queue nodes (leases, or
/// the acquirers' queue) was made with another N. Reads until it finds one
/// of lc-cli's (a Curator node says no N), at most a few.
async fn check_limit(s: &Session, dir: &str, key: &str, n: u32) -> Result<()> {
    let children = match s.retry(|c| async move { c.list_children(dir).await }).await {
        Ok(children) => names::queue(children),
        Err(zk::Error::NoNode) => return Ok(()),
        Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
    };
    for child in children.iter().take(4) {
        let path = format!("{dir}/{child}");
        let p = path.as_str();
        let limit = match s.retry(|c| async move { c.get_data(p).await }).await {
            Ok((data, _)) => NodeData::decode(&data).and_then(|d| d.limit),
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(s.error(&format!("reading {path}"), e)),
        };
        match limit {
            Some(theirs) if theirs != n => {
                return Err(LockMode::limit(n).conflict(key, LockMode::limit(theirs)))
            }
            Some(_) => return Ok(()),
            None => {}
        }
    }
    Ok(())
}

/// Refuses a semaphore request on a key that queue nodes of a lock
/// (exclusive or shared) are under.
async fn refuse_if_lock(s: &Session, dir: &str, key: &str, n: u32) -> Result<()> {
    let children = match s.retry(|c| async move { c.list_children(dir).await }).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(()),
        Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
    };
    if names::queue(children).is_empty() {
        return Ok(());
    }
    Err(LockMode::limit(n).conflict(key, LockMode::Exclusive))
}
