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

pub mod file;
mod live;
pub mod record;

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

pub use record::Record;

use self::live::Live;
use crate::mode::LockMode;
use record::{decode, Next};

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

/// Opens (or creates) the log file and reads it whole.
fn open_and_read(path: &Path) -> Result<(File, Vec<u8>), WalError> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io(path, "open"))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io(path, "read"))?;
    Ok((file, bytes))
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> WalError + 'a {
    move |source| WalError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compact");
    path.with_file_name(name)
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// What a replay found.
struct Replayed {
    live: Live,
    /// Just past the last whole record.
    offset: usize,
    records: u64,
    max_token: u64,
}

/// Replays the records of `bytes` from `start`.
fn replay(path: &Path, bytes: &[u8], start: usize) -> Result<Replayed, WalError> {
    let mut live = Live::default();
    let mut max_token = 0;
    let mut records = 0;
    let mut offset = start;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        match decode(rest) {
            Next::Record(record, used) => {
                records += 1;
                match &record {
                    Record::Grant { token, .. } | Record::Floor { token } => {
                        max_token = max_token.max(*token)
                    }
                    Record::Release { .. } => {}
                }
                // Kept in this build's format, for a compaction (a grant of
                // an earlier version gains its fields).
                live.apply(&record, &record.encode());
                offset += used;
            }
            // A crash after the size grew but before the data landed
            // leaves zeros: that is a torn tail too.
            Next::Incomplete => break,
            Next::Corrupt(_) if rest.iter().all(|&b| b == 0) => break,
            Next::Corrupt(reason) => {
                return Err(WalError::Corrupt {
                    path: path.to_path_buf(),
                    offset: offset as u64,
                    reason,
                })
            }
        }
    }
    Ok(Replayed {
        live,
        offset,
        records,
        max_token,
    })
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
        }
    }

    /// The hold a framed Grant record describes.
    fn from_frame(framed: &[u8]) -> Option<Held> {
        let Next::Record(
            Record::Grant {
                key,
                source,
                peer,
                since_ms,
                token,
                session,
                mode,
            },
            _,
        ) = decode(framed)
        else {
            return None;
        };
        Some(Held {
            key,
            source,
            peer,
            since: UNIX_EPOCH + Duration::from_millis(since_ms),
            token,
            session,
            mode,
        })
    }
}

/// The records of a compacted log: the token floor, then every live grant.
fn snapshot(max_token: u64, live: &Live) -> Vec<u8> {
    let mut snap = Record::Floor { token: max_token }.encode();
    for framed in live.frames() {
        snap.extend_from_slice(framed);
    }
    snap
}

/// Writes `header + records` to the temp file, syncs it, renames it over
/// `path` and syncs the directory: the log is replaced whole or not at all.
/// Returns the new log, open for appends.
fn replace_log(path: &Path, records: &[u8]) -> std::io::Result<File> {
    let file = write_temp(path, records, |f| f.sync_all())?;
    std::fs::rename(temp_path(path), path).inspect_err(|_| {
        let _ = std::fs::remove_file(temp_path(path));
    })?;
    // A failed directory sync only means the rename might not survive a
    // power cut, in which case the old log (still valid) comes back.
    let _ = sync_dir(path);
    Ok(file)
}

/// The temp file of a rewrite, written and synced with `sync`; removed again
/// if that fails.
fn write_temp(
    path: &Path,
    records: &[u8],
    sync: impl FnOnce(&File) -> std::io::Result<()>,
) -> std::io::Result<File> {
    let temp = temp_path(path);
    let attempt = || -> std::io::Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        file.write_all_at(&file::header(), 0)?;
        file.write_all_at(records, file::HEADER_LEN as u64)?;
        sync(&file)?;
        Ok(file)
    };
    attempt().inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

