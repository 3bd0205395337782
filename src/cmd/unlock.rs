//! `lc-cli unlock KEY`: release a hold left by `lock` without a command.

use anyhow::Result;

use crate::backend::BackendConfig;
use crate::exit::{fail, ExitCode};

pub fn run(config: &BackendConfig, key: &str) -> Result<ExitCode> {
    super::client_runtime()?.block_on(async {
        let backend = super::connect_for(config, &[key]).await?;
        let released = backend.unlock(key).await;
        backend.close().await;
        if released? {
            Ok(ExitCode::Success)
        } else {
            Err(fail(
                ExitCode::Conflict,
                format!("'{key}' was not held on {}", config.server),
            ))
        }
    })
}
