//! `lc-cli ping` on the Locking-Center protocol: PING (action 7) tells a
//! Locking-Center server (`+` lc-cli serve, `-` a reference one) from any
//! other peer. The Hello (action 16) in front of it, as on every
//! connection, tells lc-cli serve's version and whether it took the token,
//! with which role; a server that does not know Hello (`-`) is pinged
//! again without it (`LcBackend::guarded`).

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::probe::{self, Reply};
use super::LcBackend;
use crate::backend::ping::PingReport;
use crate::backend::{BackendError, Result};
use crate::proto::{self, Answer, HelloAnswer, Request, PING_FRAME};

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
        let greeting = self.dialer.greeting();
        match probe::classify(&reply) {
            Reply::Answer(Answer::Ok) => {
                report.service = "lc-cli serve".into();
                match greeting.answer() {
                    // The features the server took follow its version.
                    Some(HelloAnswer::Unchecked { version }) => {
                        report.version = Some(version_only(version))
                    }
                    Some(HelloAnswer::Accepted { version, role }) => {
                        report.version = Some(version_only(version));
                        report.authenticated = Some(true);
                        report.role = Some(role);
                    }
                    // No Hello on this connection: an lc-cli serve from
                    // before it, or one that answered it `-`.
                    _ => report.version = self.hello().await?,
                }
            }
            Reply::Answer(_) => report.service = "Locking-Center server".into(),
            Reply::Foreign(bytes) => return Err(probe::foreign(&self.addr, &bytes)),
        }
        // A token the server does not check (it has no --token-file, or
        // does not know Hello): not "accepted".
        if greeting.has_token() && report.authenticated.is_none() {
            report.authenticated = Some(false);
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

/// The version in a Hello answer's version field, without the features
/// named after it (`0.1.0 secret`).
fn version_only(field: String) -> String {
    match field.split_once(' ') {
        Some((version, _)) => version.to_string(),
        None => field,
    }
}
