//! A backend that exists only in the test build, to check that adding one
//! is its folder plus one line in `BACKENDS` (CONTRIBUTING.md's list): an
//! in-process set of held keys, no service behind it.

pub(super) mod address;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::backend::{
    ping, Acquired, Backend, HeldLock, KeyInfo, LockRequest, LostReason, Result, WaitProgress,
};

#[derive(Default)]
pub(super) struct ThrowawayBackend {
    held: Arc<Mutex<HashSet<String>>>,
}

#[async_trait]
impl Backend for ThrowawayBackend {
    /// Never waits: a held key is busy.
    async fn acquire(
        &self,
        request: &LockRequest,
        _cancel: CancellationToken,
        _progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        if !self.held.lock().unwrap().insert(request.key.clone()) {
            return Ok(Acquired::Busy);
        }
        Ok(Acquired::Held(Box::new(Held {
            held: self.held.clone(),
            key: request.key.clone(),
        })))
    }

    async fn unlock(&self, key: &str) -> Result<bool> {
        Ok(self.held.lock().unwrap().remove(key))
    }

    async fn reset_key(&self, key: &str) -> Result<()> {
        self.held.lock().unwrap().remove(key);
        Ok(())
    }

    async fn reset_source(&self, _source: &str) -> Result<()> {
        self.held.lock().unwrap().clear();
        Ok(())
    }

    async fn keys(&self) -> Result<Vec<KeyInfo>> {
        Ok(Vec::new())
    }

    async fn ping(&self) -> Result<ping::PingReport> {
        Err(crate::backend::BackendError::Other(
            "no service to ping".into(),
        ))
    }
}

struct Held {
    held: Arc<Mutex<HashSet<String>>>,
    key: String,
}

#[async_trait]
impl HeldLock for Held {
    async fn lost(&mut self) -> LostReason {
        std::future::pending().await
    }

    async fn release(&mut self) -> Result<()> {
        self.held.lock().unwrap().remove(&self.key);
        Ok(())
    }

    async fn detach(self: Box<Self>, _expire: Option<std::time::Duration>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::*;

    fn request(key: &str) -> LockRequest {
        LockRequest {
            key: key.into(),
            mode: LockMode::Exclusive,
            source: "test".into(),
            nonblock: true,
            detached: false,
            expire: None,
            extras: Default::default(),
        }
    }

    /// Through the table only: the address parses, its capabilities are
    /// asked the one way, and `connect` finds the implementation.
    #[tokio::test]
    async fn its_address_parses_and_connects_through_the_table() {
        let url: ServerUrl = "throwaway://here".parse().unwrap();
        let config = BackendConfig::new(url, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.shown(), "throwaway://here");
        assert!(check_mode(&*config.server, "x", LockMode::Shared).is_err());
        assert!(!config.server.keeps_detached_holds());
        let e = "throwaway://here?x=1".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("throwaway:// knows"), "{e}");
        let e = "nowhere://x".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("throwaway://"), "{e}");

        let backend = connect(&config).await.unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let Acquired::Held(mut held) = backend
            .acquire(&request("k"), cancel.clone(), &|_| {})
            .await
            .unwrap()
        else {
            panic!("a free key was not granted");
        };
        let again = backend.acquire(&request("k"), cancel, &|_| {}).await;
        assert!(matches!(again, Ok(Acquired::Busy)));
        held.release().await.unwrap();
        assert!(!backend.unlock("k").await.unwrap());
    }
}
