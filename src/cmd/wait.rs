//! `lc-cli wait KEY`: wait until KEY is free, taking it in turn and releasing
//! it at once.

use anyhow::Result;

use super::lock::{self, LockOptions};
use crate::backend::fields::Extras;
use crate::backend::BackendConfig;
use crate::cli::WaitArgs;
use crate::exit::{fail, ExitCode};

pub(crate) fn run(config: &BackendConfig, args: WaitArgs) -> Result<ExitCode> {
    let extras = Extras {
        note: args.note,
        ..Extras::default()
    };
    if let Err(e) = extras.check() {
        return Err(fail(ExitCode::Usage, format!("'{}': {e}", args.key)));
    }
    let options = LockOptions {
        mode: lock::mode_of(&args.mode),
        key: args.key,
        source: args.source.source.unwrap_or_else(super::default_source),
        // `-w 0`: only look (lock.rs turns it into a try).
        nonblock: false,
        timeout: args.timeout,
        conflict_exit_code: args.conflict_exit_code,
        kill_after: std::time::Duration::ZERO,
        quiet: args.quiet,
        command: lock::CommandSpec::ReleaseAtOnce,
        expire: None,
        extras,
        superseded_exit_code: ExitCode::Superseded.code(),
        outdated_exit_code: ExitCode::Outdated.code(),
        at_least: None,
        slot_names: Vec::new(),
    };
    lock::run(config, options)
}
