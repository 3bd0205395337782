//! The lock-backend trait, its error type, and parsing of `--server`.
//!
//! Commands see only [`Backend`] and [`HeldLock`]; which service is behind
//! them is decided once, from the server address, by [`connect`].

pub mod etcd;
pub mod lc;
pub mod ping;
pub mod postgres;
pub mod redis;
pub mod secret;
pub(crate) mod tcp;
pub mod zk;

use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// How a backend is reached and tuned; built from the command line, never a
/// clap type.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    pub server: ServerSpec,
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
/// etcdctl lock's default session TTL.
pub const DEFAULT_ETCD_TTL: Duration = Duration::from_secs(10);
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
        let default_ttl = match url.spec {
            ServerSpec::Etcd { .. } => DEFAULT_ETCD_TTL,
            _ => DEFAULT_TTL,
        };
        BackendConfig {
            server: url.spec,
            access: url.access,
            session_timeout: t.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT),
            ttl: t.ttl.unwrap_or(default_ttl),
            queue_timeout: t.queue_timeout.unwrap_or(DEFAULT_QUEUE_TIMEOUT),
            connect_timeout,
            verbose: false,
        }
    }
}

/// Where the lock service is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSpec {
    /// The Locking-Center protocol (the built-in server): `host:port` or
    /// `lc://host:port[?manager=host:port]`.
    Lc {
        addr: String,
        /// The manager port (`keys`), when it is not the lock port + 1.
        manager: Option<String>,
    },
    /// `zk://host:port[,host:port...][/path]`
    Zk { hosts: Vec<String>, root: String },
    /// `redis://host:port[,host:port...][/db]`: several hosts form a quorum.
    Redis { nodes: Vec<String>, db: i64 },
    /// `etcd://host:port[,host:port...][/prefix]`: the lock NAME is the
    /// etcd key prefix `PREFIX/NAME/` (`NAME/` without a prefix, as
    /// `etcdctl lock NAME` names it).
    Etcd {
        endpoints: Vec<String>,
        prefix: String,
    },
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DB` (or `postgresql://`):
    /// session advisory locks.
    Postgres(postgres::PgAddress),
}

impl ServerSpec {
    /// Whether a hold can outlive lc-cli (`lock KEY` without a command):
    /// not where a hold is a session's, as on PostgreSQL.
    pub fn keeps_detached_holds(&self) -> bool {
        !matches!(self, ServerSpec::Postgres(_))
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    pub spec: ServerSpec,
    pub tuning: Tuning,
    pub access: secret::Access,
}

pub const DEFAULT_SERVER: &str = "127.0.0.1:22119";
pub const DEFAULT_ZK_ROOT: &str = "/lc-cli";

/// The query parameters each scheme knows, for the docs and the errors.
pub const LC_PARAMS: &[&str] = &["manager"];
pub const ZK_PARAMS: &[&str] = &["session-timeout"];
pub const REDIS_PARAMS: &[&str] = &["ttl", "queue-timeout", "cacert", "cert", "key"];
pub const ETCD_PARAMS: &[&str] = &["ttl", "cacert", "cert", "key"];

/// Where each backend reads a password the address does not hold, as that
/// service's own client does (redis-cli, etcdctl); ZooKeeper's has none.
pub const REDIS_PASSWORD_ENV: &str = "REDISCLI_AUTH";
pub const ZK_PASSWORD_ENV: &str = "LC_ZK_PASSWORD";
pub const ETCD_USER_ENV: &str = "ETCDCTL_USER";
pub const ETCD_PASSWORD_ENV: &str = "ETCDCTL_PASSWORD";

impl std::fmt::Display for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerSpec::Lc {
                addr,
                manager: None,
            } => write!(f, "{addr}"),
            ServerSpec::Lc {
                addr,
                manager: Some(m),
            } => write!(f, "lc://{addr}?manager={m}"),
            ServerSpec::Zk { hosts, root } => write!(f, "zk://{}{}", hosts.join(","), root),
            ServerSpec::Redis { nodes, db } => write!(f, "redis://{}/{db}", nodes.join(",")),
            ServerSpec::Etcd { endpoints, prefix } if prefix.is_empty() => {
                write!(f, "etcd://{}", endpoints.join(","))
            }
            ServerSpec::Etcd { endpoints, prefix } => {
                write!(f, "etcd://{}/{prefix}", endpoints.join(","))
            }
            ServerSpec::Postgres(a) => write!(f, "{a}"),
        }
    }
}

