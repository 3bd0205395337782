//! The built-in Locking-Center-compatible lock server (`lc-cli serve`).
//!
//! [`Server::serve`] takes already-bound listeners and a shutdown future, so
//! `lc-cli serve --listen 127.0.0.1:0` binds first and prints the address;
//! the integration tests run it as a process (`tests/common/serve.rs`).

pub(crate) mod conn;
pub(crate) mod events;
mod expiry;
mod grant;
mod hello;
mod history;
mod keep;
mod keys;
pub(crate) mod limits;
mod lock;
pub(crate) mod manager_port;
mod mark;
pub(crate) mod metrics;
mod quota;
mod refuse;
mod reset;
pub(crate) mod runtime;
mod session;
pub(crate) mod stream;
pub(crate) mod table;
pub(crate) mod tls;
pub(crate) mod tokens;
mod trylock;
mod unlock;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;

use self::events::Events;
use self::metrics::{Counters, FsyncHistogram, Snapshot};
use self::table::Table;
use crate::proto::printable;
use crate::wal::{self, Wal, WalError};

#[derive(Debug, Clone)]
pub(crate) struct ServerOptions {
    /// How long a client may take to send its whole request.
    pub read_timeout: Duration,
    /// How long a connection may take to log in: its TLS handshake and
    /// first frame (with tokens, the Hello and its token).
    pub login_timeout: Duration,
    pub verbose: bool,
    /// The write-ahead log; in memory only without it.
    pub data: Option<PathBuf>,
    /// How long a session hold outlives the last word from its holder.
    pub reclaim_grace: Duration,
    /// Serve lc-cli's own actions (6 and up); off only in the test-only
    /// reference mode, which answers them `-` as the reference server does.
    pub extensions: bool,
    /// Connections open at once, in all and from one peer address (0: no
    /// limit per address), and those still in their login.
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    pub max_pending_logins: usize,
    /// `--token-file`: every connection must open with a Hello that
    /// carries one of them (see `tokens.rs`); None: no tokens, as the
    /// reference server.
    pub tokens: Option<Arc<tokens::Tokens>>,
    /// How many ended holds each key keeps in its history (`--history`;
    /// 0: none, and the feature `history` is not named).
    pub history: usize,
    /// `--max-log-bytes` (with `data`).
    pub max_log_bytes: Option<u64>,
}

/// A table without a log that keeps `cap` entries of each key's history.
fn history_kept(cap: usize) -> Table {
    let table = Table::new();
    table.keep_history(cap);
    table
}

/// A session hold outlives its holder's last word this long by default:
/// ZooKeeper's usual session timeout.
pub(crate) const DEFAULT_RECLAIM_GRACE: Duration = Duration::from_secs(10);

/// The default `--login-timeout`: a TLS handshake and a Hello take a few
/// round trips, milliseconds on a LAN; five seconds leave room for a slow
/// link and keep an idle or byte-at-a-time connection's slot short.
pub(crate) const DEFAULT_LOGIN_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for ServerOptions {
    fn default() -> Self {
        let max_connections = limits::default_max_connections();
        ServerOptions {
            read_timeout: Duration::from_secs(30),
            login_timeout: DEFAULT_LOGIN_TIMEOUT,
            verbose: false,
            data: None,
            reclaim_grace: DEFAULT_RECLAIM_GRACE,
            extensions: true,
            max_connections,
            max_connections_per_peer: limits::DEFAULT_PER_PEER,
            max_pending_logins: limits::default_pending_logins(max_connections),
            tokens: None,
            history: crate::backend::history::DEFAULT_HISTORY,
            max_log_bytes: None,
        }
    }
}

/// What every connection task shares.
pub(crate) struct Shared {
    /// The lock table, and with `--data` the write-ahead log it owns.
    pub table: Table,
    pub events: Events,
    /// How long a client may take to send its whole request.
    pub read_timeout: Duration,
    pub login_timeout: Duration,
    /// The table's counters (it bumps grants; the request paths the rest).
    pub counters: Arc<Counters>,
    /// fsync latency of the log, with `--data`.
    pub fsync: Option<Arc<FsyncHistogram>>,
    pub reclaim_grace: Duration,
    pub extensions: bool,
    pub limits: Arc<limits::Limits>,
    pub tokens: Option<Arc<tokens::Tokens>>,
    /// `--max-log-bytes`, with `--data`.
    pub log_cap: Option<quota::LogCap>,
}

impl Shared {
    pub(crate) fn new(table: Table, events: Events, options: &ServerOptions) -> Shared {
        Shared {
            counters: table.counters(),
            table,
            events,
            read_timeout: options.read_timeout,
            login_timeout: options.login_timeout,
            fsync: None,
            reclaim_grace: options.reclaim_grace,
            extensions: options.extensions,
            limits: Arc::new(limits::Limits::new(
                options.max_connections,
                options.max_connections_per_peer,
                options.max_pending_logins,
            )),
            tokens: options.tokens.clone(),
            log_cap: None,
        }
    }

