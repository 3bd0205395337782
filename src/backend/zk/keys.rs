//! `lc-cli keys` for ZooKeeper: every lock node under the root, its holder
//! and how many queue behind it; with `--waiters`, who they are.
//!
//! A lock node is a znode with queue children (`..lock-<10 digits>`, lc-cli's
//! or a Curator client's); its key is its path below the root. The walk asks
//! one getChildren per znode that is not a queue node and one getData per
//! holder (the head of a queue), nothing for waiters. The requests of one
//! level of the tree (and then those for the holders) are sent together and
//! their answers read in turn, so a wide tree costs a few round trips, not
//! one per znode.
//!
//! `since` is what the server can tell without the holder writing anything
//! at its grant (which would wake the waiter watching it): for a detached
//! hold, the time recorded in its data when the hold was taken; for any
//! other holder (lc-cli with a running command, a Curator client), the
//! creation time of its node on the server, i.e. when it joined the queue.
//! That is exactly when the hold began for a holder that found the key free;
//! for one that waited first, HELD also counts its wait.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, UNIX_EPOCH};

use zookeeper_client as zk;

use super::names::{self, Mode, NodeData, NodeKind, Turn};
use super::session::Session;
use crate::backend::{BackendError, KeyInfo, LockMode, Result, WaiterInfo};

/// At most this many requests in flight at once.
const BATCH: usize = 256;

/// A request already sent, its answer to come.
pub(super) type Reply<'a, T> =
    Pin<Box<dyn Future<Output = std::result::Result<T, zk::Error>> + Send + 'a>>;

fn send_list<'a>(c: &'a zk::Client, path: &'a str) -> Reply<'a, Vec<String>> {
    Box::pin(c.list_children(path))
}

pub(super) fn send_get<'a>(c: &'a zk::Client, path: &'a str) -> Reply<'a, (Vec<u8>, zk::Stat)> {
    Box::pin(c.get_data(path))
}

/// A lock node and its queue in the order it is served.
struct Lock {
    dir: String,
    queue: Vec<String>,
    /// It has a mark (`names::MARK`).
    mark: bool,
}

/// The lock nodes under the root: mutexes, read-write locks (several may
/// hold) and semaphores (their directories).
struct Walk {
    locks: Vec<Lock>,
    shared: Vec<Lock>,
    semaphores: Vec<String>,
}

async fn walk(s: &Session, root: &str) -> Result<Walk> {
    // The lock nodes, level by level.
    let mut locks = Vec::new();
    // Read-write locks (several may hold) and semaphores, looked at after.
    let mut shared = Vec::new();
    let mut semaphores = Vec::new();
    let mut level = vec![root.to_string()];
    while !level.is_empty() {
        let mut next = Vec::new();
        for batch in level.chunks(BATCH) {
            let listed = pipelined(s, batch, send_list, "listing").await?;
            for (dir, children) in batch.iter().zip(listed) {
                // None: deleted meanwhile (an emptied container).
                let Some(children) = children else { continue };
                let semaphore = dir != root && names::semaphore_parts(&children);
                let mut queue = Vec::new();
                let mark = children.iter().any(|c| c == names::MARK);
                for child in children {
                    if names::sequence_of(&child).is_some() {
                        queue.push(child);
                    } else if names::is_extra(&child) {
                        // The mark and the markers: no keys under them.
                    } else if !(semaphore
                        && (child == names::SEMAPHORE_LEASES || child == names::SEMAPHORE_LOCKS))
                    {
                        next.push(format!("{dir}/{child}"));
                    }
                }
                if semaphore {
                    semaphores.push(dir.clone());
                }
                // The root itself is no key.
                if !queue.is_empty() && dir != root {
                    let lock = Lock {
                        dir: dir.clone(),
                        queue: names::queue(queue),
                        mark,
                    };
                    if names::read_write_in_use(&lock.queue) {
                        shared.push(lock);
                    } else {
                        locks.push(lock);
                    }
                }
            }
        }
        level = next;
    }
    Ok(Walk {
        locks,
        shared,
        semaphores,
    })
}

