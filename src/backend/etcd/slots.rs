//! Which slot a `--limit N` holder has (`LC_SLOT`, docs/fleet-slots.md).
//! The queue decides who holds (the N oldest keys, `line.rs`); a holder
//! then claims a slot: the key `PREFIX/NAME.lc-cli/slot.<i>` on its own
//! lease, its value the holder's queue key. One transaction, sent once the
//! grant is seen: while our key is still ours, it tries slot 0, 1, ... in
//! nested transactions, each put only if the slot is free, and the first
//! that is taken is ours (the lowest free one). A slot is free when its key
//! is absent, or when the queue key it names is gone (a holder reset or
//! unlocked, whose slot key was left on its lease): the latter is known
//! only from a read, which the innermost branch makes for the next try.
//!
//! Never two holders of one slot: a slot key is put only where none is or
//! where its holder's queue key is gone, in one transaction; it goes with
//! its holder's lease (a crash frees both at once) or is deleted with the
//! queue key (a release); a kept hold moves it onto the kept key's lease.
//! Etcd's own semaphore recipe (and `etcdctl`) know no slots: they count
//! the queue only, as before.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use super::lease::Lease;
use super::names::OwnKey;
use super::queue::unexpected;
use super::rpc::Rpc;
use crate::backend::{BackendError, LockMode, Result};

/// The most slots a holder is told on etcd (the most `--slots` names): a
/// `--limit N` above it holds as before, without `LC_SLOT`.
pub(super) const MAX_TOLD: u32 = 64;

/// How many times the slots may change under one claim.
const ROUNDS: usize = 20;

/// How many slots a grant in `mode` claims among: None where it claims none.
pub(super) fn count(mode: LockMode) -> Option<u32> {
    match mode {
        LockMode::Limit(n) if n.get() <= MAX_TOLD => Some(n.get()),
        _ => None,
    }
}

/// The range of the key's slot keys (`state`: `names::state_prefix`).
pub(super) fn prefix(state: &str) -> String {
    format!("{state}slot.")
}

pub(super) fn key(state: &str, i: u32) -> String {
    format!("{state}slot.{i}")
}

/// A slot key found by a scan: its lock name and its index.
pub(super) fn owner_of<'a>(scan_prefix: &str, key: &'a str) -> Option<(&'a str, u32)> {
    let rest = key.strip_prefix(scan_prefix)?;
    let (state, i) = rest.rsplit_once("/slot.")?;
    let name = state.strip_suffix(".lc-cli")?;
    let i = i.parse().ok()?;
    (!name.is_empty() && !name.contains('/')).then_some((name, i))
}

/// What a slot's value says to show: its name in a named pool, else its
/// index.
pub(super) fn shown(i: u32, names: &[String]) -> String {
    names
        .get(i as usize)
        .cloned()
        .unwrap_or_else(|| i.to_string())
}

/// The slot keys as last read: by index, the key if present.
type Seen = Vec<Option<KeyValue>>;

/// Whether slot `i` may be taken, as `seen` shows it.
fn free_when(state: &str, i: u32, seen: &Seen) -> Vec<Compare> {
    let k = key(state, i);
    match seen.get(i as usize).and_then(Option::as_ref) {
        None => vec![Compare::create_revision(k, CompareOp::Equal, 0)],
        Some(kv) => vec![
            Compare::mod_revision(k, CompareOp::Equal, kv.mod_revision()),
            Compare::create_revision(kv.value().to_vec(), CompareOp::Equal, 0),
        ],
    }
}

/// Claims the lowest free of `n` slots for the holder `place` on `lease`;
/// `open(i)`: the put of our history entry naming slot `i`, in the branch
/// that takes it. The slot, and the revision of the transaction that took
/// it (0: taken by an earlier attempt whose answer was lost).
pub(super) async fn claim(
    rpc: &Rpc,
    lease: &Lease,
    place: &OwnKey,
    state: &str,
    n: u32,
    open: &(dyn Fn(u32) -> TxnOp + Sync),
) -> Result<(u32, i64)> {
    let mut seen: Seen = vec![None; n as usize];
    for _ in 0..ROUNDS {
        let read = TxnOp::get(prefix(state), Some(GetOptions::new().with_prefix()));
        let mut chain: Option<Txn> = None;
        for i in (0..n).rev() {
            let otherwise = match chain.take() {
                Some(t) => TxnOp::txn(t),
                None => read.clone(),
            };
            let put = TxnOp::put(
                key(state, i),
                place.key.as_str(),
                Some(PutOptions::new().with_lease(lease.id)),
            );
            chain = Some(
                Txn::new()
                    .when(free_when(state, i, &seen))
                    .and_then([put, open(i)])
                    .or_else([otherwise]),
            );
        }
        let chain = chain.ok_or_else(|| unexpected(rpc, "a --limit of 0 slots"))?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                place.key.as_str(),
                CompareOp::Equal,
                place.rev,
            )])
            .and_then([TxnOp::txn(chain)]);
        let resp = rpc
            .call("claiming a slot", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        if !resp.succeeded() {
            return Err(BackendError::Refused {
                server: rpc.server.clone(),
                reason: format!("{} was gone before it could take a slot", place.key),
            });
        }
        let mut ops = resp.op_responses();
        let mut i = 0;
        loop {
            match ops.first() {
                Some(TxnOpResponse::Txn(t)) if t.succeeded() => {
                    return Ok((i, super::queue::header_rev(resp.header())))
                }
                Some(TxnOpResponse::Txn(t)) => {
                    ops = t.op_responses();
                    i += 1;
                }
                Some(TxnOpResponse::Get(g)) => {
                    seen = vec![None; n as usize];
                    for kv in g.kvs() {
                        let Some(j) = kv
                            .key_str()
                            .ok()
                            .and_then(|k| k.rsplit_once("slot."))
                            .and_then(|(_, j)| j.parse::<u32>().ok())
                        else {
                            continue;
                        };
                        // Ours already (a retried request that went through).
                        if kv.value() == place.key.as_bytes() {
                            return Ok((j, 0));
                        }
                        if let Some(s) = seen.get_mut(j as usize) {
                            *s = Some(kv.clone());
                        }
                    }
                    break;
                }
                _ => return Err(unexpected(rpc, "an unreadable answer to a slot claim")),
            }
        }
    }
    Err(unexpected(
        rpc,
        &format!(
            "the slots of {} kept changing under {ROUNDS} claims",
            place.queue
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_keys_are_no_queue_keys() {
        let state = super::super::names::state_prefix("locks", "pool");
        assert_eq!(key(&state, 2), "locks/pool.lc-cli/slot.2");
        assert_eq!(
            owner_of("locks/", "locks/pool.lc-cli/slot.2"),
            Some(("pool", 2))
        );
        assert_eq!(owner_of("", "pool.lc-cli/slot.0"), Some(("pool", 0)));
        assert_eq!(owner_of("", "pool/slot.0"), None);
        assert_eq!(
            super::super::names::lock_name_of("", "pool.lc-cli/slot.0"),
            None
        );
        assert_eq!(count(LockMode::limit(3)), Some(3));
        assert_eq!(count(LockMode::limit(65)), None);
        assert_eq!(count(LockMode::Shared), None);
        assert_eq!(shown(1, &["a".into(), "b".into()]), "b");
        assert_eq!(shown(1, &[]), "1");
    }
}
