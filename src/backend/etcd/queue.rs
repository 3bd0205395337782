//! The wait, as concurrency.Mutex does it, with the modes of etcd's
//! rwmutex and semaphore recipes (`line.rs`): put our key if absent in one
//! transaction that also reads the queue; then wait for the deletion of
//! the key ahead that keeps us waiting (by create revision), and look
//! again. Every look is a transaction that first compares our own key's
//! create revision and lease, so the look that finds our turn also proves
//! our key still held at that revision (the check Jepsen found missing in
//! etcd's recipe).

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, WatchFilterType, WatchOptions,
};
use tokio_util::sync::CancellationToken;

use super::held::EtcdHeld;
use super::lease::{Lease, LeaseEnd};
use super::line;
use super::names::{self, KeyData, OwnKey};
use super::rpc::Rpc;
use crate::backend::settle::{settle, QueueEntry};
use crate::backend::{
    Acquired, BackendError, HeldLock, LockMode, LockRequest, Result, WaitProgress,
};

pub(super) async fn acquire(
    rpc: &Rpc,
    prefix: &str,
    request: &LockRequest,
    ttl: std::time::Duration,
    cancel: CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Acquired> {
    let mut lease = Lease::grant(rpc, ttl).await?;
    let queue = names::queue_prefix(prefix, &request.key);
    let data = KeyData::new(&request.source, request.mode, false).encode();
    let (place, first) = match enqueue(rpc, &lease, &queue, data).await {
        Ok(v) => v,
        Err(e) => {
            let _ = lease.revoke().await;
            return Err(e);
        }
    };
    let mode = request.mode;
    let outcome = match line::conflict(&request.key, mode, &first.modes()) {
        Err(e) => Err(e),
        Ok(()) if line::granted(mode, &first.modes()) => {
            progress(WaitProgress { ahead: Some(0) });
            Ok(Some(first.header_rev))
        }
        Ok(()) if request.nonblock => Ok(None),
        Ok(()) => wait_turn(rpc, &lease, &place, mode, first, &cancel, progress).await,
    };
    let entry = Entry {
        rpc: rpc.clone(),
        lease,
        place,
        source: request.source.clone(),
        mode,
    };
    settle(entry, outcome, &cancel).await
}

/// Our key and its lease, while the wait is settled; a grant is the
/// revision of the answer that showed us our turn.
struct Entry {
    rpc: Rpc,
    lease: Lease,
    place: OwnKey,
    source: String,
    mode: LockMode,
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
            self.mode,
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

/// The whole queue, oldest first (`keys`, `reset`, `unlock`).
pub(super) fn by_create() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// The keys created before ours, oldest first: all a grant depends on.
fn older_than(rev: i64) -> GetOptions {
    by_create().with_max_create_revision(rev - 1)
}

/// The keys ahead of ours, as one answer showed them.
struct Ahead {
    kvs: Vec<KeyValue>,
    header_rev: i64,
}

impl Ahead {
    fn modes(&self) -> Vec<LockMode> {
        self.kvs
            .iter()
            .map(|kv| KeyData::mode_of(kv.value()))
            .collect()
    }
}

fn header_rev(h: Option<&etcd_client::ResponseHeader>) -> i64 {
    h.map(|h| h.revision()).unwrap_or(0)
}

fn got(op: Option<&TxnOpResponse>) -> Vec<KeyValue> {
    match op {
        Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
        _ => Vec::new(),
    }
}

/// Puts our key unless it exists (a retried request), reading the queue in
/// the same transaction. Returns our place and the keys ahead of it.
async fn enqueue(rpc: &Rpc, lease: &Lease, queue: &str, data: Vec<u8>) -> Result<(OwnKey, Ahead)> {
    let key = names::own_key(queue, lease.id);
    let txn = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(
                key.as_str(),
                data,
                Some(PutOptions::new().with_lease(lease.id)),
            ),
            TxnOp::get(queue, Some(by_create())),
        ])
        .or_else([
            TxnOp::get(key.as_str(), None),
            TxnOp::get(queue, Some(by_create())),
        ]);
    let resp = rpc
        .call(&format!("putting {key}"), |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    let header_rev = header_rev(resp.header());
    let ops = resp.op_responses();
    let rev = if resp.succeeded() {
        header_rev
    } else {
        got(ops.first())
            .first()
            .map(|kv| kv.create_revision())
            .ok_or_else(|| unexpected(rpc, "our key vanished at once"))?
    };
    let kvs = got(ops.get(1))
        .into_iter()
        .filter(|kv| kv.create_revision() < rev)
        .collect();
    Ok((
        OwnKey {
            key,
            rev,
            queue: queue.to_string(),
        },
        Ahead { kvs, header_rev },
    ))
}

fn unexpected(rpc: &Rpc, reason: &str) -> BackendError {
    BackendError::Protocol {
        server: rpc.server.clone(),
        reason: reason.to_string(),
    }
}

/// Reads the keys ahead of ours in a transaction that holds only while our
/// key is still the one we put (its create revision) on our lease.
async fn look(rpc: &Rpc, lease: &Lease, place: &OwnKey) -> Result<Ahead> {
    let key = place.key.as_str();
    let txn = Txn::new()
        .when([
            Compare::create_revision(key, CompareOp::Equal, place.rev),
            Compare::lease(key, CompareOp::Equal, lease.id),
        ])
        .and_then([TxnOp::get(
            place.queue.as_str(),
            Some(older_than(place.rev)),
        )]);
    let resp = rpc
        .call("reading the queue", |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    if !resp.succeeded() {
        return Err(if lease.is_expired() {
            lease_gone(rpc, LeaseEnd::Expired, lease)
        } else {
            BackendError::Refused {
                server: rpc.server.clone(),
                reason: format!(
                    "our place in the queue ({}) was deleted or its lease {:x} is gone (a reset by source?)",
                    place.key, lease.id
                ),
            }
        });
    }
    Ok(Ahead {
        kvs: got(resp.op_responses().first()),
        header_rev: header_rev(resp.header()),
    })
}

/// waitDeletes: until the keys ahead let ours hold. Some(revision of the
/// answer that showed it, our key checked in it) once they do; None when
/// cancelled. `first` is what the enqueue saw.
async fn wait_turn(
    rpc: &Rpc,
    lease: &Lease,
    place: &OwnKey,
    mode: LockMode,
    first: Ahead,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Option<i64>> {
    let mut ahead = first;
    loop {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        let modes = ahead.modes();
        if line::granted(mode, &modes) {
            // The enqueue's answer did not check our lease: look once more.
            let last = tokio::select! {
                r = look(rpc, lease, place) => r?,
                _ = cancel.cancelled() => return Ok(None),
            };
            if line::granted(mode, &last.modes()) {
                return Ok(Some(last.header_rev));
            }
            ahead = last;
            continue;
        }
        progress(WaitProgress {
            ahead: Some(line::waiting_ahead(&modes)),
        });
        // The key that keeps us waiting, or (a limit) any key ahead.
        let options = WatchOptions::new()
            .with_start_revision(ahead.header_rev + 1)
            .with_filters([WatchFilterType::NoPut]);
        let (watched, options) = match line::blocker(mode, &modes) {
            Some(i) => (ahead.kvs[i].key().to_vec(), options),
            None => (place.queue.clone().into_bytes(), options.with_prefix()),
        };
        let mut stream = tokio::select! {
            w = rpc.call("watching the key ahead", |mut c| { let k = watched.clone(); let options = options.clone(); async move { c.watch(k, Some(options)).await } }) => w?,
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
                    // The stream broke: look again.
                    _ => break,
                },
                gone = lease.until_gone() => return Err(lease_gone(rpc, gone, lease)),
                _ = cancel.cancelled() => return Ok(None),
            }
        }
        ahead = tokio::select! {
            r = look(rpc, lease, place) => r?,
            _ = cancel.cancelled() => return Ok(None),
        };
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
pub(super) async fn withdraw(rpc: &Rpc, lease: &mut Lease, key: &str) {
    let k = key.to_string();
    let _ = rpc
        .call("deleting our key", |mut c| {
            let k = k.clone();
            async move { c.delete(k, None).await }
        })
        .await;
    let _ = lease.revoke().await;
}
