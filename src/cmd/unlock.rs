//! `lc-cli unlock KEY`: release a hold left by `lock` without a command.

use anyhow::{Context, Result};

use super::OrFail;
use crate::backend::{BackendConfig, BackendError};
use crate::cli::UnlockArgs;
use crate::exit::{fail, ExitCode};

pub(crate) fn run(config: &BackendConfig, args: UnlockArgs) -> Result<ExitCode> {
    let key = args.key.as_str();
    if !config.server.keeps_detached_holds() {
        // No hold outlives its lc-cli here, so there is none to unlock.
        return Err(fail(
            ExitCode::Usage,
            format!(
                "unlock '{key}' on {}: keys here are held only while their command runs; end a holder with `{}`",
                config.server,
                super::command_line(config, "reset", key)
            ),
        ));
    }
    super::block_on(async {
        let context = || format!("unlock '{key}' on {}", config.shown());
        let backend = super::connect_for(config, &[key])
            .await
            .with_context(context)?;
        let released = backend.unlock(key).await;
        backend.close().await;
        let released = match released {
            Err(e @ BackendError::NotReleased { .. }) => {
                return Err(fail(
                    ExitCode::ReleaseFailed,
                    format!(
                        "{}: {e}; clear it with `lc-cli --server {} reset {}`",
                        context(),
                        super::shell_quote(&config.shown()),
                        super::shell_quote(key)
                    ),
                ))
            }
            other => other.or_fail().with_context(context)?,
        };
        if released {
            Ok(ExitCode::Success)
        } else {
            // Not an lc-cli failure: the same status as "the lock was not taken".
            Err(fail(
                ExitCode::Conflict,
                format!("unlock '{key}' on {}: it was not held", config.shown()),
            ))
        }
    })
}
