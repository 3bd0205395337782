//! Which slot a `--limit N` holder has (`LC_SLOT`, docs/fleet-slots.md).
//!
//! Curator's `InterProcessSemaphoreV2` decides who holds (`semaphore.rs`:
//! at most N leases under `ROOT/KEY/leases`); its leases carry no slot, and
//! nothing may be added under `leases` (Curator counts every child there)
//! or `locks` (its acquirers' mutex). A holder's slot is an ephemeral child
//! of the key's own node, `ROOT/KEY/_c_lc-slot-<i>`, whose data is the
//! name of the lease it belongs to. No Curator recipe lists the key's node
//! of a semaphore, and lc-cli's walks skip `_c_lc-` children (the mark,
//! the history).
//!
//! The claim is made by the acquirer that holds the acquirers' mutex and
//! has just seen room among the leases, in one transaction that also
//! writes `slot=<i>` into its lease's data and gives the mutex to the next
//! acquirer. So lc-cli's claims follow one another, each seeing the slots
//! as they are (only releases change them meanwhile), and the one listing
//! of the key's node, sent with the leases' last listing (no round trip of
//! its own), tells the lowest free slot. The create is create-if-absent:
//! whatever races, never two nodes of one slot.
//!
//! A free slot always exists: at most N leases are granted, ours among
//! them; a slot node is made only by a granted holder, in the transaction
//! that also checks its lease is there, and it goes in the same
//! transaction as that lease (a release, `unlock`, `reset`) or with the
//! same session (a crash: ZooKeeper deletes a session's ephemeral nodes
//! together when it expires it). So the other slot nodes belong to at most
//! N-1 other leases. A slot node whose lease is gone without it (a lease
//! deleted by hand, or by a `reset` that could not write its transaction)
//! is *stale*: a claimer that finds every slot taken reads them and takes
//! the lowest stale one (its delete compared with the version read, in
//! the claim's transaction).

use std::time::Duration;

use zookeeper_client as zk;

use super::keys::{pipelined, send_get};
use super::names::{self, NodeData, NodeKind};
use super::queue::QueueNode;
use super::session::{connection_lost, Session};
use crate::backend::{BackendError, Result};

/// The start of every slot node's name: `_c_lc-slot-0`, `_c_lc-slot-1`...
pub(super) const PREFIX: &str = "_c_lc-slot-";

/// How many times the slots may change under one claim.
const ROUNDS: usize = 20;

/// The slot node `i` of the key whose lock node is `dir`.
pub(super) fn path(dir: &str, i: u32) -> String {
    format!("{dir}/{PREFIX}{i}")
}

/// The index of a slot node's name; None for another child.
pub(super) fn index_of(child: &str) -> Option<u32> {
    let digits = child.strip_prefix(PREFIX)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

/// The lowest of `0..n` that no child of the key's node names.
fn lowest_free(children: &[String], n: u32) -> Option<u32> {
    let taken: Vec<u32> = children.iter().filter_map(|c| index_of(c)).collect();
    (0..n).find(|i| !taken.contains(i))
}

/// The slot `slot=` in a lease's data says (lc-cli's lease with a slot).
pub(super) fn of_lease(data: &[u8]) -> Option<u32> {
    NodeData::decode(data)?.fields.get("slot")?.parse().ok()
}

/// What a claim needs.
pub(super) struct Claim<'a> {
    /// The key's lock node (the slots' parent).
    pub dir: &'a str,
    /// Our lease.
    pub lease: &'a QueueNode,
    /// Our lease's data as created (`slot=` is added to its fields).
    pub data: &'a NodeData,
    /// Our node in the acquirers' queue, deleted in the claim's
    /// transaction: the next acquirer's turn.
    pub mutex: &'a str,
}

/// A claim's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Claimed {
    /// This slot is ours, and the mutex given back.
    Slot(u32),
    /// Our lease was gone (deleted from outside): nothing claimed.
    LeaseGone,
}

/// One operation of the claim's transaction, to tell which one failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Steal,
    Create,
    SetLease,
    GiveMutex,
}

