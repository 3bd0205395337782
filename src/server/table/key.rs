//! One key's state and the rules of its line: who may hold it together,
//! and who is next.

use super::line::Line;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::num::NonZeroU32;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

pub(crate) use super::owner::{Owner, Secret, Whose};
use super::{GrantId, Notice, Token};
use crate::mode::LockMode;

/// Who asks for a key, and how.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub source: Vec<u8>,
    pub peer: SocketAddr,
    /// Held only while its holder is heard from (a session), not until an
    /// Unlock.
    pub session: bool,
    pub mode: LockMode,
    /// The identity of the token its connection gave (`--token-file`).
    pub owner: Option<Owner>,
    /// How many requests of its owner may wait in line at once (the token
    /// line's `waits=`); None: no cap (no token).
    pub waits: Option<u32>,
    /// A session grant carries a secret for its reclaims (its Hello asked).
    pub secret: bool,
    /// A kept hold the server releases this many seconds after its grant
    /// (whole seconds, rounded up: it fits in the padding of this struct,
    /// which every waiter keeps).
    pub expire: Option<NonZeroU32>,
    /// Its field list (an ExtendedLock, issue 44), `ticket=` taken out.
    pub fields: Option<Arc<[u8]>>,
    /// The place in line it had before a restart of the server (the
    /// ticket its wait was handed), shown again to take it back.
    pub ticket: Option<u64>,
}

impl Ask {
    /// The whole seconds of a TTL in ms, rounded up (at least 1, at most
    /// u32::MAX: 136 years).
    pub(crate) fn expire_secs(ttl_ms: u64) -> NonZeroU32 {
        let secs = ttl_ms.div_ceil(1000).clamp(1, u64::from(u32::MAX));
        NonZeroU32::new(secs as u32).expect("at least 1")
    }
}

/// The hold asked for is held, but not under the caller's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotYours;

/// A hold as callers see it: a copy of the table's own, compact [`Hold`]
/// (made by [`Hold::holder`]). Its two other forms each carry what this
/// one cannot: the log's `wal::Held` (its key, the peer as text: what a
/// restart reads back; built from this in one place, `Inner::record_grant`)
/// and the manager's `KeyReport` (what `keys` reads, with the fields older
/// servers lack as options). All three keep the start as a `SystemTime`.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub id: GrantId,
    pub token: Token,
    pub source: Vec<u8>,
    pub peer: SocketAddr,
    pub since: SystemTime,
    pub session: bool,
    pub mode: LockMode,
    /// Whose token it was granted under; None without tokens, or restored
    /// from a log of an earlier release (which did not keep it) until its
    /// holder reclaims it.
    pub owner: Option<Owner>,
    /// When the server releases this kept hold (`lock KEY --expire`).
    pub expires: Option<SystemTime>,
    /// The digest of a session hold's secret ([`secret_digest`]), if it
    /// has one: a reclaim must show the secret.
    pub secret: Option<Secret>,
    /// Its request's field list (issue 44), if it had one.
    pub fields: Option<Arc<[u8]>>,
    /// A `--limit N` hold's slot (issue 45): 0 to N-1, the lowest free at
    /// its grant, never another hold's of the key.
    pub slot: Option<u32>,
}

/// The live end of a session hold.
pub(super) struct Link {
    /// Bumped by each reclaim: which connection serves the hold now.
    pub gen: u64,
    pub heard: Instant,
    /// Dropped when the hold ends or moves to another connection, which
    /// wakes the task holding the receiver; fired (`Ok`) when a newer
    /// `--cancel-running` request asks the hold to stop (the task then
    /// tells its holder `>` and takes a new receiver,
    /// [`super::Table::rearm`]).
    pub changed: Option<oneshot::Sender<()>>,
}

/// What the task serving a session hold keeps.
#[derive(Debug)]
pub(crate) struct LinkEnd {
    pub gen: u64,
    /// Resolves with an error when the hold ends or is reclaimed
    /// elsewhere; with `Ok` when a newer `--cancel-running` request asks
    /// the hold to stop ([`super::Table::cancel_notice`] says who).
    pub changed: oneshot::Receiver<()>,
}

impl Link {
    /// The link of a new hold: a session hold has one, a kept hold none.
    pub(super) fn for_hold(session: bool) -> (Option<Link>, Option<LinkEnd>) {
        match session {
            true => {
                let (link, end) = Link::new(0);
                (Some(link), Some(end))
            }
            false => (None, None),
        }
    }

    pub(super) fn new(gen: u64) -> (Link, LinkEnd) {
        let (tx, rx) = oneshot::channel();
        let link = Link {
            gen,
            heard: Instant::now(),
            changed: Some(tx),
        };
        (link, LinkEnd { gen, changed: rx })
    }
}

