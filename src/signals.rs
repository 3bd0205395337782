//! The signals lc-cli catches: those it forwards to the child, and those that
//! withdraw it from the queue while it waits.

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};
use tokio::sync::mpsc;

/// Forwarded to the child's process group while it runs.
pub const FORWARDED: [i32; 7] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH];

pub struct Signals {
    rx: mpsc::UnboundedReceiver<i32>,
    handle: signal_hook::iterator::Handle,
}

impl Signals {
    pub fn install() -> Result<Self> {
        let mut signals = signal_hook::iterator::Signals::new(FORWARDED)
            .context("cannot install signal handlers")?;
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
