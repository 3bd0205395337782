//! `lc-cli ping` on Redis: every node is asked `INFO server` at once; a
//! lock can be taken now when a majority answers and counts (a node
//! restarted without persistence counts only once it has been up for a
//! lease: `Quorum::counts`).

use std::time::{Duration, Instant};

use super::node::{NodeError, REFUSED};
use super::RedisBackend;
use crate::backend::ping::{NodeReport, PingReport};
use crate::backend::{BackendError, Result};

impl RedisBackend {
    pub(super) async fn ping_nodes(&self) -> Result<PingReport> {
        let q = &self.quorum;
        let answers = q
            .all(|node| async move {
                let started = Instant::now();
                let info: String = node.cmd(redis::cmd("INFO").arg("server")).await?;
                Ok((started.elapsed(), version_of(&info)))
            })
            .await;
        if let Some(Err(NodeError::Server(e))) = answers
            .iter()
            .find(|a| matches!(a, Err(NodeError::Server(e)) if e.starts_with(REFUSED)))
        {
            return Err(BackendError::Refused {
                server: q.server.clone(),
                reason: e.clone(),
            });
        }
        let mut report = PingReport {
            service: "Redis".into(),
            ..PingReport::default()
        };
        let mut counting = 0;
        for (i, (answer, node)) in answers.iter().zip(&q.nodes).enumerate() {
            let mut n = NodeReport {
                addr: node.addr.clone(),
                ..NodeReport::default()
            };
            match answer {
                Ok((rtt, version)) => {
                    n.up = true;
                    n.version = version.clone();
                    if report.version.is_none() {
                        report.version = version.clone();
                        report.round_trip = *rtt;
                    }
                    n.counts = q.counts(i);
                    if n.counts {
                        counting += 1;
                    } else {
                        let left = node.counts_in(q.ttl).unwrap_or(q.ttl);
                        let why = fresh_node(&node.addr, q.ttl, left);
                        n.note = Some(why.clone());
                        report.waits.push(why);
                    }
                }
                Err(e) => n.note = Some(e.to_string()),
            }
            report.nodes.push(n);
        }
        let majority = q.majority();
        if counting >= majority {
            // A majority counts: a node that does not yet is no wait.
            report.waits.clear();
        } else if q.is_multi_node() {
            let up = report.nodes.iter().filter(|n| n.up).count();
            report.waits.insert(
                0,
                format!(
                    "{counting} of {} nodes count ({up} answer), a lock needs {majority}",
                    q.nodes.len()
                ),
            );
        }
        Ok(report)
    }
}

/// Why a node that answers does not count yet, the remedy, and how long.
fn fresh_node(addr: &str, ttl: Duration, left: Duration) -> String {
    format!(
        "{addr} was started without persistence: it counts once it has been up for the lease \
(ttl={ttl:?}), in {} s (or run it with appendonly yes and appendfsync always)",
        left.as_secs_f64().ceil() as u64
    )
}

/// `redis_version` from `INFO server`.
fn version_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_and_the_wait_are_read_and_said() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(version_of(info).as_deref(), Some("7.0.15"));
        assert_eq!(version_of("# Server\r\n"), None);
        let why = fresh_node(
            "r:1",
            Duration::from_secs(30),
            Duration::from_millis(28_100),
        );
        assert!(
            why.contains("in 29 s") && why.contains("appendfsync always"),
            "{why}"
        );
    }
}
