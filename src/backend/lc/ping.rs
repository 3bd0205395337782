//! `lc-cli ping` on the Locking-Center protocol: PING (action 7) tells a
//! Locking-Center server (`+` lc-cli serve, `-` a reference one) from any
//! other peer; only after a `+` is HELLO (action 16) sent for the version,
//! as a reference server does not know it.

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::probe::{self, Reply};
use super::LcBackend;
use crate::backend::ping::PingReport;
use crate::backend::{BackendError, Result};
use crate::proto::{self, Answer, Request, PING_FRAME};

impl LcBackend {
    pub(super) async fn ping_server(&self) -> Result<PingReport> {
        let started = Instant::now();
        let reply = self.exchange(&PING_FRAME, 1).await?;
        let round_trip = started.elapsed();
        let mut report = PingReport {
            round_trip,
            tls: Some(self.dialer.is_tls()),
            ..PingReport::default()
        };
        match probe::classify(&reply) {
            Reply::Answer(Answer::Ok) => {
                report.service = "lc-cli serve".into();
                report.version = self.hello().await?;
            }
            Reply::Answer(_) => report.service = "Locking-Center server".into(),
            Reply::Foreign(bytes) => return Err(probe::foreign(&self.addr, &bytes)),
        }
        Ok(report)
    }

    /// The server's version, from HELLO.
    async fn hello(&self) -> Result<Option<String>> {
        let frame = proto::encode(&Request::Hello {
            client: env!("CARGO_PKG_VERSION").as_bytes().to_vec(),
            token: Vec::new(),
        })
        .map_err(|e| BackendError::Other(e.to_string()))?;
        let reply = self.exchange(&frame, 2 + proto::MAX_FIELD).await?;
        match proto::parse_hello_answer(&reply) {
            Some(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
            // An lc-cli serve from before HELLO answers `-`.
            None if reply == b"-" => Ok(None),
            None => Err(probe::foreign(&self.addr, &reply)),
        }
    }

    /// One connection attempt (a ping reports the state now, it does not
    /// wait for a server to come up), one frame, the answer until the
    /// server closes, all within the connect timeout.
    async fn exchange(&self, frame: &[u8], most: usize) -> Result<Vec<u8>> {
        let limit = self.connect_timeout;
        let exchange = async {
            let mut stream = self
                .dialer
                .connect_once(limit)
                .await
                .map_err(|e| self.unavailable(e))?;
            stream
                .write_all(frame)
                .await
                .map_err(|e| self.unavailable(e))?;
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            while got.len() < most.max(1) {
                match stream.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if got.is_empty() => return Err(self.unavailable(e)),
                    Err(_) => break,
                }
            }
            if got.is_empty() {
                return Err(self.unavailable("the server closed the connection without an answer"));
            }
            Ok(got)
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(r) => r,
            Err(_) => Err(probe::silent(&self.addr, limit)),
        }
    }
}
