//! The etcd backend: etcd's own lock recipe (concurrency.Mutex), so
//! `etcdctl lock NAME` and lc-cli exclude each other, with the modes of its
//! rwmutex and semaphore recipes.
//!
//! Each request has a lease (TTL `?ttl=`, 10 s by default, as etcdctl's),
//! kept alive while waiting and holding (`lease.rs`); its key
//! `PREFIX/NAME/<lease hex>` is put if absent in a transaction that also
//! reads the queue under `PREFIX/NAME/`; who holds follows from the modes
//! of the keys in create-revision order (`line.rs`); a waiter waits for the
//! deletion of the key that keeps it waiting, then looks again, each look
//! checking its own key (`queue.rs`). A hold that outlives the process
//! (`lock KEY` without a command) is the same key taken off the lease
//! (`held.rs`). Key layout and values: `names.rs`. The deploy-queue rules
//! (issue 44): what a request does on arrival (`rules.rs`, `arrive.rs`),
//! the mark and the notices beside the queue (`names.rs`).

pub(crate) mod address;
mod arrive;
mod held;
mod lease;
mod line;
mod names;
mod ping;
mod queue;
mod rpc;
mod rules;

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use tokio_util::sync::CancellationToken;

pub(crate) use address::EtcdAddress;

use super::{
    Acquired, Backend, BackendConfig, BackendError, KeyInfo, LockRequest, Result, WaitProgress,
    WaiterInfo,
};
use names::KeyData;
use rpc::Rpc;

pub(crate) struct EtcdBackend {
    rpc: Rpc,
    prefix: String,
    ttl: Duration,
}

impl EtcdBackend {
    pub(crate) async fn connect(address: &EtcdAddress, config: &BackendConfig) -> Result<Self> {
        let EtcdAddress { endpoints, prefix } = address;
        let timeout = (config.ttl / 3).clamp(Duration::from_secs(1), Duration::from_secs(5));
        let rpc = Rpc::connect(
            endpoints,
            config.shown(),
            &config.access,
            timeout,
            config.connect_timeout,
        )
        .await?;
        Ok(EtcdBackend {
            rpc,
            prefix: prefix.clone(),
            ttl: config.ttl,
        })
    }

    /// The queue of `key`, oldest first.
    async fn queue(&self, key: &str) -> Result<Vec<etcd_client::KeyValue>> {
        let queue = names::queue_prefix(&self.prefix, key);
        let q = queue.clone();
        let resp = self
            .rpc
            .call(&format!("reading {queue}"), |mut c| {
                let q = q.clone();
                async move { c.get(q, Some(queue::by_create())).await }
            })
            .await?;
        Ok(resp.kvs().to_vec())
    }

    /// Deletes one holder of `key`, a kept hold first (as `unlock` frees
    /// a hold that outlived its lc-cli); false when there is none.
    async fn delete_holder(&self, key: &str) -> Result<bool> {
        // A holder that leaves between the read and the delete is followed
        // by the next one: a few rounds at most.
        for _ in 0..10 {
            let held = holding(self.queue(key).await?).0;
            let Some(kv) = held.iter().find(|kv| is_kept(kv)).or(held.first()) else {
                return Ok(false);
            };
            if self.delete_exact(kv).await? {
                return Ok(true);
            }
        }
        Err(BackendError::Unavailable {
            server: self.rpc.server.clone(),
            reason: format!("the holder of '{key}' kept changing; try again"),
        })
    }

    /// Deletes every holder of `key` (shared or limited: all of them).
    async fn delete_holders(&self, key: &str) -> Result<()> {
        for kv in holding(self.queue(key).await?).0 {
            self.delete_exact(&kv).await?;
        }
        Ok(())
    }

