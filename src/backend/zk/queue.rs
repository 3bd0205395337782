//! The fair queue: an ephemeral sequential node per waiter, served in
//! sequence order, each waiter watching only its predecessor.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::held::ZkHeld;
use super::names::{self, Mode, NodeData};
use super::session::{Gone, OwnWatch, Session};
use crate::backend::{Acquired, BackendError, LockRequest, Result, WaitProgress};

pub async fn acquire(
    s: &Arc<Session>,
    root: &str,
    request: &LockRequest,
    cancel: CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Acquired> {
    let dir = names::lock_dir(root, &request.key);
    let data = NodeData::new(Mode::Queue, &request.source).encode();
    let name = match create_node(s, &dir, &data).await {
        Ok(name) => name,
        Err(e) => {
            s.close().await;
            return Err(e);
        }
    };
    let place = Place::new(dir, name);
    let node = place.path.clone();
    match wait_turn(s, &place, request.nonblock, &cancel, progress).await {
        // A grant that raced with the cancellation is given back.
        Ok(Some(_)) if cancel.is_cancelled() => {
            withdraw(s, &node).await;
            Ok(Acquired::Cancelled)
        }
        Ok(Some((czxid, own_watch))) => Ok(Acquired::Held(Box::new(ZkHeld::new(
            s.clone(),
            node,
            czxid,
            own_watch,
            request.source.clone(),
        )))),
        Ok(None) => {
            withdraw(s, &node).await;
            Ok(if cancel.is_cancelled() {
                Acquired::Cancelled
            } else {
                Acquired::Busy
            })
        }
        Err(e) => {
            withdraw(s, &node).await;
            Err(e)
        }
    }
}

/// Creates our queue node (and the lock node and its ancestors, as
/// containers, as Curator does). After a connection loss the node is looked
/// for by its unique prefix before creating another. Returns its name.
async fn create_node(s: &Session, dir: &str, data: &[u8]) -> Result<String> {
    let prefix = names::new_prefix();
    let path = format!("{dir}/{prefix}");
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(s.acls);
    let container = zk::CreateMode::Container.with_acls(s.acls);
    let deadline = tokio::time::Instant::now() + s.retry_for;
    // Each round either creates, finds, or makes the parents: bounded, since
    // a container reaped under us is the only way to see NoNode twice.
    for _ in 0..1000 {
        let client = s.client()?;
        match client.create(&path, data, &ephemeral).await {
            Ok((_stat, seq)) => return Ok(format!("{prefix}{seq}")),
            Err(zk::Error::NoNode) => {
                if let Err(e) = s
                    .retry(|c| {
                        let container = container.clone();
                        async move { c.mkdir(dir, &container).await }
                    })
                    .await
                {
                    return Err(s.error(&format!("creating {dir}"), e));
                }
            }
            Err(zk::Error::ConnectionLoss) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                match s.retry(|c| async move { c.list_children(dir).await }).await {
                    Ok(children) => {
                        if let Some(found) = children.into_iter().find(|c| c.starts_with(&prefix)) {
                            return Ok(found);
                        }
                    }
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
                }
            }
            Err(e) => return Err(s.error(&format!("creating a node in {dir}"), e)),
        }
    }
    Err(BackendError::Other(format!(
        "could not create a node in {dir}"
    )))
}

/// Our node in the queue: the lock node it is under, its name there, and
/// its full path.
struct Place {
    dir: String,
    name: String,
    path: String,
}

impl Place {
    fn new(dir: String, name: String) -> Place {
        let path = format!("{dir}/{name}");
        Place { dir, name, path }
    }
}

/// Waits until our node is first. Some((czxid, own watch)) when it is;
/// None when we must leave (cancelled, or `nonblock` and not first).
async fn wait_turn(
    s: &Session,
    place: &Place,
    nonblock: bool,
    cancel: &CancellationToken,
    progress: &(dyn Fn(WaitProgress) + Send + Sync),
) -> Result<Option<(i64, OwnWatch)>> {
    let (dir, name, node) = (place.dir.as_str(), place.name.as_str(), place.path.as_str());
    let Some((stat, mut own_watch)) = s.watch_own(node).await? else {
        return Err(gone(s, node));
    };
    loop {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        let children = match s.retry(|c| async move { c.list_children(dir).await }).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Err(gone(s, node)),
            Err(e) => return Err(s.error(&format!("listing {dir}"), e)),
        };
        let queue = names::queue(children);
        let Some(ahead) = queue.iter().position(|n| n == name) else {
            return Err(gone(s, node));
        };
        progress(WaitProgress {
            ahead: Some(ahead.saturating_sub(1)),
        }); // not the holder
        if ahead == 0 {
            return Ok(Some((stat.czxid, own_watch)));
        }
        if nonblock {
            return Ok(None);
        }
        // One request both registers the watch and checks that the
        // predecessor still exists: a deletion in between cannot be missed.
        let predecessor = format!("{dir}/{}", queue[ahead - 1]);
        let pred = predecessor.as_str();
        let watch = match s
            .retry(|c| async move { c.get_and_watch_data(pred).await })
            .await
        {
            Ok((_, _, watch)) => watch,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(s.error(&format!("watching {predecessor}"), e)),
        };
        tokio::select! {
            event = watch.changed() => {
                if event.session_state == zk::SessionState::Expired {
                    return Err(expired(s));
                }
            }
            event = &mut own_watch => {
                match event.event_type {
                    zk::EventType::NodeDeleted => return Err(gone(s, node)),
                    zk::EventType::Session => return Err(expired(s)),
                    _ => match s.watch_own(node).await? {
                        Some((_, w)) => own_watch = w,
                        None => return Err(gone(s, node)),
                    },
                }
            }
            _ = cancel.cancelled() => return Ok(None),
            gone = s.until_gone() => {
                return Err(match gone {
                    Gone::Expired => expired(s),
                    _ => BackendError::Unavailable {
                        server: s.server.clone(),
                        reason: format!(
                            "no contact with ZooKeeper for longer than the session timeout ({:?}) while waiting",
                            s.retry_for
                        ),
                    },
                })
            }
        }
    }
}

fn gone(s: &Session, node: &str) -> BackendError {
    if s.is_expired() {
        return expired(s);
    }
    BackendError::Refused {
        server: s.server.clone(),
        reason: format!("our place in the queue ({node}) was deleted (a reset by source?)"),
    }
}

fn expired(s: &Session) -> BackendError {
    BackendError::Unavailable {
        server: s.server.clone(),
        reason: "the ZooKeeper session expired while waiting".into(),
    }
}

/// Leaves the queue: deletes our node and ends the session (which removes
/// the node anyway, even if the delete could not be sent).
pub async fn withdraw(s: &Session, node: &str) {
    let _ = s.retry(|c| async move { c.delete(node, None).await }).await;
    s.close().await;
}