    /// The Prometheus text for a scrape of `--metrics`.
    pub(crate) fn metrics(&self) -> String {
        let g = self.table.gauges();
        let snap = Snapshot {
            keys_held: g.held,
            waiters: g.waiting,
            oldest_hold: g
                .oldest_since
                .map(|s| SystemTime::now().duration_since(s).unwrap_or_default()),
            wal_bytes: self.table.wal_stats().map(|st| st.file_len),
            connections: self.limits.open(),
        };
        metrics::render(&self.counters, self.fsync.as_deref(), &snap)
    }
}

/// The listeners of a server: the lock port, and optionally the manager
/// port and the metrics endpoint.
pub(crate) struct Listeners {
    pub lock: TcpListener,
    /// TLS on the lock port (`--tls-cert`); the other two stay plain.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub manager: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
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
pub(crate) struct Server {
    shared: Arc<Shared>,
    /// Restored session holds, expired by `serve` unless reclaimed.
    orphans: Vec<(Vec<u8>, table::GrantId, table::LinkEnd)>,
    /// Restored kept holds that expire: released by `serve` at their
    /// deadline, before it accepts anyone if that has passed.
    expiring: Vec<(Vec<u8>, table::GrantId, SystemTime)>,
}

impl Server {
    /// Opens and recovers the log, if any, and restores the held keys.
    pub(crate) fn open(options: ServerOptions) -> Result<Server, OpenError> {
        let events = Events::new(options.verbose);
        let Some(path) = options.data.clone() else {
            return Ok(Server {
                shared: Arc::new(Shared::new(history_kept(options.history), events, &options)),
                orphans: Vec::new(),
                expiring: Vec::new(),
            });
        };
        let fsync = Arc::new(FsyncHistogram::default());
        let observer = fsync.clone();
        let wal_options = wal::Options {
            on_sync: Some(Arc::new(move |took| observer.observe(took))),
            ..wal::Options::default()
        };
        // Each hold is restored as the log's bytes have it (no copy of its
        // fields), straight into the table's tree, before the log's writer
        // starts.
        let table = Table::new();
        table.keep_history(options.history);
        let mut orphans = Vec::new();
        let mut expiring = Vec::new();
        let mut restored = 0;
        // The first holds' lines, told after what the recovery found.
        let mut lines = Vec::new();
        let mut restorer = table.restorer();
        let opened = Wal::open_with(&path, wal_options, |h| {
            let peer: SocketAddr = std::str::from_utf8(h.peer)
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
            let (id, link) = restorer.add(&h, peer);
            if restored < RESTORED_LINES {
                lines.push((h.to_owned(), peer, link.is_some()));
            }
            restored += 1;
            if let Some(link) = link {
                orphans.push((h.key.to_vec(), id, link));
            } else if let Some(at) = h.expires {
                expiring.push((h.key.to_vec(), id, at));
            }
        });
        drop(restorer);
        let (wal, recovery) = opened.map_err(|e| match e {
            WalError::Corrupt { .. } | WalError::Version { .. } | WalError::Foreign { .. } => {
                OpenError::Corrupt(e)
            }
            WalError::Locked { .. } => OpenError::InUse(e),
            WalError::Io { .. } => OpenError::Io(e),
        })?;
        let live = wal.live_gauge();
        table.attach_wal(wal);
        table.raise_token_floor(recovery.token_floor);
        for (key, mark) in &recovery.marks {
            table.restore_mark(key, *mark);
        }
        for (key, owner, entry) in &recovery.history {
            table.restore_history(key, *owner, entry);
        }
        if let Some(version) = recovery.upgraded {
            events.info(format_args!(
                "{}: log of format version {version} upgraded to version {} in place",
                path.display(),
                wal::file::VERSION
            ));
        }
        if recovery.stale_temp {
            events.info(format_args!(
                "{}: removed the temp file of an unfinished compaction",
                path.display()
            ));
        }
        if recovery.migrated {
            events.info(format_args!(
                "{}: log of the previous release (no header) rewritten in format version {}",
                path.display(),
                wal::file::VERSION
            ));
        }
        if let Some((offset, len)) = recovery.torn {
            events.info(format_args!(
                "{}: cut a torn last record ({len} byte(s) at offset {offset})",
                path.display()
            ));
        }
        for (h, peer, session) in lines {
            log_restored(&events, &h, peer, session, &options);
        }
        if restored > RESTORED_LINES {
            events.info(format_args!(
                "restored {} more hold(s), not listed one by one (`lc-cli keys` lists them)",
                restored - RESTORED_LINES
            ));
        }
        wal::release_free_memory();
        // Past their deadline while the server was down: released (and
        // logged, durably) before the port is announced, let alone served.
        expiring.retain(|(key, id, at): &(Vec<u8>, table::GrantId, SystemTime)| {
            *at > SystemTime::now() || !release_expired(&table, &events, key, *id)
        });
        events.info(format_args!(
            "{}: {} record(s) read, {} hold(s) restored",
            path.display(),
            recovery.records,
            restored
        ));
        let mut shared = Shared::new(table, events, &options);
        shared.fsync = Some(fsync);
        shared.log_cap = options.max_log_bytes.map(|max| quota::LogCap { max, live });
        Ok(Server {
            shared: Arc::new(shared),
            orphans,
            expiring,
        })
    }

