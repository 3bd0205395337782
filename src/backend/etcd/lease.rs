//! Our etcd lease (concurrency.Session's job): granted once per lock
//! request, kept alive while we wait and while we hold, revoked at the end,
//! with a contact clock telling when the server last renewed it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::rpc::{self, Rpc};
use crate::backend::Result;

/// Keepalives per TTL: a healthy lease's last renewal is never older than
/// about a fifth of it, far from the two thirds at which a holder stops.
const KEEPALIVES_PER_TTL: u32 = 5;

/// What the keepalive learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Alive,
    /// The server answered that the lease is gone (revoked or expired):
    /// our keys are gone with it.
    Expired,
}

/// Why the lease can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseEnd {
    Expired,
    /// No renewal for longer than the TTL: the server has expired the lease
    /// by now even if we cannot hear it say so.
    Silent,
}

pub(super) struct Lease {
    pub id: i64,
    /// As granted by the server (it rounds up to its minimum).
    pub ttl: Duration,
    rpc: Rpc,
    /// The send time of the latest keepalive the server answered: it had
    /// renewed the lease by then, so its expiry is no sooner than TTL after.
    contact: Arc<Mutex<Instant>>,
    state: watch::Receiver<State>,
    keepalive: Option<JoinHandle<()>>,
}

impl Lease {
    pub(super) async fn grant(rpc: &Rpc, ttl: Duration) -> Result<Lease> {
        let secs = ttl.as_secs_f64().ceil().max(1.0) as i64;
        let sent = Instant::now();
        let granted = rpc
            .call("granting a lease", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?;
        let ttl = Duration::from_secs(granted.ttl().max(1) as u64);
        let contact = Arc::new(Mutex::new(sent));
        let (tx, state) = watch::channel(State::Alive);
        let keepalive = tokio::spawn(keep_alive(
            rpc.client(),
            granted.id(),
            ttl / KEEPALIVES_PER_TTL,
            contact.clone(),
            tx,
        ));
        Ok(Lease {
            id: granted.id(),
            ttl,
            rpc: rpc.clone(),
            contact,
            state,
            keepalive: Some(keepalive),
        })
    }

    pub(super) fn last_contact(&self) -> Instant {
        *self.contact.lock().unwrap()
    }

    pub(super) fn is_expired(&self) -> bool {
        *self.state.borrow() == State::Expired
    }

    /// Resolves when the lease is over: the server said so, or it has not
    /// renewed it for a whole TTL. Cancel-safe.
    pub(super) async fn until_gone(&self) -> LeaseEnd {
        let mut state = self.state.clone();
        loop {
            if *state.borrow_and_update() == State::Expired {
                return LeaseEnd::Expired;
            }
            let deadline = self.last_contact() + self.ttl;
            if Instant::now() >= deadline {
                return LeaseEnd::Silent;
            }
            tokio::select! {
                changed = state.changed() => {
                    if changed.is_err() {
                        // The keepalive ended: only the clock is left.
                        tokio::time::sleep_until(deadline).await;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Stops renewing and revokes the lease (deleting every key attached to
    /// it). Safe to call again.
    pub(super) async fn revoke(&mut self) -> Result<()> {
        if let Some(k) = self.keepalive.take() {
            k.abort();
        }
        let id = self.id;
        match self
            .rpc
            .call("revoking the lease", |mut c| async move {
                c.lease_revoke(id).await
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if rpc::is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Stops renewing without revoking: the lease runs out on its own.
    pub(super) fn stop_renewing(&mut self) {
        if let Some(k) = self.keepalive.take() {
            k.abort();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

/// Sends one keepalive every `every` on a stream and waits for its answer
/// (at most `every`); a stream that fails or stays silent is dropped and
/// opened again, so a late answer never counts for a later send.
async fn keep_alive(
    client: Client,
    id: i64,
    every: Duration,
    contact: Arc<Mutex<Instant>>,
    state: watch::Sender<State>,
) {
    let every = every.max(Duration::from_millis(100));
    // The grant just renewed it: the first keepalive is due a period later.
    let mut tick = tokio::time::interval_at(Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stream = None;
    loop {
        tick.tick().await;
        let sent = Instant::now();
        let answer = tokio::time::timeout(every, async {
            if stream.is_none() {
                stream = Some(client.clone().lease_keep_alive(id).await?);
            }
            let (keeper, answers) = stream.as_mut().expect("opened above");
            keeper.keep_alive().await?;
            answers.message().await
        })
        .await;
        match answer {
            Ok(Ok(Some(a))) if a.ttl() > 0 => {
                let mut last = contact.lock().unwrap();
                *last = (*last).max(sent);
            }
            Ok(Ok(Some(_))) => {
                let _ = state.send(State::Expired);
                return;
            }
            Ok(Err(e)) if rpc::is_not_found_raw(&e) => {
                let _ = state.send(State::Expired);
                return;
            }
            _ => stream = None,
        }
    }
}
