//! `lc-cli lock KEY [-- COMMAND...]` and `trylock`: wait in line, run the
//! command while holding the key, release it whatever the outcome.

use std::ffi::OsString;
use std::time::{Duration, Instant};

pub(super) use super::loss::{frozen_past, grace, release_attempt, sleep_until_some, EXPIRY_LOOK};

use anyhow::{Context, Result};

use super::holder;
use super::waiting::{self, Withdrawn};
use super::OrFail;
use crate::backend::fields::Extras;
use crate::backend::{Acquired, Backend, BackendConfig, HeldLock, LockMode, LockRequest};
use crate::child;
use crate::cli::{ModeArgs, RunArgs};
use crate::exit::{fail, ExitCode};
use crate::guardian::Guardian;
use crate::signals::Signals;
use crate::terminal::Terminal;

/// What to do once the key is ours.
#[derive(Debug, Clone)]
pub(crate) enum CommandSpec {
    /// Run this program with these arguments.
    Exec(Vec<OsString>),
    /// Keep the key held after exiting (`lock` without a command); say so
    /// on stderr unless quiet.
    Detach,
    /// Release at once (`wait`).
    ReleaseAtOnce,
}

#[derive(Debug, Clone)]
pub(crate) struct LockOptions {
    pub key: String,
    pub mode: LockMode,
    pub source: String,
    pub nonblock: bool,
    pub timeout: Option<Duration>,
    pub conflict_exit_code: i32,
    pub kill_after: Duration,
    /// No line on stderr for a conflict, a timeout or a detached hold.
    pub quiet: bool,
    pub command: CommandSpec,
    /// A kept hold (`Detach`) that frees itself this long after its grant.
    pub expire: Option<Duration>,
    /// The note and the deploy-queue rules.
    pub extras: Extras,
    /// The statuses of a superseded and of an outdated request.
    pub superseded_exit_code: i32,
    pub outdated_exit_code: i32,
    /// `--hold-at-least`: the key stays held this long after the grant.
    pub at_least: Option<Duration>,
    /// The named pool of `--slots` (LC_SLOT names one), else empty.
    pub slot_names: Vec<String>,
}

impl LockOptions {
    pub(crate) fn from_args(
        args: RunArgs,
        nonblock: bool,
        timeout: Option<Duration>,
    ) -> Result<Self> {
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
            (None, true) => CommandSpec::Detach,
        };
        match (args.expire, &command) {
            (Some(_), CommandSpec::Exec(_)) => {
                return Err(fail(
                    ExitCode::Usage,
                    format!(
                        "--expire is for a hold of '{}' kept without a command (`lc-cli lock KEY --expire 2h`): a command's hold ends with the command",
                        args.key
                    ),
                ))
            }
            (Some(ttl), _) if ttl < Duration::from_millis(1) => {
                return Err(fail(
                    ExitCode::Usage,
                    format!("--expire for '{}' must be at least 1ms", args.key),
                ))
            }
            _ => {}
        }
        let slot_names = super::slots::names(&args.mode, &args.key)?;
        let mode = mode_of(&args.mode);
        let extras =
            super::queue_options::extras(&args.queue, &args.key, mode, nonblock, &command)?;
        Ok(LockOptions {
            key: args.key,
            mode,
            source: args.source.source.unwrap_or_else(super::default_source),
            nonblock,
            timeout,
            conflict_exit_code: args.conflict_exit_code,
            kill_after: args.kill_after,
            quiet: args.quiet,
            command,
            expire: args.expire,
            extras,
            superseded_exit_code: args
                .queue
                .superseded_exit_code
                .unwrap_or(ExitCode::Superseded.code()),
            outdated_exit_code: args
                .queue
                .outdated_exit_code
                .unwrap_or(ExitCode::Outdated.code()),
            at_least: args.queue.hold_at_least,
            slot_names,
        })
    }
}

/// `-x` (the default), `-s` or `--limit N` (clap refuses the mixtures).
pub(crate) fn mode_of(args: &ModeArgs) -> LockMode {
    match (args.shared, args.limit) {
        (true, _) => LockMode::Shared,
        (false, Some(n)) => LockMode::limit(n),
        (false, None) if !args.slots.is_empty() => LockMode::limit(args.slots.len() as u32),
        (false, None) => LockMode::Exclusive,
    }
}

/// How long a failed release is retried before giving up.
const RELEASE_RETRY: Duration = Duration::from_secs(10);

