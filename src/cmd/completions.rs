//! `lc-cli completions SHELL`: print a completion script, for
//! `source <(lc-cli completions bash)`.

use anyhow::Result;
use clap_complete::Shell;

use crate::exit::ExitCode;

pub(crate) fn run(shell: Shell) -> Result<ExitCode> {
    super::print_out(crate::docs::completion(shell))?;
    Ok(ExitCode::Success)
}
