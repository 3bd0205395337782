//! The wait, as concurrency.Mutex does it, with the modes of etcd's
//! rwmutex and semaphore recipes (`line.rs`): put our key if absent in one
//! transaction that also reads the queue; then wait for the deletion of
//! the key ahead that keeps us waiting (by create revision), and look
//! again. Every look is a transaction that first compares our own key's
//! create revision and lease, so the look that finds our turn also proves
//! our key still held at that revision (the check Jepsen found missing in
//! etcd's recipe). With deploy-queue fields, the put also reads the mark,
//! the arrival applies the rules (`arrive.rs`), a `--newest` waiter also
//! watches its own key, and the look that shows our turn checks the mark.

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, WatchFilterType, WatchOptions,
};
use tokio_util::sync::CancellationToken;

use super::arrive::{arrive, MarkSeen, Rules, Step};
use super::held::EtcdHeld;
use super::history::{self, Trim};
use super::lease::{Lease, LeaseEnd};
use super::names::{self, KeyData, OwnKey};
use super::rpc::Rpc;
use super::{line, rules, slots};
use crate::backend::settle::{settle, QueueEntry};
use crate::backend::{
    Acquired, BackendError, HeldLock, LockMode, LockRequest, Result, Rival, WaitProgress,
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
    let mut rules = Rules::new(request, prefix, lease.id);
    let data = KeyData::new(&request.source, request.mode, false).with_fields(rules.fields.clone());
    rules.since_ms = data.since_ms;
    let data = data.encode();
    let (place, first) = match enqueue(rpc, &lease, &queue, data, &rules).await {
        Ok(v) => v,
        Err(e) => {
            let _ = lease.revoke().await;
            return Err(e);
        }
    };
    let mode = request.mode;
    let outcome = async {
        line::conflict(&request.key, mode, &first.modes())?;
        let ahead = match arrive(rpc, &lease, &place, &rules, first).await? {
            Step::Wait(ahead) => ahead,
            Step::Done(turn) => return Ok(turn),
        };
        if line::granted(mode, &ahead.modes()) {
            progress(WaitProgress { ahead: Some(0) });
            return Ok(Turn::Granted(ahead.grant()));
        }
        if request.nonblock {
            return Ok(Turn::Left);
        }
        wait_turn(rpc, &lease, &place, &rules, mode, ahead, &cancel, progress).await
    }
    .await;
    // A --limit holder takes its slot before anything runs.
    let outcome = match (outcome, slots::count(mode)) {
        (Ok(Turn::Granted(mut grant)), Some(n)) => {
            slots::claim(rpc, &lease, &place, &rules.state, n)
                .await
                .map(|slot| {
                    grant.slot = Some(slot);
                    Turn::Granted(grant)
                })
        }
        (outcome, _) => outcome,
    };
    let mut entry = Entry {
        rpc: rpc.clone(),
        lease,
        place,
        source: request.source.clone(),
        mode,
        rules,
    };
    match outcome {
        // Our key is gone or about to be: the lease takes whatever is left.
        Ok(Turn::Superseded(by)) => {
            let _ = entry.lease.revoke().await;
            Ok(Acquired::Superseded(by))
        }
        Ok(Turn::Outdated(mark)) => {
            let _ = entry.lease.revoke().await;
            Ok(Acquired::Outdated { mark })
        }
        Ok(Turn::Granted(grant)) => settle(entry, Ok(Some(grant)), &cancel).await,
        Ok(Turn::Left) => settle(entry, Ok(None), &cancel).await,
        Err(e) => settle(entry, Err(e), &cancel).await,
    }
}

/// How a wait ended.
pub(super) enum Turn {
    Granted(Grant),
    /// Cancelled, or busy with `nonblock`.
    Left,
    Superseded(Rival),
    Outdated(u64),
}

/// The answer that showed us our turn: its revision, and the key's mark
/// as it read it (the release raises it from there).
pub(super) struct Grant {
    header_rev: i64,
    mark: MarkSeen,
    trim: Trim,
    /// The slot a `--limit` holder claimed (`slots.rs`).
    slot: Option<u32>,
}

/// Our key and its lease, while the wait is settled; a grant is the
/// revision of the answer that showed us our turn.
struct Entry {
    rpc: Rpc,
    lease: Lease,
    place: OwnKey,
    source: String,
    mode: LockMode,
    rules: Rules,
}