impl Wal {
    /// Opens (or creates) the log at `path`, recovers it and starts the
    /// writer. Returns the held keys, sorted by key.
    pub fn open(path: &Path, options: Options) -> Result<(Wal, Vec<Held>, Recovery), WalError> {
        // First of all: nothing of the log is touched (not even a stale
        // temp file) while another server may be using it.
        let lock = file::LogLock::acquire(path).map_err(|e| match e {
            file::LockError::Held { pid } => WalError::Locked {
                path: path.to_path_buf(),
                lock: file::lock_path(path),
                pid,
            },
            file::LockError::Io(e) => io(path, "lock")(e),
        })?;
        let mut recovery = Recovery::default();
        let temp = temp_path(path);
        if temp.exists() {
            // A compaction that never reached its rename: the log is intact.
            std::fs::remove_file(&temp).map_err(io(&temp, "remove"))?;
            recovery.stale_temp = true;
        }
        let (mut file, bytes) = open_and_read(path)?;
        let first_record = matches!(decode(&bytes), Next::Record(..));
        let start = match file::classify(&bytes, first_record) {
            file::Kind::New => {
                // New, or a crash cut its header short: (re)write the header.
                file.set_len(0).map_err(io(path, "truncate"))?;
                file.write_all_at(&file::header(), 0)
                    .map_err(io(path, "write the header of"))?;
                file.sync_all().map_err(io(path, "sync"))?;
                sync_dir(path).map_err(io(path, "sync the directory of"))?;
                file::HEADER_LEN
            }
            file::Kind::Current => file::HEADER_LEN,
            file::Kind::Earlier(version) => {
                // Same framing; from now on records of this version follow, so
                // the header must say so before any is appended (an older
                // lc-cli then refuses the file instead of misreading it).
                file.write_all_at(&file::header(), 0)
                    .map_err(io(path, "upgrade the header of"))?;
                file.sync_all().map_err(io(path, "sync"))?;
                recovery.upgraded = Some(version);
                file::HEADER_LEN
            }
            file::Kind::Headerless => 0,
            file::Kind::Version(version) => {
                return Err(WalError::Version {
                    path: path.to_path_buf(),
                    version,
                })
            }
            file::Kind::Foreign => {
                return Err(WalError::Foreign {
                    path: path.to_path_buf(),
                })
            }
        };
        let bytes = if start == file::HEADER_LEN && bytes.len() < start {
            file::header().to_vec()
        } else {
            bytes
        };
        let Replayed {
            live,
            mut offset,
            records,
            max_token,
        } = replay(path, &bytes, start)?;
        recovery.records = records;
        recovery.token_floor = max_token;
        if offset < bytes.len() {
            recovery.torn = Some((offset as u64, (bytes.len() - offset) as u64));
            file.set_len(offset as u64)
                .map_err(io(path, "truncate the torn tail of"))?;
            file.sync_all().map_err(io(path, "sync"))?;
        }
        if start == 0 {
            // The previous release's format: rewritten with a header and
            // the live holders only, as a compaction would, so no held key
            // is lost.
            let frames = snapshot(max_token, &live);
            file = replace_log(path, &frames).map_err(io(path, "add a header to"))?;
            offset = file::HEADER_LEN + frames.len();
            recovery.migrated = true;
        }

        let mut held: Vec<Held> = live.frames().filter_map(Held::from_frame).collect();
        held.sort_by(|a, b| (&a.key, a.token).cmp(&(&b.key, b.token)));
        let wal = Wal::start(path, file, offset as u64, (live, max_token), options, lock)?;
        Ok((wal, held, recovery))
    }

