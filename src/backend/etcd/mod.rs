//! The etcd backend: etcd's own lock recipe (concurrency.Mutex), so
//! `etcdctl lock NAME` and lc-cli exclude each other.
//!
//! Each request has a lease (TTL `?ttl=`, 10 s by default, as etcdctl's),
//! kept alive while waiting and holding (`lease.rs`); its key
//! `PREFIX/NAME/<lease hex>` is put if absent in a transaction that also
//! reads the holder, the smallest create revision under `PREFIX/NAME/`; a
//! waiter waits for the deletion of the last key created before its own,
//! then looks again (`queue.rs`). A hold that outlives the process (`lock
//! KEY` without a command) is the same key taken off the lease
//! (`held.rs`). Key layout and values: `names.rs`.

pub mod address;
mod held;
mod lease;
mod names;
mod ping;
mod queue;
mod rpc;

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use tokio_util::sync::CancellationToken;

pub use address::EtcdAddress;

use super::{
    Acquired, Backend, BackendConfig, BackendError, KeyInfo, LockRequest, Result, WaitProgress,
};
use names::KeyData;
use rpc::Rpc;

pub struct EtcdBackend {
    rpc: Rpc,
    prefix: String,
    ttl: Duration,
}

impl EtcdBackend {
    pub async fn connect(address: &EtcdAddress, config: &BackendConfig) -> Result<Self> {
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

    /// The holder's key-value of `key` and how many keys its queue has.
    async fn head(&self, key: &str) -> Result<Option<(etcd_client::KeyValue, usize)>> {
        let queue = names::queue_prefix(&self.prefix, key);
        let q = queue.clone();
        let first = self
            .rpc
            .call(&format!("reading {queue}"), |mut c| {
                let q = q.clone();
                async move { c.get(q, Some(queue::first_create())).await }
            })
            .await?;
        Ok(first
            .kvs()
            .first()
            .map(|kv| (kv.clone(), first.count() as usize)))
    }

    /// Deletes the head of the queue; false when there is none.
    async fn delete_holder(&self, key: &str) -> Result<bool> {
        // A holder that leaves between the read and the delete is followed
        // by the next one: a few rounds at most.
        for _ in 0..10 {
            let Some((kv, _)) = self.head(key).await? else {
                return Ok(false);
            };
            if self.delete_exact(&kv).await? {
                return Ok(true);
            }
        }
        Err(BackendError::Unavailable {
            server: self.rpc.server.clone(),
            reason: format!("the holder of '{key}' kept changing; try again"),
        })
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

    /// Every queue key under the prefix (the whole keyspace without one).
    async fn scan(&self) -> Result<Vec<etcd_client::KeyValue>> {
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
        Ok(resp
            .kvs()
            .iter()
            .filter(|kv| {
                kv.key_str()
                    .is_ok_and(|k| names::lock_name_of(&start, k).is_some())
                    && (kv.lease() != 0 || KeyData::decode(kv.value()).is_some())
            })
            .cloned()
            .collect())
    }
}

fn info(key: &str, kv: &etcd_client::KeyValue, count: usize) -> KeyInfo {
    let data = KeyData::decode(kv.value());
    KeyInfo {
        key: key.to_string(),
        // etcdctl records no source: its lease is what names it.
        source: data
            .as_ref()
            .map(|d| d.source.clone())
            .unwrap_or_else(|| format!("lease {:x}", kv.lease())),
        peer: None,
        // A kept hold is lc-cli's key taken off its lease.
        kept: data.as_ref().map(|_| kv.lease() == 0),
        token: None,
        since: data.map(|d| d.since()),
        waiting: count.saturating_sub(1),
        mode: crate::backend::LockMode::Exclusive,
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

    /// Deletes the holder key, whichever it is (a detached hold, or a
    /// running holder, which then loses the lock).
    async fn unlock(&self, key: &str) -> Result<bool> {
        self.delete_holder(key).await
    }

    async fn reset_key(&self, key: &str) -> Result<()> {
        self.delete_holder(key).await.map(|_| ())
    }

    /// Deletes every queue key whose value names `source`: holders and
    /// waiters alike (etcdctl's keys record no source).
    async fn reset_source(&self, source: &str) -> Result<()> {
        for kv in self.scan().await? {
            if KeyData::decode(kv.value()).is_some_and(|d| d.source == source) {
                self.delete_exact(&kv).await?;
            }
        }
        Ok(())
    }

    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        let start = names::scan_prefix(&self.prefix);
        let mut by_name: std::collections::BTreeMap<String, Vec<etcd_client::KeyValue>> =
            Default::default();
        for kv in self.scan().await? {
            let Some(name) = kv
                .key_str()
                .ok()
                .and_then(|k| names::lock_name_of(&start, k))
            else {
                continue;
            };
            by_name.entry(name.to_string()).or_default().push(kv);
        }
        Ok(by_name
            .into_iter()
            .filter_map(|(name, kvs)| {
                let head = kvs.iter().min_by_key(|kv| kv.create_revision())?;
                Some(info(&name, head, kvs.len()))
            })
            .collect())
    }

    async fn holder(&self, key: &str) -> Result<Option<KeyInfo>> {
        Ok(self
            .head(key)
            .await?
            .map(|(kv, count)| info(key, &kv, count)))
    }
}
