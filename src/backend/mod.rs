//! The lock-backend trait, its error type, and the table of backends.
//!
//! Commands see only [`Backend`] and [`HeldLock`]. Each backend's folder
//! owns its scheme (`NAME/address.rs`: its address, query parameters,
//! default port, credential variables, capabilities); [`BACKENDS`] lists
//! them, so parsing `--server` and [`connect`] are lookups in it
//! (`scheme.rs`); `config.rs` holds how a backend is reached and tuned.

pub(crate) mod address;
mod config;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
pub mod feed;
pub mod fields;
pub(crate) mod help;
pub mod history;
pub(crate) mod lc;
pub(crate) mod ping;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
mod scheme;
pub(crate) mod secret;
#[cfg(any(feature = "zk", feature = "etcd"))]
pub(crate) mod settle;
pub(crate) mod tcp;
#[cfg(test)]
mod throwaway;
#[cfg(feature = "zk")]
pub(crate) mod zk;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

pub use config::{
    BackendConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_QUEUE_TIMEOUT, DEFAULT_TTL,
    DEFAULT_ZK_SESSION_TIMEOUT,
};
pub(crate) use scheme::any_key;
pub use scheme::{
    check_extras, check_history, check_mode, check_names, port_hint, Capabilities, Scheme,
    ServerAddress, ServerUrl, Tuning, Usage, DEFAULT_SERVER,
};

/// Every backend, by its scheme: adding one is its folder and one line here.
pub const BACKENDS: &[&Scheme] = &[
    &lc::address::SCHEME,
    #[cfg(feature = "zk")]
    &zk::address::SCHEME,
    #[cfg(feature = "redis")]
    &redis::address::SCHEME,
    #[cfg(feature = "etcd")]
    &etcd::address::SCHEME,
    #[cfg(feature = "postgres")]
    &postgres::address::SCHEME,
    #[cfg(test)]
    &throwaway::address::SCHEME,
];

/// The schemes of the backends this build left out (cargo features), so an
/// address of one is refused naming the feature, not as unknown.
const LEFT_OUT: &[(&str, &str)] = &[
    #[cfg(not(feature = "zk"))]
    ("zk", "zk"),
    #[cfg(not(feature = "redis"))]
    ("redis", "redis"),
    #[cfg(not(feature = "redis"))]
    ("rediss", "redis"),
    #[cfg(not(feature = "etcd"))]
    ("etcd", "etcd"),
    #[cfg(not(feature = "postgres"))]
    ("postgres", "postgres"),
    #[cfg(not(feature = "postgres"))]
    ("postgresql", "postgres"),
];

pub use crate::mode::LockMode;

impl LockMode {
    /// The refusal of a request in this mode on `key`, used `theirs` way.
    pub(crate) fn conflict(self, key: &str, theirs: LockMode) -> BackendError {
        BackendError::ModeConflict {
            key: key.to_string(),
            ours: self.phrase(),
            theirs: theirs.phrase(),
        }
    }
}

/// What a lock request asks for.
#[derive(Debug, Clone)]
pub struct LockRequest {
    pub key: String,
    pub mode: LockMode,
    /// Who holds it, for reset by source (default: this machine's hostname).
    pub source: String,
    /// Take the key only if it is free now (trylock, `-n`).
    pub nonblock: bool,
    /// The hold outlives this process (`lock` without a command): it stays
    /// until `unlock` or `reset`.
    pub detached: bool,
    /// A detached hold that frees itself this long after its grant (`lock
    /// KEY --expire 2h`); only with `detached`.
    pub expire: Option<std::time::Duration>,
    /// The request's extra fields (docs/request-fields.md): its note, and
    /// the deploy-queue rules (`--order`, `--newest`, `--cancel-running`),
    /// checked before ([`check_extras`]).
    pub extras: fields::Extras,
}

/// Another request, as a superseded, outdated or cancelled request names
/// it: its source, its token's identity where the service knows one, and
/// its field list (note, order, flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rival {
    pub source: String,
    pub identity: Option<String>,
    pub fields: fields::FieldList,
}

