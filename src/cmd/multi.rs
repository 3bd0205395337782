//! `lc-cli lock KEY --and KEY2 [--and ...] -- COMMAND` (and `trylock`):
//! several keys at once, all or none (docs/several-keys.md).
//!
//! The rules, once:
//! - Where the service grants keys together (the built-in server's Hello
//!   feature `group`), every key is asked at once and granted in one step,
//!   nothing held while waiting (`multi_together.rs`). Elsewhere (and for
//!   `-n`) the keys are taken one after another in one global order,
//!   sorted by their bytes, whatever order the command line names them
//!   in: two requests that share keys take the shared ones in the same
//!   order, so no cycle of waits (a deadlock) can form.
//! - Each key has a connection of its own, so each backend's single-key
//!   rules (leases, sessions, crash rules) hold unchanged for every key.
//! - `-w` is one deadline for all the keys; `-n` tries each key once and
//!   gives back all it took at the first busy one; a signal while waiting
//!   gives back all taken so far. Whatever was taken is released before
//!   lc-cli reports.
//! - The command runs only once all are held. Losing any one stops it
//!   (75) as a single lost key does; the guardian is given the earliest
//!   deadlines of all the keys.
//! - The command gets `LC_KEY` and `LC_LOCK_TOKEN` of the first key named,
//!   and `LC_LOCK_TOKENS=key=token,...` (every key, in the order named).
//! - Refused with 64 at once: `-s`/`--limit` (a mode per key is not
//!   defined), a hold kept without a command, the deploy-queue options,
//!   a key named twice, a key with a ',' (LC_LOCK_TOKENS could not be
//!   split).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::lock::{self, CommandSpec, LockOptions};
use super::waiting::{self, Withdrawn};
use super::OrFail;
use crate::backend::{
    Acquired, Backend, BackendConfig, Expiry, HeldLock, LockMode, LockRequest, LostReason,
};
use crate::exit::{fail, ExitCode};
use crate::guardian::Guardian;
use crate::signals::Signals;

/// `lock`/`trylock` with `and` as the other keys: the single-key path
/// when there are none.
pub(crate) fn run_or_single(
    config: &BackendConfig,
    options: LockOptions,
    and: Vec<String>,
) -> Result<ExitCode> {
    if and.is_empty() {
        return lock::run(config, options);
    }
    let keys = plan(&options, and)?;
    run(config, &options, &keys)
}

/// The keys of one request: as named (the first is `LockOptions::key`)
/// and in the order they are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySet {
    pub named: Vec<String>,
    pub sorted: Vec<String>,
}

/// Checks what several keys allow (64 with one line otherwise) and fixes
/// the order they are taken in: sorted by their bytes.
pub(crate) fn plan(options: &LockOptions, and: Vec<String>) -> Result<KeySet> {
    let usage = |what: String| Err(fail(ExitCode::Usage, format!("--and: {what}")));
    let mut named = vec![options.key.clone()];
    named.extend(and);
    for (i, key) in named.iter().enumerate() {
        if named[..i].contains(key) {
            return usage(format!(
                "'{}' is named twice; name each key once",
                super::printable(key)
            ));
        }
        if key.contains(',') {
            return usage(format!(
                "'{}' has a ',', which LC_LOCK_TOKENS uses between keys; rename the key or lock it alone",
                super::printable(key)
            ));
        }
    }
    if options.mode != LockMode::Exclusive {
        return usage(
            "several keys are taken as exclusive locks only (-s and --limit with --and are not defined); lock the shared key in a lc-cli of its own".into(),
        );
    }
    if !matches!(options.command, CommandSpec::Exec(_)) {
        return usage(
            "several keys are held only while a command runs; give a command (`lc-cli lock A --and B -- CMD`), or keep each key with a `lc-cli lock KEY` of its own".into(),
        );
    }
    let e = &options.extras;
    if e.order.is_some() || e.newest || e.cancel || e.at_least.is_some() || !e.slots.is_empty() {
        return usage(
            "the deploy-queue options (--order, --newest, --cancel-running), --hold-at-least and --slots are for one key; lock that key alone".into(),
        );
    }
    let mut sorted = named.clone();
    sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(KeySet { named, sorted })
}

