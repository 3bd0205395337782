//! Several keys asked at once, from a service that grants them together
//! (the built-in server: its Hello feature `group`; docs/several-keys.md).
//!
//! Every key's request goes out at once, each on its own connection as
//! before, all naming one group (`group=ID/N`). The server grants none of
//! them alone: all in one step once the group stands at the head of every
//! line (`server/table/group.rs`), so nothing is held while waiting for
//! the rest. `-w`, a signal or a failure of any one withdraws them all;
//! a grant that raced with that is given back by the caller, as in the
//! one-after-another path, which `-n` and other services keep.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;

use super::{KeySet, Taken};
use crate::backend::fields::MAX_GROUP;
use crate::backend::{self, Acquired, Backend, BackendConfig, LockMode, LockRequest, WaitProgress};
use crate::cmd::lock::{self, LockOptions};
use crate::cmd::waiting::{self, Withdrawn};
use crate::cmd::OrFail;
use crate::exit::ExitCode;
use crate::signals::Signals;
use crate::status_line::StatusLine;

/// When the status line first appears (as for one key).
const STATUS_DELAY: Duration = Duration::from_millis(250);

/// How many times a group granted in part only is asked again.
const MAX_ATTEMPTS: u32 = 5;

/// Takes every key in one step where the service can (`Ok(None)`: it
/// cannot, or `-n` was asked: take them one after another). `Ok(Some(None))`:
/// all held, in `taken`; `Ok(Some(Some(code)))`: not taken (timeout,
/// signal), and what raced in is left in `taken` to give back.
pub(super) async fn take(
    config: &BackendConfig,
    options: &LockOptions,
    keys: &KeySet,
    signals: &mut Signals,
    taken: &mut Vec<Taken>,
) -> Result<Option<Option<ExitCode>>> {
    let n = keys.sorted.len();
    if options.nonblock || options.timeout == Some(Duration::ZERO) || n > usize::from(MAX_GROUP) {
        return Ok(None);
    }
    let server = config.shown();
    let context = |key: &str| format!("lock '{key}' on {server}");
    let first = &keys.sorted[0];
    let backend = super::super::connect_for(config, &[first])
        .await
        .with_context(|| context(first))?;
    let checked = backend::check_extras(&*config.server, &server, &options.extras);
    match checked.and(backend.grants_together().await) {
        Ok(true) => {}
        Ok(false) => {
            backend.close().await;
            return Ok(None);
        }
        Err(e) => {
            backend.close().await;
            return Err(e).or_fail().with_context(|| context(first));
        }
    }
    let started = Instant::now();
    let mut backend = backend;
    let mut attempt = 1;
    let (withdrawn, failure, closed) = loop {
        let mut backends = vec![backend];
        for key in &keys.sorted[1..] {
            let connected = super::super::connect_for(config, &[key]).await;
            match connected.with_context(|| context(key)) {
                Ok(b) => backends.push(b),
                Err(e) => {
                    for b in &backends {
                        b.close().await;
                    }
                    return Err(e);
                }
            }
        }
        let group = Some((fresh_id(), n as u16));
        let requests: Vec<LockRequest> = keys
            .sorted
            .iter()
            .map(|key| LockRequest {
                key: key.clone(),
                mode: LockMode::Exclusive,
                source: options.source.clone(),
                nonblock: false,
                detached: false,
                expire: None,
                extras: backend::fields::Extras {
                    group,
                    ..options.extras.clone()
                },
            })
            .collect();
        let left = options.timeout.map(|t| t.saturating_sub(started.elapsed()));
        let (results, withdrawn, split) =
            wait_all(&backends, &requests, left, keys, config, signals).await;
        if split && withdrawn.is_none() && attempt < MAX_ATTEMPTS {
            // Granted in part only: what came is given back, and the
            // whole group asked again, never held in part while waiting.
            for ((key, b), r) in keys.sorted.iter().zip(&backends).zip(results) {
                if let Ok(Acquired::Held(held)) = r {
                    let _ = lock::release(held, key, config).await;
                }
                b.close().await;
            }
            if config.verbose {
                eprintln!(
                    "lc-cli: only some of the {n} keys were granted on {server} within {:?} of the first (the server restarted while granting them?): gave them back, asking for all again",
                    config.connect_timeout
                );
            }
            attempt += 1;
            backend = super::super::connect_for(config, &[first])
                .await
                .with_context(|| context(first))?;
            continue;
        }
        // Every hold that came is kept in `taken` (given back by the caller
        // if the command is not to run); the first failure is reported.
        let mut failure = None;
        let mut closed = Vec::new();
        for ((key, backend), result) in keys.sorted.iter().zip(backends).zip(results) {
            match result {
                Ok(Acquired::Held(held)) => taken.push(Taken {
                    key: key.clone(),
                    backend,
                    held,
                }),
                Ok(_) => closed.push(backend),
                Err(e) => {
                    if failure.is_none() {
                        failure = Some(Err::<(), _>(e).or_fail().with_context(|| context(key)));
                    }
                    closed.push(backend);
                }
            }
        }
        break (withdrawn, failure, closed);
    };
    let stop = stop_of(
        withdrawn,
        failure,
        taken.len() == n,
        &closed,
        keys,
        config,
        options,
        started,
    )
    .await;
    for b in &closed {
        b.close().await;
    }
    let code = stop?;
    if code.is_none() && config.verbose {
        eprintln!(
            "lc-cli: holding all {n} keys on {server} after {:.6} seconds (granted together)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(Some(
        code.or_else(|| signals.pending_stop().map(ExitCode::Signal)),
    ))
}

