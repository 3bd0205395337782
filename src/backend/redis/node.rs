//! One Redis server: a quorum multiplexed connection, made again after a
//! transport error, dedicated connections for blocking waits, and how long
//! the server has been up (a node restarted empty must not vouch for a
//! lock until it has been up for a lease: see `Quorum::counts`).

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, ConnectionAddr, FromRedisValue,
    IntoConnectionInfo, RedisConnectionInfo, RedisError, ScriptInvocation, TlsCertificates,
};

use crate::backend::secret::{Access, Tls};
use tokio::sync::Mutex;

/// What went wrong on one node.
#[derive(Debug, Clone)]
pub(super) enum NodeError {
    /// Not reached, or no answer in time: the node may be down.
    Transport(String),
    /// The node answered with an error (a script error, a key of the wrong type).
    Server(String),
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Transport(s) | NodeError::Server(s) => f.write_str(s),
        }
    }
}

pub(super) type NodeResult<T> = std::result::Result<T, NodeError>;

pub(super) struct Node {
    pub addr: String,
    client: Client,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    conn: Mutex<Option<MultiplexedConnection>>,
    /// The server process the quorum connection reaches, learnt when the
    /// connection is made: a restart always breaks the connection, so a
    /// new process is always looked at before it answers anything.
    incarnation: std::sync::Mutex<Option<Incarnation>>,
}

/// One run of a server process (`INFO`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Incarnation {
    run_id: String,
    /// The latest moment it can have started: `uptime_in_seconds` is the
    /// difference of two whole-second clock readings, so more than
    /// `uptime - 1` s before the answer arrived.
    up_since: Instant,
    /// It writes every change to its append-only file before answering
    /// (`appendonly yes`, `appendfsync always`): a restart keeps its holds.
    durable: bool,
    /// `appendonly yes`, whatever its fsync policy (for the message only).
    aof: bool,
}

/// A server whose word does not count yet (see `Node::vouches`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Uncounted {
    /// How long it has been up, at least.
    pub up: Duration,
    /// How long until it counts.
    pub left: Duration,
    /// Its AOF is on, but not synced on every write.
    pub aof: bool,
}

/// A field of an `INFO` answer.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
}

/// `run_id`, `uptime_in_seconds` and whether the AOF is on, from `INFO`.
fn parse_info(info: &str) -> Option<(String, u64, bool)> {
    Some((
        info_field(info, "run_id")?.to_string(),
        info_field(info, "uptime_in_seconds")?.parse().ok()?,
        info_field(info, "aof_enabled") == Some("1"),
    ))
}

/// The client for one node: AUTH (ACL user or the password alone) on every
/// connection it makes, over TLS for `rediss://`.
fn client_for(addr: &str, db: i64, access: &Access) -> std::result::Result<Client, String> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("'{addr}' is not HOST:PORT"))?;
    let mut redis = RedisConnectionInfo::default().set_db(db);
    if let Some(user) = &access.user {
        redis = redis.set_username(user);
    }
    if let Some(password) = &access.password {
        redis = redis.set_password(password.expose());
    }
    let Some(tls) = &access.tls else {
        let info = ConnectionAddr::Tcp(host.to_string(), port)
            .into_connection_info()
            .map_err(|e| e.to_string())?
            .set_redis_settings(redis);
        return Client::open(info).map_err(|e| e.to_string());
    };
    // One crypto provider for the process (a second install is a no-op).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client_tls = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: Tls::read(cert, "client certificate")?,
            client_key: Tls::read(key, "client key")?,
        }),
        (None, None) => None,
        _ => return Err("a client certificate needs both cert= and key=".into()),
    };
    let root_cert = match &tls.ca {
        Some(ca) => Some(Tls::read(ca, "CA file")?),
        None => None,
    };
    let info = ConnectionAddr::TcpTls {
        host: host.to_string(),
        port,
        insecure: false,
        tls_params: None,
    }
    .into_connection_info()
    .map_err(|e| e.to_string())?
    .set_redis_settings(redis);
    Client::build_with_tls(
        info,
        TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|e| e.to_string())
}

/// How a node error that refused lc-cli's credentials begins: trying
/// again does not help, and it is no protocol error.
pub(super) const REFUSED: &str = "credentials: ";
/// How a failed TLS handshake (an untrusted certificate) begins: as
/// unreachable, but not worth retrying.
pub(super) const UNTRUSTED: &str = "TLS: ";

/// A wrong or missing password, or an ACL that forbids us.
fn is_refusal(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

/// A TLS handshake that failed: the server's certificate is not trusted.
fn is_untrusted(e: &RedisError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        source = s.source();
    }
    // The TLS error reaches us as an I/O error's text.
    e.is_io_error() && e.to_string().contains("peer certificate")
}