pub(crate) fn run(config: &BackendConfig, options: LockOptions) -> Result<ExitCode> {
    super::block_on(async {
        // Signals are caught before we ask for anything, so one that arrives
        // while we wait withdraws us instead of killing us mid-request.
        let mut signals = Signals::install()?;
        let context = || format!("lock '{}' on {}", options.key, config.shown());
        super::check_source_shape(&options.source).with_context(context)?;
        super::at_least::check(
            config,
            &options.key,
            options.at_least,
            options.extras.order,
            &options.command,
        )?;
        super::slots::check(config, &options.key, &options.slot_names)?;
        if matches!(options.command, CommandSpec::Detach) && !config.server.keeps_detached_holds() {
            let what = match options.expire {
                Some(_) => "no hold that expires (--expire) can be kept here: ",
                None => "",
            };
            return Err(fail(
                ExitCode::Usage,
                format!(
                    "lock '{}' on {}: {what}a hold here lasts only as long as lc-cli's session; give a command (`lc-cli lock KEY -- CMD`)",
                    options.key, config.server
                ),
            ));
        }
        // The guardian's start (an exec) overlaps the connection and the
        // wait; it is told what to guard once there is a command.
        let guardian = match options.command {
            CommandSpec::Exec(_) => Some(Guardian::start(options.kill_after)),
            _ => None,
        };
        let backend = super::connect_for(config, &[&options.key])
            .await
            .with_context(context)?;
        let result = hold_and_run(&*backend, config, &options, &mut signals, guardian).await;
        backend.close().await;
        result
    })
}

async fn hold_and_run(
    backend: &dyn Backend,
    config: &BackendConfig,
    options: &LockOptions,
    signals: &mut Signals,
    guardian: Option<std::io::Result<Guardian>>,
) -> Result<ExitCode> {
    let verbose = config.verbose;
    let key = &options.key;
    let server = config.shown();
    // `-w 0` tries once, as flock takes it.
    let nonblock = options.nonblock || options.timeout == Some(Duration::ZERO);
    let request = LockRequest {
        key: key.clone(),
        mode: options.mode,
        source: options.source.clone(),
        nonblock,
        detached: matches!(options.command, CommandSpec::Detach),
        expire: options.expire,
        extras: options.extras.clone(),
    };
    let outcome =
        waiting::wait_for_grant(backend, config, &request, options.timeout, signals).await;
    let waited = outcome.waited.as_secs_f64();
    // `--hold-at-least` counts from here, on the monotonic clock.
    let granted = Instant::now();
    let held = match outcome
        .acquired
        .or_fail()
        .with_context(|| format!("lock '{key}' on {server}"))?
    {
        Acquired::Held(held) => held,
        Acquired::Busy => {
            let why = backend.wait_reason();
            return not_taken(config, options, "failed to get lock".into(), why).await;
        }
        Acquired::Superseded(by) => {
            if !options.quiet {
                eprintln!(
                    "lc-cli: superseded while waiting for '{}' on {server}: a newer request, {by}, came; the command did not run",
                    super::printable(key)
                );
            }
            return Ok(ExitCode::Raw(options.superseded_exit_code));
        }
        Acquired::Outdated { mark } => {
            if !options.quiet {
                let order = options.extras.order.unwrap_or_default();
                eprintln!(
                    "lc-cli: outdated: '{}' on {server} has already run order {mark} with success, above this request's --order {order}; the command did not run (`{}` clears the mark)",
                    super::printable(key),
                    super::command_line(config, "mark --clear", key)
                );
            }
            return Ok(ExitCode::Raw(options.outdated_exit_code));
        }
        Acquired::Cancelled => match outcome.withdrawn {
            Some(Withdrawn::Signal(sig)) => {
                if verbose {
                    eprintln!(
                        "lc-cli: stopped waiting for '{key}' on {server} after {waited:.6} seconds: signal {sig}"
                    );
                }
                return Ok(ExitCode::Signal(sig));
            }
            Some(Withdrawn::Timeout) | None => {
                let what = format!("timeout after {waited:.3} seconds while waiting to get lock");
                return not_taken(config, options, what, backend.wait_reason()).await;
            }
        },
    };
    if verbose {
        eprintln!("lc-cli: getting lock '{key}' on {server} took {waited:.6} seconds");
    }
    // A signal that came with the grant still means "do not start".
    if let Some(sig) = signals.pending_stop() {
        release(held, key, config).await?;
        return Ok(ExitCode::Signal(sig));
    }
    // `--slots` granted by a service that did not say which slot: given
    // back, never run without its LC_SLOT (one line, 76).
    if let Some(why) = super::slots::untold(held.slot(), &options.slot_names) {
        release(held, key, config).await?;
        return Err(fail(
            ExitCode::Protocol,
            format!("lock '{key}' on {server}: {why}"),
        ));
    }
    match &options.command {
        CommandSpec::Detach => {
            held.detach(options.expire)
                .await
                .or_fail()
                .with_context(|| format!("lock '{key}' on {server}"))?;
            if !options.quiet {
                let unlock = super::command_line(config, "unlock", key);
                match options.expire {
                    Some(ttl) => eprintln!(
                        "'{key}' is held until '{unlock}' or until it expires at {} (in {})",
                        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + ttl),
                        humantime::format_duration(Duration::from_secs(ttl.as_secs().max(1)))
                    ),
                    None => eprintln!("'{key}' is held until '{unlock}'"),
                }
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
            let guardian = guardian.unwrap_or_else(|| Err(std::io::ErrorKind::Other.into()));
            run_child(held, argv, config, options, signals, guardian, granted).await
        }
    }
}

