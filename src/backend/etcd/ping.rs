//! `lc-cli ping` on etcd: `Status` gives the version, the leader and any
//! alarm (a cluster out of space refuses writes), `MemberList` the
//! members, and each member's client address is tried with a TCP
//! connection, which is cheap and says which ones answer.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::EtcdBackend;
use crate::backend::ping::{NodeReport, PingReport};
use crate::backend::Result;

/// How long a member's TCP connection may take.
const MEMBER_BUDGET: Duration = Duration::from_secs(1);

impl EtcdBackend {
    pub(super) async fn ping_cluster(&self) -> Result<PingReport> {
        let started = Instant::now();
        let status = self
            .rpc
            .call("status", |mut c| async move { c.status().await })
            .await?;
        let round_trip = started.elapsed();
        let members = self
            .rpc
            .call("listing the members", |mut c| async move {
                c.member_list().await
            })
            .await?;
        let mut report = PingReport {
            service: "etcd".into(),
            version: Some(status.version().to_string()),
            round_trip,
            ..PingReport::default()
        };
        if status.leader() == 0 {
            report
                .waits
                .push("no leader: the cluster has no quorum of members".into());
        }
        for alarm in status.errors() {
            report.waits.push(format!("the member reports: {alarm}"));
        }
        let mut set = JoinSet::new();
        for (i, m) in members.members().iter().enumerate() {
            let url = m.client_urls().first().cloned().unwrap_or_default();
            report.nodes.push(NodeReport {
                addr: url.clone(),
                note: (!m.name().is_empty()).then(|| m.name().to_string()),
                ..NodeReport::default()
            });
            set.spawn(async move { (i, answers(&url).await) });
        }
        while let Some(Ok((i, up))) = set.join_next().await {
            report.nodes[i].up = up;
            report.nodes[i].counts = up;
        }
        Ok(report)
    }
}

/// Whether a member's client URL (`http://host:port`) takes a connection.
async fn answers(url: &str) -> bool {
    let host = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .trim_end_matches('/');
    matches!(
        tokio::time::timeout(MEMBER_BUDGET, TcpStream::connect(host)).await,
        Ok(Ok(_))
    )
}
