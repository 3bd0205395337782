//! One Redis server: a quorum multiplexed connection, made again after a
//! transport error, dedicated connections for blocking waits, and how long
//! the server has been up (a node restarted empty must not vouch for a
//! lock until it has been up for a lease: see `Quorum::counts`).

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, FromRedisValue, RedisError, ScriptInvocation};
use tokio::sync::Mutex;

/// What went wrong on one node.
#[derive(Debug, Clone)]
pub enum NodeError {
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

pub type NodeResult<T> = std::result::Result<T, NodeError>;

pub struct Node {
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

fn is_transport(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

impl Node {
    pub fn new(
        addr: &str,
        db: i64,
        connect_timeout: Duration,
    ) -> std::result::Result<Node, String> {
        let client = Client::open(format!("redis://{addr}/{db}")).map_err(|e| e.to_string())?;
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
            Ok(Err(e)) => Err(NodeError::Transport(e.to_string())),
            Err(_) => Err(NodeError::Transport(format!(
                "no connection within {:?}",
                self.connect_timeout
            ))),
        }
    }

    /// The quorum connection, made if there is none.
    pub async fn conn(&self) -> NodeResult<MultiplexedConnection> {
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
            if is_transport(&e) {
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
        });
        Ok(())
    }

    /// Whether this server's word on a lock may count: it has been up for
    /// at least `lease` (a restart that emptied it is a lease behind us), or
    /// it keeps every write across a restart.
    pub fn vouches(&self, lease: Duration) -> bool {
        self.incarnation
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|i| i.durable || i.up_since.elapsed() >= lease)
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

    pub async fn run<T: FromRedisValue>(&self, inv: &ScriptInvocation<'_>) -> NodeResult<T> {
        let mut c = self.conn().await?;
        inv.invoke_async(&mut c).await.map_err(|e| self.failed(e))
    }

    pub async fn cmd<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> NodeResult<T> {
        let mut c = self.conn().await?;
        cmd.query_async(&mut c).await.map_err(|e| self.failed(e))
    }

    /// A connection of its own for BLPOP (a blocked command would hold up
    /// everything queued behind it on the quorum one).
    pub async fn blocking_conn(&self) -> NodeResult<MultiplexedConnection> {
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
