//! `lc-cli ping` on Redis: every node is asked `INFO server` at once; a
//! lock can be taken now when a majority answers and counts (a node
//! restarted without persistence counts only once it has been up for a
//! lease: `Quorum::counts`; what it says of such a node is `fresh.rs`,
//! as the waits say it).

use std::time::Instant;

use super::fresh;
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
                    n.note = fresh::node_wait(q, i);
                }
                Err(e) => n.note = Some(e.to_string()),
            }
            report.nodes.push(n);
        }
        let answered: Vec<bool> = answers.iter().map(|a| a.is_ok()).collect();
        report.waits = fresh::waits(q, &answered);
        Ok(report)
    }
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
    }
}
