//! A session hold's SessionRelease: on the session's connection, or on a
//! new one if that broke ([`LcSession::ask_release`]); and
//! `--hold-at-least` on lc-cli's own server (issue 45, docs/fleet-jobs.md):
//! at the command's end, the SessionRelease carries the rest of the window
//! (the Hello feature `keep`), and the server turns the session hold into a
//! kept hold that expires then, in one step (one round trip). A server
//! that does not name `keep` (an older lc-cli serve): released as usual,
//! said in one line.

use std::time::Duration;

use tokio::sync::oneshot;

use super::LcSession;
use crate::backend::{BackendError, HeldLock, Result};
use crate::proto::{self, Answer, ReleaseKind, Request};

impl LcSession {
    /// Sends a SessionRelease that says `ended` on the session's
    /// connection, or (`again`) on a new one when that broke.
    pub(super) async fn ask_release(
        &mut self,
        ended: Option<proto::Ended>,
        again: Option<proto::Ended>,
    ) -> Result<Answer> {
        let (tx, rx) = oneshot::channel();
        let here = match self.asks.send((ended, tx)).await {
            Ok(()) => rx.await.ok().flatten(),
            Err(_) => None,
        };
        match here {
            Some(answer) => answer,
            None => {
                self.backend
                    .call(Request::Release {
                        key: self.key.as_bytes().to_vec(),
                        kind: ReleaseKind::Token(self.token),
                        ended: again,
                    })
                    .await
            }
        }
    }

    /// Keeps the hold `rest` more (see the module's note).
    pub(super) async fn keep(&mut self, rest: Duration) -> Result<()> {
        if !self.backend.dialer.greeting().named(proto::FEATURE_KEEP) {
            eprintln!(
                "lc-cli: '{}' on {}: this server cannot keep a hold after its command (it did not name the feature 'keep': an older lc-cli serve), so --hold-at-least's window is not kept: released now",
                self.key, self.backend.addr
            );
            return self.release().await;
        }
        let ended = proto::Ended {
            keep_ms: Some(rest.as_millis().clamp(1, u64::MAX as u128) as u64),
            ..self.ended.unwrap_or(proto::Ended {
                status: 0,
                order: self.order,
                keep_ms: None,
            })
        };
        match self.ask_release(Some(ended), Some(ended)).await? {
            Answer::Ok => Ok(()),
            // Not held under our token any more (a reset, an unlock, an
            // expiry): nothing is left to keep, nor to free.
            Answer::Busy => {
                eprintln!(
                    "lc-cli: '{}' on {}: the hold was no longer ours when its command ended, so --hold-at-least's window is not kept",
                    self.key, self.backend.addr
                );
                Ok(())
            }
            Answer::Fail => Err(BackendError::NotReleased {
                server: self.backend.addr.clone(),
                key: self.key.clone(),
                reason: "it answered '-' to keeping it for --hold-at-least (it could not record it; the key stays held until the window's end)"
                    .to_string(),
            }),
        }
    }
}