    /// Deletes this very key (same create revision); false if it was gone.
    async fn delete_exact(&self, kv: &etcd_client::KeyValue) -> Result<bool> {
        let k = kv.key().to_vec();
        let txn = Txn::new()
            .when([Compare::create_revision(
                k.clone(),
                CompareOp::Equal,
                kv.create_revision(),
            )])
            .and_then([TxnOp::delete(k, None)]);
        let resp = self
            .rpc
            .call("deleting the holder", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        Ok(resp.succeeded())
    }

    /// Every queue key under the prefix (the whole keyspace without one),
    /// and the marks found there by lock name.
    async fn scan(&self) -> Result<(Vec<etcd_client::KeyValue>, Marks)> {
        let start = names::scan_prefix(&self.prefix);
        let end = names::range_end(start.as_bytes());
        let from = if start.is_empty() {
            vec![0]
        } else {
            start.clone().into_bytes()
        };
        let resp = self
            .rpc
            .call("listing the lock keys", |mut c| {
                let from = from.clone();
                let end = end.clone();
                async move { c.get(from, Some(GetOptions::new().with_range(end))).await }
            })
            .await?;
        let mut marks = Marks::new();
        let mut queued = Vec::new();
        for kv in resp.kvs() {
            let Ok(k) = kv.key_str() else { continue };
            if let Some(name) = names::mark_owner(&start, k) {
                if let Some(mark) = names::mark_value(kv.value()) {
                    marks.insert(name.to_string(), mark);
                }
            } else if names::lock_name_of(&start, k).is_some()
                && (kv.lease() != 0 || KeyData::decode(kv.value()).is_some())
            {
                queued.push(kv.clone());
            }
        }
        Ok((queued, marks))
    }

    /// The key's mark, as `mark` reads it.
    async fn read_mark(&self, key: &str) -> Result<Option<u64>> {
        let mark = names::mark_key(&names::state_prefix(&self.prefix, key));
        let resp = self
            .rpc
            .call(&format!("reading {mark}"), |mut c| {
                let mark = mark.clone();
                async move { c.get(mark, None).await }
            })
            .await?;
        Ok(resp
            .kvs()
            .first()
            .and_then(|kv| names::mark_value(kv.value())))
    }
}

/// Marks by lock name.
type Marks = std::collections::BTreeMap<String, u64>;

/// A queue (oldest first) split into its holders and how many wait.
fn holding(mut kvs: Vec<etcd_client::KeyValue>) -> (Vec<etcd_client::KeyValue>, usize) {
    kvs.sort_by_key(|kv| kv.create_revision());
    let modes: Vec<_> = kvs.iter().map(|kv| KeyData::mode_of(kv.value())).collect();
    let holds = line::holders(&modes);
    let waiting = holds.iter().filter(|h| !**h).count();
    let held = kvs
        .into_iter()
        .zip(holds)
        .filter_map(|(kv, h)| h.then_some(kv))
        .collect();
    (held, waiting)
}

/// A hold that outlived its lc-cli: off any lease, or marked detached by
/// lc-cli on a lease nobody renews (`--expire`).
fn is_kept(kv: &etcd_client::KeyValue) -> bool {
    kv.lease() == 0 || KeyData::decode(kv.value()).is_some_and(|d| d.detached)
}

fn info(key: &str, kv: &etcd_client::KeyValue, waiting: usize, mark: Option<u64>) -> KeyInfo {
    let data = KeyData::decode(kv.value());
    KeyInfo {
        identity: None,
        key: key.to_string(),
        // etcdctl records no source: its lease is what names it.
        source: data
            .as_ref()
            .map(|d| d.source.clone())
            .unwrap_or_else(|| format!("lease {:x}", kv.lease())),
        peer: None,
        // A kept hold is lc-cli's key taken off its lease (or put on one
        // nobody renews, `--expire`).
        kept: data.as_ref().map(|_| is_kept(kv)),
        token: None,
        expires: data
            .as_ref()
            .and_then(|d| d.expires_ms)
            .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
        since: data.as_ref().map(|d| d.since()),
        waiting,
        mode: KeyData::mode_of(kv.value()),
        fields: data.as_ref().map(|d| d.list()).unwrap_or_default(),
        mark,
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn ping(&self) -> Result<crate::backend::ping::PingReport> {
        self.ping_cluster().await
    }

    async fn acquire(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        queue::acquire(&self.rpc, &self.prefix, request, self.ttl, cancel, progress).await
    }

    /// Deletes a holder's key: a kept hold if there is one, else a running
    /// holder, which then loses the lock.
    async fn unlock(&self, key: &str) -> Result<bool> {
        self.delete_holder(key).await
    }

    async fn reset_key(&self, key: &str) -> Result<()> {
        self.delete_holders(key).await
    }

    /// Deletes every queue key whose value names `source`: holders and
    /// waiters alike (etcdctl's keys record no source).
    async fn reset_source(&self, source: &str) -> Result<()> {
        for kv in self.scan().await?.0 {
            if KeyData::decode(kv.value()).is_some_and(|d| d.source == source) {
                self.delete_exact(&kv).await?;
            }
        }
        Ok(())
    }

    /// The marks come with the scan: every key under the prefix.
    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        let (by_name, marks) = self.by_name().await?;
        Ok(by_name
            .into_iter()
            .flat_map(|(name, kvs)| {
                let (held, waiting) = holding(kvs);
                let mark = marks.get(&name).copied();
                held.iter()
                    .map(|kv| info(&name, kv, waiting, mark))
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    /// The queue and the mark, read in one transaction.
    async fn holder(&self, key: &str) -> Result<Option<KeyInfo>> {
        let queue = names::queue_prefix(&self.prefix, key);
        let mark = names::mark_key(&names::state_prefix(&self.prefix, key));
        let txn = Txn::new().and_then([
            TxnOp::get(queue.as_str(), Some(queue::by_create())),
            TxnOp::get(mark, None),
        ]);
        let resp = self
            .rpc
            .call(&format!("reading {queue}"), |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        let ops = resp.op_responses();
        let mark = queue::got(ops.get(1))
            .first()
            .and_then(|kv| names::mark_value(kv.value()));
        let (held, waiting) = holding(queue::got(ops.first()));
        Ok(held.first().map(|kv| info(key, kv, waiting, mark)))
    }

    async fn mark(&self, key: &str) -> Result<Option<u64>> {
        self.read_mark(key).await
    }

    /// Deletes the mark; the line and its holder are left as they are.
    async fn clear_mark(&self, key: &str) -> Result<bool> {
        let mark = names::mark_key(&names::state_prefix(&self.prefix, key));
        let resp = self
            .rpc
            .call(&format!("deleting {mark}"), |mut c| {
                let mark = mark.clone();
                async move { c.delete(mark, None).await }
            })
            .await?;
        Ok(resp.deleted() > 0)
    }

    /// Each lock's keys that do not hold, by create revision (the line).
    async fn waiters(&self) -> Result<Option<Vec<WaiterInfo>>> {
        let mut out = Vec::new();
        for (name, mut kvs) in self.by_name().await?.0 {
            kvs.sort_by_key(|kv| kv.create_revision());
            let modes: Vec<_> = kvs.iter().map(|kv| KeyData::mode_of(kv.value())).collect();
            let holds = line::holders(&modes);
            let waiting = kvs.iter().zip(holds).filter(|(_, h)| !*h);
            for (place, (kv, _)) in waiting.enumerate() {
                let data = KeyData::decode(kv.value());
                out.push(WaiterInfo {
                    key: name.clone(),
                    source: data
                        .as_ref()
                        .map(|d| d.source.clone())
                        .unwrap_or_else(|| format!("lease {:x}", kv.lease())),
                    peer: None,
                    since: data.as_ref().map(|d| d.since()),
                    mode: KeyData::mode_of(kv.value()),
                    place,
                    kept: None,
                    identity: None,
                    fields: data.as_ref().map(|d| d.list()).unwrap_or_default(),
                });
            }
        }
        Ok(Some(out))
    }
}

impl EtcdBackend {
    /// Every queue key under the prefix, by lock name, and the marks.
    async fn by_name(
        &self,
    ) -> Result<(
        std::collections::BTreeMap<String, Vec<etcd_client::KeyValue>>,
        Marks,
    )> {
        let start = names::scan_prefix(&self.prefix);
        let mut by_name: std::collections::BTreeMap<String, Vec<etcd_client::KeyValue>> =
            Default::default();
        let (kvs, marks) = self.scan().await?;
        for kv in kvs {
            let Some(name) = kv
                .key_str()
                .ok()
                .and_then(|k| names::lock_name_of(&start, k))
            else {
                continue;
            };
            by_name.entry(name.to_string()).or_default().push(kv);
        }
        Ok((by_name, marks))
    }
}
