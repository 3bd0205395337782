//! `lc-cli lock KEY [-- COMMAND...]` and `trylock`: wait in line, run the
//! command while holding the key, release it whatever the outcome.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use crate::backend::{Acquired, Backend, BackendConfig, HeldLock, LockRequest};
use crate::child::{self, ChildEnd};
use crate::cli::LockArgs;
use crate::exit::{fail, ExitCode};
use crate::signals::Signals;

/// What to do once the key is ours.
#[derive(Debug, Clone)]
pub enum CommandSpec {
    /// Run this program with these arguments.
    Exec(Vec<OsString>),
    /// Keep the key held after exiting (`lock` without a command).
    Detach,
    /// Release at once (`wait`).
    ReleaseAtOnce,
}

#[derive(Debug, Clone)]
pub struct LockOptions {
    pub key: String,
    pub source: String,
    pub nonblock: bool,
    pub timeout: Option<Duration>,
    pub conflict_exit_code: i32,
    pub kill_after: Duration,
    pub command: CommandSpec,
}

impl LockOptions {
    pub fn from_args(args: LockArgs, nonblock: bool) -> Result<Self> {
        let command = match (args.shell_command, args.command.is_empty()) {
            (Some(script), _) => CommandSpec::Exec(vec!["sh".into(), "-c".into(), script.into()]),
            (None, false) => CommandSpec::Exec(args.command),
            (None, true) => CommandSpec::Detach,
        };
        Ok(LockOptions {
            key: args.key,
            source: args.source.source.unwrap_or_else(super::default_source),
            nonblock: nonblock || args.nonblock,
            timeout: args.timeout,
            conflict_exit_code: args.conflict_exit_code,
            kill_after: args.kill_after,
            command,
        })
    }
}

/// How long a failed release is retried before giving up.
const RELEASE_RETRY: Duration = Duration::from_secs(10);

pub fn run(config: &BackendConfig, options: LockOptions, verbose: bool) -> Result<ExitCode> {
    super::client_runtime()?.block_on(async {
        // Signals are caught before we ask for anything, so one that arrives
        // while we wait withdraws us instead of killing us mid-request.
        let mut signals = Signals::install()?;
        let backend = super::connect_for(config, &[&options.key]).await?;
        let result = hold_and_run(&*backend, config, &options, &mut signals, verbose).await;
        backend.close().await;
        result
    })
}

async fn hold_and_run(
    backend: &dyn Backend,
    config: &BackendConfig,
    options: &LockOptions,
    signals: &mut Signals,
    verbose: bool,
) -> Result<ExitCode> {
    let key = &options.key;
    let request = LockRequest {
        key: key.clone(),
        source: options.source.clone(),
        nonblock: options.nonblock,
        detached: matches!(options.command, CommandSpec::Detach),
    };
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let acquire = backend.acquire(&request, cancel.clone(), &|_| {});
    tokio::pin!(acquire);
    let deadline = async {
        match options.timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    // Why we cancelled: a signal's number, or None for the timeout.
    let mut cancelled_by: Option<Option<i32>> = None;
    let acquired = loop {
        tokio::select! {
            r = &mut acquire => break r,
            _ = &mut deadline, if cancelled_by.is_none() => {
                cancelled_by = Some(None);
                cancel.cancel();
            }
            sig = signals.recv(), if cancelled_by.is_none() => {
                if Signals::stops_waiting(sig) {
                    cancelled_by = Some(Some(sig));
                    cancel.cancel();
                }
            }
        }
    };
    let held = match acquired
        .map_err(|e| anyhow::Error::new(e).context(format!("lock '{key}' on {}", config.server)))?
    {
        Acquired::Held(held) => held,
        Acquired::Busy => {
            if verbose {
                eprintln!("lc-cli: '{key}' is held by someone else");
            }
            return Ok(ExitCode::Raw(options.conflict_exit_code));
        }
        Acquired::Cancelled => {
            return Ok(match cancelled_by.flatten() {
                Some(sig) => ExitCode::Signal(sig),
                None => {
                    if verbose {
                        eprintln!(
                            "lc-cli: timed out waiting for '{key}' after {:.3}s",
                            started.elapsed().as_secs_f64()
                        );
                    }
                    ExitCode::Raw(options.conflict_exit_code)
                }
            });
        }
    };
    if verbose {
        eprintln!(
            "lc-cli: got '{key}' after {:.3}s",
            started.elapsed().as_secs_f64()
        );
    }
    match &options.command {
        CommandSpec::Detach => {
            held.detach().await?;
            Ok(ExitCode::Success)
        }
        CommandSpec::ReleaseAtOnce => {
            release(held, key, config).await?;
            Ok(ExitCode::Success)
        }
        CommandSpec::Exec(argv) => {
            if verbose {
                eprintln!(
                    "lc-cli: executing {}",
                    argv.iter()
                        .map(|a| a.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
            run_child(held, argv, key, config, options, signals).await
        }
    }
}

async fn run_child(
    mut held: Box<dyn HeldLock>,
    argv: &[OsString],
    key: &str,
    config: &BackendConfig,
    options: &LockOptions,
    signals: &mut Signals,
) -> Result<ExitCode> {
    let mut env = vec![("LC_KEY".to_string(), key.to_string())];
    if let Some(token) = held.token() {
        env.push(("LC_LOCK_TOKEN".to_string(), token.to_string()));
    }
    let mut running = match child::spawn(argv, &env) {
        Ok(c) => c,
        Err(spawn_error) => {
            release(held, key, config).await?;
            eprintln!("lc-cli: {}", spawn_error.message);
            return Ok(spawn_error.code);
        }
    };
    let end = loop {
        tokio::select! {
            end = running.wait() => break end?,
            sig = signals.recv() => running.forward(sig),
            reason = held.lost() => {
                eprintln!("lc-cli: lost the lock '{key}' on {}: {}; stopping the command", config.server, reason.0);
                running.stop(options.kill_after).await?;
                // Give back whatever is left; the loss is what we report.
                let _ = held.release().await;
                return Err(fail(ExitCode::LockLost, format!("lock '{key}' on {} was lost: {}", config.server, reason.0)));
            }
        }
    };
    release(held, key, config).await?;
    Ok(match end {
        ChildEnd::Exited(code) => ExitCode::Raw(code),
        ChildEnd::Signalled(sig) => ExitCode::Signal(sig),
    })
}

/// Releases, retrying for a bounded time while the service is unreachable;
/// if it never confirms, names the exact command that clears the key.
async fn release(mut held: Box<dyn HeldLock>, key: &str, config: &BackendConfig) -> Result<()> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        let err = match held.release().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if !err.is_transient() || started.elapsed() + delay > RELEASE_RETRY {
            return Err(fail(
                ExitCode::ReleaseFailed,
                format!(
                    "could not release '{key}' on {}: {err}; the key may still be held: clear it with `lc-cli --server {} reset {key}`",
                    config.server, config.server
                ),
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}