impl std::str::FromStr for ServerSpec {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        s.parse::<ServerUrl>().map(|u| u.spec)
    }
}

impl std::str::FromStr for ServerUrl {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let s = s.trim();
        // Every message below quotes the address masked: never its password.
        let shown = secret::mask(s);
        let (base, query) = match s.split_once('?') {
            Some((b, q)) => (b, q),
            None => (s, ""),
        };
        let mut params = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some((name, value)) if !value.is_empty() => params.push((name, value)),
                _ => return Err(format!("'{pair}' in '{shown}' is not NAME=VALUE")),
            }
        }
        let unknown = |name: &str, scheme: &str, known: &[&str]| {
            format!(
                "unknown parameter '{name}' in '{shown}' ({scheme} knows {})",
                known.join(", ")
            )
        };
        let duration = |name: &str, value: &str| {
            crate::duration::parse_duration(value).map_err(|e| format!("{name} in '{shown}': {e}"))
        };
        let mut tuning = Tuning::default();
        let mut access = secret::Access::default();
        let pg = base
            .strip_prefix("postgres://")
            .or_else(|| base.strip_prefix("postgresql://"));
        let redis = base
            .strip_prefix("redis://")
            .map(|r| (r, false))
            .or_else(|| base.strip_prefix("rediss://").map(|r| (r, true)));
        let spec = if let Some(rest) = pg {
            ServerSpec::Postgres(postgres::address::parse(rest, &params, s)?)
        } else if let Some(rest) = base.strip_prefix("zk://") {
            for (name, value) in params {
                match name {
                    "session-timeout" => tuning.session_timeout = Some(duration(name, value)?),
                    _ => return Err(unknown(name, "zk://", ZK_PARAMS)),
                }
            }
            let (a, rest) = split_credentials(rest, s, Some(ZK_PASSWORD_ENV))?;
            if a.password.is_some() && a.user.is_none() {
                return Err(format!(
                    "'{shown}': ZooKeeper's digest authentication needs a user (zk://USER:PASSWORD@HOSTS)"
                ));
            }
            access = a;
            parse_zk(&rest)?
        } else if let Some((rest, tls)) = redis {
            let mut t = secret::Tls::default();
            for (name, value) in params {
                match name {
                    "ttl" => tuning.ttl = Some(duration(name, value)?),
                    "queue-timeout" => tuning.queue_timeout = Some(duration(name, value)?),
                    "cacert" | "cert" | "key" if tls => tls_param(&mut t, name, value),
                    "cacert" | "cert" | "key" => {
                        return Err(format!(
                            "'{name}' in '{shown}' is a TLS setting: use rediss://"
                        ))
                    }
                    _ => return Err(unknown(name, "redis://", REDIS_PARAMS)),
                }
            }
            let (a, rest) = split_credentials(rest, s, Some(REDIS_PASSWORD_ENV))?;
            check_tls(&t, &shown)?;
            access = a;
            access.tls = tls.then_some(t);
            parse_redis(&rest)?
        } else if let Some(rest) = base.strip_prefix("etcd://") {
            let mut t = secret::Tls::default();
            let mut tls = false;
            for (name, value) in params {
                match name {
                    "ttl" => tuning.ttl = Some(duration(name, value)?),
                    "cacert" | "cert" | "key" => {
                        tls = true;
                        tls_param(&mut t, name, value)
                    }
                    _ => return Err(unknown(name, "etcd://", ETCD_PARAMS)),
                }
            }
            let (a, rest) = split_credentials(rest, s, Some(ETCD_PASSWORD_ENV))?;
            check_tls(&t, &shown)?;
            access = etcd_user_from_env(a);
            access.tls = tls.then_some(t);
            parse_etcd(&rest)?
        } else {
            let addr = base.strip_prefix("lc://").unwrap_or(base);
            if addr.contains("://") {
                return Err(format!(
                    "unknown server scheme in '{shown}' (use host:port, lc://, zk://, redis://, rediss://, etcd:// or postgres://)"
                ));
            }
            if addr.contains('@') {
                return Err(format!(
                    "'{shown}': the built-in server takes no credentials (see the README's Security section)"
                ));
            }
            let mut manager = None;
            for (name, value) in params {
                match name {
                    "manager" => manager = Some(single_host(value, 22120, s)?),
                    _ => return Err(unknown(name, "lc://", LC_PARAMS)),
                }
            }
            ServerSpec::Lc {
                addr: single_host(addr, 22119, s)?,
                manager,
            }
        };
        Ok(ServerUrl {
            spec,
            tuning,
            access,
        })
    }
}

