//! One file per subcommand; `run` turns the parsed command line into plain
//! config and dispatches.

pub mod completions;
pub mod keys;
pub mod lock;
pub mod reset;
pub mod serve;
pub mod unlock;
pub mod wait;

use anyhow::Result;

use crate::backend::{Backend, BackendConfig};
use crate::cli::{Cli, Command};
use crate::exit::{fail, ExitCode};

pub fn run(cli: Cli) -> Result<ExitCode> {
    let config = BackendConfig {
        server: cli.server,
        session_timeout: cli.session_timeout,
        ttl: cli.ttl,
        queue_timeout: cli.queue_timeout,
        connect_timeout: cli.connect_timeout,
    };
    let verbose = cli.verbose;
    match cli.command {
        Command::Lock(args) => {
            lock::run(&config, lock::LockOptions::from_args(args, false)?, verbose)
        }
        Command::Trylock(args) => {
            lock::run(&config, lock::LockOptions::from_args(args, true)?, verbose)
        }
        Command::Unlock(args) => unlock::run(&config, &args.key),
        Command::Wait(args) => wait::run(&config, args, verbose),
        Command::Reset(args) => reset::run(&config, args),
        Command::Keys(args) => keys::run(&config, args.pattern.as_deref(), args.json),
        Command::Serve(args) => serve::run(args, verbose),
        Command::Completions { shell } => completions::run(shell),
    }
}

/// The client commands run on one thread: they wait, they do not compute.
pub(crate) fn client_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Connects to the backend, refusing a bad key before any connection.
pub(crate) async fn connect_for(config: &BackendConfig, keys: &[&str]) -> Result<Box<dyn Backend>> {
    for key in keys {
        check_key_shape(key)?;
    }
    let backend = crate::backend::connect(config).await?;
    for key in keys {
        backend.check_key(key)?;
    }
    Ok(backend)
}

/// The limits every backend shares, checked before connecting at all.
fn check_key_shape(key: &str) -> Result<()> {
    crate::proto::check_key(key.as_bytes())
        .map_err(|e| fail(ExitCode::Usage, format!("invalid key '{key}': {e}")))
}

/// This machine's name: the default source, so one `reset --source HOST`
/// clears everything a dead machine held.
pub(crate) fn default_source() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "lc-cli".to_string())
}
