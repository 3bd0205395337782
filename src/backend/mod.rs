//! The lock-backend trait, its error type, and the table of backends.
//!
//! Commands see only [`Backend`] and [`HeldLock`]. Each backend's folder
//! owns its scheme (`NAME/address.rs`: its address, query parameters,
//! default port, credential variables, capabilities); [`BACKENDS`] lists
//! them, so parsing `--server` and [`connect`] are lookups in it.

pub mod address;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod lc;
pub mod ping;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
pub mod secret;
pub mod settle;
pub(crate) mod tcp;
#[cfg(feature = "zk")]
pub mod zk;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

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

/// What lc-cli knows of one backend's scheme, for parsing, the errors and
/// the docs; each backend's `address.rs` defines its own.
pub struct Scheme {
    /// The service as messages name it ("Redis").
    pub service: &'static str,
    /// The URL schemes it answers to; `""` is a bare `host:port`.
    pub names: &'static [&'static str],
    /// The query parameters it knows.
    pub params: &'static [&'static str],
    /// Where its credentials can come from when the address has none.
    pub env: &'static [&'static str],
    pub default_port: u16,
    /// The lease (`ttl=`) when the address gives none.
    pub default_ttl: Duration,
    pub caps: Capabilities,
    /// Its own naming rule for keys, beyond the limits every backend keeps.
    pub key_problem: fn(&str) -> Option<String>,
    /// The address after the scheme, its query, into the typed address.
    pub parse: fn(&address::Parts) -> std::result::Result<ServerUrl, String>,
}

/// What a backend can do: asked only through [`check_mode`] and
/// [`ServerAddress::keeps_detached_holds`].
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// `--shared`.
    pub shared: bool,
    /// `--limit N`.
    pub limit: bool,
    /// A hold can outlive lc-cli (`lock KEY` without a command): not where a
    /// hold is a session's, as on PostgreSQL.
    pub kept_holds: bool,
    /// Why a mode is refused, added to the refusal: inside the parentheses
    /// that name the mode asked for where neither mode is taken.
    pub why: &'static str,
}

impl Capabilities {
    pub const ALL: Capabilities = Capabilities {
        shared: true,
        limit: true,
        kept_holds: true,
        why: "",
    };

    /// Why `who` ("lc-cli's etcd backend", "this server") refuses `mode`;
    /// None when it takes it.
    pub fn refusal(&self, who: &str, mode: LockMode) -> Option<String> {
        let what = match mode {
            LockMode::Exclusive => return None,
            LockMode::Shared if self.shared => return None,
            LockMode::Limit(_) if self.limit => return None,
            _ if !self.shared && !self.limit => {
                let why = self.why;
                return Some(format!(
                    "{who} cannot take shared or limited locks (asked for {mode}{why})"
                ));
            }
            LockMode::Limit(n) => format!("--limit {n}"),
            LockMode::Shared => "shared locks".to_string(),
        };
        Some(format!("{who} cannot take {what}{}", self.why))
    }
}

/// A parsed server address: a backend's own type, behind which [`connect`]
/// finds its implementation.
#[async_trait]
pub trait ServerAddress: std::fmt::Display + std::fmt::Debug + Send + Sync {
    fn scheme(&self) -> &'static Scheme;

    /// Opens the backend (a session, a connection check) at this address.
    async fn connect(&self, config: &BackendConfig) -> Result<Box<dyn Backend>>;

    /// Whether a hold can outlive lc-cli (`lock KEY` without a command).
    fn keeps_detached_holds(&self) -> bool {
        self.scheme().caps.kept_holds
    }
}

/// How a backend is reached and tuned; built from the command line, never a
/// clap type.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    pub server: Arc<dyn ServerAddress>,
    /// Credentials and TLS (ZooKeeper, Redis, etcd).
    pub access: secret::Access,
    /// ZooKeeper session timeout.
    pub session_timeout: Duration,
    /// Redis lease on the lock key, renewed at a third of it; the etcd
    /// lease of our queue key.
    pub ttl: Duration,
    /// Redis: how long a dead waiter can keep its place in the queue.
    pub queue_timeout: Duration,
    /// How long to try to reach the service before giving up.
    pub connect_timeout: Duration,
    /// `-v`: a backend may say how it serves a request (a fallback taken).
    pub verbose: bool,
}

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(60);

