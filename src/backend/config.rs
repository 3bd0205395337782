//! [`BackendConfig`]: how a backend is reached and tuned, and the defaults.

use std::sync::Arc;
use std::time::Duration;

use super::{secret, ServerAddress, ServerUrl};

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
/// ZooKeeper's session timeout when the address gives no `session-timeout=`
/// (not the built-in server's reclaim grace).
pub const DEFAULT_ZK_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
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
            session_timeout: t.session_timeout.unwrap_or(DEFAULT_ZK_SESSION_TIMEOUT),
            ttl: t.ttl.unwrap_or(default_ttl),
            queue_timeout: t.queue_timeout.unwrap_or(DEFAULT_QUEUE_TIMEOUT),
            connect_timeout,
            verbose: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_defaults_come_from_the_scheme() {
        let config = BackendConfig::new("etcd://e".parse().unwrap(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.ttl, Duration::from_secs(10));
        let config = BackendConfig::new("redis://r".parse().unwrap(), DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(config.ttl, DEFAULT_TTL);
    }
}
