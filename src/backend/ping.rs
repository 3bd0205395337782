//! What `lc-cli ping` learns from a service: a plain report each backend
//! fills, printed by `cmd::ping`.

use std::time::Duration;

/// One `ping`: what the service is, and what would make a lock wait now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PingReport {
    /// "lc-cli serve", "Locking-Center server", "ZooKeeper", "Redis", "etcd", "PostgreSQL".
    pub service: String,
    /// As the service tells it; None where it does not.
    pub version: Option<String>,
    /// One request and its answer (the first member's, on an ensemble).
    pub round_trip: Duration,
    /// Over TLS; None: the backend leaves it to the address (`cmd::ping`).
    pub tls: Option<bool>,
    /// Credentials were given and accepted; None: none given; Some(false):
    /// given but not checked (lc-cli serve without --token-file).
    pub authenticated: Option<bool>,
    /// The role the service gave the credentials (lc-cli serve's tokens).
    pub role: Option<String>,
    /// Why a lock would wait now (a node that does not count yet, a lost
    /// quorum), each with its remedy and how long; empty: a lock can be
    /// taken now.
    pub waits: Vec<String>,
    /// The members of a quorum or an ensemble, where there are several.
    pub nodes: Vec<NodeReport>,
}

/// One member of a quorum or ensemble.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeReport {
    pub addr: String,
    /// It answered.
    pub up: bool,
    /// Its answers count toward a lock now.
    pub counts: bool,
    pub version: Option<String>,
    /// Why it does not answer or count, or its role (leader, follower).
    pub note: Option<String>,
}

impl PingReport {
    pub fn ready(&self) -> bool {
        self.waits.is_empty()
    }

    /// "2 of 3 nodes": how many members answer, where there are several.
    pub fn answering(&self) -> Option<String> {
        if self.nodes.len() < 2 {
            return None;
        }
        let up = self.nodes.iter().filter(|n| n.up).count();
        Some(format!("{up} of {} nodes", self.nodes.len()))
    }
}
