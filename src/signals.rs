//! The signals lc-cli catches: those it forwards to the child, those that
//! withdraw it from the queue while it waits, and SIGCHLD/SIGCONT/SIGTSTP
//! for supervising the child (its exit, its stops, `fg`).
//!
//! A signal-hook thread turns each signal into a message on a tokio channel,
//! so the async code handles signals in order, at points of its choosing.

use anyhow::{Context, Result};
use signal_hook::consts::{
    SIGCHLD, SIGCONT, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP, SIGUSR1, SIGUSR2, SIGWINCH,
};
use tokio::sync::mpsc;

/// Forwarded to the child's process group while it runs.
pub const FORWARDED: [i32; 7] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH];

pub struct Signals {
    rx: mpsc::UnboundedReceiver<i32>,
    handle: signal_hook::iterator::Handle,
}

impl Signals {
    pub fn install() -> Result<Self> {
        // SIGTSTP too: it stops the command first, then lc-cli
        // ([`crate::terminal::stop_self`]).
        let all = FORWARDED.iter().copied().chain([SIGCHLD, SIGCONT, SIGTSTP]);
        let mut signals =
            signal_hook::iterator::Signals::new(all).context("cannot install signal handlers")?;
        let handle = signals.handle();
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if tx.send(sig).is_err() {
                        break;
                    }
                }
            })
            .context("cannot start the signal thread")?;
        Ok(Signals { rx, handle })
    }

    /// The next signal; pends forever once the handlers are gone.
    pub async fn recv(&mut self) -> i32 {
        match self.rx.recv().await {
            Some(sig) => sig,
            None => std::future::pending().await,
        }
    }

    /// A signal that arrived meanwhile and ends a wait, if any; the others
    /// already received are dropped (nothing runs yet to forward them to).
    pub fn pending_stop(&mut self) -> Option<i32> {
        let mut found = None;
        while let Ok(sig) = self.rx.try_recv() {
            if found.is_none() && Self::stops_waiting(sig) {
                found = Some(sig);
            }
        }
        found
    }

    /// Signals that end a wait (the others are ignored until a child runs).
    pub fn stops_waiting(sig: i32) -> bool {
        matches!(sig, SIGHUP | SIGINT | SIGQUIT | SIGTERM)
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
    }
}