impl BackendConfig {
    /// The address as output shows it: the user, and `***` for a password
    /// the address held (never the password).
    pub fn shown(&self) -> String {
        self.access.show(&self.server.to_string())
    }

    /// The address's tuning, or each default.
    pub fn new(url: ServerUrl, connect_timeout: Duration) -> Self {
        let t = url.tuning;
        let default_ttl = url.server.scheme().default_ttl;
        BackendConfig {
            server: url.server,
            access: url.access,
            session_timeout: t.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT),
            ttl: t.ttl.unwrap_or(default_ttl),
            queue_timeout: t.queue_timeout.unwrap_or(DEFAULT_QUEUE_TIMEOUT),
            connect_timeout,
            verbose: false,
        }
    }
}

/// Backend tuning carried in the address's query (`redis://h/0?ttl=30s`), so
/// a new backend adds parameters to its scheme, not global flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    pub session_timeout: Option<Duration>,
    pub ttl: Option<Duration>,
    pub queue_timeout: Option<Duration>,
}

/// A `--server` value: the service and the tuning its address carries.
#[derive(Debug, Clone)]
pub struct ServerUrl {
    pub server: Arc<dyn ServerAddress>,
    pub tuning: Tuning,
    pub access: secret::Access,
}

impl ServerUrl {
    /// An address without tuning or credentials of its own.
    pub fn plain(server: impl ServerAddress + 'static) -> ServerUrl {
        ServerUrl {
            server: Arc::new(server),
            tuning: Tuning::default(),
            access: secret::Access::default(),
        }
    }
}

pub const DEFAULT_SERVER: &str = "127.0.0.1:22119";

impl std::str::FromStr for ServerUrl {
    type Err = String;

    /// Finds the scheme in [`BACKENDS`]; every message quotes the address
    /// masked, never its password.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let parts = address::Parts::split(s)?;
        match BACKENDS.iter().find(|b| b.names.contains(&parts.scheme)) {
            Some(scheme) => (scheme.parse)(&parts),
            None if LEFT_OUT.iter().any(|(n, _)| *n == parts.scheme) => {
                let feature = LEFT_OUT
                    .iter()
                    .find(|(n, _)| *n == parts.scheme)
                    .map(|(_, f)| *f);
                Err(format!(
                    "'{}': this lc-cli was built without the {}:// backend (build it with `--features {}`)",
                    parts.shown,
                    parts.scheme,
                    feature.unwrap_or_default()
                ))
            }
            None => Err(format!(
                "unknown server scheme in '{}' (use {})",
                parts.shown,
                scheme_list()
            )),
        }
    }
}

/// `host:port, lc://, zk://, ... or postgresql://`, from the table.
fn scheme_list() -> String {
    let forms: Vec<String> = BACKENDS
        .iter()
        .flat_map(|b| b.names.iter())
        .map(|n| match *n {
            "" => "host:port".to_string(),
            n => format!("{n}://"),
        })
        .collect();
    match forms.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => forms.join(""),
    }
}

/// What the well-known port of another backend in `addr` suggests, for a
/// built-in-protocol address that got no Locking-Center answer.
pub fn port_hint(addr: &str) -> String {
    let (host, port) = match addr.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok()),
        None => (addr, None),
    };
    let other = BACKENDS
        .iter()
        .filter(|b| !b.names.contains(&""))
        .find(|b| Some(b.default_port) == port);
    match (other, port) {
        (Some(b), Some(port)) => format!(
            " ({port} is {}'s port: use --server {}://{host}:{port})",
            b.service, b.names[0]
        ),
        (None, Some(80 | 443 | 8080)) => " (an HTTP port?)".to_string(),
        _ => String::new(),
    }
}

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

/// The one check of a mode against the backend's capabilities: a shared or
/// limited request is refused, never served as an exclusive lock.
pub fn check_mode(server: &dyn ServerAddress, shown: &str, mode: LockMode) -> Result<()> {
    let scheme = server.scheme();
    let who = format!("lc-cli's {} backend", scheme.service);
    match scheme.caps.refusal(&who, mode) {
        None => Ok(()),
        Some(reason) => Err(BackendError::Unsupported {
            server: shown.to_string(),
            reason,
        }),
    }
}

