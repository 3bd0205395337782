//! `lc-cli ping` on ZooKeeper: the session is up (so the ensemble has a
//! quorum and took our credentials), one read times the round trip, and
//! each host is asked `srvr` (a four-letter word) for its version and
//! role, where the server allows it.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::ZkBackend;
use crate::backend::ping::{NodeReport, PingReport};
use crate::backend::Result;

/// How long one host's `srvr` may take: it is a side question.
const SRVR_BUDGET: Duration = Duration::from_secs(1);

impl ZkBackend {
    pub(super) async fn ping_ensemble(&self) -> Result<PingReport> {
        let started = Instant::now();
        self.session
            .retry(|c| async move { c.check_stat("/").await })
            .await
            .map_err(|e| self.session.error("reading /", e))?;
        let round_trip = started.elapsed();
        let mut set = JoinSet::new();
        for (i, host) in self.hosts.iter().enumerate() {
            let host = host.clone();
            set.spawn(async move { (i, srvr(&host).await) });
        }
        let mut nodes: Vec<NodeReport> = self
            .hosts
            .iter()
            .map(|h| NodeReport {
                addr: h.clone(),
                ..NodeReport::default()
            })
            .collect();
        while let Some(Ok((i, answer))) = set.join_next().await {
            let n = &mut nodes[i];
            match answer {
                Ok(text) => {
                    let (version, mode) = parse_srvr(&text);
                    n.up = true;
                    n.counts = mode.as_deref() != Some("read-only");
                    n.version = version;
                    n.note = mode
                        .or_else(|| Some("srvr is not allowed (4lw.commands.whitelist)".into()));
                }
                Err(e) => n.note = Some(e),
            }
        }
        Ok(PingReport {
            service: "ZooKeeper".into(),
            version: nodes.iter().find_map(|n| n.version.clone()),
            round_trip,
            nodes,
            ..PingReport::default()
        })
    }
}

/// The answer to `srvr`, whole (the server closes after it).
async fn srvr(host: &str) -> std::result::Result<String, String> {
    let ask = async {
        let mut s = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
        s.write_all(b"srvr").await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        s.take(64 * 1024)
            .read_to_end(&mut out)
            .await
            .map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    };
    tokio::time::timeout(SRVR_BUDGET, ask)
        .await
        .unwrap_or_else(|_| Err(format!("no answer to srvr within {SRVR_BUDGET:?}")))
}

/// The version (`3.8.0`, without its build hash) and the mode
/// (`standalone`, `leader`, `follower`) of a `srvr` answer.
fn parse_srvr(text: &str) -> (Option<String>, Option<String>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    let version = field("Zookeeper version:").map(|v| {
        v.split([',', '-'])
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    });
    (version, field("Mode:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srvr_answers_are_read() {
        let text = "Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on 2022-02-25 08:49 UTC\nLatency min/avg/max: 0/0.0/0\nMode: standalone\nNode count: 5\n";
        assert_eq!(
            parse_srvr(text),
            (Some("3.8.0".into()), Some("standalone".into()))
        );
        let refused = "srvr is not executed because it is not in the whitelist.\n";
        assert_eq!(parse_srvr(refused), (None, None));
    }
}
