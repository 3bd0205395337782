//! The note and the deploy-queue options of `lock` and `trylock`
//! (docs/deploy-queues.md), turned into a request's extra fields and
//! checked before anything is sent.

use anyhow::Result;

use super::lock::CommandSpec;
use crate::backend::fields::Extras;
use crate::backend::LockMode;
use crate::cli::QueueArgs;
use crate::exit::{fail, ExitCode};

/// The note and the deploy-queue rules, checked: the rules are for an
/// exclusive lock that runs a command, and `--newest`/`--cancel-running`
/// for a request that may wait.
pub(super) fn extras(
    queue: &QueueArgs,
    key: &str,
    mode: LockMode,
    nonblock: bool,
    command: &CommandSpec,
) -> Result<Extras> {
    let extras = Extras {
        note: queue.note.clone(),
        order: queue.order,
        newest: queue.newest,
        cancel: queue.cancel_running,
        ..Extras::default()
    };
    let usage = |what: String| Err(fail(ExitCode::Usage, format!("'{key}': {what}")));
    if let Err(e) = extras.check() {
        return usage(e.to_string());
    }
    if extras.queued() {
        let options = Extras {
            note: None,
            ..extras.clone()
        }
        .options();
        if mode != LockMode::Exclusive {
            return usage(format!(
                "{options} are for an exclusive lock (a deploy queue), not {}",
                mode.phrase()
            ));
        }
        if !matches!(command, CommandSpec::Exec(_)) {
            return usage(format!(
                "{options} need a command to run (the mark rises when it ends with status 0)"
            ));
        }
    }
    if nonblock && (extras.newest || extras.cancel) {
        return usage(
            "--newest and --cancel-running are for a request that waits in line, not for trylock or -n".into(),
        );
    }
    if queue.superseded_exit_code.is_some() && !extras.newest {
        return usage("--superseded-exit-code is for a request with --newest".into());
    }
    if queue.outdated_exit_code.is_some() && extras.order.is_none() {
        return usage("--outdated-exit-code is for a request with --order".into());
    }
    Ok(extras)
}
