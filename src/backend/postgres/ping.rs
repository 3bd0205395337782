//! `lc-cli ping` on PostgreSQL: one query gives the server's version,
//! whether this connection is encrypted, and whether the server is a
//! standby (which cannot record lc-cli's grants).

use std::time::Instant;

use super::address::password_for;
use super::PgBackend;
use crate::backend::ping::PingReport;
use crate::backend::Result;

const ASK: &str = "SELECT current_setting('server_version'), \
    coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false), \
    pg_is_in_recovery()";

impl PgBackend {
    pub(super) async fn ping_server(&self) -> Result<PingReport> {
        let s = self.admin().await?;
        let started = Instant::now();
        let row = s
            .client
            .query_one(ASK, &[])
            .await
            .map_err(|e| s.error("asking the server's version", e))?;
        let round_trip = started.elapsed();
        let standby: bool = row.get(2);
        let version: String = row.get(0);
        Ok(PingReport {
            service: "PostgreSQL".into(),
            // `15.5 (Debian 15.5-0+deb12u1)`: the number alone.
            version: version.split_whitespace().next().map(str::to_string),
            round_trip,
            tls: Some(row.get(1)),
            authenticated: password_for(&self.address).map(|_| true),
            waits: if standby {
                vec!["the server is a standby (in recovery): connect to the primary".into()]
            } else {
                Vec::new()
            },
            nodes: Vec::new(),
            ..PingReport::default()
        })
    }
}