/// The lock was not taken (held with `-n`, or the `-w` deadline passed):
/// one line naming the holder where the service knows it, or the reason
/// the backend gave (`Backend::wait_reason`), unless quiet, and the
/// conflict status.
pub(super) async fn not_taken(
    config: &BackendConfig,
    options: &LockOptions,
    what: String,
    why: Option<String>,
) -> Result<ExitCode> {
    if !options.quiet {
        let key = &options.key;
        let detail = match why {
            Some(why) => format!(": {why}"),
            None => {
                let info = holder::lookup_anew(config, key).await;
                match &info {
                    Some(_) => holder::clause(info.as_ref(), config, key),
                    None => match holder::reserved_anew(config, key).await {
                        Some(why) => format!(": {why}"),
                        None => ": it is held".to_string(),
                    },
                }
            }
        };
        eprintln!(
            "lc-cli: {what} '{}' on {}{detail}",
            super::printable(key),
            config.server
        );
    }
    Ok(ExitCode::Raw(options.conflict_exit_code))
}

async fn run_child(
    mut held: Box<dyn HeldLock>,
    argv: &[OsString],
    config: &BackendConfig,
    options: &LockOptions,
    signals: &mut Signals,
    guardian: std::io::Result<Guardian>,
    granted: Instant,
) -> Result<ExitCode> {
    let verbose = config.verbose;
    let key = options.key.as_str();
    let mut env = vec![("LC_KEY".to_string(), key.to_string())];
    if let Some(token) = held.token() {
        env.push(("LC_LOCK_TOKEN".to_string(), token.to_string()));
    }
    env.extend(super::slots::env(held.slot(), &options.slot_names));
    env.extend(held.env());
    // Started before the command (before the connection, in `run`), so a
    // command never runs unguarded where its hold can run out or its key
    // outlive lc-cli.
    let needs_guardian = held.expiry().is_some() || held.session_fd().is_some();
    let guardian = guardian.and_then(|mut g| match held.session_fd() {
        Some(fd) => g.keep(fd).map(|()| g),
        None => Ok(g),
    });
    let mut guardian = match guardian {
        Ok(g) => Some(g),
        Err(e) if needs_guardian => {
            eprintln!(
                "lc-cli: cannot run '{}' holding '{key}' on {}: cannot start the guardian that stops the command if lc-cli is frozen or killed: {e}",
                argv[0].to_string_lossy(),
                config.server
            );
            release(held, key, config).await?;
            return Ok(ExitCode::Software);
        }
        Err(e) => {
            if verbose {
                eprintln!("lc-cli: running without a guardian (this hold does not expire): {e}");
            }
            None
        }
    };
    let terminal = Terminal::open();
    // The deadlines first: the command may announce itself to the guardian
    // and run before lc-cli speaks again.
    if let Some(g) = &mut guardian {
        g.update(held.expiry());
    }
    let announce = guardian.as_ref().map(Guardian::announce_fd);
    let mut running = match child::spawn(argv, &env, terminal.as_ref(), announce) {
        Ok(c) => c,
        Err(spawn_error) => {
            eprintln!(
                "lc-cli: cannot run '{}' holding '{key}' on {}: {}",
                argv[0].to_string_lossy(),
                config.server,
                spawn_error.reason
            );
            drop(guardian);
            release(held, key, config).await?;
            return Ok(spawn_error.code);
        }
    };
    if let Some(g) = &mut guardian {
        g.guard(running.pgid());
        g.update(held.expiry());
    }
    let end = loop {
        // Looked at again halfway to the deadline the guardian knows (a
        // renewal moves it), so `lost` is asked anew about once a renewal.
        let look = held.expiry().map(|e| {
            let half = e.term_at.saturating_duration_since(Instant::now()) / 2;
            tokio::time::Instant::now() + half.max(EXPIRY_LOOK)
        });
        let lost = tokio::select! {
            // In this order: the service's own loss notice falls due at the
            // very stop deadline the look checks, and that tie is a silent
            // service, not a frozen lc-cli. The notice's task may not have
            // run yet in the tick both fall due, so the look calls lc-cli
            // frozen only once it is a look past the deadline.
            biased;
            end = running.supervise(signals) => Ok(end),
            reason = held.lost() => Err(reason),
            _ = sleep_until_some(look) => match frozen_past(held.expiry(), EXPIRY_LOOK, guardian.as_ref()) {
                Some(reason) => Err(reason),
                None => {
                    if let Some(g) = &mut guardian {
                        g.update(held.expiry());
                    }
                    continue;
                }
            },
        };
        // Woken after a freeze: the command may have ended by the guardian's
        // hand, past what the service confirmed, or past the older deadline
        // the guardian had been told (a renewal lc-cli got just before).
        let lost = match lost {
            Ok(end) => match frozen_past(held.expiry(), Duration::ZERO, guardian.as_ref()) {
                Some(reason) => Err(reason),
                None => Ok(end),
            },
            // The guardian stopped the command: lc-cli was frozen, and the
            // service's silence it wakes to is that freeze's doing.
            Err(reason) => Err(super::loss::frozen_first(
                reason,
                held.expiry(),
                guardian.as_ref(),
            )),
        };
        match lost {
            Ok(end) => break end,
            Err(lost) => {
                // One SIGTERM: the guardian may have sent it (lc-cli was frozen).
                let term = guardian.as_mut().is_none_or(|g| g.stopping());
                let grace = grace(&lost, options.kill_after);
                let _ = running.stop(signals, grace, term).await;
                if let Some(g) = &mut guardian {
                    g.go();
                }
                if let Some(by) = lost.cancelled_by {
                    // Still ours: released as after any end, the mark untouched.
                    held.command_ended(ExitCode::Cancelled.code());
                    let released = release(held, key, config).await;
                    drop(guardian);
                    released?;
                    return Err(fail(
                        ExitCode::Cancelled,
                        format!(
                            "cancelled: a newer run, {by}, came for '{key}' on {} with --cancel-running; the command was stopped and the key released",
                            config.server
                        ),
                    ));
                }
                // Give back whatever is left; the loss is what we report.
                let _ = release_attempt(&mut held).await;
                drop(guardian);
                return Err(fail(
                    ExitCode::LockLost,
                    format!(
                        "lost the lock '{key}' on {} while the command ran: {}; the command was stopped",
                        config.server, lost.reason
                    ),
                ));
            }
        }
    };
    // The group is reaped: the guardian goes (and is reaped after the
    // release, by when it has long exited). A PostgreSQL session it kept a
    // copy of lives on in lc-cli's own descriptor until the release.
    if let Some(g) = &mut guardian {
        g.go();
    }
    // Released whatever happened to the command (even if it could not be
    // waited for), told how it ended (the mark rises only on a 0).
    let status = match &end {
        Ok(end) => end.exit_code().code(),
        Err(_) => ExitCode::Software.code(),
    };
    held.command_ended(status);
    let rest = options
        .at_least
        .and_then(|w| super::at_least::rest(w, granted, Instant::now()).map(|r| (w, r)));
    let released = match rest {
        Some((window, rest)) => super::at_least::keep_rest(held, key, config, window, rest).await,
        None => release(held, key, config).await,
    };
    drop(guardian);
    released?;
    let end = end.with_context(|| format!("command holding '{key}' on {}", config.shown()))?;
    Ok(end.exit_code())
}

/// Releases, retrying for a bounded time while the service is unreachable;
/// if it never confirms, names the exact command that clears the key.
pub(super) async fn release(
    mut held: Box<dyn HeldLock>,
    key: &str,
    config: &BackendConfig,
) -> Result<()> {
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
