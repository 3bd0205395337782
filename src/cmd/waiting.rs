//! The wait for a grant, for `lock`, `trylock` and `wait`: the request, the
//! `-w` deadline, the signals that withdraw it, Ctrl-Z, and the status line
//! (the place in line, and the holder, looked up now and then).

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::holder;
use crate::backend::{self, Acquired, Backend, BackendConfig, KeyInfo, LockRequest, WaitProgress};
use crate::signals::Signals;
use crate::status_line::StatusLine;
use crate::terminal;

/// When the status line first appears (a quick grant shows nothing).
const STATUS_DELAY: Duration = Duration::from_millis(250);

/// How often the status line asks who holds the key: rarely, a listing can
/// cost the service more than a wait.
const HOLDER_REFRESH: Duration = Duration::from_secs(5);

/// Why lc-cli withdrew its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Withdrawn {
    /// The `-w` deadline passed.
    Timeout,
    /// A signal that stops the wait (HUP, INT, QUIT, TERM).
    Signal(i32),
}

pub(super) struct Waited {
    pub acquired: backend::Result<Acquired>,
    /// Set when lc-cli withdrew the request (then `acquired` is usually
    /// `Cancelled`, or a grant that raced with the withdrawal).
    pub withdrawn: Option<Withdrawn>,
    pub waited: Duration,
}

pub(super) async fn wait_for_grant(
    backend: &dyn Backend,
    config: &BackendConfig,
    request: &LockRequest,
    timeout: Option<Duration>,
    signals: &mut Signals,
) -> Waited {
    let key = &request.key;
    let server = config.shown();
    let cancel = CancellationToken::new();
    let started = Instant::now();
    // The place in line as the backend last reported it.
    let ahead: Mutex<Option<usize>> = Mutex::new(None);
    let on_progress = |p: WaitProgress| *ahead.lock().unwrap() = p.ahead;
    // Never an exclusive lock in place of a mode the backend cannot take.
    let checked = backend::check_mode(&*config.server, &server, request.mode)
        .and_then(|()| backend::check_extras(&*config.server, &server, &request.extras));
    if let Err(e) = checked {
        return Waited {
            acquired: Err(e),
            withdrawn: None,
            waited: Duration::ZERO,
        };
    }
    let acquire = backend.acquire(request, cancel.clone(), &on_progress);
    tokio::pin!(acquire);
    let deadline = async {
        match timeout {
            Some(t) if !request.nonblock => tokio::time::sleep(t).await,
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut status = StatusLine::new();
    let show_status = status.enabled() && !request.nonblock;
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + STATUS_DELAY,
        Duration::from_secs(1),
    );
    let mut holder: Option<Blocker> = None;
    let lookup = holder_after(backend, key, STATUS_DELAY, config.connect_timeout);
    tokio::pin!(lookup);
    let mut withdrawn = None;
    let acquired = loop {
        tokio::select! {
            r = &mut acquire => break r,
            _ = &mut deadline, if withdrawn.is_none() => {
                withdrawn = Some(Withdrawn::Timeout);
                cancel.cancel();
            }
            sig = signals.recv(), if withdrawn.is_none() => {
                withdrawn = on_signal(sig, &mut status, &cancel);
            }
            info = &mut lookup, if show_status && withdrawn.is_none() => {
                holder = info;
                lookup.set(holder_after(backend, key, HOLDER_REFRESH, config.connect_timeout));
            }
            _ = tick.tick(), if show_status && withdrawn.is_none() => {
                let ahead = *ahead.lock().unwrap();
                // A reason the backend gives beats the holder, who may be us.
                let held_by = backend
                    .wait_reason()
                    .or_else(|| holder.as_ref().map(Blocker::short));
                status.waiting(
                    &super::printable(key),
                    &server,
                    started.elapsed(),
                    ahead,
                    held_by.as_deref(),
                );
            }
        }
    };
    status.clear();
    Waited {
        acquired,
        withdrawn,
        waited: started.elapsed(),
    }
}

/// Who keeps the key from us, as last looked up.
enum Blocker {
    Holder(KeyInfo),
    /// A free key reserved by a request for several keys in front of us.
    Reserved(String),
}

impl Blocker {
    fn short(&self) -> String {
        match self {
            Blocker::Holder(h) => holder::short(h, SystemTime::now()),
            Blocker::Reserved(why) => why.clone(),
        }
    }
}

/// A signal while waiting: one that stops the wait (HUP, INT, QUIT, TERM)
/// withdraws it through `cancel`; Ctrl-Z stops lc-cli as if it were not
/// caught, still in line.
pub(super) fn on_signal(
    sig: i32,
    status: &mut StatusLine,
    cancel: &CancellationToken,
) -> Option<Withdrawn> {
    if Signals::stops_waiting(sig) {
        cancel.cancel();
        return Some(Withdrawn::Signal(sig));
    }
    if sig == libc::SIGTSTP {
        status.clear();
        terminal::stop_self(false);
    }
    None
}

async fn holder_after(
    backend: &dyn Backend,
    key: &str,
    delay: Duration,
    limit: Duration,
) -> Option<Blocker> {
    tokio::time::sleep(delay).await;
    match holder::lookup(backend, key, limit).await {
        Some(h) => Some(Blocker::Holder(h)),
        None => holder::reserved_by(backend, key, limit)
            .await
            .map(Blocker::Reserved),
    }
}
