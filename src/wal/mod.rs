//! The write-ahead log of held keys (`lc-cli serve --data PATH`).
//!
//! Bytes and keys in, records out: this module knows nothing of the server.
//! [`Wal::append`] encodes a record into the open batch (cheap, under a short
//! mutex, so callers can append while holding their own lock and the log's
//! order is theirs) and returns a [`Ticket`]. One writer thread takes the whole
//! batch, writes it with one `write` and makes it durable with one
//! `fdatasync` (group commit), then resolves every ticket of that batch.
//! While it syncs, the next batch fills up.
//!
//! The writer also keeps the set of live holders (a grant not yet released)
//! and rewrites the log to hold only them once it is about twice what they
//! need: temp file, fsync, rename, fsync of the directory.
//! See `src/wal/README.md` for the format and the crash windows.
//!
//! Here: the log's types and [`Wal`]'s appending side. `recover`: start-up
//! ([`Wal::open`]); `writer`: the writer thread and compaction; `rewrite`:
//! replacing the file whole; `record` and `file`: the record framing and
//! the file header; `live`: the live holders.

pub mod file;
mod live;
pub mod record;
mod recover;
mod rewrite;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

pub use record::{Ownership, OwnershipRef, Record};

use self::live::Live;
use crate::mode::LockMode;

/// A key held according to the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub key: Vec<u8>,
    pub source: Vec<u8>,
    pub peer: Vec<u8>,
    pub since: SystemTime,
    pub token: u64,
    pub session: bool,
    pub mode: LockMode,
    /// When the server releases this kept hold (`lock KEY --expire`).
    pub expires: Option<SystemTime>,
    /// Whose it is and its secret's digest (none in a log before version 5).
    pub ownership: Ownership,
}

/// A [`Held`] as read in place from the log's bytes ([`Wal::open_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldRef<'a> {
    pub key: &'a [u8],
    pub source: &'a [u8],
    pub peer: &'a [u8],
    pub since: SystemTime,
    pub token: u64,
    pub session: bool,
    pub mode: LockMode,
    pub expires: Option<SystemTime>,
    pub ownership: OwnershipRef<'a>,
}

impl HeldRef<'_> {
    pub fn to_owned(&self) -> Held {
        Held {
            key: self.key.to_vec(),
            source: self.source.to_vec(),
            peer: self.peer.to_vec(),
            since: self.since,
            token: self.token,
            session: self.session,
            mode: self.mode,
            expires: self.expires,
            ownership: self.ownership.to_owned(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A whole record that fails its checksum (or cannot be read): the file
    /// is damaged, not torn by a crash.
    #[error("{path}: corrupt record at byte offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: &'static str,
    },
    /// Another server has the log open.
    #[error("{path} is in use by another lc-cli serve ({}, lock file {lock})", holder(*pid))]
    Locked {
        path: PathBuf,
        lock: PathBuf,
        pid: Option<u32>,
    },
    /// A header of a format this build does not know (a newer lc-cli).
    #[error(
        "{path}: log format version {version}, this lc-cli reads version {}: use a newer lc-cli",
        file::VERSION
    )]
    Version { path: PathBuf, version: u32 },
    /// Neither an lc-cli header nor a record at its start.
    #[error("{path} is not an lc-cli log (no lc-cli header, and no record at its start)")]
    Foreign { path: PathBuf },
    #[error("{path}: cannot {op}: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        source: std::io::Error,
    },
}

fn holder(pid: Option<u32>) -> String {
    pid.map_or_else(|| "pid unknown".to_string(), |p| format!("pid {p}"))
}

/// Called by the writer thread with the time each fsync took.
pub type SyncObserver = Arc<dyn Fn(Duration) + Send + Sync>;

#[derive(Clone)]
pub struct Options {
    /// Never compact a log smaller than this many bytes.
    pub compact_min: u64,
    /// Test hook: when set, the next compaction stops dead after the temp
    /// file is written and synced, before the rename, as if the process had
    /// been killed there; the writer then writes nothing more.
    pub crash_before_rename: Arc<AtomicBool>,
    /// Told how long each fsync of the log took (for a latency histogram).
    pub on_sync: Option<SyncObserver>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            compact_min: 64 * 1024,
            crash_before_rename: Arc::new(AtomicBool::new(false)),
            on_sync: None,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("compact_min", &self.compact_min)
            .field("crash_before_rename", &self.crash_before_rename)
            .field("on_sync", &self.on_sync.as_ref().map(|_| "Fn(Duration)"))
            .finish()
    }
}

/// What start-up found.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Records read.
    pub records: u64,
    /// The length of a torn tail that was cut off, and where.
    pub torn: Option<(u64, u64)>,
    /// A temp file of an unfinished compaction was removed.
    pub stale_temp: bool,
    /// A log of the previous release (no header) was rewritten with one.
    pub migrated: bool,
    /// The highest fencing token the log knows of (grants and floors).
    pub token_floor: u64,
    /// A log of this earlier format version now has this build's header.
    pub upgraded: Option<u32>,
    /// Each key's mark (issue 44), by key.
    pub marks: Vec<(Vec<u8>, u64)>,
    /// Each key's history entries (key, its token's fingerprint, entry),
    /// each key's oldest first (tag 11).
    pub history: Vec<(Vec<u8>, u64, Vec<u8>)>,
}

