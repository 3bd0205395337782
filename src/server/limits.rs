//! Limits against floods (`serve --max-connections`,
//! `--max-connections-per-peer`): a connection beyond them is closed at
//! once, before anything is read, so the holds and the queue of the
//! connections already open are untouched. Each refusal is counted
//! (`lc_refused_connections_total`); it is logged once per peer address per
//! [`LOG_INTERVAL`], so a flood cannot flood the log too.
//!
//! A connection is counted while its task or the task of the session hold
//! it carries runs: [`Tracked`] guards are held by both, and the count of a
//! peer address falls when the last one drops.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a refused peer address is logged again.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// File descriptors kept for the log, the listeners and the metrics
/// endpoint when the default limit is derived from the file limit.
const RESERVED_FDS: u64 = 64;

/// The default `--max-connections`: the soft file limit less what the
/// server needs besides its connections (at least 16).
pub(crate) fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    };
    soft.saturating_sub(RESERVED_FDS).clamp(16, 1 << 20) as usize
}

#[derive(Debug, Default)]
struct State {
    /// Per connection: how many guards it has (its task, its hold's task).
    conns: HashMap<SocketAddr, u32>,
    per_ip: HashMap<IpAddr, usize>,
    logged: HashMap<IpAddr, Instant>,
}

#[derive(Debug)]
pub(crate) struct Limits {
    pub max: usize,
    pub per_peer: usize,
    state: Mutex<State>,
}

/// Why a connection was refused, for the one log line.
pub(crate) enum Refusal {
    Total(usize),
    PerPeer(usize),
}

impl Limits {
    pub(crate) fn new(max: usize, per_peer: usize) -> Limits {
        Limits {
            max,
            per_peer,
            state: Mutex::new(State::default()),
        }
    }

    /// Counts the connection from `peer`, or says which limit it is over.
    /// `Err(Some(_))`: log it; `Err(None)`: refused, already logged lately.
    pub(crate) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Tracked, Option<Refusal>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let from_peer = st.per_ip.get(&peer.ip()).copied().unwrap_or(0);
        let refusal = if st.conns.len() >= self.max {
            Some(Refusal::Total(self.max))
        } else if from_peer >= self.per_peer {
            Some(Refusal::PerPeer(self.per_peer))
        } else {
            None
        };
        if let Some(r) = refusal {
            let now = Instant::now();
            let log = match st.logged.get(&peer.ip()) {
                Some(at) => now.duration_since(*at) >= LOG_INTERVAL,
                None => true,
            };
            if log {
                // Bounded: peers not refused lately are forgotten.
                st.logged
                    .retain(|_, at| now.duration_since(*at) < LOG_INTERVAL);
                st.logged.insert(peer.ip(), now);
            }
            return Err(log.then_some(r));
        }
        st.conns.insert(peer, 1);
        *st.per_ip.entry(peer.ip()).or_insert(0) += 1;
        Ok(Tracked {
            limits: self.clone(),
            peer,
        })
    }

    /// Connections counted now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .conns
            .len()
    }

    /// Another guard for the connection from `peer`, while it is counted
    /// (for the task of the session hold it carries on).
    pub(crate) fn again(self: &Arc<Self>, peer: SocketAddr) -> Option<Tracked> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *st.conns.get_mut(&peer)? += 1;
        Some(Tracked {
            limits: self.clone(),
            peer,
        })
    }

    fn release(&self, peer: SocketAddr) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(n) = st.conns.get_mut(&peer) else {
            return;
        };
        *n -= 1;
        if *n > 0 {
            return;
        }
        st.conns.remove(&peer);
        if let Some(c) = st.per_ip.get_mut(&peer.ip()) {
            *c -= 1;
            if *c == 0 {
                st.per_ip.remove(&peer.ip());
            }
        }
    }
}

/// A connection counted against the limits while this lives.
#[derive(Debug)]
pub(crate) struct Tracked {
    limits: Arc<Limits>,
    peer: SocketAddr,
}

impl Tracked {
    /// The connection's peer (kept here once for all who need it).
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.limits.release(self.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn beyond_a_limit_is_refused_and_logged_once() {
        let l = Arc::new(Limits::new(3, 2));
        let one = l.admit(a("10.0.0.1:1")).ok().unwrap();
        let two = l.admit(a("10.0.0.1:2")).ok().unwrap();
        assert!(matches!(
            l.admit(a("10.0.0.1:3")),
            Err(Some(Refusal::PerPeer(2)))
        ));
        assert!(matches!(l.admit(a("10.0.0.1:4")), Err(None)));
        let other = l.admit(a("10.0.0.2:1")).ok().unwrap();
        assert!(matches!(
            l.admit(a("10.0.0.3:1")),
            Err(Some(Refusal::Total(3)))
        ));
        // A shared guard keeps the connection counted until both drop.
        let hold = l.again(a("10.0.0.1:1")).unwrap();
        drop(one);
        assert_eq!(l.open(), 3);
        drop(hold);
        assert_eq!(l.open(), 2);
        assert!(l.again(a("10.0.0.1:1")).is_none());
        let again = l.admit(a("10.0.0.1:5")).ok().unwrap();
        drop((two, other, again));
        assert_eq!(l.open(), 0);
    }
}