/// What ends the wait: nothing (all held), the signal or timeout that
/// withdrew it (a timeout says which key was held, and by whom), or the
/// first failure.
#[allow(clippy::too_many_arguments)]
async fn stop_of(
    withdrawn: Option<Withdrawn>,
    failure: Option<Result<()>>,
    all: bool,
    backends: &[Box<dyn Backend>],
    keys: &KeySet,
    config: &BackendConfig,
    options: &LockOptions,
    started: Instant,
) -> Result<Option<ExitCode>> {
    if let Some(Err(e)) = failure {
        return Err(e);
    }
    match withdrawn {
        Some(Withdrawn::Signal(sig)) => {
            if config.verbose {
                eprintln!(
                    "lc-cli: stopped waiting for '{}' on {} after {:.6} seconds: signal {sig}",
                    keys.sorted.join("', '"),
                    config.shown(),
                    started.elapsed().as_secs_f64()
                );
            }
            Ok(Some(ExitCode::Signal(sig)))
        }
        Some(Withdrawn::Timeout) if !all => {
            let key = busy_key(backends, keys, config).await;
            let one = LockOptions {
                key,
                ..options.clone()
            };
            let what = format!(
                "timeout after {:.3} seconds while waiting to get lock",
                started.elapsed().as_secs_f64()
            );
            lock::not_taken(config, &one, what, None).await.map(Some)
        }
        _ if all => Ok(None),
        _ => {
            let one = LockOptions {
                key: keys.sorted[0].clone(),
                ..options.clone()
            };
            let what = "failed to get lock".to_string();
            lock::not_taken(config, &one, what, None).await.map(Some)
        }
    }
}

/// The first key (in the order taken) that someone holds: the one a
/// timeout names; the first key if none is found held.
async fn busy_key(backends: &[Box<dyn Backend>], keys: &KeySet, config: &BackendConfig) -> String {
    let limit = config.connect_timeout;
    let backend = match backends.first() {
        Some(b) => b,
        None => return keys.sorted[0].clone(),
    };
    for key in &keys.sorted {
        if super::super::holder::lookup(&**backend, key, limit)
            .await
            .is_some()
        {
            return key.clone();
        }
    }
    keys.sorted[0].clone()
}

type Pending<'a> = Pin<Box<dyn Future<Output = (usize, backend::Result<Acquired>)> + Send + 'a>>;

/// Waits for every request's answer, withdrawing all at the deadline, at a
/// signal that stops waiting, or at the first that is not a grant; the
/// status line names the keys meanwhile.
///
/// The server grants a group's requests together, so their answers come
/// within moments of each other; one still missing `connect_timeout`
/// after the first grant means a grant in part (a restart of the server
/// between them): then all are withdrawn and `split` is true.
async fn wait_all(
    backends: &[Box<dyn Backend>],
    requests: &[LockRequest],
    timeout: Option<Duration>,
    keys: &KeySet,
    config: &BackendConfig,
    signals: &mut Signals,
) -> (Vec<backend::Result<Acquired>>, Option<Withdrawn>, bool) {
    let cancel = CancellationToken::new();
    let progress = |_: WaitProgress| {};
    let progress: &(dyn Fn(WaitProgress) + Send + Sync) = &progress;
    let mut pending: Vec<Pending<'_>> = backends
        .iter()
        .zip(requests)
        .enumerate()
        .map(|(i, (b, r))| {
            let cancel = cancel.clone();
            Box::pin(async move { (i, b.acquire(r, cancel, progress).await) }) as Pending<'_>
        })
        .collect();
    let mut results: Vec<Option<backend::Result<Acquired>>> =
        (0..requests.len()).map(|_| None).collect();
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let started = Instant::now();
    let mut status = StatusLine::new();
    let show_status = status.enabled();
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + STATUS_DELAY,
        Duration::from_secs(1),
    );
    let shown = keys.sorted.join("', '");
    let server = config.shown();
    let mut withdrawn = None;
    let (mut first_grant, mut split) = (None, false);
    while !pending.is_empty() {
        tokio::select! {
            (i, r) = next_done(&mut pending) => {
                match r {
                    Ok(Acquired::Held(_)) => {
                        first_grant.get_or_insert(tokio::time::Instant::now() + config.connect_timeout);
                    }
                    _ => cancel.cancel(),
                }
                results[i] = Some(r);
            }
            _ = lock::sleep_until_some(first_grant), if !split && !cancel.is_cancelled() => {
                split = true;
                cancel.cancel();
            }
            _ = &mut deadline, if withdrawn.is_none() => {
                withdrawn = Some(Withdrawn::Timeout);
                cancel.cancel();
            }
            sig = signals.recv(), if withdrawn.is_none() => {
                withdrawn = waiting::on_signal(sig, &mut status, &cancel);
            }
            _ = tick.tick(), if show_status && withdrawn.is_none() => {
                status.waiting(&shown, &server, started.elapsed(), None, Some("all granted together"));
            }
        }
    }
    status.clear();
    let results = results
        .into_iter()
        .map(|r| r.expect("every request answered"))
        .collect();
    (results, withdrawn, split)
}

/// The first of `pending` to finish (taken out of it).
async fn next_done<T>(pending: &mut Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> T {
    use std::task::Poll;
    std::future::poll_fn(|cx| {
        for i in 0..pending.len() {
            if let Poll::Ready(out) = pending[i].as_mut().poll(cx) {
                drop(pending.swap_remove(i));
                return Poll::Ready(out);
            }
        }
        Poll::Pending
    })
    .await
}

/// A group's id: unpredictable enough that no other client names it by
/// chance (a server with tokens also keeps each token's groups apart).
fn fresh_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.finish()
}
