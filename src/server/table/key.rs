//! One key's state and the rules of its line: who may hold it together,
//! and who is next.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Instant, SystemTime};

use tokio::sync::oneshot;

use super::{GrantId, Notice, Token};
use crate::mode::LockMode;

/// Who asks for a key, and how.
#[derive(Debug, Clone)]
pub struct Ask {
    pub source: Vec<u8>,
    pub peer: SocketAddr,
    /// Held only while its holder is heard from (a session), not until an
    /// Unlock.
    pub session: bool,
    pub mode: LockMode,
    /// The fingerprint of the token its connection gave (`--token-file`).
    pub owner: Option<Owner>,
    /// A kept hold the server releases this many seconds after its grant
    /// (whole seconds, rounded up: it fits in the padding of this struct,
    /// which every waiter keeps).
    pub expire: Option<NonZeroU32>,
}

impl Ask {
    /// The whole seconds of a TTL in ms, rounded up (at least 1, at most
    /// u32::MAX: 136 years).
    pub fn expire_secs(ttl_ms: u64) -> NonZeroU32 {
        let secs = ttl_ms.div_ceil(1000).clamp(1, u64::from(u32::MAX));
        NonZeroU32::new(secs as u32).expect("at least 1")
    }
}

/// A token's fingerprint (`server::tokens::Owner`): never 0, so that an
/// `Option` of it is 8 bytes (an `Ask` is part of every parked waiter).
pub type Owner = std::num::NonZeroU64;

/// Whose holds a release (or a reclaim) may end: any, or only those of one
/// token (a `lock` role's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    Any,
    Only(Owner),
}

impl Whose {
    /// Whether a hold of `owner` is one this may release.
    pub fn may_release(self, owner: Option<Owner>) -> bool {
        match self {
            Whose::Any => true,
            Whose::Only(o) => owner == Some(o),
        }
    }
}

/// The hold asked for is held, but not under the caller's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotYours;

/// A hold as the live table keeps it: its grant id and the holder's socket
/// address. Its two other forms each carry what this one cannot: the log's
/// `wal::Held` (its key, the peer as text: what a restart reads back; built
/// from this in one place, `Inner::record_grant`) and the manager's
/// `KeyReport` (what `keys` reads, with the fields older servers lack as
/// options). All three keep the start as a `SystemTime`.
#[derive(Debug, Clone)]
pub struct Holder {
    pub id: GrantId,
    pub token: Token,
    pub source: Vec<u8>,
    pub peer: SocketAddr,
    pub since: SystemTime,
    pub session: bool,
    pub mode: LockMode,
    /// Whose token it was granted under; None without tokens, or restored
    /// from the log (which does not keep it) until its holder reclaims it.
    pub owner: Option<Owner>,
    /// When the server releases this kept hold (`lock KEY --expire`).
    pub expires: Option<SystemTime>,
}

/// The live end of a session hold.
pub(super) struct Link {
    /// Bumped by each reclaim: which connection serves the hold now.
    pub gen: u64,
    pub heard: Instant,
    /// Dropped when the hold ends or moves to another connection, which
    /// wakes the task holding the receiver.
    _changed: oneshot::Sender<()>,
}

/// What the task serving a session hold keeps.
#[derive(Debug)]
pub struct LinkEnd {
    pub gen: u64,
    /// Resolves (with an error) when the hold ends or is reclaimed elsewhere.
    pub changed: oneshot::Receiver<()>,
}

impl Link {
    /// The link of a new hold: a session hold has one, a kept hold none.
    pub fn for_hold(session: bool) -> (Option<Link>, Option<LinkEnd>) {
        match session {
            true => {
                let (link, end) = Link::new(0);
                (Some(link), Some(end))
            }
            false => (None, None),
        }
    }

    pub fn new(gen: u64) -> (Link, LinkEnd) {
        let (tx, rx) = oneshot::channel();
        let link = Link {
            gen,
            heard: Instant::now(),
            _changed: tx,
        };
        (link, LinkEnd { gen, changed: rx })
    }
}

/// One hold of a key: its holder and, for a session hold, its link.
pub(super) struct Hold {
    pub holder: Holder,
    pub link: Option<Link>,
}

pub(super) struct Waiter {
    pub id: GrantId,
    pub ask: Ask,
    /// When it joined the line (for Keys' listing of waiters).
    pub since: SystemTime,
    pub notify: oneshot::Sender<Notice>,
}

#[derive(Default)]
pub(super) struct KeyState {
    /// In grant order, the oldest first: one, or several shared or limited.
    pub holds: Vec<Hold>,
    /// In arrival order, across modes.
    pub waiters: VecDeque<Waiter>,
}

impl KeyState {
    /// The mode the key is used in while anyone holds or waits for it.
    pub fn mode(&self) -> Option<LockMode> {
        self.holds
            .first()
            .map(|h| h.holder.mode)
            .or_else(|| self.waiters.front().map(|w| w.ask.mode))
    }

    /// Whether a request in `mode` may hold the key beside its holders now.
    /// (Nobody may pass a waiter: callers also check the line is empty.)
    pub fn admits(&self, mode: LockMode) -> bool {
        match mode {
            LockMode::Exclusive => self.holds.is_empty(),
            LockMode::Shared => self.holds.iter().all(|h| h.holder.mode == LockMode::Shared),
            LockMode::Limit(n) => self.holds.len() < n.get() as usize,
        }
    }

    pub fn hold(&self, id: GrantId) -> Option<&Hold> {
        self.holds.iter().find(|h| h.holder.id == id)
    }

    pub fn hold_mut(&mut self, id: GrantId) -> Option<&mut Hold> {
        self.holds.iter_mut().find(|h| h.holder.id == id)
    }

    /// The hold a plain Unlock (`lc-cli unlock KEY`) ends: the oldest kept
    /// hold, else the oldest hold.
    #[cfg(test)]
    pub fn unlock_target(&self) -> Option<&Holder> {
        self.unlock_target_of(Whose::Any)
    }

    /// As [`KeyState::unlock_target`], among the holds `whose` may release.
    pub fn unlock_target_of(&self, whose: Whose) -> Option<&Holder> {
        let mut mine = self
            .holds
            .iter()
            .filter(|h| whose.may_release(h.holder.owner));
        let first = mine.clone().next();
        mine.find(|h| !h.holder.session)
            .or(first)
            .map(|h| &h.holder)
    }

    pub fn is_idle(&self) -> bool {
        self.holds.is_empty() && self.waiters.is_empty()
    }
}