#[async_trait]
impl QueueEntry for Entry {
    type Grant = Grant;

    fn hold(self, grant: Grant) -> Box<dyn HeldLock> {
        Box::new(
            EtcdHeld::new(
                self.rpc,
                self.lease,
                self.place,
                grant.header_rev,
                self.source,
                self.mode,
            )
            .with_rules(self.rules, grant.mark)
            .with_trim(grant.trim)
            .with_slot(grant.slot),
        )
    }

    /// Revoking the lease deletes our key even if the delete was not sent.
    async fn give_back(self, _: Grant) -> Result<()> {
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

/// The keys ahead of ours, as one answer showed them, with the key's mark
/// when our request has an order.
pub(super) struct Ahead {
    pub kvs: Vec<KeyValue>,
    pub header_rev: i64,
    pub mark: MarkSeen,
    /// The history as the answer read it (what the release trims).
    pub trim: Trim,
}

impl Ahead {
    fn modes(&self) -> Vec<LockMode> {
        self.kvs
            .iter()
            .map(|kv| KeyData::mode_of(kv.value()))
            .collect()
    }

    fn grant(&self) -> Grant {
        Grant {
            header_rev: self.header_rev,
            mark: self.mark,
            trim: self.trim.clone(),
            slot: None,
        }
    }
}

pub(super) fn header_rev(h: Option<&etcd_client::ResponseHeader>) -> i64 {
    h.map(|h| h.revision()).unwrap_or(0)
}

pub(super) fn got(op: Option<&TxnOpResponse>) -> Vec<KeyValue> {
    match op {
        Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
        _ => Vec::new(),
    }
}

/// Puts our key unless it exists (a retried request), reading the queue
/// (and the mark, with an order) in the same transaction. Returns our place
/// and the keys ahead of it.
async fn enqueue(
    rpc: &Rpc,
    lease: &Lease,
    queue: &str,
    data: Vec<u8>,
    rules: &Rules,
) -> Result<(OwnKey, Ahead)> {
    let key = names::own_key(queue, lease.id);
    let mut put = vec![
        TxnOp::put(
            key.as_str(),
            data,
            Some(PutOptions::new().with_lease(lease.id)),
        ),
        TxnOp::get(queue, Some(by_create())),
    ];
    let mut found = vec![
        TxnOp::get(key.as_str(), None),
        TxnOp::get(queue, Some(by_create())),
    ];
    let marked = rules.mark_read();
    if let Some(mark) = marked.clone() {
        put.push(mark.clone());
        found.push(mark);
    }
    put.push(rules.trim_read());
    found.push(rules.trim_read());
    let txn = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then(put)
        .or_else(found);
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
        Ahead {
            kvs,
            header_rev,
            mark: marked
                .as_ref()
                .map_or_else(MarkSeen::default, |_| MarkSeen::of(&got(ops.get(2)))),
            trim: Trim::of(ops.get(2 + usize::from(marked.is_some()))),
        },
    ))
}

pub(super) fn unexpected(rpc: &Rpc, reason: &str) -> BackendError {
    BackendError::Protocol {
        server: rpc.server.clone(),
        reason: reason.to_string(),
    }
}

/// What a look found.
pub(super) enum Looked {
    Line(Ahead),
    /// Our key was deleted by a newer `--newest` request (its notice).
    Superseded(Rival),
}

