//! A request's arrival under the deploy-queue rules (issue 44), after the
//! transaction that put its key and read the line (and the mark): outdated
//! or superseded at once, it leaves; else, in one more transaction, it
//! deletes the older `--newest` waiters it ranks at or above, leaving each a
//! notice on its own lease (`superseded.<lease>`, naming us), and leaves a
//! `cancel.<lease>` notice on the lease of a `--cancel-running` holder. The
//! transaction holds only while our key, the head of the line (so every
//! victim still waits) and each key it touches are the ones read; else the
//! line is read again. A request without these rules skips all of it.

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp};

use super::lease::Lease;
use super::names::{self, KeyData, OwnKey};
use super::queue::{look, unexpected, Ahead, Looked, Turn};
use super::rpc::Rpc;
use super::rules::{self, Arrival, Other};
use crate::backend::fields::Extras;
use crate::backend::{LockRequest, Result};

/// How many times the line may change under an arrival's transaction.
const ROUNDS: usize = 20;

/// What a request keeps of its fields while it waits and holds.
pub(super) struct Rules {
    pub extras: Extras,
    /// Its field list, as written into its key's value.
    pub fields: String,
    pub source: String,
    /// The key's state range (`names::state_prefix`).
    pub state: String,
    /// The key's history range (`names::history_range`).
    pub history: String,
    pub lease: i64,
    /// When the request arrived (its key's `since_ms`), for its history.
    pub since_ms: u64,
    pub mode: crate::backend::LockMode,
}

impl Rules {
    pub(super) fn new(request: &LockRequest, prefix: &str, lease: i64) -> Rules {
        Rules {
            fields: if request.extras.is_empty() {
                String::new()
            } else {
                request.extras.encode()
            },
            extras: request.extras.clone(),
            source: request.source.clone(),
            state: names::state_prefix(prefix, &request.key),
            history: names::history_range(prefix, &request.key),
            lease,
            since_ms: 0,
            mode: request.mode,
        }
    }

    /// Our history entry (`history.rs`), named after our queue key `own`.
    pub(super) fn entry_key(&self, own: &str) -> String {
        super::history::entry_key(&self.history, own.as_bytes())
    }

    /// Our entry opened: granted at `granted_ms`; `token` 0 where it is
    /// put with our key (its create revision is then the token).
    pub(super) fn opened(&self, token: i64, slot: Option<String>, granted_ms: u64) -> Vec<u8> {
        let mut data =
            KeyData::new(&self.source, self.mode, false).with_fields(self.fields.clone());
        data.since_ms = self.since_ms;
        super::history::Ended {
            data: Some(&data),
            token,
            granted_ms: Some(granted_ms),
            slot,
            ending: None,
            status: None,
            by: None,
        }
        .encode()
    }

    pub(super) fn mark_key(&self) -> String {
        names::mark_key(&self.state)
    }

    /// The read of the mark, for a request with an order.
    pub(super) fn mark_read(&self) -> Option<TxnOp> {
        self.extras.order.map(|_| TxnOp::get(self.mark_key(), None))
    }

    /// The read of the history, in a transaction that may grant.
    pub(super) fn trim_read(&self) -> TxnOp {
        super::history::trim_read(&self.history)
    }

    /// The read of our superseded notice, for a `--newest` request.
    pub(super) fn notice_read(&self) -> Vec<TxnOp> {
        match self.extras.newest {
            true => vec![TxnOp::get(
                names::superseded_key(&self.state, self.lease),
                None,
            )],
            false => Vec::new(),
        }
    }

    /// The notice we leave, naming us.
    fn notice(&self) -> Vec<u8> {
        names::notice(&self.source, &self.fields)
    }
}

/// The mark as one answer read it: its value and the revision it was last
/// written at (0: no mark), which the release compares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct MarkSeen {
    pub value: Option<u64>,
    pub mod_rev: i64,
}

impl MarkSeen {
    pub(super) fn of(kvs: &[KeyValue]) -> MarkSeen {
        kvs.first().map_or(MarkSeen::default(), |kv| MarkSeen {
            value: names::mark_value(kv.value()),
            mod_rev: kv.mod_revision(),
        })
    }
}

