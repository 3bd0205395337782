//! `lc-cli lock KEY [-- COMMAND...]` and `trylock`: wait in line, run the
//! command while holding the key, release it whatever the outcome.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

use crate::backend::{
    Acquired, Backend, BackendConfig, BackendError, HeldLock, LockRequest, WaitProgress,
};
use crate::child;
use crate::cli::RunArgs;
use crate::exit::{fail, ExitCode};
use crate::signals::Signals;
use crate::status_line::StatusLine;
use crate::terminal::{self, Terminal};

/// What to do once the key is ours.
#[derive(Debug, Clone)]
pub enum CommandSpec {
    /// Run this program with these arguments.
    Exec(Vec<OsString>),
    /// Keep the key held after exiting (`lock` without a command); say so
    /// on stderr unless `quiet`.
    Detach { quiet: bool },
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
    pub fn from_args(args: RunArgs, nonblock: bool, timeout: Option<Duration>) -> Result<Self> {
        let command = match (args.shell_command, args.command.is_empty()) {
            (Some(script), _) => CommandSpec::Exec(vec!["sh".into(), "-c".into(), script.into()]),
            (None, false) => CommandSpec::Exec(args.command),
            (None, true) if args.empty_after_dashdash => {
                return Err(fail(
                    ExitCode::Usage,
                    format!(
                        "no command after '--' for '{}' (leave out '--' to keep the key held until `lc-cli unlock`)",
                        args.key
                    ),
                ))
            }
            (None, true) => CommandSpec::Detach { quiet: args.quiet },
        };
        Ok(LockOptions {
            key: args.key,
            source: args.source.source.unwrap_or_else(super::default_source),
            nonblock,
            timeout,
            conflict_exit_code: args.conflict_exit_code,
            kill_after: args.kill_after,
            command,
        })
    }
}

/// How long a failed release is retried before giving up.
const RELEASE_RETRY: Duration = Duration::from_secs(10);

/// When the status line first appears (a quick grant shows nothing).
const STATUS_DELAY: Duration = Duration::from_millis(250);

