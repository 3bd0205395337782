//! The wait, as concurrency.Mutex does it: put our key if absent in one
//! transaction that also reads the holder; then wait for the deletion of
//! the key just ahead of ours (by create revision), look again, and verify
//! that our own key is still there before reporting the lock held.

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use tokio_util::sync::CancellationToken;

use super::held::EtcdHeld;
use super::lease::{Lease, LeaseEnd};
use super::names::{self, KeyData, OwnKey};
use super::rpc::Rpc;
use crate::backend::settle::{settle, QueueEntry};
use crate::backend::{Acquired, BackendError, HeldLock, LockRequest, Result, WaitProgress};

pub async fn acquire(
    rpc: &Rpc,
    prefix: &str,
    request: &LockRequest,
    ttl: std::time::Duration,
    cancel: CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Acquired> {
    let mut lease = Lease::grant(rpc, ttl).await?;
    let queue = names::queue_prefix(prefix, &request.key);
    let data = KeyData::new(&request.source, false).encode();
    let (place, holder_rev, header_rev) = match enqueue(rpc, &lease, &queue, data).await {
        Ok(v) => v,
        Err(e) => {
            let _ = lease.revoke().await;
            return Err(e);
        }
    };
    let outcome = if holder_rev == place.rev {
        progress(WaitProgress { ahead: Some(0) });
        Ok(Some(header_rev))
    } else if request.nonblock {
        Ok(None)
    } else {
        wait_turn(rpc, &lease, &place, &cancel, progress).await
    };
    let entry = Entry {
        rpc: rpc.clone(),
        lease,
        place,
        source: request.source.clone(),
    };
    settle(entry, outcome, &cancel).await
}

/// Our key and its lease, while the wait is settled; a grant is the
/// revision of the answer that showed us first.
struct Entry {
    rpc: Rpc,
    lease: Lease,
    place: OwnKey,
    source: String,
}

#[async_trait]
impl QueueEntry for Entry {
    type Grant = i64;

    fn hold(self, header_rev: i64) -> Box<dyn HeldLock> {
        Box::new(EtcdHeld::new(
            self.rpc,
            self.lease,
            self.place,
            header_rev,
            self.source,
        ))
    }

    /// Revoking the lease deletes our key even if the delete was not sent.
    async fn give_back(self, _: i64) -> Result<()> {
        self.withdraw().await;
        Ok(())
    }

    async fn withdraw(mut self) {
        withdraw(&self.rpc, &mut self.lease, &self.place.key).await;
    }
}

/// The holder: the key with the smallest create revision under the queue.
pub fn first_create() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
}

/// Puts our key unless it exists (a retried request), reading the holder in
/// the same transaction. Returns our place, the holder's create revision
/// and the revision of the answer.
async fn enqueue(
    rpc: &Rpc,
    lease: &Lease,
    queue: &str,
    data: Vec<u8>,
) -> Result<(OwnKey, i64, i64)> {
    let key = names::own_key(queue, lease.id);
    let txn = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(
                key.as_str(),
                data,
                Some(PutOptions::new().with_lease(lease.id)),
            ),
            TxnOp::get(queue, Some(first_create())),
        ])
        .or_else([
            TxnOp::get(key.as_str(), None),
            TxnOp::get(queue, Some(first_create())),
        ]);
    let resp = rpc
        .call(&format!("putting {key}"), |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    let header_rev = resp.header().map(|h| h.revision()).unwrap_or(0);
    let ops = resp.op_responses();
    let first_rev = |op: Option<&TxnOpResponse>| match op {
        Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.create_revision()),
        _ => None,
    };
    let rev = if resp.succeeded() {
        header_rev
    } else {
        first_rev(ops.first()).ok_or_else(|| unexpected(rpc, "our key vanished at once"))?
    };
    let holder = first_rev(ops.get(1)).unwrap_or(rev);
    Ok((
        OwnKey {
            key,
            rev,
            queue: queue.to_string(),
        },
        holder,
        header_rev,
    ))
}

fn unexpected(rpc: &Rpc, reason: &str) -> BackendError {
    BackendError::Protocol {
        server: rpc.server.clone(),
        reason: reason.to_string(),
    }
}

/// waitDeletes: until no key under the queue was created before ours.
/// Some(revision of the answer that found our key first) once it is; None
/// when cancelled.
async fn wait_turn(
    rpc: &Rpc,
    lease: &Lease,
    place: &OwnKey,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Option<i64>> {
    loop {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        // The keys created before ours, the last first.
        let queue = place.queue.clone();
        let before = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(place.rev - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_keys_only();
        let resp = tokio::select! {
            r = rpc.call("reading the queue", |mut c| { let queue = queue.clone(); let before = before.clone(); async move { c.get(queue, Some(before)).await } }) => r?,
            _ = cancel.cancelled() => return Ok(None),
        };
        let header_rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        let Some(pred) = resp.kvs().first() else {
            return verify_own(rpc, lease, place).await.map(Some);
        };
        // Every key ahead (the count etcd returns ignores the revision
        // filter), less the holder.
        let ahead = resp.kvs().len().saturating_sub(1);
        progress(WaitProgress { ahead: Some(ahead) });
        let pred_key = pred.key().to_vec();
        let options = WatchOptions::new().with_start_revision(header_rev + 1);
        let k = pred_key.clone();
        let mut stream = tokio::select! {
            w = rpc.call("watching the key ahead", |mut c| { let k = k.clone(); let options = options.clone(); async move { c.watch(k, Some(options)).await } }) => w?,
            _ = cancel.cancelled() => return Ok(None),
        };
        loop {
            tokio::select! {
                msg = stream.message() => match msg {
                    Ok(Some(m)) => {
                        if m.canceled() || m.events().iter().any(|e| e.event_type() == EventType::Delete) {
                            break;
                        }
                    }
                    // The stream broke: look again (the get re-checks).
                    _ => break,
                },
                gone = lease.until_gone() => return Err(lease_gone(rpc, gone, lease)),
                _ = cancel.cancelled() => return Ok(None),
            }
        }
    }
}

/// The re-check after the wait: our key must still be ours.
async fn verify_own(rpc: &Rpc, lease: &Lease, place: &OwnKey) -> Result<i64> {
    let key = place.key.clone();
    let resp = rpc
        .call("reading our key", |mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        })
        .await?;
    match resp.kvs().first() {
        Some(kv) if kv.create_revision() == place.rev => {
            Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
        }
        _ if lease.is_expired() => Err(lease_gone(rpc, LeaseEnd::Expired, lease)),
        _ => Err(BackendError::Refused {
            server: rpc.server.clone(),
            reason: format!(
                "our place in the queue ({}) was deleted (a reset by source?)",
                place.key
            ),
        }),
    }
}

fn lease_gone(rpc: &Rpc, gone: LeaseEnd, lease: &Lease) -> BackendError {
    let reason = match gone {
        LeaseEnd::Expired => format!("the etcd lease {:x} expired while waiting", lease.id),
        LeaseEnd::Silent => format!(
            "no answer from etcd for longer than the lease TTL ({:?}) while waiting",
            lease.ttl
        ),
    };
    BackendError::Unavailable {
        server: rpc.server.clone(),
        reason,
    }
}

/// Leaves the queue: deletes our key and revokes the lease (which deletes
/// it too, if the delete could not be sent).
pub async fn withdraw(rpc: &Rpc, lease: &mut Lease, key: &str) {
    let k = key.to_string();
    let _ = rpc
        .call("deleting our key", |mut c| {
            let k = k.clone();
            async move { c.delete(k, None).await }
        })
        .await;
    let _ = lease.revoke().await;
}
