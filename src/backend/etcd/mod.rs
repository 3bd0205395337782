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
mod feed;
mod held;
mod history;
mod lease;
mod line;
mod names;
mod ping;
mod queue;
mod rpc;
mod rules;
mod seen;
mod slots;

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};
use tokio_util::sync::CancellationToken;

pub(crate) use address::EtcdAddress;

use super::{
    Acquired, Backend, BackendConfig, BackendError, KeyInfo, LockRequest, Result, WaitProgress,
    WaiterInfo,
};
use crate::backend::fields::Extras;
use crate::backend::history::{Ending, HistoryEntry};
use names::KeyData;
use rpc::Rpc;

pub(crate) struct EtcdBackend {
    rpc: Rpc,
    prefix: String,
    ttl: Duration,
    /// Who we are in a history entry's `by=` (a reset, an unlock): the
    /// etcd user, if any, at this host.
    by: String,
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
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".into());
        let by = match &config.access.user {
            Some(user) => format!("{user}@{host}"),
            None => host,
        };
        Ok(EtcdBackend {
            rpc,
            prefix: prefix.clone(),
            ttl: config.ttl,
            by,
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
            // A kept hold ends released by its unlock; a running one as a
            // reset would end it.
            let ending = match is_kept(kv) {
                true => Ending::Released,
                false => Ending::Reset,
            };
            if self.delete_exact(kv, Some((key, ending))).await? {
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
            self.delete_exact(&kv, Some((key, Ending::Reset))).await?;
        }
        Ok(())
    }

    /// Deletes this very key (same create revision); false if it was gone.
    /// With `ended` (the lock name, and how the hold ends), a holder's
    /// history entry is closed in the same transaction, `by=` us: the open
    /// entry as read just before (with its grant), else one from the key's
    /// value (a hold of an older lc-cli). A waiter withdrawn by a reset by
    /// source had no hold: none.
    async fn delete_exact(
        &self,
        kv: &etcd_client::KeyValue,
        ended: Option<(&str, Ending)>,
    ) -> Result<bool> {
        let k = kv.key().to_vec();
        let mut ops = vec![TxnOp::delete(k.clone(), None)];
        if let Some((name, ending)) = ended {
            let key = history::entry_key(&names::history_range(&self.prefix, name), kv.key());
            let read = self
                .rpc
                .call(&format!("reading {key}"), |mut c| {
                    let key = key.clone();
                    async move { c.get(key, None).await }
                })
                .await?;
            let token = kv.create_revision();
            let value = match read.kvs().first() {
                Some(open) => history::close(open.value(), token, ending, None, Some(&self.by)),
                None => Some(history::unopened(kv, ending, Some(&self.by))),
            };
            ops.extend(value.map(|v| TxnOp::put(key, v, None)));
        }
        let txn = Txn::new()
            .when([Compare::create_revision(
                k,
                CompareOp::Equal,
                kv.create_revision(),
            )])
            .and_then(ops);
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
    async fn scan(&self) -> Result<(Vec<etcd_client::KeyValue>, Marks, Slots)> {
        let start = names::scan_prefix(&self.prefix);
        let end = names::range_end(start.as_bytes());
        let from = if start.is_empty() {
            vec![0]
        } else {
            start.clone().into_bytes()
        };
        // Both sides of the history's range, in one transaction: `keys`
        // reads no history entry.
        let history = names::history_root(&self.prefix);
        let txn = Txn::new().and_then([
            TxnOp::get(from, Some(GetOptions::new().with_range(history.as_str()))),
            TxnOp::get(
                names::range_end(history.as_bytes()),
                Some(GetOptions::new().with_range(end)),
            ),
        ]);
        let resp = self
            .rpc
            .call("listing the lock keys", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        let ops = resp.op_responses();
        let kvs: Vec<_> = ops.iter().flat_map(|op| queue::got(Some(op))).collect();
        let mut marks = Marks::new();
        let mut slots = Slots::new();
        let mut queued = Vec::new();
        for kv in &kvs {
            let Ok(k) = kv.key_str() else { continue };
            if let Some((_, i)) = slots::owner_of(&start, k) {
                slots.insert(kv.value().to_vec(), i);
            } else if let Some(name) = names::mark_owner(&start, k) {
                if let Some(mark) = names::mark_value(kv.value()) {
                    marks.insert(name.to_string(), mark);
                }
            } else if names::lock_name_of(&start, k).is_some()
                && (kv.lease() != 0 || KeyData::decode(kv.value()).is_some())
            {
                queued.push(kv.clone());
            }
        }
        Ok((queued, marks, slots))
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

/// Slots taken (`slots.rs`), by the holder's queue key.
type Slots = std::collections::BTreeMap<Vec<u8>, u32>;

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

fn info(
    key: &str,
    kv: &etcd_client::KeyValue,
    waiting: usize,
    mark: Option<u64>,
    slot: Option<u32>,
) -> KeyInfo {
    let data = KeyData::decode(kv.value());
    let mut fields = data.as_ref().map(|d| d.list()).unwrap_or_default();
    if let Some(i) = slot {
        let names = Extras::from_list(&fields).slots;
        fields.push("slot", &slots::shown(i, &names));
    }
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
        fields,
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
        for (name, kvs) in self.by_name().await?.0 {
            let (held, _) = holding(kvs.clone());
            for kv in kvs {
                if KeyData::decode(kv.value()).is_some_and(|d| d.source == source) {
                    let holds = held
                        .iter()
                        .any(|h| h.create_revision() == kv.create_revision());
                    let ended = holds.then_some((name.as_str(), Ending::Reset));
                    self.delete_exact(&kv, ended).await?;
                }
            }
        }
        Ok(())
    }

    /// The newest entries first (by token): the entries and the queue,
    /// read in one transaction (an open entry whose holder is there is a
    /// hold that goes on: not listed).
    async fn history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let range = names::history_range(&self.prefix, key);
        let queue = names::queue_prefix(&self.prefix, key);
        let txn = Txn::new().and_then([
            TxnOp::get(range.as_str(), Some(history::read_options())),
            TxnOp::get(queue.as_str(), Some(queue::by_create().with_keys_only())),
        ]);
        let resp = self
            .rpc
            .call(&format!("reading {range}"), |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        let ops = resp.op_responses();
        let live: Vec<i64> = queue::got(ops.get(1))
            .iter()
            .map(|kv| kv.create_revision())
            .collect();
        let mut entries: Vec<HistoryEntry> = queue::got(ops.first())
            .iter()
            .filter_map(|kv| history::decode(key, kv, |t| live.contains(&t)))
            .collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.token));
        entries.truncate(limit);
        Ok(entries)
    }

    /// The marks come with the scan: every key under the prefix.
    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        let (by_name, marks, slots) = self.by_name().await?;
        Ok(by_name
            .into_iter()
            .flat_map(|(name, kvs)| {
                let (held, waiting) = holding(kvs);
                let mark = marks.get(&name).copied();
                held.iter()
                    .map(|kv| {
                        let slot = slots.get(kv.key()).copied();
                        info(&name, kv, waiting, mark, slot)
                    })
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
        Ok(held.first().map(|kv| info(key, kv, waiting, mark, None)))
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

    /// One Watch on the prefix (`feed.rs`).
    async fn change_feed(&self, _under: &str) -> Result<crate::backend::feed::Feed> {
        feed::arm(&self.rpc, &self.prefix).await
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
        Slots,
    )> {
        let start = names::scan_prefix(&self.prefix);
        let mut by_name: std::collections::BTreeMap<String, Vec<etcd_client::KeyValue>> =
            Default::default();
        let (kvs, marks, slots) = self.scan().await?;
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
        Ok((by_name, marks, slots))
    }
}