pub(super) async fn list(s: &Session, root: &str) -> Result<Vec<KeyInfo>> {
    let Walk {
        locks,
        shared,
        semaphores,
    } = walk(s, root).await?;
    // Their holders.
    let mut out = Vec::with_capacity(locks.len());
    for batch in locks.chunks(BATCH) {
        let heads: Vec<String> = batch
            .iter()
            .map(|l| format!("{}/{}", l.dir, l.queue[0]))
            .collect();
        let data = pipelined(s, &heads, send_get, "reading").await?;
        // The marks, sent after the holders' reads: no more round trips.
        let marks: Vec<String> = batch
            .iter()
            .filter(|l| l.mark)
            .map(|l| super::rules::mark_path(&l.dir))
            .collect();
        let mut marks = pipelined(s, &marks, send_get, "reading")
            .await?
            .into_iter()
            .map(|got| got.and_then(|(data, _)| names::parse_mark(&data)));
        for (lock, got) in batch.iter().zip(data) {
            let mark = if lock.mark {
                marks.next().flatten()
            } else {
                None
            };
            let key = &lock.dir[root.len() + 1..];
            let found = match got {
                Some((data, stat)) => Some((data, stat, lock.queue.len() - 1)),
                // The holder left after the listing: look again.
                None => holder_of(s, &lock.dir).await?,
            };
            if let Some((data, stat, waiting)) = found {
                let mut info = holder_info(key, &data, stat.ctime, waiting);
                info.mark = mark;
                out.push(info);
            }
        }
    }
    for lock in &shared {
        out.extend(read_write_holders(s, root, lock).await?);
    }
    for dir in &semaphores {
        out.extend(semaphore_holders(s, root, dir).await?);
    }
    Ok(out)
}

/// Every queue node that waits, key by key in line order: behind a
/// mutex's head, a read-write lock's nodes that do not hold (a reader
/// behind a writer, every writer but the head), and a semaphore's
/// acquirers (in line for its mutex, then for a lease). Each node is read
/// once (the requests pipelined) for its source and arrival.
pub(super) async fn waiters(s: &Session, root: &str) -> Result<Vec<WaiterInfo>> {
    let Walk {
        mut locks,
        shared,
        semaphores,
    } = walk(s, root).await?;
    // (key, node path, mode) of each waiter, in line order.
    let mut wanted: Vec<(String, String, LockMode)> = Vec::new();
    locks.extend(shared);
    locks.sort_by(|a, b| a.dir.cmp(&b.dir));
    for lock in &locks {
        let key = lock.dir[root.len() + 1..].to_string();
        let kinds: Vec<NodeKind> = lock
            .queue
            .iter()
            .map(|n| names::parse(n).map_or(NodeKind::Mutex, |(k, _)| k))
            .collect();
        for (i, node) in lock.queue.iter().enumerate() {
            if names::turn(&kinds, i) == Turn::Holds {
                continue;
            }
            let mode = match kinds[i] {
                NodeKind::Read => LockMode::Shared,
                _ => LockMode::Exclusive,
            };
            wanted.push((key.clone(), format!("{}/{node}", lock.dir), mode));
        }
    }
    let parts: Vec<String> = semaphores
        .iter()
        .map(|d| format!("{d}/{}", names::SEMAPHORE_LOCKS))
        .collect();
    let listed = pipelined(s, &parts, send_list, "listing").await?;
    for ((dir, part), children) in semaphores.iter().zip(&parts).zip(listed) {
        let key = dir[root.len() + 1..].to_string();
        for node in names::queue(children.unwrap_or_default()) {
            // N from the node's data, below.
            wanted.push((key.clone(), format!("{part}/{node}"), LockMode::limit(2)));
        }
    }
    let paths: Vec<String> = wanted.iter().map(|w| w.1.clone()).collect();
    let mut data = Vec::with_capacity(paths.len());
    for batch in paths.chunks(BATCH) {
        data.extend(pipelined(s, batch, send_get, "reading").await?);
    }
    let mut out: Vec<WaiterInfo> = Vec::with_capacity(wanted.len());
    for ((key, _, mode), got) in wanted.into_iter().zip(data) {
        // Gone meanwhile: granted, or it gave up.
        let Some((data, stat)) = got else { continue };
        let place = match out.last() {
            Some(prev) if prev.key == key => prev.place + 1,
            _ => 0,
        };
        out.push(waiter_info(key, &data, stat.ctime, mode, place));
    }
    Ok(out)
}