    /// Serves every listener given until `shutdown` resolves.
    pub(crate) async fn serve(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let shared = self.shared;
        for (key, id, link) in self.orphans {
            tokio::spawn(session::orphan(shared.clone(), key, id, link));
        }
        for (key, id, _) in self.expiring {
            expiry::spawn(&shared, key, id);
        }
        let listener = listeners.lock;
        let tls = listeners.tls;
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
                    Ok((tcp, peer)) => {
                        let tracked = match shared.limits.admit(peer) {
                            Ok(tracked) => tracked,
                            Err(why) => {
                                refuse::note(&shared, peer, why);
                                refuse::tell(&tcp, peer, why, tls.is_some());
                                continue;
                            }
                        };
                        let s = shared.clone();
                        let tls = tls.clone();
                        tokio::spawn(conn::serve_connection(tcp, peer, s, tls, tracked));
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        shared.events.limited(None, "accept", format_args!("accept: {e}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = &mut shutdown => break,
            }
        }
        // Connection tasks are not drained, on purpose: most of them are
        // waiters, which may wait for hours, and a shutdown must not wait for
        // them (mini-redis drains because its requests are short). Nothing is
        // lost by not waiting: a client is told `+` only after its change is
        // durable, so a change whose answer was not sent yet is, at worst, a
        // key held by a client that never heard `+` (the crash windows of
        // src/wal/README.md; `reset` clears it). Closing the connections
        // (the process exits) withdraws every waiter.
        for task in side_tasks {
            task.abort();
        }
        let g = shared.table.gauges();
        shared.events.info(format_args!(
            "shutting down: {} key(s) held, {} waiter(s) queued",
            g.held, g.waiting
        ));
        let closing = shared.clone();
        if let Ok(Some(st)) = tokio::task::spawn_blocking(move || closing.table.close_wal()).await {
            shared.events.info(format_args!(
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

/// Restored holds logged one by one at start-up; the rest are counted (a
/// million lines would take longer than the restore itself).
const RESTORED_LINES: usize = 1000;

/// The start-up line of one restored hold.
fn log_restored(
    events: &Events,
    h: &wal::Held,
    peer: SocketAddr,
    session: bool,
    options: &ServerOptions,
) {
    let mut kind = match (session, h.expires) {
        (true, _) => format!(
            "session hold, token {}, released in {:?} unless its holder reclaims it",
            h.token, options.reclaim_grace
        ),
        (false, Some(at)) => format!(
            "token {}, expires at {}{}",
            h.token,
            humantime::format_rfc3339_millis(at),
            match at.duration_since(SystemTime::now()) {
                Ok(left) => format!(
                    ", in {}",
                    humantime::format_duration(Duration::from_secs(left.as_secs()))
                ),
                Err(_) => ": past, released now".to_string(),
            }
        ),
        (false, None) => format!("token {}", h.token),
    };
    if h.mode != crate::mode::LockMode::Exclusive {
        kind = format!("{}, {kind}", h.mode);
    }
    // The owner's identity as the log has it (never a token).
    let owner = match h.ownership.fingerprint {
        0 => String::new(),
        _ => format!(" as '{}'", printable(&h.ownership.name)),
    };
    events.info(format_args!(
        "restored '{}' held by '{}'{owner} (peer {peer}) since {} ({kind})",
        printable(&h.key),
        printable(&h.source),
        humantime::format_rfc3339_millis(h.since)
    ));
}

/// Releases restored kept hold `id` of `key`, whose deadline passed while
/// the server was down, at start-up: its release is made durable first
/// (blocking), then the hold ends. False if the log could not record it:
/// the hold stays, and its timer tries again once the server runs.
fn release_expired(table: &Table, events: &Events, key: &[u8], id: table::GrantId) -> bool {
    let table::Expiry::Due(_durable) = table.expire_kept(key, id) else {
        return true;
    };
    if let Err(e) = table.sync_wal() {
        events.error(format_args!(
            "expiry of the kept hold of '{}' not recorded in the log, the key stays held until it is: {e}",
            printable(key)
        ));
        return false;
    }
    let end = table::End::new(crate::backend::history::Ending::Expired);
    if let Some((holder, _)) = table.finish_release(key, id, end) {
        Counters::bump(&table.counters().releases);
        events.session(format_args!(
            "{}: kept hold of '{}' by '{}' (token {}) expired at its deadline, while the server was down",
            holder.peer,
            printable(key),
            printable(&holder.source),
            holder.token
        ));
    }
    true
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
                // Closed unanswered: the manager's commands have no answer
                // that says why.
                let tracked = match shared.limits.admit(peer) {
                    Ok(tracked) => tracked,
                    Err(why) => {
                        refuse::note(&shared, peer, why);
                        continue;
                    }
                };
                let work = handle(stream, peer, shared.clone());
                tokio::spawn(async move {
                    let _tracked = tracked;
                    work.await
                });
            }
            Err(e) => {
                shared
                    .events
                    .limited(None, "accept", format_args!("manager accept: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
