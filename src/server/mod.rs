//! The built-in Locking-Center-compatible lock server (`lc-cli serve`).
//!
//! `run` takes an already-bound listener and a shutdown future, so tests bind
//! `127.0.0.1:0` and drive it in-process or as a process.

pub mod conn;
mod grant;
mod lock;
pub mod log;
pub mod manager_port;
pub mod metrics;
mod reset;
mod show;
pub mod table;
mod trylock;
mod unlock;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::TcpListener;

use self::log::Log;
use self::metrics::{Counters, FsyncHistogram, Snapshot};
use self::show::show;
use self::table::Table;
use crate::wal::{self, Wal, WalError};

#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// How long a client may take to send its whole request.
    pub read_timeout: Duration,
    pub verbose: bool,
    /// The write-ahead log; in memory only without it.
    pub data: Option<PathBuf>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            read_timeout: Duration::from_secs(30),
            verbose: false,
            data: None,
        }
    }
}

/// What every connection task shares.
pub struct Shared {
    pub table: Table,
    pub log: Log,
    pub options: ServerOptions,
    /// The table's counters (it bumps grants; the request paths the rest).
    pub counters: Arc<Counters>,
    /// fsync latency of the log, with `--data`.
    pub fsync: Option<Arc<FsyncHistogram>>,
    pub wal: Option<Arc<Wal>>,
}

impl Shared {
    pub fn new(table: Table, log: Log, options: ServerOptions) -> Shared {
        Shared {
            counters: table.counters(),
            table,
            log,
            options,
            fsync: None,
            wal: None,
        }
    }

    /// The Prometheus text for a scrape of `--metrics`.
    pub fn metrics(&self) -> String {
        let g = self.table.gauges();
        let snap = Snapshot {
            keys_held: g.held,
            waiters: g.waiting,
            oldest_hold: g
                .oldest_since
                .map(|s| SystemTime::now().duration_since(s).unwrap_or_default()),
            wal_bytes: self.wal.as_ref().map(|w| w.stats().file_len),
        };
        metrics::render(&self.counters, self.fsync.as_deref(), &snap)
    }
}

/// The listeners of a server: the lock port, and optionally the manager
/// port and the metrics endpoint.
pub struct Listeners {
    pub lock: TcpListener,
    pub manager: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The log holds a damaged record, is not an lc-cli log, or is of a
    /// newer format: refusing to guess the table.
    #[error("{0}")]
    Corrupt(WalError),
    /// Another server has the log.
    #[error("{0}")]
    InUse(WalError),
    #[error("{0}")]
    Io(WalError),
}

/// A server with its table restored, ready to accept.
pub struct Server {
    shared: Arc<Shared>,
    wal: Option<Arc<Wal>>,
}

impl Server {
    /// Opens and recovers the log, if any, and restores the held keys.
    pub fn open(options: ServerOptions) -> Result<Server, OpenError> {
        let log = Log {
            verbose: options.verbose,
        };
        let Some(path) = options.data.clone() else {
            return Ok(Server {
                shared: Arc::new(Shared::new(Table::new(), log, options)),
                wal: None,
            });
        };
        let fsync = Arc::new(FsyncHistogram::default());
        let observer = fsync.clone();
        let wal_options = wal::Options {
            on_sync: Some(Arc::new(move |took| observer.observe(took))),
            ..wal::Options::default()
        };
        let (wal, held, recovery) = Wal::open(&path, wal_options).map_err(|e| match e {
            WalError::Corrupt { .. } | WalError::Version { .. } | WalError::Foreign { .. } => {
                OpenError::Corrupt(e)
            }
            WalError::Locked { .. } => OpenError::InUse(e),
            WalError::Io { .. } => OpenError::Io(e),
        })?;
        let wal = Arc::new(wal);
        let table = Table::with_wal(wal.clone());
        if recovery.stale_temp {
            log.info(format_args!(
                "{}: removed the temp file of an unfinished compaction",
                path.display()
            ));
        }
        if recovery.migrated {
            log.info(format_args!(
                "{}: log of the previous release (no header) rewritten in format version {}",
                path.display(),
                wal::file::VERSION
            ));
        }
        if let Some((offset, len)) = recovery.torn {
            log.info(format_args!(
                "{}: cut a torn last record ({len} byte(s) at offset {offset})",
                path.display()
            ));
        }
        for h in &held {
            let peer: SocketAddr = String::from_utf8_lossy(&h.peer)
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
            let since = UNIX_EPOCH + Duration::from_millis(h.since_ms);
            table.restore(&h.key, &h.source, peer, since);
            log.info(format_args!(
                "restored '{}' held by '{}' (peer {peer}) since {}",
                show(&h.key),
                show(&h.source),
                humantime::format_rfc3339_millis(since)
            ));
        }
        log.info(format_args!(
            "{}: {} record(s) read, {} key(s) held",
            path.display(),
            recovery.records,
            held.len()
        ));
        let mut shared = Shared::new(table, log, options);
        shared.fsync = Some(fsync);
        shared.wal = Some(wal.clone());
        Ok(Server {
            shared: Arc::new(shared),
            wal: Some(wal),
        })
    }

    /// Serves the lock port only until `shutdown` resolves.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let listeners = Listeners {
            lock: listener,
            manager: None,
            metrics: None,
        };
        self.serve(listeners, shutdown).await
    }

    /// Serves every listener given until `shutdown` resolves.
    pub async fn serve(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let shared = self.shared;
        let listener = listeners.lock;
        let mut side_tasks = Vec::new();
        if let Some(manager) = listeners.manager {
            side_tasks.push(tokio::spawn(accept_loop(
                manager,
                shared.clone(),
                manager_port::handle,
            )));
        }
        if let Some(metrics) = listeners.metrics {
            let s = shared.clone();
            side_tasks.push(tokio::spawn(metrics::serve(
                metrics,
                Arc::new(move || s.metrics()),
            )));
        }
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
        for task in side_tasks {
            task.abort();
        }
        let (held, waiting) = shared.table.counts();
        shared.log.info(format_args!(
            "shutting down: {held} key(s) held, {waiting} waiter(s) queued"
        ));
        if let Some(wal) = self.wal {
            let w = wal.clone();
            let _ = tokio::task::spawn_blocking(move || w.close()).await;
            let st = wal.stats();
            shared.log.info(format_args!(
                "wal: {} grants, {} releases in {} syncs ({:.2} grants per sync), {} failed batch(es), {} compaction(s), log {} bytes",
                st.grants,
                st.releases,
                st.syncs,
                st.grants as f64 / st.syncs.max(1) as f64,
                st.failed_batches,
                st.compactions,
                st.file_len
            ));
        }
        Ok(())
    }
}

/// Accepts on the manager port, one task per connection.
async fn accept_loop<F, Fut>(listener: TcpListener, shared: Arc<Shared>, handle: F)
where
    F: Fn(tokio::net::TcpStream, SocketAddr, Arc<Shared>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(handle(stream, peer, shared.clone()));
            }
            Err(e) => {
                shared.log.error(format_args!("manager accept: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves until `shutdown` resolves (in memory, or with `options.data`).
pub async fn run(
    listener: TcpListener,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    Server::open(options)?.run(listener, shutdown).await
}
