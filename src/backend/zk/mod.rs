//! The ZooKeeper backend: the fair queue of ephemeral sequential nodes.
//!
//! The lock for KEY is the znode `ROOT/KEY` (ancestors created as container
//! nodes). Each waiter creates an ephemeral sequential child named as
//! Curator's `InterProcessMutex` names them (`_c_<uuid>-lock-<10 digits>`),
//! so Curator clients and lc-cli exclude each other; the lowest sequence
//! holds the key, and each waiter watches only its predecessor. A hold that
//! must outlive the process (`lock KEY` without a command) is a persistent
//! node with the same sequence digits. Every node's data records its source.
//! `keys` walks the tree for lock nodes and reads only their holders
//! (`keys.rs`).
//!
//! One `ZkBackend` is one session and serves one acquire: releasing,
//! withdrawing or detaching ends the session and waits until it is closed.

pub(crate) mod address;
mod feed;
mod held;
mod history;
mod keys;
mod names;
mod ping;
mod queue;
mod rules;
mod semaphore;
mod session;
mod slots;

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

pub(crate) use address::{Recipe, ZkAddress};

use super::{
    Acquired, Backend, BackendConfig, BackendError, KeyInfo, LockMode, LockRequest, Result,
    WaitProgress,
};
use crate::backend::history::{Ending, HistoryEntry};
use names::NodeData;
use session::Session;

pub(crate) struct ZkBackend {
    session: Arc<Session>,
    root: String,
    /// The ensemble as the address names it, for `ping`.
    hosts: Vec<String>,
    /// The node an exclusive request makes (`recipe=`).
    recipe: Recipe,
}

impl ZkBackend {
    pub(crate) async fn connect(address: &ZkAddress, config: &BackendConfig) -> Result<Self> {
        let ZkAddress {
            hosts,
            root,
            recipe,
        } = address;
        if let Some(problem) = root.strip_prefix('/').and_then(names::key_problem) {
            return Err(BackendError::BadKey {
                key: root.clone(),
                reason: format!("the root path in {address} is not a znode path: {problem}"),
            });
        }
        let session = Session::connect(
            hosts,
            config.shown(),
            &config.access,
            config.session_timeout,
            config.connect_timeout,
        )
        .await?;
        Ok(ZkBackend {
            session: Arc::new(session),
            root: root.clone(),
            hosts: hosts.clone(),
            recipe: *recipe,
        })
    }

    /// The queue under the lock node of `key` (empty when there is none).
    async fn queue_of(&self, key: &str) -> Result<(String, Vec<String>)> {
        let dir = names::lock_dir(&self.root, key);
        let d = dir.as_str();
        match self
            .session
            .retry(|c| async move { c.list_children(d).await })
            .await
        {
            Ok(children) => Ok((dir, names::queue(children))),
            Err(zk::Error::NoNode) => Ok((dir, Vec::new())),
            Err(e) => Err(self.session.error(&format!("listing {dir}"), e)),
        }
    }