/// Claims the lowest free of `n` slots for our lease (see the module's
/// docs). `children`: the key's node as listed with the leases' last
/// listing; `leases`: that listing (the leases there now, but for some
/// that left since: no acquirer but us can add one while we hold the
/// mutex).
pub(super) async fn claim(
    s: &Session,
    c: &Claim<'_>,
    n: u32,
    mut children: Vec<String>,
    leases: &[String],
) -> Result<Claimed> {
    let deadline = tokio::time::Instant::now() + s.retry_for;
    let mut give_mutex = true;
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(s.acls);
    let mut round = 0;
    while round < ROUNDS {
        let (i, steal) = match lowest_free(&children, n) {
            Some(i) => (i, None),
            None => match stale(s, c.dir, n, leases).await? {
                Some((i, version)) => (i, Some(version)),
                None => {
                    return Err(BackendError::Other(format!(
                        "every one of the {n} slots of {} is held by a lease that is there, \
                         though ours was granted among at most {n} (a --limit that differs \
                         from another holder's?)",
                        c.dir
                    )))
                }
            },
        };
        let slot = path(c.dir, i);
        let mut data = c.data.clone();
        data.fields.push("slot", &i.to_string());
        let data = data.encode();
        let client = s.client()?;
        let mut multi = client.new_multi_writer();
        let mut ops = Vec::new();
        let mut added = Ok(());
        if let Some(version) = steal {
            ops.push(Op::Steal);
            added = added.and_then(|_| multi.add_delete(&slot, Some(version)));
        }
        ops.push(Op::Create);
        added = added.and_then(|_| multi.add_create(&slot, c.lease.name.as_bytes(), &ephemeral));
        ops.push(Op::SetLease);
        added = added.and_then(|_| multi.add_set_data(&c.lease.path, &data, None));
        if give_mutex {
            ops.push(Op::GiveMutex);
            added = added.and_then(|_| multi.add_delete(c.mutex, None));
        }
        if let Err(e) = added {
            return Err(s.error(&format!("claiming {slot}"), e));
        }
        match multi.commit().await {
            Ok(_) => return Ok(Claimed::Slot(i)),
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                match (ops.get(index).copied(), source) {
                    // Ours already: an attempt whose answer was lost.
                    (Some(Op::Create), zk::Error::NodeExists)
                        if ours(s, &slot, &c.lease.name).await? =>
                    {
                        return Ok(Claimed::Slot(i))
                    }
                    (Some(Op::SetLease), zk::Error::NoNode) => return Ok(Claimed::LeaseGone),
                    // Our mutex node deleted from outside: the next is in turn already.
                    (Some(Op::GiveMutex), zk::Error::NoNode) => {
                        give_mutex = false;
                        continue;
                    }
                    // Taken, freed or stolen meanwhile: look again.
                    (Some(Op::Create | Op::Steal), _) => {}
                    (_, e) => return Err(s.error(&format!("claiming {slot}"), e)),
                }
            }
            Err(zk::MultiWriteError::RequestFailed { source }) if connection_lost(&source) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(s.error(&format!("claiming {slot}"), source));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                // It may have gone through before the connection broke.
                if ours(s, &slot, &c.lease.name).await? {
                    return Ok(Claimed::Slot(i));
                }
                continue;
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                return Err(s.error(&format!("claiming {slot}"), source))
            }
        }
        round += 1;
        let dir = c.dir;
        children = match s.retry(|c| async move { c.list_children(dir).await }).await {
            Ok(children) => children,
            Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
        };
    }
    Err(BackendError::Unavailable {
        server: s.server.clone(),
        reason: format!(
            "the slots of {} kept changing under {ROUNDS} claims; try again",
            c.dir
        ),
    })
}

/// Whether the slot node at `slot` is our lease's.
async fn ours(s: &Session, slot: &str, lease: &str) -> Result<bool> {
    match s.retry(|c| async move { c.get_data(slot).await }).await {
        Ok((data, _)) => Ok(data == lease.as_bytes()),
        Err(zk::Error::NoNode) => Ok(false),
        Err(e) => Err(s.error(&format!("reading {slot}"), e)),
    }
}

/// The lowest slot whose node names a lease not among `leases`, and that
/// node's version; None when every slot's lease is there.
async fn stale(s: &Session, dir: &str, n: u32, leases: &[String]) -> Result<Option<(u32, i32)>> {
    let paths: Vec<String> = (0..n).map(|i| path(dir, i)).collect();
    let got = pipelined(s, &paths, send_get, "reading").await?;
    Ok(got.into_iter().enumerate().find_map(|(i, got)| {
        let (data, stat) = got?;
        let lease = String::from_utf8_lossy(&data);
        (!leases.iter().any(|l| *l == lease)).then_some((i as u32, stat.version))
    }))
}