/// A waiting node as `keys --waiters` shows it: lc-cli's data (source,
/// arrival, N), or a Curator client's as text, since its creation.
fn waiter_info(
    key: String,
    data: &[u8],
    ctime_ms: i64,
    mode: LockMode,
    place: usize,
) -> WaiterInfo {
    let fields = NodeData::decode(data).map(|d| d.fields).unwrap_or_default();
    let (source, since_ms, kept, mode) = match NodeData::decode(data) {
        Some(d) => {
            let mode = match (mode, d.limit) {
                (LockMode::Limit(_), Some(n)) => LockMode::limit(n.max(2)),
                (m, _) => m,
            };
            let since = if d.since_ms > 0 {
                d.since_ms
            } else {
                ctime(ctime_ms)
            };
            (d.source, since, Some(d.mode == Mode::Detached), mode)
        }
        None => (
            String::from_utf8_lossy(data).into_owned(),
            ctime(ctime_ms),
            None,
            mode,
        ),
    };
    WaiterInfo {
        key,
        source,
        peer: None,
        since: (since_ms > 0).then(|| UNIX_EPOCH + Duration::from_millis(since_ms)),
        mode,
        place,
        kept,
        identity: None,
        fields,
    }
}

/// Every holder of a read-write lock: the readers at the head together, or
/// the writer there.
async fn read_write_holders(s: &Session, root: &str, lock: &Lock) -> Result<Vec<KeyInfo>> {
    let key = &lock.dir[root.len() + 1..];
    let kinds: Vec<NodeKind> = lock
        .queue
        .iter()
        .map(|n| names::parse(n).map_or(NodeKind::Mutex, |(k, _)| k))
        .collect();
    let holding: Vec<usize> = (0..kinds.len())
        .filter(|&i| names::turn(&kinds, i) == Turn::Holds)
        .collect();
    let paths: Vec<String> = holding
        .iter()
        .map(|&i| format!("{}/{}", lock.dir, lock.queue[i]))
        .collect();
    let data = pipelined(s, &paths, send_get, "reading").await?;
    let waiting = lock.queue.len() - holding.len();
    Ok(holding
        .iter()
        .zip(data)
        .filter_map(|(&i, got)| {
            let (data, stat) = got?;
            let mut info = holder_info(key, &data, stat.ctime, waiting);
            if kinds[i] == NodeKind::Read {
                info.mode = LockMode::Shared;
            }
            Some(info)
        })
        .collect())
}

/// Every lease of a semaphore, and how many acquirers queue for one. N is
/// what lc-cli's nodes record; a semaphore of Curator clients only records
/// none, and shows the number of leases held.
async fn semaphore_holders(s: &Session, root: &str, dir: &str) -> Result<Vec<KeyInfo>> {
    let key = &dir[root.len() + 1..];
    let parts = [
        format!("{dir}/{}", names::SEMAPHORE_LEASES),
        format!("{dir}/{}", names::SEMAPHORE_LOCKS),
    ];
    let listed = pipelined(s, &parts, send_list, "listing").await?;
    let mut listed = listed
        .into_iter()
        .map(|l| names::queue(l.unwrap_or_default()));
    let leases = listed.next().unwrap_or_default();
    let waiting = listed.next().unwrap_or_default().len();
    let paths: Vec<String> = leases.iter().map(|l| format!("{}/{l}", parts[0])).collect();
    let data: Vec<(Vec<u8>, zk::Stat)> = pipelined(s, &paths, send_get, "reading")
        .await?
        .into_iter()
        .flatten()
        .collect();
    let n = data
        .iter()
        .find_map(|(d, _)| NodeData::decode(d).and_then(|d| d.limit))
        .unwrap_or(data.len() as u32);
    // Past the first N: the lease of the acquirer holding the mutex, waiting
    // for room. That acquirer is in `locks` too: counted once.
    let holding = data.len().min(n as usize);
    let waiting = waiting.max(data.len() - holding);
    Ok(data[..holding]
        .iter()
        .map(|(d, stat)| {
            let mut info = holder_info(key, d, stat.ctime, waiting);
            info.mode = LockMode::limit(n.max(2));
            info
        })
        .collect())
}