/// A source name, one allocation shared by every hold of that source
/// (see `Sources`): a million keys held by one host keep one copy.
pub(super) type Source = Arc<[u8]>;

/// A peer address in 16 bytes instead of `SocketAddr`'s 32: IPv4 inline,
/// IPv6 (with its flow and scope) boxed.
#[derive(Clone)]
pub(super) enum Peer {
    V4(SocketAddrV4),
    V6(Box<SocketAddrV6>),
}

impl Peer {
    pub(super) fn new(addr: SocketAddr) -> Peer {
        match addr {
            SocketAddr::V4(a) => Peer::V4(a),
            SocketAddr::V6(a) => Peer::V6(Box::new(a)),
        }
    }

    pub(super) fn addr(&self) -> SocketAddr {
        match self {
            Peer::V4(a) => SocketAddr::V4(*a),
            Peer::V6(a) => SocketAddr::V6(**a),
        }
    }
}

/// What few holds have, kept apart so the others do not pay for it: the
/// token's owner (`--token-file`), a kept hold's deadline (`--expire`),
/// a session hold's link.
#[derive(Default)]
pub(super) struct Rare {
    pub owner: Option<Owner>,
    pub expires: Option<SystemTime>,
    pub link: Option<Link>,
    pub secret: Option<Secret>,
    /// The request's field list (issue 44).
    pub fields: Option<Arc<[u8]>>,
    /// A newer `--cancel-running` request asked the hold to stop: who.
    pub cancelled_by: Option<Box<crate::proto::RivalWire>>,
}

/// One hold of a key, as the table keeps it: 80 bytes (a held key's
/// memory is mostly this, its key and its map entry; see
/// `a_hold_stays_small`). [`Hold::holder`] gives the [`Holder`] callers see.
pub(super) struct Hold {
    pub id: GrantId,
    pub token: Token,
    /// The start, in ns since the epoch (a `SystemTime` to the ns, 8 bytes).
    since_ns: u64,
    pub source: Source,
    peer: Peer,
    pub mode: LockMode,
    pub session: bool,
    /// A `--limit N` hold's slot, [`NO_SLOT`] for the others (in the
    /// room the flag above leaves: a hold stays 80 bytes).
    slot: u32,
    rare: Option<Box<Rare>>,
}

/// What a hold without a slot keeps in its place (no `--limit` takes so
/// many: the protocol's N is a u32, and slots go from 0 to N-1).
const NO_SLOT: u32 = u32::MAX;

impl Hold {
    pub(super) fn new(h: &Holder, source: Source, link: Option<Link>) -> Hold {
        let rare = Rare {
            owner: h.owner.clone(),
            expires: h.expires,
            link,
            secret: h.secret,
            fields: h.fields.clone(),
            cancelled_by: None,
        };
        let any = rare.owner.is_some()
            || rare.expires.is_some()
            || rare.link.is_some()
            || rare.secret.is_some()
            || rare.fields.is_some();
        Hold {
            id: h.id,
            token: h.token,
            since_ns: h
                .since
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            source,
            peer: Peer::new(h.peer),
            mode: h.mode,
            session: h.session,
            slot: h.slot.unwrap_or(NO_SLOT),
            rare: any.then(|| Box::new(rare)),
        }
    }

    /// The hold as callers see it (a copy).
    pub(super) fn holder(&self) -> Holder {
        Holder {
            id: self.id,
            token: self.token,
            source: self.source.to_vec(),
            peer: self.peer(),
            since: self.since(),
            session: self.session,
            mode: self.mode,
            owner: self.owner().cloned(),
            expires: self.expires(),
            secret: self.secret(),
            fields: self.fields().cloned(),
            slot: self.slot(),
        }
    }

    /// A `--limit N` hold's slot.
    pub(super) fn slot(&self) -> Option<u32> {
        (self.slot != NO_SLOT).then_some(self.slot)
    }

    /// Gives a hold restored without a slot (from a log of an earlier
    /// release) the slot `slot`.
    pub(super) fn set_slot(&mut self, slot: u32) {
        self.slot = slot;
    }

    /// The request's field list, if it had one.
    pub(super) fn fields(&self) -> Option<&Arc<[u8]>> {
        self.rare.as_ref().and_then(|r| r.fields.as_ref())
    }

    /// Who asked this hold to stop (`--cancel-running`), if anyone did.
    pub(super) fn cancelled_by(&self) -> Option<&crate::proto::RivalWire> {
        self.rare.as_ref().and_then(|r| r.cancelled_by.as_deref())
    }