/// The slot node of the lease at `lease` (whose data is `data`), for those
/// who end a hold from outside (`unlock`, `reset`): its path, when the
/// lease's data names a slot and that slot's node names the lease.
pub(super) async fn of_node(s: &Session, lease: &str, data: &[u8]) -> Option<String> {
    let i = of_lease(data)?;
    let (leases, name) = lease.rsplit_once('/')?;
    let dir = leases.rsplit_once('/')?.0;
    let slot = path(dir, i);
    ours(s, &slot, name).await.ok()?.then_some(slot)
}

/// Deletes the queue node `node` from outside without its history entry
/// (which could not be written): a lease with its slot node, in one
/// transaction. True when this deleted the node.
pub(super) async fn delete_with_slot(s: &Session, node: &str) -> Result<bool> {
    let lease = matches!(
        node.rsplit('/').next().and_then(names::parse),
        Some((NodeKind::Lease, _))
    );
    let slot = match lease {
        true => match s.retry(|c| async move { c.get_data(node).await }).await {
            Ok((data, _)) => of_node(s, node, &data).await,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(_) => None,
        },
        false => None,
    };
    let slot = slot.as_deref();
    let deleted = s
        .retry(|c| async move {
            let mut multi = c.new_multi_writer();
            multi.add_delete(node, None)?;
            if let Some(slot) = slot {
                multi.add_delete(slot, None)?;
            }
            multi.commit().await.map_err(zk::Error::from)
        })
        .await;
    match deleted {
        Ok(_) => Ok(true),
        // The node gone, or (with a slot) the slot gone meanwhile: the node alone.
        Err(zk::Error::NoNode) if slot.is_some() => {
            match s.retry(|c| async move { c.delete(node, None).await }).await {
                Ok(()) => Ok(true),
                Err(zk::Error::NoNode) => Ok(false),
                Err(e) => Err(s.error(&format!("deleting {node}"), e)),
            }
        }
        Err(zk::Error::NoNode) => Ok(false),
        Err(e) => Err(s.error(&format!("deleting {node}"), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::zk::names::Mode;

    #[test]
    fn slot_nodes_are_no_contenders() {
        assert_eq!(path("/lc-cli/pool", 2), "/lc-cli/pool/_c_lc-slot-2");
        assert_eq!(index_of("_c_lc-slot-0"), Some(0));
        assert_eq!(index_of("_c_lc-slot-17"), Some(17));
        for other in [
            "_c_lc-slot-",
            "_c_lc-slot-01",
            "_c_lc-slot-x",
            "_c_lc-mark",
            "leases",
        ] {
            assert_eq!(index_of(other), None, "{other}");
        }
        for i in [0, 9, 63, 4096] {
            let name = format!("{PREFIX}{i}");
            // lc-cli's walks skip it, no queue takes it for a contender,
            // no key can be it, and Curator would sort it after every
            // sequence number.
            assert!(names::is_extra(&name));
            assert_eq!(names::parse(&name), None);
            assert!(names::key_problem(&name).is_some());
            assert!(name.as_str() > "9999999999");
        }
    }

    #[test]
    fn the_lowest_free_slot() {
        let kids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(lowest_free(&kids(&["locks", "leases"]), 3), Some(0));
        let taken = kids(&["leases", "_c_lc-slot-0", "_c_lc-slot-2", "_c_lc-mark"]);
        assert_eq!(lowest_free(&taken, 3), Some(1));
        let full = kids(&["_c_lc-slot-1", "_c_lc-slot-0", "_c_lc-slot-2"]);
        assert_eq!(lowest_free(&full, 3), None);
        // A slot beyond N (another N, once) does not count.
        assert_eq!(lowest_free(&kids(&["_c_lc-slot-5"]), 1), Some(0));
    }

    #[test]
    fn a_leases_slot() {
        let mut d = NodeData::new(Mode::Queue, "ci").with_limit(Some(3));
        assert_eq!(of_lease(&d.encode()), None);
        d.fields.push("slot", "2");
        assert_eq!(of_lease(&d.encode()), Some(2));
        assert_eq!(of_lease(b"10.0.0.1"), None);
    }
}