fn is_transport(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

impl Node {
    pub(super) fn new(
        addr: &str,
        db: i64,
        access: &Access,
        connect_timeout: Duration,
    ) -> std::result::Result<Node, String> {
        let client = client_for(addr, db, access)?;
        // A script answers in well under a millisecond; a node that takes
        // longer than the connect timeout to answer is treated as down.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(connect_timeout));
        Ok(Node {
            addr: addr.to_string(),
            client,
            config,
            connect_timeout,
            conn: Mutex::new(None),
            incarnation: std::sync::Mutex::new(None),
        })
    }

    async fn connect(&self, config: &AsyncConnectionConfig) -> NodeResult<MultiplexedConnection> {
        match tokio::time::timeout(
            self.connect_timeout + Duration::from_millis(100),
            self.client
                .get_multiplexed_async_connection_with_config(config),
        )
        .await
        {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) if is_refusal(&e) => Err(NodeError::Server(format!("{REFUSED}{e}"))),
            Ok(Err(e)) if is_untrusted(&e) => Err(NodeError::Server(format!("{UNTRUSTED}{e}"))),
            Ok(Err(e)) => Err(NodeError::Transport(e.to_string())),
            Err(_) => Err(NodeError::Transport(format!(
                "no connection within {:?}",
                self.connect_timeout
            ))),
        }
    }

    /// The quorum connection, made if there is none.
    pub(super) async fn conn(&self) -> NodeResult<MultiplexedConnection> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let mut c = self.connect(&self.config).await?;
        self.learn_incarnation(&mut c).await?;
        *guard = Some(c.clone());
        Ok(c)
    }

    /// Asks a new connection which server process it reaches (`INFO`, whose
    /// default sections hold both `server` and `persistence` on every
    /// version) and how it syncs its AOF (`CONFIG GET`, which a hosted Redis
    /// may refuse: then it is taken as not durable).
    async fn learn_incarnation(&self, c: &mut MultiplexedConnection) -> NodeResult<()> {
        let info: String = redis::cmd("INFO").query_async(c).await.map_err(|e| {
            if is_refusal(&e) {
                NodeError::Server(format!("{REFUSED}{e}"))
            } else if is_transport(&e) {
                NodeError::Transport(e.to_string())
            } else {
                NodeError::Server(format!("INFO: {e}"))
            }
        })?;
        let answered = Instant::now();
        let (run_id, uptime, aof) = parse_info(&info)
            .ok_or_else(|| NodeError::Server("INFO gave no run_id and uptime_in_seconds".into()))?;
        let always = aof
            && redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendfsync")
                .query_async::<Vec<String>>(c)
                .await
                .is_ok_and(|kv| kv.get(1).map(String::as_str) == Some("always"));
        // Whole seconds on both ends: up for more than `uptime - 1` only.
        let up_since = answered
            .checked_sub(Duration::from_secs(uptime.saturating_sub(1)))
            .unwrap_or(answered);
        let mut known = self.incarnation.lock().unwrap();
        // The same process seen again keeps its (earlier, still safe) start.
        let start = match known.as_ref() {
            Some(k) if k.run_id == run_id => k.up_since,
            _ => up_since,
        };
        *known = Some(Incarnation {
            run_id,
            up_since: start,
            durable: always,
            aof,
        });
        Ok(())
    }

    /// Whether this server's word on a lock may count: it has been up for
    /// at least `lease` (a restart that emptied it is a lease behind us), or
    /// it keeps every write across a restart.
    pub(super) fn vouches(&self, lease: Duration) -> bool {
        self.incarnation
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|i| i.durable || i.up_since.elapsed() >= lease)
    }

    /// How this server stands while its word does not count yet (see
    /// `vouches`): None once it does, or before a connection has learnt
    /// which process it is.
    pub(super) fn uncounted(&self, lease: Duration) -> Option<Uncounted> {
        let known = self.incarnation.lock().unwrap();
        let i = known.as_ref()?;
        let up = i.up_since.elapsed();
        (!i.durable && up < lease).then(|| Uncounted {
            up,
            left: lease - up,
            aof: i.aof,
        })
    }

    fn failed(&self, e: RedisError) -> NodeError {
        if is_transport(&e) {
            // Made again on the next call.
            if let Ok(mut guard) = self.conn.try_lock() {
                *guard = None;
            }
            NodeError::Transport(e.to_string())
        } else {
            NodeError::Server(e.to_string())
        }
    }

    pub(super) async fn run<T: FromRedisValue>(&self, inv: &ScriptInvocation<'_>) -> NodeResult<T> {
        let mut c = self.conn().await?;
        inv.invoke_async(&mut c).await.map_err(|e| self.failed(e))
    }

    pub(super) async fn cmd<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> NodeResult<T> {
        let mut c = self.conn().await?;
        cmd.query_async(&mut c).await.map_err(|e| self.failed(e))
    }

    /// A subscriber connection of its own (`keys --watch`'s feed).
    pub(super) async fn pubsub(&self) -> NodeResult<redis::aio::PubSub> {
        match tokio::time::timeout(self.connect_timeout, self.client.get_async_pubsub()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(e)) => Err(self.failed(e)),
            Err(_) => Err(NodeError::Transport(format!(
                "no connection within {:?}",
                self.connect_timeout
            ))),
        }
    }

    /// A connection of its own for BLPOP (a blocked command would hold up
    /// everything queued behind it on the quorum one).
    pub(super) async fn blocking_conn(&self) -> NodeResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        self.connect(&config).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_server_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c9a\r\ntcp_port:6379\r\nuptime_in_seconds:42\r\n# Persistence\r\naof_enabled:0\r\n";
        assert_eq!(parse_info(info), Some(("4f1c9a".into(), 42, false)));
        let aof = info.replace("aof_enabled:0", "aof_enabled:1");
        assert_eq!(parse_info(&aof), Some(("4f1c9a".into(), 42, true)));
        assert_eq!(parse_info("# Server\r\nuptime_in_seconds:1\r\n"), None);
    }
}