    /// Records that `by` asks the hold to stop, and tells the task serving
    /// it (once: later askers change nothing).
    pub(super) fn cancel(&mut self, by: crate::proto::RivalWire) {
        let rare = self.rare_mut();
        if rare.cancelled_by.is_some() {
            return;
        }
        rare.cancelled_by = Some(Box::new(by));
        if let Some(tx) = rare.link.as_mut().and_then(|l| l.changed.take()) {
            let _ = tx.send(());
        }
    }

    pub(super) fn since(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.since_ns)
    }

    pub(super) fn peer(&self) -> SocketAddr {
        self.peer.addr()
    }

    pub(super) fn owner(&self) -> Option<&Owner> {
        self.rare.as_ref().and_then(|r| r.owner.as_ref())
    }

    pub(super) fn secret(&self) -> Option<Secret> {
        self.rare.as_ref().and_then(|r| r.secret)
    }

    pub(super) fn expires(&self) -> Option<SystemTime> {
        self.rare.as_ref().and_then(|r| r.expires)
    }

    pub(super) fn link(&self) -> Option<&Link> {
        self.rare.as_ref().and_then(|r| r.link.as_ref())
    }

    pub(super) fn link_mut(&mut self) -> Option<&mut Link> {
        self.rare.as_mut().and_then(|r| r.link.as_mut())
    }

    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    pub(super) fn set_owner(&mut self, owner: Owner) {
        self.rare_mut().owner = Some(owner);
    }

    pub(super) fn set_link(&mut self, mut link: Link) {
        // A stop asked for while the holder was away is told again.
        if self.cancelled_by().is_some() {
            if let Some(tx) = link.changed.take() {
                let _ = tx.send(());
            }
        }
        self.rare_mut().link = Some(link);
    }
}

/// The holds of a key: one inline (nearly every key), several in a `Vec`
/// (shared and limited keys). Read as a slice.
pub(super) enum Holds {
    One(Hold),
    Many(Vec<Hold>),
}

impl Default for Holds {
    fn default() -> Self {
        Holds::Many(Vec::new())
    }
}

impl Deref for Holds {
    type Target = [Hold];
    fn deref(&self) -> &[Hold] {
        match self {
            Holds::One(h) => std::slice::from_ref(h),
            Holds::Many(v) => v,
        }
    }
}

impl DerefMut for Holds {
    fn deref_mut(&mut self) -> &mut [Hold] {
        match self {
            Holds::One(h) => std::slice::from_mut(h),
            Holds::Many(v) => v,
        }
    }
}

impl Holds {
    pub(super) fn push(&mut self, hold: Hold) {
        *self = match std::mem::take(self) {
            Holds::Many(v) if v.is_empty() => Holds::One(hold),
            Holds::One(first) => Holds::Many(vec![first, hold]),
            Holds::Many(mut v) => {
                v.push(hold);
                Holds::Many(v)
            }
        };
    }

    pub(super) fn remove(&mut self, pos: usize) -> Hold {
        match self {
            Holds::Many(v) => v.remove(pos),
            Holds::One(_) => {
                assert_eq!(pos, 0, "one hold");
                let Holds::One(h) = std::mem::take(self) else {
                    unreachable!()
                };
                h
            }
        }
    }

    pub(super) fn retain(&mut self, keep: impl FnMut(&Hold) -> bool) {
        match self {
            Holds::Many(v) => v.retain(keep),
            Holds::One(h) => {
                let mut keep = keep;
                if !keep(h) {
                    *self = Holds::default();
                }
            }
        }
    }
}

pub(super) struct Waiter {
    pub id: GrantId,
    pub ask: QueuedAsk,
    /// When it joined the line (for Keys' listing of waiters).
    pub since: SystemTime,
    pub notify: oneshot::Sender<Notice>,
}

/// An [`Ask`] as a line keeps it: its source in a slice and its peer in
/// 16 bytes (88 bytes a [`Waiter`] instead of 112: ten thousand waiters on
/// one key are a line of 16,384).
pub(super) struct QueuedAsk {
    pub source: Box<[u8]>,
    peer: Peer,
    pub session: bool,
    pub mode: LockMode,
    /// A session grant carries a secret (see [`Ask::secret`]).
    secret: bool,
    expire: Option<NonZeroU32>,
    /// Its token's owner and its field list, where it has either: boxed,
    /// so a waiter without them pays 8 bytes for both.
    rare: Option<Box<AskRare>>,
}