/// Reads the keys ahead of ours (and the mark, with an order) in a
/// transaction that holds only while our key is still the one we put (its
/// create revision) on our lease; else it reads the notice a superseding
/// request leaves (`--newest`).
pub(super) async fn look(
    rpc: &Rpc,
    lease: &Lease,
    place: &OwnKey,
    rules: &Rules,
    seen_end: Vec<TxnOp>,
) -> Result<Looked> {
    let key = place.key.as_str();
    let mut then = vec![TxnOp::get(
        place.queue.as_str(),
        Some(older_than(place.rev)),
    )];
    let marked = rules.mark_read().is_some();
    then.extend(rules.mark_read());
    then.push(rules.trim_read());
    then.extend(seen_end);
    let txn = Txn::new()
        .when([
            Compare::create_revision(key, CompareOp::Equal, place.rev),
            Compare::lease(key, CompareOp::Equal, lease.id),
        ])
        .and_then(then)
        .or_else(rules.notice_read());
    let resp = rpc
        .call("reading the queue", |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    let ops = resp.op_responses();
    if !resp.succeeded() {
        if let Some(notice) = got(ops.first()).first() {
            return Ok(Looked::Superseded(names::notice_rival(notice.value())));
        }
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
    Ok(Looked::Line(Ahead {
        kvs: got(ops.first()),
        header_rev: header_rev(resp.header()),
        mark: match marked {
            true => MarkSeen::of(&got(ops.get(1))),
            false => MarkSeen::default(),
        },
        trim: Trim::of(ops.get(1 + usize::from(marked))),
    }))
}

/// waitDeletes: until the keys ahead let ours hold. The grant (the answer
/// that showed it, our key checked in it) once they do, unless our order is
/// then below the mark; Left when cancelled. `first` is what the arrival
/// saw. A `--newest` waiter also watches its own key: a newer request
/// deletes it, leaving a notice.
#[allow(clippy::too_many_arguments)]
async fn wait_turn(
    rpc: &Rpc,
    lease: &Lease,
    place: &OwnKey,
    rules: &Rules,
    mode: LockMode,
    first: Ahead,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Turn> {
    let mut ahead = first;
    let look_again = |before: &Ahead| {
        let seen_end = record_vanished(rules, before);
        async {
            tokio::select! {
                r = look(rpc, lease, place, rules, seen_end) => r.map(Some),
                _ = cancel.cancelled() => Ok(None),
            }
        }
    };
    loop {
        if cancel.is_cancelled() {
            return Ok(Turn::Left);
        }
        let modes = ahead.modes();
        if line::granted(mode, &modes) {
            // The enqueue's answer did not check our lease: look once more.
            let last = match look_again(&ahead).await? {
                None => return Ok(Turn::Left),
                Some(Looked::Superseded(by)) => return Ok(Turn::Superseded(by)),
                Some(Looked::Line(last)) => last,
            };
            if line::granted(mode, &last.modes()) {
                if let Some(mark) = rules::outdated(&rules.extras, last.mark.value) {
                    return Ok(Turn::Outdated(mark));
                }
                return Ok(Turn::Granted(last.grant()));
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
        let (watched, key_options) = match line::blocker(mode, &modes) {
            Some(i) => (ahead.kvs[i].key().to_vec(), options.clone()),
            None => (
                place.queue.clone().into_bytes(),
                options.clone().with_prefix(),
            ),
        };
        let own = rules.extras.newest.then(|| place.key.clone());
        let armed = rpc.call("watching the key ahead", |mut c| {
            let k = watched.clone();
            let key_options = key_options.clone();
            let own = own.clone();
            let options = options.clone();
            async move {
                let mut stream = c.watch(k, Some(key_options)).await?;
                if let Some(own) = own {
                    stream.watch(own, Some(options)).await?;
                }
                Ok(stream)
            }
        });
        let mut stream = tokio::select! {
            w = armed => w?,
            _ = cancel.cancelled() => return Ok(Turn::Left),
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
                _ = cancel.cancelled() => return Ok(Turn::Left),
            }
        }
        ahead = match look_again(&ahead).await? {
            None => return Ok(Turn::Left),
            Some(Looked::Superseded(by)) => return Ok(Turn::Superseded(by)),
            Some(Looked::Line(a)) => a,
        };
    }
}

/// For each holder `before` showed that ended without a record when the
/// next look shows it gone (its lease ran out: its lc-cli died, or lost the
/// service), its history entry: a transaction nested in the look's, which
/// writes it only if the key is gone and no entry is there (a release or a
/// reset writes its own with the delete). 0 round trips added.
fn record_vanished(rules: &Rules, before: &Ahead) -> Vec<TxnOp> {
    let holds = line::holders(&before.modes());
    before
        .kvs
        .iter()
        .zip(holds)
        .filter(|(_, held)| *held)
        .filter_map(|(kv, _)| {
            let ending = history::vanished(kv)?;
            let data = KeyData::decode(kv.value());
            let ended = history::Ended {
                data: data.as_ref(),
                token: kv.create_revision(),
                granted_ms: None,
                slot: None,
                ending,
                status: None,
                by: None,
            };
            let gone = Compare::create_revision(kv.key(), CompareOp::Equal, 0);
            Some(TxnOp::txn(ended.put_if_absent(&rules.history, Some(gone))))
        })
        .collect()
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