/// `'build-42' (order 42, note 'deploy 1.4.2', identity ci)`.
impl std::fmt::Display for Rival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "'{}'", self.source.escape_debug())?;
        let mut parts = Vec::new();
        if let Some(order) = self.fields.get("order") {
            parts.push(format!("order {order}"));
        }
        if let Some(note) = self.fields.get("note") {
            parts.push(format!("note '{}'", note.escape_debug()));
        }
        if let Some(who) = &self.identity {
            parts.push(format!("identity {who}"));
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

/// What happened to a lock request.
pub enum Acquired {
    Held(Box<dyn HeldLock>),
    /// `nonblock` and the key is held by someone else.
    Busy,
    /// The cancellation token fired first (timeout, signal); the request has
    /// left the service's queue.
    Cancelled,
    /// `--newest`: a newer `--newest` request joined the key's line while
    /// this one waited (or a waiting one with a higher `--order` was
    /// there when it came); it has left the line, nothing was taken.
    Superseded(Rival),
    /// `--order N` below the key's mark (the highest order whose command
    /// ended with status 0), when it came or when its turn came; it has
    /// left the line, nothing is held.
    Outdated {
        mark: u64,
    },
}

/// Progress while waiting, for the status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitProgress {
    /// 0 = next in line, when the backend knows it.
    pub ahead: Option<usize>,
}

/// A held key as an operator sees it (`lc-cli keys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub key: String,
    /// The holder's source (`--source`, by default its host name).
    pub source: String,
    /// The holder's network address, where the service knows it.
    pub peer: Option<String>,
    /// When the hold began, where the service knows it.
    pub since: Option<std::time::SystemTime>,
    /// How many wait behind the holder.
    pub waiting: usize,
    /// Some(true): a kept hold (`lock KEY` without a command, until `unlock`
    /// or `reset`); Some(false): the hold of a running command; None: the
    /// service cannot tell.
    pub kept: Option<bool>,
    /// How the key is held: a shared or limited key has one entry per
    /// holder, each with the same `waiting`.
    pub mode: LockMode,
    /// The hold's fencing token, where the service shows it.
    pub token: Option<u64>,
    /// When a kept hold frees itself (`lock KEY --expire`), where the
    /// service knows it; None: it does not expire (or the service cannot
    /// tell).
    pub expires: Option<std::time::SystemTime>,
    /// The identity of the holder's token (lc-cli's server with
    /// `--token-file`: the token line's name, else `token:FINGERPRINT`).
    pub identity: Option<String>,
    /// The holder's request fields (note, order, flags), as the service
    /// keeps them; empty where none were given or the service keeps none.
    pub fields: fields::FieldList,
    /// The key's mark (`--order`: the highest order whose command ended
    /// with status 0), where the backend reads it with the listing.
    pub mark: Option<u64>,
}

/// A request waiting in a key's line, as an operator sees it (`lc-cli keys
/// --waiters`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterInfo {
    pub key: String,
    /// The waiter's source (`--source`, by default its host name).
    pub source: String,
    /// Its network address, where the service knows it.
    pub peer: Option<String>,
    /// Since when it waits, where the service knows it.
    pub since: Option<std::time::SystemTime>,
    pub mode: LockMode,
    /// Its place in the key's line: 0 = next.
    pub place: usize,
    /// Some(true): it asks for a kept hold (`lock KEY` without a command);
    /// None: the service cannot tell.
    pub kept: Option<bool>,
    /// Its token's identity (lc-cli's server with `--token-file`), else None.
    pub identity: Option<String>,
    /// Its request fields (note, order, flags), as the service keeps them.
    pub fields: fields::FieldList,
}

/// Why a held lock is no longer ours, and by when its command must be gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostReason {
    pub reason: String,
    /// From this moment the service may grant the key to someone else (a
    /// lease or a session running out): the command's stop must be over by
    /// then, whatever `--kill-after` says. None when nothing is known (the
    /// key was taken from outside): the grace is `--kill-after`.
    pub kill_by: Option<std::time::Instant>,
    /// Not a loss: a newer `--cancel-running` request came while this hold,
    /// taken with `--cancel-running` too, ran; its command is stopped as a
    /// lost lock's is, and lc-cli exits "cancelled" (81), naming it.
    pub cancelled_by: Option<Rival>,
}

impl LostReason {
    /// A loss with no deadline of its own.
    pub fn new(reason: impl Into<String>) -> Self {
        LostReason {
            reason: reason.into(),
            kill_by: None,
            cancelled_by: None,
        }
    }

    /// A loss whose command must be gone by `kill_by`.
    pub fn kill_by(reason: impl Into<String>, kill_by: std::time::Instant) -> Self {
        LostReason {
            reason: reason.into(),
            kill_by: Some(kill_by),
            cancelled_by: None,
        }
    }

    /// The hold's command is to stop for `by`, a newer `--cancel-running`
    /// request (the hold itself is still ours until released).
    pub fn cancelled(by: Rival) -> Self {
        LostReason {
            reason: format!("cancelled by a newer run, {by}"),
            kill_by: None,
            cancelled_by: Some(by),
        }
    }
}