/// What few waiters have (see [`QueuedAsk`]).
struct AskRare {
    owner: Option<Owner>,
    fields: Option<Arc<[u8]>>,
    /// Its place in its owner's count of waiters (`waits=`), given back
    /// when it leaves the line, whichever way.
    _counted: Option<WaitCount>,
    /// The group of requests for several keys it is one of (`group.rs`).
    group: Option<super::group::GroupName>,
}

/// One waiter of a token's in [`super::inner::Inner::waiting_by`]: counted
/// when made, uncounted when dropped (granted, withdrawn, superseded,
/// reset: every way out of a line drops it).
pub(super) struct WaitCount(Arc<AtomicU32>);

impl WaitCount {
    pub(super) fn new(count: Arc<AtomicU32>) -> WaitCount {
        count.fetch_add(1, Ordering::Relaxed);
        WaitCount(count)
    }
}

impl Drop for WaitCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl QueuedAsk {
    pub(super) fn new(ask: &Ask, counted: Option<WaitCount>) -> QueuedAsk {
        QueuedAsk {
            source: ask.source.as_slice().into(),
            peer: Peer::new(ask.peer),
            session: ask.session,
            mode: ask.mode,
            secret: ask.secret,
            expire: ask.expire,
            rare: (ask.owner.is_some() || ask.fields.is_some()).then(|| {
                Box::new(AskRare {
                    owner: ask.owner.clone(),
                    fields: ask.fields.clone(),
                    _counted: counted,
                    group: super::group::name_of(ask),
                })
            }),
        }
    }

    /// Its token's owner (`--token-file`).
    pub(super) fn owner(&self) -> Option<&Owner> {
        self.rare.as_ref().and_then(|r| r.owner.as_ref())
    }

    /// The group of requests for several keys it is one of.
    pub(super) fn group(&self) -> Option<super::group::GroupName> {
        self.rare.as_ref().and_then(|r| r.group)
    }

    /// Its field list (issue 44).
    pub(super) fn fields(&self) -> Option<&[u8]> {
        self.rare.as_ref().and_then(|r| r.fields.as_deref())
    }

    pub(super) fn peer(&self) -> SocketAddr {
        self.peer.addr()
    }

    /// The request again, for its grant.
    pub(super) fn to_ask(&self) -> Ask {
        Ask {
            source: self.source.to_vec(),
            peer: self.peer(),
            session: self.session,
            mode: self.mode,
            owner: self.owner().cloned(),
            waits: None,
            secret: self.secret,
            expire: self.expire,
            fields: self.rare.as_ref().and_then(|r| r.fields.clone()),
            ticket: None,
        }
    }
}

#[derive(Default)]
pub(super) struct KeyState {
    /// In grant order, the oldest first: one, or several shared or limited.
    pub holds: Holds,
    /// In arrival order, across modes.
    pub waiters: Line,
}

impl KeyState {
    /// The mode the key is used in while anyone holds or waits for it.
    pub(super) fn mode(&self) -> Option<LockMode> {
        self.holds
            .first()
            .map(|h| h.mode)
            .or_else(|| self.waiters.front().map(|w| w.ask.mode))
    }

    /// Whether a request in `mode` may hold the key beside its holders now.
    /// (Nobody may pass a waiter: callers also check the line is empty.)
    pub(super) fn admits(&self, mode: LockMode) -> bool {
        match mode {
            LockMode::Exclusive => self.holds.is_empty(),
            LockMode::Shared => self.holds.iter().all(|h| h.mode == LockMode::Shared),
            LockMode::Limit(n) => self.holds.len() < n.get() as usize,
        }
    }

    pub(super) fn hold(&self, id: GrantId) -> Option<&Hold> {
        self.holds.iter().find(|h| h.id == id)
    }

    pub(super) fn hold_mut(&mut self, id: GrantId) -> Option<&mut Hold> {
        self.holds.iter_mut().find(|h| h.id == id)
    }

    /// The hold a plain Unlock (`lc-cli unlock KEY`) ends: the oldest kept
    /// hold, else the oldest hold.
    #[cfg(test)]
    pub(super) fn unlock_target(&self) -> Option<&Hold> {
        self.unlock_target_of(Whose::Any)
    }

    /// As [`KeyState::unlock_target`], among the holds `whose` may release.
    pub(super) fn unlock_target_of(&self, whose: Whose) -> Option<&Hold> {
        let mut mine = self.holds.iter().filter(|h| whose.may_release(h.owner()));
        let first = mine.clone().next();
        mine.find(|h| !h.session).or(first)
    }

    pub(super) fn is_idle(&self) -> bool {
        self.holds.is_empty() && self.waiters.is_empty()
    }
}

#[cfg(test)]
mod tests;
