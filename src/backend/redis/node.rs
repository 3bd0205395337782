//! One Redis server: a shared multiplexed connection, made again after a
//! transport error, and dedicated connections for blocking waits.

use std::time::Duration;

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

    /// The shared connection, made if there is none.
    pub async fn conn(&self) -> NodeResult<MultiplexedConnection> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let c = self.connect(&self.config).await?;
        *guard = Some(c.clone());
        Ok(c)
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
    /// everything queued behind it on the shared one).
    pub async fn blocking_conn(&self) -> NodeResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        self.connect(&config).await
    }
}