/// The one check of keys and sources, before anything is sent: the limits
/// of the one-byte protocol (a key of 1 to 127 bytes, a source of up to 127), which
/// every backend keeps so a key means the same thing on each, then the
/// naming rule of the backend at `server`.
pub fn check_names(
    server: Option<&dyn ServerAddress>,
    keys: &[&str],
    sources: &[&str],
) -> Result<()> {
    for key in keys {
        let problem = crate::proto::check_key(key.as_bytes())
            .err()
            .map(|e| e.to_string())
            .or_else(|| server.and_then(|s| (s.scheme().key_problem)(key)));
        if let Some(reason) = problem {
            return Err(BackendError::BadKey {
                key: key.to_string(),
                reason,
            });
        }
    }
    for source in sources {
        if let Err(e) = crate::proto::check_source(source.as_bytes()) {
            return Err(BackendError::BadSource {
                source_name: source.to_string(),
                reason: e.to_string(),
            });
        }
    }
    Ok(())
}

/// No naming rule beyond the shared limits.
pub(crate) fn any_key(_key: &str) -> Option<String> {
    None
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
}

/// What happened to a lock request.
pub enum Acquired {
    Held(Box<dyn HeldLock>),
    /// `nonblock` and the key is held by someone else.
    Busy,
    /// The cancellation token fired first (timeout, signal); the request has
    /// left the service's queue.
    Cancelled,
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
}

impl LostReason {
    /// A loss with no deadline of its own.
    pub fn new(reason: impl Into<String>) -> Self {
        LostReason {
            reason: reason.into(),
            kill_by: None,
        }
    }

