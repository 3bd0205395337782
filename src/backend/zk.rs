//! Placeholder: filled in by its own issue.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{Acquired, Backend, BackendConfig, BackendError, LockRequest, Result, WaitProgress};

pub struct ZkBackend;

impl ZkBackend {
    pub async fn connect(config: &BackendConfig) -> Result<Self> {
        Err(BackendError::Other(format!(
            "{} is not supported yet",
            config.server
        )))
    }
}

#[async_trait]
impl Backend for ZkBackend {
    fn check_key(&self, _key: &str) -> Result<()> {
        unimplemented!()
    }
    async fn acquire(
        &self,
        _request: &LockRequest,
        _cancel: CancellationToken,
        _progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired> {
        unimplemented!()
    }
    async fn unlock(&self, _key: &str) -> Result<bool> {
        unimplemented!()
    }
    async fn reset_key(&self, _key: &str) -> Result<()> {
        unimplemented!()
    }
    async fn reset_source(&self, _source: &str) -> Result<()> {
        unimplemented!()
    }
}
