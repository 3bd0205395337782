//! `lc-cli reset KEY...` and `lc-cli reset --source SOURCE...`: the operator's
//! way to clear what a crashed client left held.

use anyhow::{Context, Result};

use crate::backend::BackendConfig;
use crate::cli::ResetArgs;
use crate::exit::ExitCode;

pub fn run(config: &BackendConfig, args: ResetArgs) -> Result<ExitCode> {
    let keys: Vec<&str> = args.keys.iter().map(String::as_str).collect();
    for source in &args.source {
        super::check_source_shape(source).with_context(|| format!("reset on {}", config.server))?;
    }
    super::block_on(async {
        let backend = super::connect_for(config, &keys)
            .await
            .with_context(|| format!("reset on {}", config.server))?;
        let result = async {
            for key in &keys {
                backend
                    .reset_key(key)
                    .await
                    .with_context(|| format!("reset of '{key}' on {}", config.server))?;
            }
            for source in &args.source {
                backend
                    .reset_source(source)
                    .await
                    .with_context(|| format!("reset of source '{source}' on {}", config.server))?;
            }
            Ok(ExitCode::Success)
        }
        .await;
        backend.close().await;
        result
    })
}
