//! `lc-cli history KEY` for the Locking-Center backend (docs/history.md):
//! lc-cli's History (action 21) on the lock port, sent only to a server
//! whose Hello answer named the feature `history` (`lc-cli serve`, whose
//! `--history` is not 0). Whether it did is known from the first answer to
//! a Hello: a Ping asks it, when no request of this backend has yet. A
//! reference server (which answers the Hello `-`) and a server that does
//! not name the feature are refused in one line (76), and get nothing new.

use tokio::io::AsyncReadExt;

use super::address::REFERENCE_CAPS;
use super::{probe, LcBackend};
use crate::backend::history::HistoryEntry;
use crate::backend::{BackendError, Result};
use crate::proto::{self, history, Request};

/// The longest answer read (100 entries of the longest are 250 KB; a
/// `--history` of thousands, a few MB).
const MAX_ANSWER: u64 = 64 << 20;

impl LcBackend {
    pub(super) async fn read_history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        let greeting = self.dialer.greeting();
        if greeting.answer().is_none() && greeting.sends_hello() {
            // Any answer will do: what counts is the Hello's, kept.
            self.guarded(|| self.call(Request::Ping)).await?;
        }
        let unsupported = |why: &str| BackendError::Unsupported {
            server: self.addr.clone(),
            reason: format!("lc-cli's Locking-Center backend cannot show a key's history: {why}"),
        };
        if !greeting.sends_hello() {
            return Err(unsupported(REFERENCE_CAPS.history.unwrap_or_default()));
        }
        if !greeting.named(proto::FEATURE_HISTORY) {
            return Err(unsupported(
                "this server keeps no history (an lc-cli serve before it, or one run with --history 0)",
            ));
        }
        let request = Request::History {
            key: key.as_bytes().to_vec(),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        };
        let started = std::time::Instant::now();
        let mut stream = self.send(&request).await?;
        let within = self.connect_timeout + started.elapsed();
        let mut buf = Vec::new();
        let mut limited = (&mut stream).take(MAX_ANSWER);
        match tokio::time::timeout(within, limited.read_to_end(&mut buf)).await {
            Err(_) => return Err(probe::silent(&self.addr, within)),
            Ok(Err(e)) => return Err(self.unavailable(format!("reading the history: {e}"))),
            Ok(Ok(_)) => {}
        }
        if let Some(reason) = proto::parse_not_allowed(&buf) {
            return Err(self.refused(reason));
        }
        match buf.split_first() {
            Some((&b'+', rest)) => history::decode_answer(rest)
                .ok_or_else(|| self.protocol(format!("a malformed history ({} bytes)", buf.len()))),
            Some((&b'-', [])) => Err(unsupported("it answered '-' to lc-cli's History")),
            None => Err(self.unavailable("the server closed the connection without an answer")),
            Some(_) => Err(probe::foreign(&self.addr, &buf)),
        }
    }
}