pub fn run(config: &BackendConfig, options: LockOptions, verbose: bool) -> Result<ExitCode> {
    super::block_on(async {
        // Signals are caught before we ask for anything, so one that arrives
        // while we wait withdraws us instead of killing us mid-request.
        let mut signals = Signals::install()?;
        let context = || format!("lock '{}' on {}", options.key, config.server);
        super::check_source_shape(&options.source).with_context(context)?;
        let backend = super::connect_for(config, &[&options.key])
            .await
            .with_context(context)?;
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
    let server = config.server.to_string();
    // `-w 0` tries once, as flock takes it.
    let nonblock = options.nonblock || options.timeout == Some(Duration::ZERO);
    let request = LockRequest {
        key: key.clone(),
        source: options.source.clone(),
        nonblock,
        detached: matches!(options.command, CommandSpec::Detach { .. }),
    };
    let cancel = CancellationToken::new();
    let started = Instant::now();
    // Waiters ahead of us, as the backend last reported; MAX: unknown.
    let ahead = AtomicUsize::new(usize::MAX);
    let on_progress = |p: WaitProgress| ahead.store(p.ahead.unwrap_or(usize::MAX), Relaxed);
    let acquire = backend.acquire(&request, cancel.clone(), &on_progress);
    tokio::pin!(acquire);
    let deadline = async {
        match options.timeout {
            Some(t) if !nonblock => tokio::time::sleep(t).await,
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut status = StatusLine::new();
    let show_status = status.enabled() && !nonblock;
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + STATUS_DELAY,
        Duration::from_secs(1),
    );
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
                } else if sig == libc::SIGTSTP {
                    // Ctrl-Z while waiting: stop as if it were not caught,
                    // still in line.
                    status.clear();
                    terminal::stop_self(false);
                }
            }
            _ = tick.tick(), if show_status && cancelled_by.is_none() => {
                let ahead = Some(ahead.load(Relaxed)).filter(|&n| n != usize::MAX);
                status.waiting(key, &server, started.elapsed(), ahead);
            }
        }
    };
    status.clear();
    let waited = started.elapsed().as_secs_f64();
    let held = match acquired.with_context(|| format!("lock '{key}' on {server}"))? {
        Acquired::Held(held) => held,
        Acquired::Busy => {
            if verbose {
                eprintln!("lc-cli: failed to get lock '{key}' on {server}: it is held");
            }
            return Ok(ExitCode::Raw(options.conflict_exit_code));
        }
        Acquired::Cancelled => {
            return Ok(match cancelled_by.flatten() {
                Some(sig) => {
                    if verbose {
                        eprintln!(
                            "lc-cli: stopped waiting for '{key}' on {server} after {waited:.6} seconds: signal {sig}"
                        );
                    }
                    ExitCode::Signal(sig)
                }
                None => {
                    if verbose {
                        eprintln!(
                            "lc-cli: timeout while waiting to get lock '{key}' on {server} ({waited:.6} seconds)"
                        );
                    }
                    ExitCode::Raw(options.conflict_exit_code)
                }
            });
        }
    };
    if verbose {
        eprintln!("lc-cli: getting lock '{key}' on {server} took {waited:.6} seconds");
    }
    // A signal that came with the grant still means "do not start".
    if let Some(sig) = signals.pending_stop() {
        release(held, key, config).await?;
        return Ok(ExitCode::Signal(sig));
    }
    match &options.command {
        CommandSpec::Detach { quiet } => {
            held.detach()
                .await
                .with_context(|| format!("lock '{key}' on {server}"))?;
            if !quiet {
                eprintln!(
                    "'{key}' is held until '{}'",
                    super::command_line(config, "unlock", key)
                );
            }
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
    let terminal = Terminal::open();
    let mut running = match child::spawn(argv, &env, terminal.as_ref()) {
        Ok(c) => c,
        Err(spawn_error) => {
            eprintln!(
                "lc-cli: cannot run '{}' holding '{key}' on {}: {}",
                argv[0].to_string_lossy(),
                config.server,
                spawn_error.reason
            );
            release(held, key, config).await?;
            return Ok(spawn_error.code);
        }
    };
    let lost = tokio::select! {
        end = running.supervise(signals) => Ok(end),
        reason = held.lost() => Err(reason),
    };
    let end = match lost {
        Ok(end) => end,
        Err(reason) => {
            let _ = running.stop(signals, options.kill_after).await;
            // Give back whatever is left; the loss is what we report.
            let _ = release_attempt(&mut held).await;
            return Err(fail(
                ExitCode::LockLost,
                format!(
                    "lost the lock '{key}' on {} while the command ran: {}; the command was stopped",
                    config.server, reason.0
                ),
            ));
        }
    };
    // Released whatever happened to the command (even if it could not be waited for).
    release(held, key, config).await?;
    let end = end.with_context(|| format!("command holding '{key}' on {}", config.server))?;
    Ok(end.exit_code())
}

/// One release attempt, bounded in time.
async fn release_attempt(held: &mut Box<dyn HeldLock>) -> crate::backend::Result<()> {
    match tokio::time::timeout(RELEASE_RETRY, held.release()).await {
        Ok(r) => r,
        Err(_) => Err(BackendError::Unavailable {
            server: String::new(),
            reason: format!("no answer within {RELEASE_RETRY:?}"),
        }),
    }
}

/// Releases, retrying for a bounded time while the service is unreachable;
/// if it never confirms, names the exact command that clears the key.
async fn release(mut held: Box<dyn HeldLock>, key: &str, config: &BackendConfig) -> Result<()> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(100);
    loop {
        let left = RELEASE_RETRY.saturating_sub(started.elapsed());
        let (err, transient) = match tokio::time::timeout(left, held.release()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => (e.to_string(), e.is_transient()),
            Err(_) => (format!("no answer within {RELEASE_RETRY:?}"), true),
        };
        if !transient || started.elapsed() + delay >= RELEASE_RETRY {
            return Err(fail(
                ExitCode::ReleaseFailed,
                format!(
                    "could not release '{key}' on {}: {err}; it may still be held: clear it with `{}`",
                    config.server,
                    super::command_line(config, "reset", key)
                ),
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}