/// One key taken: its connection and its hold.
struct Taken {
    key: String,
    backend: Box<dyn Backend>,
    held: Box<dyn HeldLock>,
}

fn run(config: &BackendConfig, options: &LockOptions, keys: &KeySet) -> Result<ExitCode> {
    super::block_on(async {
        let mut signals = Signals::install()?;
        super::check_source_shape(&options.source)
            .with_context(|| format!("lock '{}' on {}", options.key, config.shown()))?;
        let guardian = Guardian::start(options.kill_after);
        let mut taken = Vec::with_capacity(keys.sorted.len());
        let result = match take_all(config, options, keys, &mut signals, &mut taken).await {
            Ok(None) => run_child(&mut taken, config, options, keys, &mut signals, guardian).await,
            Ok(Some(code)) => Ok(code),
            Err(e) => Err(e),
        };
        // Whatever is still held is given back (after an error or a stop).
        let released = give_back(&mut taken, config).await;
        let result = result.and_then(|code| released.map(|()| code));
        for t in &taken {
            t.backend.close().await;
        }
        result
    })
}

/// Takes every key: in one step where the service can (`together`),
/// else in sorted order, within one deadline. `Ok(None)`: all
/// held; `Ok(Some(code))`: not taken (conflict, timeout, signal), and
/// what was taken is left in `taken` for the caller to give back.
async fn take_all(
    config: &BackendConfig,
    options: &LockOptions,
    keys: &KeySet,
    signals: &mut Signals,
    taken: &mut Vec<Taken>,
) -> Result<Option<ExitCode>> {
    // In one step, where the service grants keys together.
    if let Some(code) = together::take(config, options, keys, signals, taken).await? {
        return Ok(code);
    }
    let started = Instant::now();
    let deadline = options.timeout.map(|t| started + t);
    let server = config.shown();
    for key in &keys.sorted {
        let backend = super::connect_for(config, &[key])
            .await
            .with_context(|| format!("lock '{key}' on {server}"))?;
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        // `-n`, and a deadline already passed: one try.
        let nonblock = options.nonblock || left == Some(Duration::ZERO);
        let request = LockRequest {
            key: key.clone(),
            mode: LockMode::Exclusive,
            source: options.source.clone(),
            nonblock,
            detached: false,
            expire: None,
            extras: options.extras.clone(),
        };
        let outcome = waiting::wait_for_grant(&*backend, config, &request, left, signals).await;
        let one = LockOptions {
            key: key.clone(),
            ..options.clone()
        };
        let acquired = outcome.acquired.or_fail();
        let acquired = match acquired {
            Ok(a) => a,
            Err(e) => {
                backend.close().await;
                return Err(e.context(format!("lock '{key}' on {server}")));
            }
        };
        let stop = match acquired {
            Acquired::Held(held) => {
                if config.verbose {
                    eprintln!(
                        "lc-cli: getting lock '{key}' on {server} took {:.6} seconds ({} of {})",
                        outcome.waited.as_secs_f64(),
                        taken.len() + 1,
                        keys.sorted.len()
                    );
                }
                taken.push(Taken {
                    key: key.clone(),
                    backend,
                    held,
                });
                continue;
            }
            Acquired::Cancelled => match outcome.withdrawn {
                Some(Withdrawn::Signal(sig)) => {
                    if config.verbose {
                        eprintln!(
                            "lc-cli: stopped waiting for '{key}' on {server} after {:.6} seconds: signal {sig}",
                            started.elapsed().as_secs_f64()
                        );
                    }
                    Ok(ExitCode::Signal(sig))
                }
                Some(Withdrawn::Timeout) | None => {
                    let what = format!(
                        "timeout after {:.3} seconds while waiting to get lock",
                        started.elapsed().as_secs_f64()
                    );
                    lock::not_taken(config, &one, what, backend.wait_reason()).await
                }
            },
            // Busy, and (never asked for) superseded or outdated.
            _ => {
                let what = "failed to get lock".to_string();
                lock::not_taken(config, &one, what, backend.wait_reason()).await
            }
        };
        backend.close().await;
        return stop.map(Some);
    }
    if config.verbose {
        eprintln!(
            "lc-cli: holding all {} keys on {server} after {:.6} seconds",
            keys.sorted.len(),
            started.elapsed().as_secs_f64()
        );
    }
    // A signal that came with the last grant still means "do not start".
    Ok(signals.pending_stop().map(ExitCode::Signal))
}