/// `[USER[:PASSWORD]@]HOSTS[/PATH]` -> the credentials and `HOSTS[/PATH]`.
fn split_credentials(
    rest: &str,
    whole: &str,
    env_password: Option<&str>,
) -> std::result::Result<(secret::Access, String), String> {
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (access, hosts) = secret::split_userinfo(authority, whole, env_password)?;
    Ok((access, format!("{hosts}{path}")))
}

/// etcdctl's ETCDCTL_USER (`USER` or `USER:PASSWORD`), when the address
/// names no user.
fn etcd_user_from_env(mut access: secret::Access) -> secret::Access {
    if access.user.is_some() {
        return access;
    }
    let Ok(value) = std::env::var(ETCD_USER_ENV) else {
        return access;
    };
    match value.split_once(':') {
        Some((user, password)) => {
            access.user = Some(user.to_string());
            if access.password.is_none() {
                access.password = Some(secret::Secret::new(password.to_string()));
            }
        }
        None if !value.is_empty() => access.user = Some(value),
        None => {}
    }
    access
}

/// A client certificate is a pair.
fn check_tls(t: &secret::Tls, shown: &str) -> std::result::Result<(), String> {
    if t.cert.is_some() != t.key.is_some() {
        return Err(format!(
            "'{shown}': a client certificate needs both cert= and key="
        ));
    }
    Ok(())
}

fn tls_param(t: &mut secret::Tls, name: &str, value: &str) {
    let path = Some(std::path::PathBuf::from(value));
    match name {
        "cacert" => t.ca = path,
        "cert" => t.cert = path,
        _ => t.key = path,
    }
}

fn parse_zk(rest: &str) -> std::result::Result<ServerSpec, String> {
    let (hosts, root) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, DEFAULT_ZK_ROOT),
    };
    let root = root.trim_end_matches('/');
    let root = if root.is_empty() {
        DEFAULT_ZK_ROOT
    } else {
        root
    };
    Ok(ServerSpec::Zk {
        hosts: host_list(hosts, 2181)?,
        root: root.to_string(),
    })
}

fn parse_redis(rest: &str) -> std::result::Result<ServerSpec, String> {
    let (hosts, db) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let db = if db.is_empty() {
        0
    } else {
        db.parse()
            .map_err(|_| format!("'{db}' is not a Redis database number"))?
    };
    Ok(ServerSpec::Redis {
        nodes: host_list(hosts, 6379)?,
        db,
    })
}

fn parse_etcd(rest: &str) -> std::result::Result<ServerSpec, String> {
    let (hosts, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    Ok(ServerSpec::Etcd {
        endpoints: host_list(hosts, 2379)?,
        prefix: prefix.trim_matches('/').to_string(),
    })
}

fn single_host(addr: &str, default_port: u16, whole: &str) -> std::result::Result<String, String> {
    let mut hosts = host_list(addr, default_port)?;
    if hosts.len() != 1 {
        return Err(format!("'{whole}': the lock server is a single host:port"));
    }
    Ok(hosts.remove(0))
}

/// `a:1,b,c:3` -> `["a:1", "b:DEFAULT", "c:3"]`.
fn host_list(list: &str, default_port: u16) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    for host in list.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err(format!("empty host in '{list}'"));
        }
        let has_port = match host.rsplit_once(':') {
            Some((h, port)) if !h.ends_with(':') && !port.contains(']') => {
                port.parse::<u16>()
                    .map_err(|_| format!("'{port}' is not a port number in '{host}'"))?;
                true
            }
            _ => false,
        };
        out.push(if has_port {
            host.to_string()
        } else {
            format!("{host}:{default_port}")
        });
    }
    Ok(out)
}

pub use crate::mode::LockMode;