/// Sends one request per path at once, then collects the answers in order:
/// None for a node that does not exist. A request lost with the connection
/// is sent again (as [`Session::retry`] does).
pub(super) async fn pipelined<T>(
    s: &Session,
    paths: &[String],
    send: for<'a> fn(&'a zk::Client, &'a str) -> Reply<'a, T>,
    doing: &str,
) -> Result<Vec<Option<T>>> {
    let client = s.client()?;
    let pending: Vec<Reply<'_, T>> = paths.iter().map(|p| send(&client, p)).collect();
    let mut out = Vec::with_capacity(paths.len());
    for (path, reply) in paths.iter().zip(pending) {
        let answer = match reply.await {
            Err(e) if super::session::connection_lost(&e) => {
                let p = path.as_str();
                s.retry(|c| async move { send(&c, p).await }).await
            }
            other => other,
        };
        out.push(match answer {
            Ok(t) => Some(t),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(s.error(&format!("{doing} {path}"), e)),
        });
    }
    Ok(out)
}

/// The holder of the lock node `dir` one request at a time, for when the
/// head of the queue went away between the listing and the read: its data,
/// stat and how many wait behind it; None when nobody holds it now.
async fn holder_of(s: &Session, dir: &str) -> Result<Option<(Vec<u8>, zk::Stat, usize)>> {
    // Each round sees a holder leave; a few rounds at most.
    for _ in 0..10 {
        let queue = match s.retry(|c| async move { c.list_children(dir).await }).await {
            Ok(children) => names::queue(children),
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
        };
        let Some(head) = queue.first() else {
            return Ok(None);
        };
        let node = format!("{dir}/{head}");
        let n = node.as_str();
        match s.retry(|c| async move { c.get_data(n).await }).await {
            Ok((data, stat)) => return Ok(Some((data, stat, queue.len() - 1))),
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(s.error(&format!("reading {node}"), e)),
        }
    }
    Err(BackendError::Other(format!(
        "the holder of {dir} kept changing; try again"
    )))
}

/// What `keys` shows for a holder node: its data (lc-cli's, or a Curator
/// client's, shown as text, by default its IP address), its creation time
/// on the server (ms since the epoch), and how many wait behind it.
fn holder_info(key: &str, data: &[u8], ctime_ms: i64, waiting: usize) -> KeyInfo {
    // A Curator client's node carries no mode: held by a live session, but
    // whether it runs a command is not known.
    let fields = NodeData::decode(data).map(|d| d.fields).unwrap_or_default();
    let expires = NodeData::decode(data)
        .and_then(|d| d.expires_ms)
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
    let (source, since_ms, kept) = match NodeData::decode(data) {
        Some(d) if d.mode == Mode::Detached && d.since_ms > 0 => (d.source, d.since_ms, Some(true)),
        Some(d) => {
            let kept = Some(d.mode == Mode::Detached);
            (d.source, ctime(ctime_ms), kept)
        }
        None => (
            String::from_utf8_lossy(data).into_owned(),
            ctime(ctime_ms),
            None,
        ),
    };
    KeyInfo {
        identity: None,
        key: key.to_string(),
        source,
        peer: None,
        since: (since_ms > 0).then(|| UNIX_EPOCH + Duration::from_millis(since_ms)),
        waiting,
        kept,
        mode: crate::backend::LockMode::Exclusive,
        token: None,
        expires,
        fields,
        mark: None,
    }
}

fn ctime(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn ms(t: SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
    }

    #[test]
    fn detached_hold_since_its_recorded_time() {
        let mut d = NodeData::new(Mode::Detached, "ops1");
        d.since_ms = 1_700_000_000_123;
        let k = holder_info("deploy/prod", &d.encode(), 1_600_000_000_000, 2);
        assert_eq!(k.key, "deploy/prod");
        assert_eq!(k.source, "ops1");
        assert_eq!(k.peer, None);
        assert_eq!(k.waiting, 2);
        assert_eq!(ms(k.since.unwrap()), 1_700_000_000_123);
    }

    #[test]
    fn running_holder_since_its_node_was_created() {
        let mut d = NodeData::new(Mode::Queue, "ci-runner");
        d.since_ms = 1_700_000_000_000;
        let k = holder_info("k", &d.encode(), 1_700_000_000_500, 0);
        assert_eq!(k.source, "ci-runner");
        assert_eq!(ms(k.since.unwrap()), 1_700_000_000_500);
    }

    #[test]
    fn curator_holder_shows_its_data_as_text() {
        let k = holder_info("c/k", b"10.0.0.1", 1_700_000_000_000, 1);
        assert_eq!(k.source, "10.0.0.1");
        assert_eq!(ms(k.since.unwrap()), 1_700_000_000_000);
        assert_eq!(holder_info("c/k", b"", 0, 0).since, None);
    }
}
