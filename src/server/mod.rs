//! The built-in Locking-Center-compatible lock server (`lc-cli serve`).
//!
//! `run` takes an already-bound listener and a shutdown future, so tests bind
//! `127.0.0.1:0` and drive it in-process or as a process.

pub mod conn;
pub mod log;
pub mod metrics;
pub mod table;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use self::log::Log;
use self::table::Table;

#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How long a client may take to send its whole request.
    pub read_timeout: Duration,
    pub verbose: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            read_timeout: Duration::from_secs(30),
            verbose: false,
        }
    }
}

/// What every connection task shares.
pub struct Shared {
    pub table: Table,
    pub log: Log,
    pub options: ServerOptions,
}

/// Serves until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let shared = Arc::new(Shared {
        table: Table::new(),
        log: Log {
            verbose: options.verbose,
        },
        options,
    });
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tokio::spawn(conn::handle(stream, peer, shared.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    shared.log.error(format_args!("accept: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = &mut shutdown => break,
        }
    }
    let (held, waiting) = shared.table.counts();
    shared.log.info(format_args!(
        "shutting down: {held} key(s) held, {waiting} waiter(s) queued"
    ));
    Ok(())
}
