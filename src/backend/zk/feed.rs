//! `keys --watch` on ZooKeeper: one persistent recursive watch on the root
//! (`addWatch ROOT PERSISTENT_RECURSIVE`, ZooKeeper 3.6 and later), armed
//! before the listing it follows: any node created, deleted or changed
//! under the root (a request joining a line, a grant, a release, a reset, a
//! semaphore's lease) fires it. One request at arming; 0 per refresh while
//! nothing changes, however many keys are held (the listing's own
//! getChildren watches would be re-armed by every listing and would miss
//! a change between two of them: this one is armed once).
//!
//! A server older than 3.6 refuses `addWatch`: the watch polls and says so
//! with `-v`. Lost: any session event (a disconnection, however short: the
//! client library re-arms the watch on reconnection but drops what fired
//! meanwhile, ZOOKEEPER-4698; an expiry; a close). The watch then lists
//! again and arms a new one.

use async_trait::async_trait;
use zookeeper_client as zk;

use super::session::Session;
use crate::backend::feed::{ChangeFeed, Feed};
use crate::backend::{BackendError, Result};

struct ZkFeed {
    watcher: zk::PersistentWatcher,
    server: String,
}

pub(super) async fn arm(s: &Session, root: &str) -> Result<Feed> {
    let armed = s
        .retry(|c| async move { c.watch(root, zk::AddWatchMode::PersistentRecursive).await })
        .await;
    match armed {
        Ok(watcher) => Ok(Feed::Armed(Box::new(ZkFeed {
            watcher,
            server: s.server.clone(),
        }))),
        Err(zk::Error::Unimplemented) => Ok(Feed::Poll(
            "this ZooKeeper has no persistent watches (addWatch, 3.6 and later)".into(),
        )),
        Err(e) => Err(s.error(&format!("watching {root}"), e)),
    }
}

#[async_trait]
impl ChangeFeed for ZkFeed {
    async fn changed(&mut self) -> Result<()> {
        let event = self.watcher.changed().await;
        match event.event_type {
            zk::EventType::Session => Err(BackendError::Unavailable {
                server: self.server.clone(),
                reason: format!("the watch saw the session {:?}", event.session_state),
            }),
            _ => Ok(()),
        }
    }
}