/// What the arrival leaves the wait.
pub(super) enum Step {
    Wait(Ahead),
    Done(Turn),
}

fn others(kvs: &[KeyValue]) -> Vec<Other> {
    kvs.iter()
        .map(|kv| {
            let data = KeyData::decode(kv.value());
            Other {
                mode: KeyData::mode_of(kv.value()),
                extras: data
                    .map(|d| Extras::from_list(&d.list()))
                    .unwrap_or_default(),
            }
        })
        .collect()
}

fn rival(kv: &KeyValue) -> crate::backend::Rival {
    KeyData::decode(kv.value())
        .map(|d| d.rival())
        .unwrap_or_else(|| crate::backend::Rival {
            source: format!("lease {:x}", kv.lease()),
            ..Default::default()
        })
}

/// The arrival: `first` is what the enqueue read.
pub(super) async fn arrive(
    rpc: &Rpc,
    lease: &Lease,
    place: &OwnKey,
    rules: &Rules,
    first: Ahead,
) -> Result<Step> {
    if !rules.extras.queued() {
        return Ok(Step::Wait(first));
    }
    let mut ahead = first;
    for _ in 0..ROUNDS {
        let (victims, cancel) =
            match rules::on_arrival(&rules.extras, ahead.mark.value, &others(&ahead.kvs)) {
                Arrival::Outdated(mark) => return Ok(Step::Done(Turn::Outdated(mark))),
                Arrival::Superseded(i) => {
                    return Ok(Step::Done(Turn::Superseded(rival(&ahead.kvs[i]))))
                }
                Arrival::Join { victims, cancel } => (victims, cancel),
            };
        // A key off any lease (a kept hold) takes no notice.
        let on_lease = |i: &usize| ahead.kvs[*i].lease() != 0;
        let victims: Vec<usize> = victims.into_iter().filter(on_lease).collect();
        let cancel: Vec<usize> = cancel.into_iter().filter(on_lease).collect();
        if victims.is_empty() && cancel.is_empty() {
            return Ok(Step::Wait(ahead));
        }
        let same = |kv: &KeyValue| {
            Compare::create_revision(kv.key(), CompareOp::Equal, kv.create_revision())
        };
        let mut when = vec![Compare::create_revision(
            place.key.as_str(),
            CompareOp::Equal,
            place.rev,
        )];
        let mut ops = Vec::new();
        if !victims.is_empty() {
            // Still behind the same head: every victim still waits.
            when.push(same(&ahead.kvs[0]));
        }
        let notice = rules.notice();
        for (&i, superseded) in victims
            .iter()
            .map(|i| (i, true))
            .chain(cancel.iter().map(|i| (i, false)))
        {
            let kv = &ahead.kvs[i];
            when.push(same(kv));
            when.push(Compare::lease(kv.key(), CompareOp::Equal, kv.lease()));
            let key = if superseded {
                ops.push(TxnOp::delete(kv.key(), None));
                names::superseded_key(&rules.state, kv.lease())
            } else {
                names::cancel_key(&rules.state, kv.lease())
            };
            ops.push(TxnOp::put(
                key,
                notice.clone(),
                Some(PutOptions::new().with_lease(kv.lease())),
            ));
        }
        let txn = Txn::new().when(when).and_then(ops);
        let resp = rpc
            .call("superseding the older waiters", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        if resp.succeeded() {
            let gone: Vec<i64> = victims
                .iter()
                .map(|&i| ahead.kvs[i].create_revision())
                .collect();
            ahead.kvs.retain(|kv| !gone.contains(&kv.create_revision()));
            // The wait watches from the read on: a key ahead deleted since
            // is seen.
            return Ok(Step::Wait(ahead));
        }
        ahead = match look(rpc, lease, place, rules, Vec::new(), None).await? {
            Looked::Line(a) => a,
            Looked::Superseded(by) => return Ok(Step::Done(Turn::Superseded(by))),
        };
    }
    Err(unexpected(
        rpc,
        &format!(
            "the line of {} kept changing under {ROUNDS} arrivals",
            place.queue
        ),
    ))
}
