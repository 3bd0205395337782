//! The one writer thread: takes the whole open batch, writes it with one
//! `write` and one `fdatasync` (group commit), resolves its tickets, and
//! compacts the log when it has grown to about twice what the live holders
//! need.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use super::live::Live;
use super::rewrite::{snapshot, sync_dir, temp_path, write_temp};
use super::{file, io, Batches, Options, State, Stats, Wal, WalError};

impl Wal {
    /// Starts the writer thread on a recovered log of `len` bytes.
    pub(super) fn start(
        path: &Path,
        file: File,
        len: u64,
        (live, max_token): (Live, u64),
        options: Options,
        lock: file::LogLock,
    ) -> Result<Wal, WalError> {
        let (batch, _) = watch::channel(None);
        let live_bytes = Arc::new(AtomicU64::new(live.bytes()));
        let shared = Arc::new(Batches {
            live_bytes,
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
            self.shared
                .live_bytes
                .store(st.live.bytes(), Ordering::Relaxed);
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