/// The refusals of a request's mode, where a backend needs them.
impl LockMode {
    /// Refuses a shared or limited request on a backend that can take only
    /// exclusive locks: the single spot each such backend calls.
    pub(crate) fn exclusive_only(self, server: &str, why: &str) -> Result<()> {
        match self {
            LockMode::Exclusive => Ok(()),
            _ => Err(BackendError::Unsupported {
                server: server.to_string(),
                reason: format!("{why} cannot take shared or limited locks (asked for {self})"),
            }),
        }
    }

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
    #[error("invalid key '{key}': {reason}")]
    BadKey { key: String, reason: String },
    #[error("invalid source '{source_name}': {reason}")]
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
    /// Refuses a key this service cannot hold, before any request is sent.
    fn check_key(&self, key: &str) -> Result<()>;

    /// Waits in line for the key (or only tries, with `nonblock`). When
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

/// The key limits of the one-byte protocol (1 to 127 bytes), which every
/// backend keeps so a key means the same thing on each.
pub(crate) fn check_key_limits(key: &str) -> Result<()> {
    crate::proto::check_key(key.as_bytes()).map_err(|e| BackendError::BadKey {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

/// A key a backend's naming rules refuse (`problem`), as the error that says so.
pub(crate) fn refuse_key(key: &str, problem: Option<String>) -> Result<()> {
    match problem {
        None => Ok(()),
        Some(reason) => Err(BackendError::BadKey {
            key: key.to_string(),
            reason,
        }),
    }
}

/// Picks the implementation for the server address.
pub async fn connect(config: &BackendConfig) -> Result<Box<dyn Backend>> {
    match &config.server {
        ServerSpec::Lc { .. } => Ok(Box::new(lc::LcBackend::new(config))),
        ServerSpec::Zk { .. } => Ok(Box::new(zk::ZkBackend::connect(config).await?)),
        ServerSpec::Redis { .. } => Ok(Box::new(redis::RedisBackend::connect(config).await?)),
        ServerSpec::Etcd { .. } => Ok(Box::new(etcd::EtcdBackend::connect(config).await?)),
        ServerSpec::Postgres(a) => Ok(Box::new(postgres::PgBackend::connect(a, config).await?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> ServerSpec {
        s.parse().unwrap()
    }

    #[test]
    fn lc_forms() {
        assert_eq!(
            parse("127.0.0.1:22119"),
            ServerSpec::Lc {
                addr: "127.0.0.1:22119".into(),
                manager: None
            }
        );
        assert_eq!(
            parse("lc://h:1"),
            ServerSpec::Lc {
                addr: "h:1".into(),
                manager: None
            }
        );
        assert_eq!(
            parse("lockhost"),
            ServerSpec::Lc {
                addr: "lockhost:22119".into(),
                manager: None
            }
        );
        assert!("a:1,b:2".parse::<ServerSpec>().is_err());
        assert!("http://x".parse::<ServerSpec>().is_err());
        assert!("h:notaport".parse::<ServerSpec>().is_err());
    }

    #[test]
    fn zk_forms() {
        assert_eq!(
            parse("zk://z1:2181,z2/locks"),
            ServerSpec::Zk {
                hosts: vec!["z1:2181".into(), "z2:2181".into()],
                root: "/locks".into()
            }
        );
        assert_eq!(
            parse("zk://z1"),
            ServerSpec::Zk {
                hosts: vec!["z1:2181".into()],
                root: DEFAULT_ZK_ROOT.into()
            }
        );
    }

    #[test]
    fn redis_forms() {
        assert_eq!(
            parse("redis://r1:6379/2"),
            ServerSpec::Redis {
                nodes: vec!["r1:6379".into()],
                db: 2
            }
        );
        assert_eq!(
            parse("redis://a,b:7000,c"),
            ServerSpec::Redis {
                nodes: vec!["a:6379".into(), "b:7000".into(), "c:6379".into()],
                db: 0
            }
        );
        assert!("redis://a/x".parse::<ServerSpec>().is_err());
    }

    #[test]
    fn etcd_forms() {
        assert_eq!(
            parse("etcd://e1,e2:3000"),
            ServerSpec::Etcd {
                endpoints: vec!["e1:2379".into(), "e2:3000".into()],
                prefix: String::new()
            }
        );
        let u: ServerUrl = "etcd://127.0.0.1:5/locks/?ttl=3s".parse().unwrap();
        assert_eq!(u.tuning.ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.spec.to_string(), "etcd://127.0.0.1:5/locks");
        assert_eq!(u.spec.to_string().parse::<ServerSpec>().unwrap(), u.spec);
        let e = "etcd://e?session-timeout=3s"
            .parse::<ServerUrl>()
            .unwrap_err();
        assert!(e.contains("etcd:// knows ttl"), "{e}");
        let config = BackendConfig::new("etcd://e".parse().unwrap(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.ttl, DEFAULT_ETCD_TTL);
    }

    #[test]
    fn tuning_comes_from_the_query() {
        let u: ServerUrl = "redis://a,b,c/0?ttl=3s&queue-timeout=1m".parse().unwrap();
        assert_eq!(u.tuning.ttl, Some(Duration::from_secs(3)));
        assert_eq!(u.tuning.queue_timeout, Some(Duration::from_secs(60)));
        assert_eq!(u.spec.to_string(), "redis://a:6379,b:6379,c:6379/0");
        let u: ServerUrl = "zk://h1,h2/locks?session-timeout=10s".parse().unwrap();
        assert_eq!(u.tuning.session_timeout, Some(Duration::from_secs(10)));
        assert_eq!(u.spec.to_string(), "zk://h1:2181,h2:2181/locks");
        let u: ServerUrl = "lc://h:5?manager=h:7".parse().unwrap();
        assert_eq!(
            u.spec,
            ServerSpec::Lc {
                addr: "h:5".into(),
                manager: Some("h:7".into())
            }
        );
        assert_eq!(u.spec.to_string(), "lc://h:5?manager=h:7");
        assert_eq!(u.spec.to_string().parse::<ServerUrl>().unwrap(), u);
        let config = BackendConfig::new("redis://r".parse().unwrap(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.ttl, DEFAULT_TTL);
    }

    #[test]
    fn credentials_and_tls_are_parsed_and_never_shown() {
        let u: ServerUrl = "rediss://locker:pw%2Fx@r1,r2:7000/3?cacert=/ca.pem&ttl=3s"
            .parse()
            .unwrap();
        assert_eq!(
            u.spec,
            ServerSpec::Redis {
                nodes: vec!["r1:6379".into(), "r2:7000".into()],
                db: 3
            }
        );
        assert_eq!(u.access.user.as_deref(), Some("locker"));
        assert_eq!(u.access.password.as_ref().map(|p| p.expose()), Some("pw/x"));
        let tls = u.access.tls.clone().unwrap();
        assert_eq!(tls.ca, Some("/ca.pem".into()));
        let config = BackendConfig::new(u, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.shown(), "rediss://locker:***@r1:6379,r2:7000/3");
        let u: ServerUrl = "zk://ops:pw@z1/locks".parse().unwrap();
        assert_eq!(u.spec.to_string(), "zk://z1:2181/locks");
        assert_eq!(u.access.user.as_deref(), Some("ops"));
        let e = "zk://:pw@z1".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("needs a user") && !e.contains("pw@"), "{e}");
        let e = "redis://u:pw@r?cacert=/x".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("rediss://") && e.contains("u:***@"), "{e}");
        let e = "rediss://r?cert=/c".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("cert= and key="), "{e}");
        assert!("lc://u:pw@h:1".parse::<ServerUrl>().is_err());
        let u: ServerUrl = "etcd://root:pw@e1?cacert=/ca".parse().unwrap();
        assert!(u.access.tls.is_some());
        assert_eq!(u.spec.to_string(), "etcd://e1:2379");
    }

    #[test]
    fn unknown_or_bad_parameters_are_refused_naming_the_known_ones() {
        let e = "redis://r?tll=3s".parse::<ServerUrl>().unwrap_err();
        assert!(
            e.contains("'tll'") && e.contains("ttl, queue-timeout"),
            "{e}"
        );
        let e = "zk://z?ttl=3s".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("session-timeout"), "{e}");
        let e = "h:1?session-timeout=3s".parse::<ServerUrl>().unwrap_err();
        assert!(e.contains("manager"), "{e}");
        assert!("redis://r?ttl".parse::<ServerUrl>().is_err());
        assert!("redis://r?ttl=-1".parse::<ServerUrl>().is_err());
        assert!("lc://h:1?manager=a:1,b:2".parse::<ServerUrl>().is_err());
    }
}