    /// The holders of a read-write lock's or a semaphore's key (paths);
    /// None for a plain lock (one holder: the head of its queue).
    async fn shared_holders(&self, key: &str) -> Result<Option<Vec<String>>> {
        let s = &self.session;
        let dir = names::lock_dir(&self.root, key);
        let d = dir.as_str();
        let children = match s.retry(|c| async move { c.list_children(d).await }).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
        };
        if names::semaphore_parts(&children) {
            let leases = format!("{dir}/{}", names::SEMAPHORE_LEASES);
            let l = leases.as_str();
            let found = match s.retry(|c| async move { c.list_children(l).await }).await {
                Ok(found) => names::queue(found),
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(s.error(&format!("listing {leases}"), e)),
            };
            let mut paths: Vec<String> = found.iter().map(|n| format!("{leases}/{n}")).collect();
            // Past the first N (as lc-cli's nodes record it): the acquirer
            // waiting for room, which keeps its place.
            for p in paths.clone().iter().take(4) {
                let p = p.as_str();
                if let Ok((data, _)) = s.retry(|c| async move { c.get_data(p).await }).await {
                    if let Some(n) = NodeData::decode(&data).and_then(|d| d.limit) {
                        paths.truncate(n as usize);
                        break;
                    }
                }
            }
            return Ok(Some(paths));
        }
        let queue = names::queue(children);
        if !names::read_write_in_use(&queue) {
            return Ok(None);
        }
        let kinds: Vec<names::NodeKind> = queue
            .iter()
            .map(|n| names::parse(n).map_or(names::NodeKind::Mutex, |(k, _)| k))
            .collect();
        Ok(Some(
            (0..queue.len())
                .filter(|&i| names::turn(&kinds, i) == names::Turn::Holds)
                .map(|i| format!("{dir}/{}", queue[i]))
                .collect(),
        ))
    }

    /// Deletes the given holder nodes (gone already is fine), each with
    /// its history entry closed as `how` (`history::end_from_outside`);
    /// how many.
    async fn delete_nodes(&self, nodes: &[String], how: Ending) -> Result<usize> {
        let mut n = 0;
        for node in nodes {
            if history::end_from_outside(&self.session, node, how, true).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Deletes the node at the head of the queue (its history entry
    /// closed as `how`); false when there is none.
    async fn delete_holder(&self, key: &str, how: Ending) -> Result<bool> {
        // A holder that leaves between the listing and the delete is
        // followed by the next one: a few rounds at most.
        for _ in 0..10 {
            let (dir, queue) = self.queue_of(key).await?;
            let Some(head) = queue.first() else {
                return Ok(false);
            };
            let node = format!("{dir}/{head}");
            if history::end_from_outside(&self.session, &node, how, true).await? {
                return Ok(true);
            }
        }
        // Transient: the queue is moving, a later attempt finds it settled.
        Err(BackendError::Unavailable {
            server: self.session.server.clone(),
            reason: format!("the holder of '{key}' kept changing; try again"),
        })
    }
}

#[async_trait]
impl Backend for ZkBackend {
    async fn ping(&self) -> Result<crate::backend::ping::PingReport> {
        self.ping_ensemble().await
    }

    async fn acquire(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        let (s, root) = (&self.session, self.root.as_str());
        match request.mode {
            LockMode::Limit(n) => {
                semaphore::acquire(s, root, request, n.get(), cancel, progress).await
            }
            _ => queue::acquire(s, root, self.recipe, request, cancel, progress).await,
        }
    }

    /// Deletes the holder node, whichever it is (a detached hold, or a
    /// running holder, which then loses the lock): as on the built-in server.
    /// Of a shared or limited key: a kept (persistent) holder first, else
    /// the oldest holder.
    async fn unlock(&self, key: &str) -> Result<bool> {
        let Some(holders) = self.shared_holders(key).await? else {
            return self.delete_holder(key, Ending::Released).await;
        };
        let s = &self.session;
        let mut pick = holders.first().cloned();
        for node in &holders {
            let p = node.as_str();
            if let Ok(Some(stat)) = s.retry(|c| async move { c.check_stat(p).await }).await {
                // A TTL node (`--expire`) shows owner 0 too, as any persistent node.
                if stat.ephemeral_owner == 0 {
                    pick = Some(node.clone());
                    break;
                }
            }
        }
        match pick {
            Some(node) => Ok(self.delete_nodes(&[node], Ending::Released).await? > 0),
            None => Ok(false),
        }
    }

    /// Frees every holder (of a shared or limited key: all of them).
    async fn reset_key(&self, key: &str) -> Result<()> {
        match self.shared_holders(key).await? {
            Some(holders) => self.delete_nodes(&holders, Ending::Reset).await.map(|_| ()),
            None => self.delete_holder(key, Ending::Reset).await.map(|_| ()),
        }
    }

    /// Walks the whole tree under the root and deletes every queue node
    /// whose data names `source`: holders and waiters alike.
    async fn reset_source(&self, source: &str) -> Result<()> {
        let s = &self.session;
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            let d = dir.as_str();
            let children = match s.retry(|c| async move { c.list_children(d).await }).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
            };
            for child in children {
                let path = format!("{dir}/{child}");
                if names::is_extra(&child) {
                    continue;
                }
                if names::sequence_of(&child).is_none() {
                    dirs.push(path);
                    continue;
                }
                let p = path.as_str();
                let data = match s.retry(|c| async move { c.get_data(p).await }).await {
                    Ok((data, _)) => data,
                    Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(s.error(&format!("reading {path}"), e)),
                };
                if NodeData::decode(&data).is_some_and(|d| d.source == source) {
                    // A holder's open entry closed as reset; a waiter has none.
                    history::end_from_outside(s, &path, Ending::Reset, false).await?;
                }
            }
        }
        Ok(())
    }

    /// The persistent child `_c_lc-mark` of the key's lock node (`rules.rs`).
    async fn mark(&self, key: &str) -> Result<Option<u64>> {
        let dir = names::lock_dir(&self.root, key);
        rules::read_mark(&self.session, &rules::mark_path(&dir)).await
    }

    async fn clear_mark(&self, key: &str) -> Result<bool> {
        let dir = names::lock_dir(&self.root, key);
        rules::clear_mark(&self.session, &rules::mark_path(&dir)).await
    }

    /// The entries beside the key's queue (`history.rs`).
    async fn history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        let dir = names::lock_dir(&self.root, key);
        history::read(&self.session, &dir, key, limit).await
    }

    /// One persistent recursive watch on the root (`feed.rs`).
    async fn change_feed(&self, _under: &str) -> Result<crate::backend::feed::Feed> {
        feed::arm(&self.session, &self.root).await
    }

    /// Walks the tree under the root: see `keys.rs` for what is asked and
    /// what `since` means here.
    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        keys::list(&self.session, &self.root).await
    }

    /// The queue nodes that wait, in line order (`keys.rs`).
    async fn waiters(&self) -> Result<Option<Vec<super::WaiterInfo>>> {
        keys::waiters(&self.session, &self.root).await.map(Some)
    }

    async fn close(&self) {
        self.session.close().await;
    }
}