/// Until when a held key is safe, from the service's last confirmed word
/// (a renewal, a heartbeat it answered): the command must be stopped at
/// `term_at` and gone by `kill_at`, before the service can hand the key to
/// anyone else. A watchdog outside lc-cli's process enforces it, so a
/// frozen lc-cli cannot let its command run on past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub term_at: std::time::Instant,
    pub kill_at: std::time::Instant,
}

/// Typed errors, because callers branch on the kind (exit status, retries).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot reach {server}: {reason}")]
    Unavailable { server: String, reason: String },
    /// The server closed the connection unread, over one of its connection
    /// limits (`lc-cli serve --max-connections-per-peer` and the others):
    /// `limit` names it.
    #[error("the server {server} is at its connection limit ({limit}): it closed the connection before reading the request; try again later (its operator can raise the limit)")]
    AtLimit { server: String, limit: String },
    #[error("{server} refused the request: {reason}")]
    Refused { server: String, reason: String },
    #[error("{server} answered something unexpected: {reason}")]
    Protocol { server: String, reason: String },
    /// The service answered that it could not release the key: it is still
    /// held (the built-in server could not record the release in its log).
    #[error("{server} did not release '{key}': {reason}")]
    NotReleased {
        server: String,
        key: String,
        reason: String,
    },
    /// This service (or this server version) cannot take the mode asked for.
    #[error("{server}: {reason}")]
    Unsupported { server: String, reason: String },
    /// The key is held or waited for in another mode or with another N.
    #[error("'{key}' is in use {theirs}, not {ours}: its holders and waiters must all agree (it changes only once nobody holds or waits for it)")]
    ModeConflict {
        key: String,
        ours: String,
        theirs: String,
    },
    #[error("invalid key '{key}', nothing was sent: {reason}")]
    BadKey { key: String, reason: String },
    #[error("invalid source '{source_name}', nothing was sent: {reason}")]
    BadSource { source_name: String, reason: String },
    #[error("{0}")]
    Other(String),
}

impl BackendError {
    /// Worth retrying (a release that could not reach the service).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BackendError::Unavailable { .. } | BackendError::AtLimit { .. }
        )
    }
}

pub type Result<T> = std::result::Result<T, BackendError>;

/// A lock service: one implementation per protocol.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Waits in line for the key (or only tries, with `nonblock`); the key,
    /// the source and the mode were checked before ([`check_names`],
    /// [`check_mode`]). When
    /// `cancel` fires, the request is withdrawn before this returns
    /// `Cancelled`; a grant that raced with it is released again.
    async fn acquire(
        &self,
        request: &LockRequest,
        cancel: CancellationToken,
        progress: &(dyn Fn(WaitProgress) + Send + Sync),
    ) -> Result<Acquired>;

    /// Releases a hold left by another process (`lc-cli unlock`). Returns
    /// false when the key was not held.
    async fn unlock(&self, key: &str) -> Result<bool>;

    /// Force-releases the key whoever holds it; its waiters keep their places.
    async fn reset_key(&self, key: &str) -> Result<()>;

    /// Releases every key held by `source` and withdraws its waiters.
    async fn reset_source(&self, source: &str) -> Result<()>;

    /// Every held key, with its holder and how many wait for it.
    async fn keys(&self) -> Result<Vec<KeyInfo>>;

    /// The held keys that start with `prefix` (`keys 'deploy/*'`): the
    /// service lists them where it can (the built-in server: a range of
    /// its table, however many other keys it holds); else every key,
    /// filtered here.
    async fn keys_under(&self, prefix: &str) -> Result<Vec<KeyInfo>> {
        let mut keys = self.keys().await?;
        keys.retain(|k| k.key.starts_with(prefix));
        Ok(keys)
    }

    /// Who holds `key`, where the service knows it (None: free, or not
    /// said). From `keys` unless a backend has a cheaper way.
    async fn holder(&self, key: &str) -> Result<Option<KeyInfo>> {
        Ok(self.keys().await?.into_iter().find(|k| k.key == key))
    }

    /// The key's mark: the highest `--order` whose command ended with
    /// status 0 (None: no mark). Backends without deploy queues refuse.
    /// Only called where the scheme's capabilities say `queues`.
    async fn mark(&self, key: &str) -> Result<Option<u64>> {
        Err(BackendError::Other(format!(
            "no mark can be read for '{key}' here"
        )))
    }

    /// Clears the key's mark (`lc-cli mark --clear KEY`); false when it had
    /// none. Only called where the scheme's capabilities say `queues`.
    async fn clear_mark(&self, key: &str) -> Result<bool> {
        Err(BackendError::Other(format!(
            "no mark can be cleared for '{key}' here"
        )))
    }

    /// Every request waiting in line, key by key in line order; None where
    /// the service does not say who waits (or this backend cannot read it).
    async fn waiters(&self) -> Result<Option<Vec<WaiterInfo>>> {
        Ok(None)
    }

    /// The waiters for the keys that start with `prefix`, as
    /// [`Backend::keys_under`] lists holds.
    async fn waiters_under(&self, prefix: &str) -> Result<Option<Vec<WaiterInfo>>> {
        let mut waiters = self.waiters().await?;
        if let Some(w) = &mut waiters {
            w.retain(|w| w.key.starts_with(prefix));
        }
        Ok(waiters)
    }

    /// Why the last wait (or try) was not granted when no holder explains
    /// it, with how long and the remedy (a Redis node up too briefly to
    /// count), for the status line and the one line of `-n` and `-w`, in
    /// place of the holder (who may be the caller itself). None: the holder
    /// says it.
    fn wait_reason(&self) -> Option<String> {
        None
    }

    /// The last `limit` ended holds of `key`, newest first (`lc-cli
    /// history`, docs/history.md). Only called where the scheme's
    /// capabilities say `history`; the others refuse before connecting.
    async fn history(&self, key: &str, limit: usize) -> Result<Vec<history::HistoryEntry>> {
        let _ = limit;
        Err(BackendError::Unsupported {
            server: String::new(),
            reason: format!("no history of '{key}' is kept here"),
        })
    }

    /// Whether the service grants the requests of one group (several keys
    /// at once, `--and`: [`fields::Extras::group`]) together, in one step:
    /// lc-cli then asks for every key at once instead of one after another
    /// (docs/several-keys.md). The built-in server says so in its answer to
    /// a Hello (asked with a ping if none was answered yet).
    async fn grants_together(&self) -> Result<bool> {
        Ok(false)
    }

    /// What the service is and whether a lock could be taken now (`lc-cli
    /// ping`); an error where it cannot be reached or refuses us.
    async fn ping(&self) -> Result<ping::PingReport>;

    /// Arms the service's own change feed for the keys under `prefix`
    /// (`keys --watch`, `feed.rs`), before the listing it is to follow.
    /// The default: no feed, the watch polls.
    async fn change_feed(&self, prefix: &str) -> Result<feed::Feed> {
        let _ = prefix;
        Ok(feed::Feed::Poll(
            "this service has no change feed lc-cli reads".into(),
        ))
    }

    /// Ends the session cleanly (ZooKeeper must close before exit, or its
    /// ephemeral nodes linger until the session times out).
    async fn close(&self) {}
}

