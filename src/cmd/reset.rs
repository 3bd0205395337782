//! `lc-cli reset KEY...` and `lc-cli reset --source SOURCE...`: the operator's
//! way to clear what a crashed client left held. Prints what it released.

use std::time::SystemTime;

use anyhow::{Context, Result};

use super::OrFail;
use crate::backend::{Backend, BackendConfig, KeyInfo};
use crate::cli::ResetArgs;
use crate::exit::ExitCode;

pub(crate) fn run(config: &BackendConfig, args: ResetArgs) -> Result<ExitCode> {
    let keys: Vec<&str> = args.keys.iter().map(String::as_str).collect();
    for source in &args.source {
        super::check_source_shape(source)
            .with_context(|| format!("reset on {}", config.shown()))?;
    }
    super::block_on(async {
        let backend = super::connect_for(config, &keys)
            .await
            .with_context(|| format!("reset on {}", config.shown()))?;
        let result = reset_all(&*backend, config, &keys, &args.source).await;
        backend.close().await;
        result
    })
}

async fn reset_all(
    backend: &dyn Backend,
    config: &BackendConfig,
    keys: &[&str],
    sources: &[String],
) -> Result<ExitCode> {
    // What is held just before the reset, to say what it released. When the
    // listing fails (a built-in server whose manager port is not the lock
    // port + 1) the reset still happens; it just says less.
    let held = backend.keys().await.ok();
    let now = SystemTime::now();
    for key in keys {
        backend
            .reset_key(key)
            .await
            .or_fail()
            .with_context(|| format!("reset of '{key}' on {}", config.shown()))?;
        match held.as_ref().map(|h| h.iter().find(|k| k.key == *key)) {
            Some(Some(info)) => say(format!("released '{key}' {}", describe(info, now)))?,
            Some(None) => say(format!("'{key}' was not held"))?,
            None => say(format!("reset '{key}'"))?,
        }
    }
    for source in sources {
        backend
            .reset_source(source)
            .await
            .or_fail()
            .with_context(|| format!("reset of source '{source}' on {}", config.shown()))?;
        match &held {
            Some(held) => {
                let mine: Vec<&KeyInfo> = held.iter().filter(|k| k.source == *source).collect();
                if mine.is_empty() {
                    say(format!("source '{source}' held no key"))?;
                }
                for info in mine {
                    say(format!("released '{}' {}", info.key, describe(info, now)))?;
                }
            }
            None => say(format!("reset source '{source}'"))?,
        }
    }
    Ok(ExitCode::Success)
}

/// One line on stdout; a closed stdout does not stop the resets.
fn say(line: String) -> Result<()> {
    super::print_out(line + "\n")
}

/// "(held by SOURCE for 5m 3s, 2 waiting)"
fn describe(info: &KeyInfo, now: SystemTime) -> String {
    let mut text = format!("(held by '{}'", info.source);
    if let Some(since) = info.since {
        let secs = now.duration_since(since).unwrap_or_default().as_secs();
        text.push_str(&format!(
            " for {}",
            humantime::format_duration(std::time::Duration::from_secs(secs))
        ));
    }
    if info.waiting > 0 {
        text.push_str(&format!(", {} waiting", info.waiting));
    }
    text.push(')');
    text
}
