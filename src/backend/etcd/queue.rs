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
use super::history::{open_alone, Opened, Trim};
use super::lease::{Lease, LeaseEnd};
use super::names::{self, KeyData, OwnKey};
use super::rpc::Rpc;
use super::seen::Seen;
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
    // A --limit holder takes its slot before anything runs (the claim
    // opens its history entry, naming the slot); a grant whose answer
    // opened no entry (one beside other holders at arrival) opens it now.
    let outcome = match (outcome, slots::count(mode)) {
        (Ok(Turn::Granted(mut grant)), Some(n)) => {
            let granted_ms = grant
                .opened
                .map_or_else(super::history::now_ms, |o| o.granted_ms);
            let open = |i: u32| {
                let slot = slots::shown(i, &rules.extras.slots);
                let value = rules.opened(place.rev, Some(slot), granted_ms);
                TxnOp::put(rules.entry_key(&place.key), value, None)
            };
            slots::claim(rpc, &lease, &place, &rules.state, n, &open)
                .await
                .map(|(slot, rev)| {
                    grant.slot = Some(slot);
                    grant.opened = Some(Opened { rev, granted_ms });
                    Turn::Granted(grant)
                })
        }
        (Ok(Turn::Granted(mut grant)), None) if grant.opened.is_none() => {
            open_alone(rpc, &place, &rules).await.map(|opened| {
                grant.opened = opened;
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
            // Found below the mark at its turn: an entry opened by the
            // answer that showed it goes (it ran nothing).
            let gone = entry.rules.entry_key(&entry.place.key);
            let _ = rpc
                .call("deleting our history entry", |mut c| {
                    let gone = gone.clone();
                    async move { c.delete(gone, None).await }
                })
                .await;
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
    /// Our history entry, where it was opened.
    opened: Option<Opened>,
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
            .with_slot(grant.slot)
            .with_opened(grant.opened),
        )
    }

    /// Revoking the lease deletes our key even if the delete was not sent.
    async fn give_back(self, _: Grant) -> Result<()> {
        self.withdraw().await;
        Ok(())
    }

    async fn withdraw(mut self) {
        let entry = self.rules.entry_key(&self.place.key);
        withdraw(&self.rpc, &mut self.lease, &self.place.key, &entry).await;
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
    /// Our entry, where this answer opened it.
    pub opened: Option<Opened>,
    /// The answers to what the look added (`Seen::ops`).
    pub tail: Vec<TxnOpResponse>,
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
            opened: self.opened,
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
    // Into an empty line, any request holds at once: our entry is opened
    // with our key (the line as it was before this transaction: every
    // compare of a transaction, nested ones too, reads the state before it).
    put.push(TxnOp::txn(
        Txn::new()
            .when([Compare::create_revision(queue, CompareOp::Equal, 0).with_prefix()])
            .and_then([TxnOp::put(
                rules.entry_key(&key),
                rules.opened(0, None, rules.since_ms),
                None,
            )]),
    ));
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
            opened: match ops.get(3 + usize::from(marked.is_some())) {
                Some(TxnOpResponse::Txn(t)) if resp.succeeded() && t.succeeded() => Some(Opened {
                    rev: header_rev,
                    granted_ms: rules.since_ms,
                }),
                _ => None,
            },
            tail: Vec::new(),
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
    open: Option<u64>,
) -> Result<Looked> {
    let key = place.key.as_str();
    let mut then = vec![TxnOp::get(
        place.queue.as_str(),
        Some(older_than(place.rev)),
    )];
    let marked = rules.mark_read().is_some();
    then.extend(rules.mark_read());
    then.push(rules.trim_read());
    let fixed = then.len();
    then.extend(seen_end);
    // The look that confirms our turn opens our entry (the turn, once
    // shown, stays ours while our key lives: `line::granted`).
    if let Some(granted_ms) = open {
        then.push(TxnOp::put(
            rules.entry_key(key),
            rules.opened(place.rev, None, granted_ms),
            None,
        ));
    }
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
        opened: open.map(|granted_ms| Opened {
            rev: header_rev(resp.header()),
            granted_ms,
        }),
        tail: ops.get(fixed..).map(<[_]>::to_vec).unwrap_or_default(),
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
    let mut seen = Seen::new(&rules.history);
    seen.update(&[], &ahead.kvs);
    let look_again = |seen: &Seen, open: Option<u64>| {
        let seen_end = seen.ops();
        async move {
            tokio::select! {
                r = look(rpc, lease, place, rules, seen_end, open) => r.map(Some),
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
            let last = match look_again(&seen, Some(super::history::now_ms())).await? {
                None => return Ok(Turn::Left),
                Some(Looked::Superseded(by)) => return Ok(Turn::Superseded(by)),
                Some(Looked::Line(last)) => last,
            };
            seen.update(&last.tail, &last.kvs);
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
        ahead = match look_again(&seen, None).await? {
            None => return Ok(Turn::Left),
            Some(Looked::Superseded(by)) => return Ok(Turn::Superseded(by)),
            Some(Looked::Line(a)) => a,
        };
        seen.update(&ahead.tail, &ahead.kvs);
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

/// Leaves the queue: deletes our key (and our history entry, where an
/// answer opened one: we ran nothing) and revokes the lease (which deletes
/// the key too, if the delete could not be sent).
pub(super) async fn withdraw(rpc: &Rpc, lease: &mut Lease, key: &str, entry: &str) {
    let txn = Txn::new().and_then([TxnOp::delete(key, None), TxnOp::delete(entry, None)]);
    let _ = rpc
        .call("deleting our key", |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await;
    let _ = lease.revoke().await;
}
