//! `--hold-at-least DURATION` (issue 45, item 1; docs/fleet-jobs.md): once
//! the command of `lock`/`trylock` ends before DURATION has passed since the
//! grant, the hold is kept for the rest of the window as a kept hold that
//! expires (`HeldLock::detach`), so a host whose cron fires a little later
//! finds the key held and does not run the job again.
//!
//! The rules, once:
//! - The window is measured on lc-cli's monotonic clock from the moment the
//!   grant reached it, and the rest is handed to the service as a relative
//!   expiry (Redis `PEXPIRE`, an etcd lease's TTL, a ZooKeeper TTL node,
//!   the built-in server's kept hold that expires, the Hello feature `keep`):
//!   no wall clock of any host is read, so a host's clock skew does not
//!   move the window; the service's own clock counts the rest from the
//!   detach. The hold so ends no earlier than DURATION after the grant.
//! - A command that runs DURATION or longer releases at its end as usual.
//! - Only where a hold can be kept after a command: refused at once (76) on
//!   the throwaway backend; on PostgreSQL the rest is a row of
//!   `lc_cli.kept` on the server's clock (a role that may not create it is
//!   told in one line, 76, at the command's end); on
//!   ZooKeeper without TTL nodes the detach is refused by the server (76)
//!   and the key is freed at the command's end; a built-in server that does
//!   not name the feature `keep` (an older one) has the hold released as
//!   usual, said in one line.
//! - `--order` is refused with it (64): a kept hold does not raise the mark.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};

use super::lock::CommandSpec;
use super::OrFail;
use crate::backend::{BackendConfig, HeldLock};
use crate::exit::{fail, ExitCode};

/// The checks made before anything is asked of the service: a command to
/// run, no `--order`, a window of 1 ms to 30 days, a backend that keeps
/// holds after a command.
pub(super) fn check(
    config: &BackendConfig,
    key: &str,
    at_least: Option<Duration>,
    order: Option<u64>,
    command: &CommandSpec,
) -> Result<()> {
    let Some(window) = at_least else {
        return Ok(());
    };
    let usage = |what: String| Err(fail(ExitCode::Usage, format!("'{key}': {what}")));
    if !matches!(command, CommandSpec::Exec(_)) {
        return usage(
            "--hold-at-least needs a command to run (without one, `--expire D` keeps the hold D)"
                .into(),
        );
    }
    if window < Duration::from_millis(1) {
        return usage("--hold-at-least must be at least 1ms".into());
    }
    if window > crate::backend::fields::MAX_AT_LEAST {
        return usage("--hold-at-least is longer than 30 days".into());
    }
    if order.is_some() {
        return usage(
            "--hold-at-least cannot be used with --order (a hold kept after the command does not raise the mark)".into(),
        );
    }
    let scheme = config.server.scheme();
    let service = scheme.service;
    if let Some(why) = scheme.caps.hold_at_least {
        return Err(fail(
            ExitCode::Protocol,
            format!(
                "lock '{key}' on {}: lc-cli's {service} backend cannot take --hold-at-least: {why}",
                config.server
            ),
        ));
    }
    Ok(())
}

/// The rest of the window at `now`: None when it is over (release as usual).
pub(super) fn rest(window: Duration, granted: Instant, now: Instant) -> Option<Duration> {
    let rest = window.saturating_sub(now.saturating_duration_since(granted));
    (rest >= Duration::from_millis(1)).then_some(rest)
}

/// Keeps the hold for the rest of the window (one detach: its round trips
/// are the backend's, docs/fleet-jobs.md). Returns false when the window is
/// over and the caller releases as usual.
pub(super) async fn keep_rest(
    held: Box<dyn HeldLock>,
    key: &str,
    config: &BackendConfig,
    window: Duration,
    rest: Duration,
) -> Result<()> {
    held.detach(Some(rest))
        .await
        .or_fail()
        .with_context(|| format!("--hold-at-least: lock '{key}' on {}", config.server))?;
    if config.verbose {
        let until = humantime::format_rfc3339_seconds(SystemTime::now() + rest);
        eprintln!(
            "lc-cli: '{key}' stays held until {until} (--hold-at-least {}), or until `{}`",
            humantime::format_duration(window),
            super::command_line(config, "unlock", key)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_the_window() {
        let t = Instant::now();
        let w = Duration::from_secs(5);
        assert_eq!(
            rest(w, t, t + Duration::from_secs(1)),
            Some(Duration::from_secs(4))
        );
        assert_eq!(rest(w, t, t + Duration::from_secs(5)), None);
        assert_eq!(rest(w, t, t + Duration::from_secs(9)), None);
    }
}
