//! Limits against floods: a connection beyond them is closed at once,
//! before anything is read, so the holds and the queue of the connections
//! already open are untouched.
//!
//! - `--max-connections`: all connections open at once.
//! - `--max-connections-per-peer` (on by default, [`DEFAULT_PER_PEER`]):
//!   all connections from one address.
//! - `--max-pending-logins` (default half of `--max-connections`): the
//!   connections still in their login (accepted, their TLS handshake and
//!   first frame not yet through; with `--token-file`, their Hello and its
//!   token not yet taken). The rest of `--max-connections` is left for
//!   connections that logged in: idle connections without a token never
//!   take the slots of holders and waiters. A login lasts at most
//!   `--login-timeout` (`conn.rs`).
//!
//! Each refusal is counted (`lc_refused_connections_total`), answered with
//! [`crate::proto::at_limit`] on the lock port (`refuse.rs`), and logged at
//! most as `Events::limited` lets it.
//!
//! A connection is counted while its task or the task of the session hold
//! it carries runs: [`Tracked`] guards are held by both, and the count of a
//! peer address falls when the last one drops.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

/// File descriptors kept for the log, the listeners and the metrics
/// endpoint when the default limit is derived from the file limit.
const RESERVED_FDS: u64 = 64;

/// The default `--max-connections-per-peer`. One `lc-cli` process holds one
/// connection per lock it holds or waits for (two for a moment when a
/// session hold reconnects): ZooKeeper's 60 per address would stop a pool
/// of CI runners behind one NAT address at about 30 jobs holding a lock
/// and waiting for another; 256 lets about a hundred, and one host that
/// floods takes 256 slots, 0.4% of the 65,472 of the shipped systemd unit.
pub(crate) const DEFAULT_PER_PEER: usize = 256;

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

/// The default `--max-pending-logins` for `max` connections: half of them
/// (at least one), so at least the other half is left for connections
/// that logged in.
pub(crate) fn default_pending_logins(max: usize) -> usize {
    (max / 2).max(1)
}

/// One connection: how many guards it has (its task, its hold's task), and
/// whether it is still in its login.
#[derive(Debug)]
struct Conn {
    guards: u32,
    pending: bool,
}

#[derive(Debug, Default)]
struct State {
    conns: HashMap<SocketAddr, Conn>,
    per_ip: HashMap<IpAddr, usize>,
    /// Connections still in their login.
    pending: usize,
}

#[derive(Debug)]
pub(crate) struct Limits {
    pub max: usize,
    /// `usize::MAX`: off.
    pub per_peer: usize,
    pub pending_logins: usize,
    state: Mutex<State>,
}

/// Which limit a connection is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Total(usize),
    PerPeer(usize),
    PendingLogins(usize),
}

impl Refusal {
    /// What the log line and the client's line say: how many are open and
    /// the option that sets the limit.
    pub(crate) fn reason(self, ip: IpAddr) -> String {
        match self {
            Refusal::Total(n) => format!("{n} connections are open, --max-connections {n}"),
            Refusal::PerPeer(n) => {
                format!("{n} connections from {ip} are open, --max-connections-per-peer {n}")
            }
            Refusal::PendingLogins(n) => {
                format!("{n} connections are still logging in, --max-pending-logins {n}")
            }
        }
    }
}

impl Limits {
    /// `per_peer` 0: no limit per address.
    pub(crate) fn new(max: usize, per_peer: usize, pending_logins: usize) -> Limits {
        Limits {
            max,
            per_peer: if per_peer == 0 { usize::MAX } else { per_peer },
            pending_logins,
            state: Mutex::new(State::default()),
        }
    }

    /// Counts the connection from `peer`, still in its login, or says
    /// which limit it is over.
    pub(crate) fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Tracked, Refusal> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let from_peer = st.per_ip.get(&peer.ip()).copied().unwrap_or(0);
        if st.conns.len() >= self.max {
            return Err(Refusal::Total(self.max));
        }
        if from_peer >= self.per_peer {
            return Err(Refusal::PerPeer(self.per_peer));
        }
        if st.pending >= self.pending_logins {
            return Err(Refusal::PendingLogins(self.pending_logins));
        }
        st.conns.insert(
            peer,
            Conn {
                guards: 1,
                pending: true,
            },
        );
        st.pending += 1;
        *st.per_ip.entry(peer.ip()).or_insert(0) += 1;
        Ok(Tracked {
            limits: self.clone(),
            peer,
        })
    }

    /// Connections counted now, and how many of them are in their login.
    pub(crate) fn open(&self) -> (usize, usize) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (st.conns.len(), st.pending)
    }

    /// Another guard for the connection from `peer`, while it is counted
    /// (for the task of the session hold it carries on).
    pub(crate) fn again(self: &Arc<Self>, peer: SocketAddr) -> Option<Tracked> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.conns.get_mut(&peer)?.guards += 1;
        Some(Tracked {
            limits: self.clone(),
            peer,
        })
    }

    fn logged_in(&self, peer: SocketAddr) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = st.conns.get_mut(&peer).filter(|c| c.pending) {
            c.pending = false;
            st.pending -= 1;
        }
    }

    fn release(&self, peer: SocketAddr) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(c) = st.conns.get_mut(&peer) else {
            return;
        };
        c.guards -= 1;
        if c.guards > 0 {
            return;
        }
        if c.pending {
            st.pending -= 1;
        }
        st.conns.remove(&peer);
        if let Some(n) = st.per_ip.get_mut(&peer.ip()) {
            *n -= 1;
            if *n == 0 {
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

    /// Its login is through: it no longer counts against
    /// `--max-pending-logins` (it still does against the others).
    pub(crate) fn logged_in(&self) {
        self.limits.logged_in(self.peer);
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
    fn beyond_a_limit_is_refused() {
        let l = Arc::new(Limits::new(4, 2, 3));
        let one = l.admit(a("10.0.0.1:1")).unwrap();
        let two = l.admit(a("10.0.0.1:2")).unwrap();
        assert_eq!(l.admit(a("10.0.0.1:3")).err(), Some(Refusal::PerPeer(2)));
        let other = l.admit(a("10.0.0.2:1")).unwrap();
        // Three in their login: the pending budget is spent...
        assert_eq!(
            l.admit(a("10.0.0.3:1")).err(),
            Some(Refusal::PendingLogins(3))
        );
        // ...until one logs in; the fourth then fills the total.
        one.logged_in();
        one.logged_in();
        assert_eq!(l.open(), (3, 2));
        let fourth = l.admit(a("10.0.0.3:1")).unwrap();
        assert_eq!(l.admit(a("10.0.0.4:1")).err(), Some(Refusal::Total(4)));
        // A shared guard keeps the connection counted until both drop.
        let hold = l.again(a("10.0.0.1:1")).unwrap();
        drop(one);
        assert_eq!(l.open(), (4, 3));
        drop(hold);
        assert_eq!(l.open(), (3, 3));
        assert!(l.again(a("10.0.0.1:1")).is_none());
        let again = l.admit(a("10.0.0.1:5")).err();
        assert_eq!(again, Some(Refusal::PendingLogins(3)));
        drop((two, other, fourth));
        assert_eq!(l.open(), (0, 0));
    }

    #[test]
    fn zero_per_peer_is_no_limit() {
        let l = Arc::new(Limits::new(100, 0, 100));
        let all: Vec<Tracked> = (1..=50)
            .map(|p| l.admit(SocketAddr::from(([10, 0, 0, 1], p))).unwrap())
            .collect();
        assert_eq!(l.open(), (50, 50));
        drop(all);
    }
}