/// Counters since start-up.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub grants: u64,
    pub releases: u64,
    pub syncs: u64,
    pub failed_batches: u64,
    pub compactions: u64,
    /// Bytes in the log file now.
    pub file_len: u64,
}

/// Why a record is not durable.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotDurable {
    /// Its batch could not be written or synced (the file was cut back to
    /// before it).
    #[error("{0}")]
    Write(Arc<str>),
    /// The writer stopped before the record's batch was written.
    #[error("the log writer has stopped")]
    Stopped,
}

type Outcome = Option<Result<(), Arc<str>>>;

/// Resolves once the record it was given for is durable, or failed to be.
#[derive(Debug, Clone)]
pub struct Ticket(watch::Receiver<Outcome>);

impl Ticket {
    pub async fn wait(mut self) -> Result<(), NotDurable> {
        match self.0.wait_for(|o| o.is_some()).await {
            Ok(o) => o.clone().unwrap().map_err(NotDurable::Write),
            Err(_) => Err(NotDurable::Stopped),
        }
    }
}

struct State {
    pending: Vec<u8>,
    pending_grants: u64,
    pending_releases: u64,
    batch: watch::Sender<Outcome>,
    /// Every hold the file has (batches are applied once durable), for a
    /// compaction.
    live: Live,
    /// The highest token appended or replayed: a compacted log starts with
    /// it, so no token is given twice after the grant that had it is gone.
    max_token: u64,
    closing: bool,
    /// The writer has stopped (only the test hook stops it early).
    stopped: bool,
    /// Batches taken by the writer / finished by it.
    taken: u64,
    finished: u64,
    last_error: Option<Arc<str>>,
    stats: Stats,
}

/// The batches between the appenders and the writer thread.
struct Batches {
    state: Mutex<State>,
    /// What a compaction would keep now ([`Wal::live_gauge`]).
    live_bytes: Arc<AtomicU64>,
    /// The writer waits here for work.
    work: Condvar,
    /// `sync` waits here for the writer.
    done: Condvar,
}

pub struct Wal {
    shared: Arc<Batches>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Held until the Wal is dropped (after the writer has stopped).
    _lock: file::LogLock,
}

impl Held {
    /// The Grant record that restores this hold.
    pub fn record(&self) -> Record {
        Record::Grant {
            key: self.key.clone(),
            source: self.source.clone(),
            peer: self.peer.clone(),
            since_ms: self
                .since
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            token: self.token,
            session: self.session,
            mode: self.mode,
            expires_ms: self.expires.map(|at| {
                at.duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0)
            }),
            ownership: self.ownership.clone(),
        }
    }
}

/// Gives the heap's free pages back to the system (glibc keeps them
/// otherwise): after a replay, whose records and copies of a million holds
/// are freed between the table's own allocations, that is most of the
/// replay's peak.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub(crate) fn io<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> WalError + 'a {
    move |source| WalError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

impl Wal {
    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `record` to the open batch. The caller's ordering of appends is
    /// the log's order.
    pub fn append(&self, record: &Record) -> Ticket {
        let mut st = self.state();
        let start = st.pending.len();
        record.encode_into(&mut st.pending);
        match record {
            Record::Grant { token, .. } => {
                st.max_token = st.max_token.max(*token);
                st.pending_grants += 1;
            }
            Record::Release { .. } => st.pending_releases += 1,
            Record::Floor { token } => st.max_token = st.max_token.max(*token),
            Record::Mark { .. } | Record::History { .. } => {}
        }
        let ticket = Ticket(st.batch.subscribe());
        if start == 0 {
            self.shared.work.notify_one();
        }
        ticket
    }

    /// Blocks until everything appended so far is durable (or failed).
    pub fn sync(&self) -> Result<(), NotDurable> {
        let mut st = self.state();
        let target = st.taken + u64::from(!st.pending.is_empty());
        let failed_before = st.stats.failed_batches;
        while st.finished < target {
            if st.stopped {
                return Err(NotDurable::Stopped);
            }
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.stats.failed_batches > failed_before {
            return Err(NotDurable::Write(
                st.last_error
                    .clone()
                    .unwrap_or_else(|| "write failed".into()),
            ));
        }
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        self.state().stats
    }

    /// The bytes a compaction would keep (the live holds, marks and
    /// history, as of the last durable batch), read without a lock: what
    /// `serve --max-log-bytes` weighs a new hold against.
    pub fn live_gauge(&self) -> Arc<AtomicU64> {
        self.shared.live_bytes.clone()
    }

    /// Writes what is pending, stops the writer and waits for it.
    pub fn close(&self) {
        self.state().closing = true;
        self.shared.work.notify_one();
        if let Some(handle) = self.writer.lock().ok().and_then(|mut w| w.take()) {
            let _ = handle.join();
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.close();
    }
}