/// Releases what is held, the last taken first; the first failure is
/// reported after all were tried.
async fn give_back(taken: &mut [Taken], config: &BackendConfig) -> Result<()> {
    let mut first = Ok(());
    for t in taken.iter_mut().rev() {
        let held = std::mem::replace(&mut t.held, Box::new(Released));
        let r = lock::release(held, &t.key, config).await;
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// The hold left in place of one given back: nothing to release.
struct Released;

#[async_trait::async_trait]
impl HeldLock for Released {
    async fn lost(&mut self) -> LostReason {
        std::future::pending().await
    }
    async fn release(&mut self) -> crate::backend::Result<()> {
        Ok(())
    }
    async fn detach(self: Box<Self>, _: Option<Duration>) -> crate::backend::Result<()> {
        Ok(())
    }
}

/// The earliest deadlines of all the holds: the guardian stops the command
/// at the first key that may run out.
fn earliest(taken: &[Taken]) -> Option<Expiry> {
    taken
        .iter()
        .filter_map(|t| t.held.expiry())
        .reduce(|a, b| Expiry {
            term_at: a.term_at.min(b.term_at),
            kill_at: a.kill_at.min(b.kill_at),
        })
}

/// Resolves with the first hold lost, and which.
async fn any_lost(taken: &mut [Taken]) -> (usize, LostReason) {
    use std::task::Poll;
    let mut losses: Vec<_> = taken.iter_mut().map(|t| t.held.lost()).collect();
    std::future::poll_fn(|cx| {
        for (i, f) in losses.iter_mut().enumerate() {
            if let Poll::Ready(reason) = f.as_mut().poll(cx) {
                return Poll::Ready((i, reason));
            }
        }
        Poll::Pending
    })
    .await
}

/// The variables the command gets: the first named key's as for one key,
/// and every key's token in LC_LOCK_TOKENS.
fn command_env(taken: &[Taken], keys: &KeySet) -> Vec<(String, String)> {
    let of = |key: &String| taken.iter().find(|t| &t.key == key);
    let first = &keys.named[0];
    let mut env = vec![("LC_KEY".to_string(), first.clone())];
    if let Some(token) = of(first).and_then(|t| t.held.token()) {
        env.push(("LC_LOCK_TOKEN".to_string(), token.to_string()));
    }
    env.push(("LC_KEYS".to_string(), keys.named.join(",")));
    let tokens: Vec<String> = keys
        .named
        .iter()
        .filter_map(|k| Some(format!("{k}={}", of(k)?.held.token()?)))
        .collect();
    if !tokens.is_empty() {
        env.push(("LC_LOCK_TOKENS".to_string(), tokens.join(",")));
    }
    if let Some(t) = of(first) {
        env.extend(t.held.env());
    }
    env
}

async fn run_child(
    taken: &mut [Taken],
    config: &BackendConfig,
    options: &LockOptions,
    keys: &KeySet,
    signals: &mut Signals,
    guardian: std::io::Result<Guardian>,
) -> Result<ExitCode> {
    let CommandSpec::Exec(argv) = &options.command else {
        unreachable!("plan refuses several keys without a command")
    };
    let server = &config.server;
    let shown = keys.named.join("', '");
    let env = command_env(taken, keys);
    let guardian = guardian.and_then(|mut g| {
        for t in taken.iter() {
            if let Some(fd) = t.held.session_fd() {
                g.keep(fd)?;
            }
        }
        Ok(g)
    });
    let mut guardian = match guardian {
        Ok(g) => g,
        Err(e) => {
            eprintln!(
                "lc-cli: cannot run '{}' holding '{shown}' on {server}: cannot start the guardian that stops the command if lc-cli is frozen or killed: {e}",
                argv[0].to_string_lossy()
            );
            return Ok(ExitCode::Software);
        }
    };
    if config.verbose {
        let line: Vec<_> = argv.iter().map(|a| a.to_string_lossy()).collect();
        eprintln!("lc-cli: executing {}", line.join(" "));
    }
    let terminal = crate::terminal::Terminal::open();
    guardian.update(earliest(taken));
    let announce = Some(guardian.announce_fd());
    let mut running = match crate::child::spawn(argv, &env, terminal.as_ref(), announce) {
        Ok(c) => c,
        Err(spawn_error) => {
            eprintln!(
                "lc-cli: cannot run '{}' holding '{shown}' on {server}: {}",
                argv[0].to_string_lossy(),
                spawn_error.reason
            );
            return Ok(spawn_error.code);
        }
    };
    guardian.guard(running.pgid());
    guardian.update(earliest(taken));
    let end = loop {
        let look = earliest(taken).map(|e| {
            let half = e.term_at.saturating_duration_since(Instant::now()) / 2;
            tokio::time::Instant::now() + half.max(lock::EXPIRY_LOOK)
        });
        let lost = tokio::select! {
            biased;
            end = running.supervise(signals) => Ok(end),
            (i, reason) = any_lost(taken) => Err((Some(i), reason)),
            _ = lock::sleep_until_some(look) => {
                match lock::frozen_past(earliest(taken), lock::EXPIRY_LOOK, Some(&guardian)) {
                    Some(reason) => Err((None, reason)),
                    None => {
                        guardian.update(earliest(taken));
                        continue;
                    }
                }
            }
        };
        let lost = match lost {
            Ok(end) => match lock::frozen_past(earliest(taken), Duration::ZERO, Some(&guardian)) {
                Some(reason) => Err((None, reason)),
                None => Ok(end),
            },
            Err((which, reason)) => Err((
                which,
                super::loss::frozen_first(reason, earliest(taken), Some(&guardian)),
            )),
        };
        match lost {
            Ok(end) => break end,
            Err((which, lost)) => {
                let term = guardian.stopping();
                let grace = lock::grace(&lost, options.kill_after);
                let _ = running.stop(signals, grace, term).await;
                guardian.go();
                // Give back whatever is left, each within a bounded try;
                // the loss is what we report.
                for t in taken.iter_mut() {
                    lock::release_attempt(&mut t.held).await;
                    t.held = Box::new(Released);
                }
                drop(guardian);
                let key = match which {
                    Some(i) => format!("'{}'", taken[i].key),
                    None => format!("of '{shown}'"),
                };
                return Err(fail(
                    ExitCode::LockLost,
                    format!(
                        "lost the lock {key} on {server} while the command ran: {}; the command was stopped and the other keys released",
                        lost.reason
                    ),
                ));
            }
        }
    };
    guardian.go();
    let status = match &end {
        Ok(end) => end.exit_code().code(),
        Err(_) => ExitCode::Software.code(),
    };
    for t in taken.iter_mut() {
        t.held.command_ended(status);
    }
    let released = give_back(taken, config).await;
    drop(guardian);
    released?;
    let end = end.with_context(|| format!("command holding '{shown}' on {}", config.shown()))?;
    Ok(end.exit_code())
}

#[path = "multi_together.rs"]
mod together;

#[cfg(test)]
#[path = "multi_tests.rs"]
mod tests;