    /// A loss whose command must be gone by `kill_by`.
    pub fn kill_by(reason: impl Into<String>, kill_by: std::time::Instant) -> Self {
        LostReason {
            reason: reason.into(),
            kill_by: Some(kill_by),
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
        matches!(self, BackendError::Unavailable { .. })
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

    /// Who holds `key`, where the service knows it (None: free, or not
    /// said). From `keys` unless a backend has a cheaper way.
    async fn holder(&self, key: &str) -> Result<Option<KeyInfo>> {
        Ok(self.keys().await?.into_iter().find(|k| k.key == key))
    }

    /// What the service is and whether a lock could be taken now (`lc-cli
    /// ping`); an error where it cannot be reached or refuses us.
    async fn ping(&self) -> Result<ping::PingReport>;

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

    /// Variables the service's own tools set for a holder's command
    /// (etcdctl lock's `ETCD_LOCK_KEY`, `ETCD_LOCK_REV`).
    fn env(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Resolves when the lock is lost; never, for services without leases.
    async fn lost(&mut self) -> LostReason;

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

    /// Leaves the lock held after this process exits (`lock` without a command).
    async fn detach(self: Box<Self>) -> Result<()>;
}

/// Opens the backend the address names.
pub async fn connect(config: &BackendConfig) -> Result<Box<dyn Backend>> {
    config.server.connect(config).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(s: &str) -> String {
        let url: ServerUrl = s.parse().unwrap();
        BackendConfig::new(url, DEFAULT_CONNECT_TIMEOUT).shown()
    }

    #[test]
    fn each_scheme_is_found_in_the_table() {
        assert_eq!(shown("h:1"), "h:1");
        assert_eq!(shown("zk://z"), "zk://z:2181/lc-cli");
        assert_eq!(shown("redis://r"), "redis://r:6379/0");
        assert_eq!(shown("rediss://u:pw@r"), "rediss://u:***@r:6379/0");
        assert_eq!(shown("etcd://e"), "etcd://e:2379");
        assert_eq!(shown("postgresql://u@p/d"), "postgres://u@p:5432/d");
        let e = "http://x".parse::<ServerUrl>().unwrap_err();
        assert!(
            e.contains("use host:port, lc://, lcs://, zk://, redis://, rediss://, etcd://, postgres:// or postgresql://"),
            "{e}"
        );
        let e = "http://u:pw@x".parse::<ServerUrl>().unwrap_err();
        assert!(!e.contains("pw"), "{e}");
    }

    #[test]
    fn every_scheme_name_and_port_is_unique() {
        let names: Vec<_> = BACKENDS.iter().flat_map(|b| b.names.iter()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        let mut ports: Vec<_> = BACKENDS.iter().map(|b| b.default_port).collect();
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), BACKENDS.len());
    }

    /// The `--server` help is written by hand: it must name every scheme
    /// and every parameter of the table.
    #[test]
    fn the_server_help_names_every_scheme_and_parameter() {
        use clap::CommandFactory;
        let cli = crate::cli::Cli::command();
        let keys = cli.find_subcommand("keys").unwrap();
        let arg = keys
            .get_arguments()
            .find(|a| a.get_id() == "server")
            .unwrap();
        let help = arg.get_help().unwrap().to_string();
        for b in BACKENDS {
            // Its main name (aliases such as postgresql:// may go unsaid).
            let name = b.names.iter().find(|n| !n.is_empty()).unwrap();
            assert!(help.contains(&format!("{name}://")), "{name}:// in {help}");
            for param in b.params {
                assert!(help.contains(&format!("{param}=")), "{param}= in {help}");
            }
        }
    }

    #[test]
    fn ttl_defaults_come_from_the_scheme() {
        let config = BackendConfig::new("etcd://e".parse().unwrap(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.ttl, Duration::from_secs(10));
        let config = BackendConfig::new("redis://r".parse().unwrap(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.ttl, DEFAULT_TTL);
    }

    #[test]
    fn port_hints_name_the_other_backends() {
        assert!(port_hint("127.0.0.1:6379").contains("redis://127.0.0.1:6379"));
        assert!(port_hint("zk1:2181").contains("zk://zk1:2181"));
        assert!(port_hint("e:2379").contains("etcd://e:2379"));
        assert!(port_hint("p:5432").contains("postgres://p:5432"));
        assert!(port_hint("h:8080").contains("HTTP"));
        assert_eq!(port_hint("h:22119"), "");
    }

    #[test]
    fn modes_are_refused_from_the_capabilities() {
        let etcd: ServerUrl = "etcd://e".parse().unwrap();
        let e = check_mode(&*etcd.server, "etcd://e", LockMode::Shared).unwrap_err();
        assert!(
            e.to_string()
                .contains("lc-cli's etcd backend cannot take shared or limited locks"),
            "{e}"
        );
        assert!(check_mode(&*etcd.server, "x", LockMode::Exclusive).is_ok());
        let pg: ServerUrl = "postgres://u@h/d".parse().unwrap();
        assert!(check_mode(&*pg.server, "x", LockMode::Shared).is_ok());
        let e = check_mode(
            &*pg.server,
            "x",
            LockMode::Limit(std::num::NonZeroU32::new(2).unwrap()),
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot take --limit 2"), "{e}");
        let lc: ServerUrl = "h:1".parse().unwrap();
        assert!(check_mode(
            &*lc.server,
            "x",
            LockMode::Limit(std::num::NonZeroU32::new(3).unwrap())
        )
        .is_ok());
        assert!(!pg.server.keeps_detached_holds() && lc.server.keeps_detached_holds());
    }

    /// A reference server's refusal comes from its capabilities, worded
    /// as before they were.
    #[test]
    fn a_reference_servers_refusal_comes_from_its_capabilities() {
        let caps = lc::address::REFERENCE_CAPS;
        assert_eq!(caps.refusal("this server", LockMode::Exclusive), None);
        let mode = LockMode::limit(2);
        assert_eq!(
            caps.refusal("this server", mode).unwrap(),
            format!(
                "this server cannot take shared or limited locks (asked for {mode}; it answered '-', as a reference Locking-Center server does)"
            )
        );
        let etcd = etcd::address::SCHEME.caps;
        assert_eq!(
            etcd.refusal("lc-cli's etcd backend", LockMode::Shared)
                .unwrap(),
            format!(
                "lc-cli's etcd backend cannot take shared or limited locks (asked for {})",
                LockMode::Shared
            )
        );
    }

    #[test]
    fn names_are_checked_once_with_the_backends_rule() {
        let zk: ServerUrl = "zk://z".parse().unwrap();
        assert!(check_names(Some(&*zk.server), &["a/b"], &[]).is_ok());
        assert!(check_names(Some(&*zk.server), &["a//b"], &[]).is_err());
        assert!(check_names(None, &[""], &[]).is_err());
        assert!(check_names(None, &[&"k".repeat(128)], &[]).is_err());
        assert!(check_names(None, &[], &[&"s".repeat(256)]).is_err());
        assert!(check_names(None, &["k"], &["s"]).is_ok());
    }
}
