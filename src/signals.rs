//! The signals lc-cli catches: those it forwards to the child, those that
//! withdraw it from the queue while it waits, and SIGCHLD/SIGCONT/SIGTSTP
//! for supervising the child (its exit, its stops, `fg`).
//!
//! They come through tokio's signal driver, on the runtime's own thread: no
//! thread of their own to start, to hop through on every SIGCHLD, or to stop
//! at exit (a tenth of a millisecond of each `lock` when they had one), and
//! lc-cli stays one thread, so its end may hand off (`teardown`). The async
//! code takes each signal at a point of its choosing; two of one kind that
//! arrive before it looks are one, as with any pending signal.

use std::future::poll_fn;
use std::task::{Context, Poll};

use anyhow::{Context as _, Result};
use libc::{
    SIGCHLD, SIGCONT, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP, SIGUSR1, SIGUSR2, SIGWINCH,
};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Forwarded to the child's process group while it runs.
pub(crate) const FORWARDED: [i32; 7] =
    [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH];

pub(crate) struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    /// Catches them from now on (tokio's handlers stay for the rest of the
    /// process: a signal after `Signals` is gone is ignored). Must be called
    /// inside the runtime.
    pub(crate) fn install() -> Result<Self> {
        // SIGTSTP too: it stops the command first, then lc-cli
        // ([`crate::terminal::stop_self`]).
        let all = FORWARDED.iter().copied().chain([SIGCHLD, SIGCONT, SIGTSTP]);
        let streams = all
            .map(|sig| Ok((sig, signal(SignalKind::from_raw(sig))?)))
            .collect::<std::io::Result<_>>()
            .context("cannot install signal handlers")?;
        Ok(Signals { streams })
    }

    /// The next signal; pends forever once the driver is gone. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> i32 {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// A signal that arrived meanwhile and ends a wait, if any; the others
    /// already received are dropped (nothing runs yet to forward them to).
    pub(crate) fn pending_stop(&mut self) -> Option<i32> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut found = None;
        while let Poll::Ready(sig) = self.poll_next(&mut cx) {
            if found.is_none() && Self::stops_waiting(sig) {
                found = Some(sig);
            }
        }
        found
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<i32> {
        for (sig, stream) in &mut self.streams {
            if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                return Poll::Ready(*sig);
            }
        }
        Poll::Pending
    }

    /// Signals that end a wait (the others are ignored until a child runs).
    pub(crate) fn stops_waiting(sig: i32) -> bool {
        matches!(sig, SIGHUP | SIGINT | SIGQUIT | SIGTERM)
    }
}