/// A lock we hold.
#[async_trait]
pub trait HeldLock: Send {
    /// A number that grows with every grant of the key, for fencing.
    fn token(&self) -> Option<u64> {
        None
    }

    /// The slot a `--limit N` grant gave (0 to N-1, the lowest free one
    /// at the grant), where the backend tells it (`LC_SLOT`).
    fn slot(&self) -> Option<u32> {
        None
    }

    /// Variables the service's own tools set for a holder's command
    /// (etcdctl lock's `ETCD_LOCK_KEY`, `ETCD_LOCK_REV`).
    fn env(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Resolves when the lock is lost; never, for services without leases.
    /// Also resolves, with [`LostReason::cancelled`], when a newer
    /// `--cancel-running` request asks a hold taken with it to stop.
    async fn lost(&mut self) -> LostReason;

    /// The command ended with `status` (its exit status, or 128+N): told
    /// before [`HeldLock::release`], which raises the key's mark to the
    /// request's `--order` when `status` is 0 (and keeps it for history).
    fn command_ended(&mut self, status: i32) {
        let _ = status;
    }

    /// The deadlines of the hold as last confirmed, asked again after each
    /// renewal; None where the hold does not run out while this process
    /// lives (a PostgreSQL session).
    fn expiry(&self) -> Option<Expiry> {
        None
    }

    /// The connection whose end frees the key (a PostgreSQL session): the
    /// guardian keeps a copy open until the command's group is gone, so a
    /// killed lc-cli does not free the key before its command ends.
    fn session_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Releases the lock; when this returns Ok the key is free. May be
    /// called again after an error (the service was unreachable).
    async fn release(&mut self) -> Result<()>;

    /// Leaves the lock held after this process exits (`lock` without a
    /// command); with `expire`, until that long from now, when the service
    /// frees it and grants the next waiter (lc-cli's server was told with
    /// the request, and ignores it here).
    async fn detach(self: Box<Self>, expire: Option<std::time::Duration>) -> Result<()>;
}

/// Opens the backend the address names.
pub async fn connect(config: &BackendConfig) -> Result<Box<dyn Backend>> {
    config.server.connect(config).await
}
