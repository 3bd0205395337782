//! The one step that turns the end of a wait in a service's queue into an
//! [`Acquired`]: the queue backends (ZooKeeper's lock and semaphore, etcd)
//! differ only in what holding, giving back and leaving do, as Curator's
//! `LockInternals` shares one algorithm over its drivers.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{Acquired, HeldLock, Result};

/// Our entry in a service's queue (a node, a key on a lease), for as long
/// as its wait is being settled; each method ends it.
#[async_trait]
pub(crate) trait QueueEntry: Send {
    /// What a wait that got its turn yields (a node's czxid and watch, a
    /// revision, the hold itself).
    type Grant: Send;

    /// The hold the grant makes.
    fn hold(self, grant: Self::Grant) -> Box<dyn HeldLock>;

    /// Gives back a grant that raced with the cancellation; an error when
    /// that is not confirmed (the key may still be held).
    async fn give_back(self, grant: Self::Grant) -> Result<()>;

    /// Leaves the queue after a wait that ended without a grant or failed:
    /// best effort, the error (if any) is the wait's.
    async fn withdraw(self);
}

/// The outcome of a wait: `Ok(Some(grant))` its turn came, `Ok(None)` it
/// left (cancelled, or `nonblock` and busy), `Err` it failed.
pub(crate) async fn settle<E: QueueEntry>(
    entry: E,
    waited: Result<Option<E::Grant>>,
    cancel: &CancellationToken,
) -> Result<Acquired> {
    match waited {
        // A grant that raced with the cancellation is given back.
        Ok(Some(grant)) if cancel.is_cancelled() => {
            entry.give_back(grant).await?;
            Ok(Acquired::Cancelled)
        }
        Ok(Some(grant)) => Ok(Acquired::Held(entry.hold(grant))),
        Ok(None) => {
            entry.withdraw().await;
            Ok(if cancel.is_cancelled() {
                Acquired::Cancelled
            } else {
                Acquired::Busy
            })
        }
        Err(e) => {
            entry.withdraw().await;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendError, LostReason};
    use std::sync::{Arc, Mutex};

    /// Records which step ran.
    struct Entry(Arc<Mutex<Vec<&'static str>>>, bool);

    struct Held;

    #[async_trait]
    impl HeldLock for Held {
        async fn lost(&mut self) -> LostReason {
            std::future::pending().await
        }
        async fn release(&mut self) -> Result<()> {
            Ok(())
        }
        async fn detach(self: Box<Self>, _expire: Option<std::time::Duration>) -> Result<()> {
            Ok(())
        }
    }

    #[async_trait]
    impl QueueEntry for Entry {
        type Grant = ();
        fn hold(self, _: ()) -> Box<dyn HeldLock> {
            self.0.lock().unwrap().push("hold");
            Box::new(Held)
        }
        async fn give_back(self, _: ()) -> Result<()> {
            self.0.lock().unwrap().push("give_back");
            if self.1 {
                Ok(())
            } else {
                Err(BackendError::Other("unconfirmed".into()))
            }
        }
        async fn withdraw(self) {
            self.0.lock().unwrap().push("withdraw");
        }
    }

    async fn run(
        waited: Result<Option<()>>,
        cancelled: bool,
        confirmed: bool,
    ) -> (String, Vec<&'static str>) {
        let steps = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancellationToken::new();
        if cancelled {
            cancel.cancel();
        }
        let out = settle(Entry(steps.clone(), confirmed), waited, &cancel).await;
        let out = match out {
            Ok(Acquired::Held(_)) => "held".to_string(),
            Ok(Acquired::Busy) => "busy".to_string(),
            Ok(Acquired::Cancelled) => "cancelled".to_string(),
            Ok(Acquired::Superseded(_) | Acquired::Outdated { .. }) => "left".to_string(),
            Err(e) => e.to_string(),
        };
        let steps = steps.lock().unwrap().clone();
        (out, steps)
    }

    #[tokio::test]
    async fn each_outcome_takes_its_one_step() {
        assert_eq!(
            run(Ok(Some(())), false, true).await,
            ("held".into(), vec!["hold"])
        );
        assert_eq!(
            run(Ok(Some(())), true, true).await,
            ("cancelled".into(), vec!["give_back"])
        );
        assert_eq!(
            run(Ok(Some(())), true, false).await,
            ("unconfirmed".into(), vec!["give_back"])
        );
        assert_eq!(
            run(Ok(None), false, true).await,
            ("busy".into(), vec!["withdraw"])
        );
        assert_eq!(
            run(Ok(None), true, true).await,
            ("cancelled".into(), vec!["withdraw"])
        );
        let failed = Err(BackendError::Other("lost".into()));
        assert_eq!(
            run(failed, false, true).await,
            ("lost".into(), vec!["withdraw"])
        );
    }
}