    /// Starts the writer thread on a recovered log of `len` bytes.
    fn start(
        path: &Path,
        file: File,
        len: u64,
        (live, max_token): (Live, u64),
        options: Options,
        lock: file::LogLock,
    ) -> Result<Wal, WalError> {
        let (batch, _) = watch::channel(None);
        let shared = Arc::new(Batches {
            state: Mutex::new(State {
                pending: Vec::new(),
                pending_grants: 0,
                pending_releases: 0,
                batch,
                live,
                max_token,
                closing: false,
                stopped: false,
                taken: 0,
                finished: 0,
                last_error: None,
                stats: Stats {
                    file_len: len,
                    ..Stats::default()
                },
            }),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let writer = Writer {
            shared: shared.clone(),
            path: path.to_path_buf(),
            file,
            len,
            options,
        };
        let handle = std::thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || writer.run())
            .map_err(io(path, "start the writer for"))?;
        Ok(Wal {
            shared,
            writer: Mutex::new(Some(handle)),
            _lock: lock,
        })
    }

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

struct Writer {
    shared: Arc<Batches>,
    path: PathBuf,
    file: File,
    len: u64,
    options: Options,
}

enum CompactFail {
    /// An I/O error: the old log is untouched.
    Io,
    /// Stopped on purpose before the rename (the test hook).
    Crashed,
}

impl Writer {
    fn run(mut self) {
        loop {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            while st.pending.is_empty() && !st.closing {
                st = self.shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            if st.pending.is_empty() {
                st.stopped = true;
                drop(st);
                self.shared.done.notify_all();
                return;
            }
            let bytes = std::mem::take(&mut st.pending);
            let (grants, releases) = (st.pending_grants, st.pending_releases);
            st.pending_grants = 0;
            st.pending_releases = 0;
            let (next, _) = watch::channel(None);
            let batch = std::mem::replace(&mut st.batch, next);
            st.taken += 1;
            let threshold = (2 * st.live.bytes()).max(self.options.compact_min);
            // A compaction writes the holds as of this batch.
            let after = (self.len + bytes.len() as u64 > threshold).then(|| {
                let mut live = st.live.clone();
                live.apply_batch(&bytes);
                live
            });
            let snapshot = after.as_ref().map(|live| snapshot(st.max_token, live));
            drop(st);

            let mut compacted = false;
            let result = match snapshot.map(|snap| self.compact(&snap)) {
                Some(Ok(())) => {
                    compacted = true;
                    Ok(())
                }
                Some(Err(CompactFail::Crashed)) => {
                    // As if killed here: nothing more is written, nothing
                    // more is acknowledged.
                    let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
                    st.stopped = true;
                    drop(st);
                    drop(batch);
                    self.shared.done.notify_all();
                    return;
                }
                Some(Err(CompactFail::Io)) | None => self.append(&bytes),
            };

            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.finished += 1;
            match &result {
                Ok(()) => {
                    match after {
                        Some(live) if compacted => st.live = live,
                        _ => st.live.apply_batch(&bytes),
                    }
                    st.stats.grants += grants;
                    st.stats.releases += releases;
                    st.stats.syncs += 1;
                    st.stats.compactions += u64::from(compacted);
                }
                Err(e) => {
                    st.stats.failed_batches += 1;
                    st.last_error = Some(e.clone());
                }
            }
            st.stats.file_len = self.len;
            drop(st);
            let _ = batch.send(Some(result));
            self.shared.done.notify_all();
        }
    }

    /// Appends one batch and syncs it; on failure cuts the file back to
    /// where it was, so a half-written batch never sits before later ones.
    fn append(&mut self, bytes: &[u8]) -> Result<(), Arc<str>> {
        let written = self
            .file
            .write_all_at(bytes, self.len)
            .and_then(|()| self.timed(|f| f.sync_data()));
        match written {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = self.file.sync_data();
                Err(format!("{}: cannot append to the log: {e}", self.path.display()).into())
            }
        }
    }

    /// Runs one fsync of the log and reports how long it took.
    fn timed(&self, sync: impl FnOnce(&File) -> std::io::Result<()>) -> std::io::Result<()> {
        self.timed_on(&self.file, sync)
    }

    fn timed_on(
        &self,
        file: &File,
        sync: impl FnOnce(&File) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let start = Instant::now();
        let result = sync(file);
        if let Some(observe) = &self.options.on_sync {
            observe(start.elapsed());
        }
        result
    }

    /// Rewrites the log to hold only `snapshot` (the live holders, including
    /// everything of the batch in hand). On an I/O error the old log is
    /// untouched and the batch is appended to it instead.
    fn compact(&mut self, snapshot: &[u8]) -> Result<(), CompactFail> {
        let temp = temp_path(&self.path);
        let file = write_temp(&self.path, snapshot, |f| self.timed_on(f, |f| f.sync_all()))
            .map_err(|_| CompactFail::Io)?;
        if self.options.crash_before_rename.load(Ordering::SeqCst) {
            return Err(CompactFail::Crashed);
        }
        if std::fs::rename(&temp, &self.path).is_err() {
            let _ = std::fs::remove_file(&temp);
            return Err(CompactFail::Io);
        }
        // The rename is done: the new log is the log. A failed directory
        // sync only means the rename might not survive a power cut, in
        // which case the old log (still valid) comes back.
        let _ = sync_dir(&self.path);
        self.file = file;
        self.len = (file::HEADER_LEN + snapshot.len()) as u64;
        Ok(())
    }
}
