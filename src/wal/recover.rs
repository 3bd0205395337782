//! Start-up: lock the log, tell what kind of file it is, replay its
//! records, cut a torn tail, upgrade or migrate an older format, and start
//! the writer on what is left.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use super::live::{self, Change, Live};
use super::record::{self, decode_ref, Next, RecordRef};
use super::rewrite::{replace_log, snapshot, sync_dir, temp_path};
use super::{file, io, Held, HeldRef, Options, Recovery, Wal, WalError};

impl Wal {
    /// Opens (or creates) the log at `path`, recovers it and starts the
    /// writer. Returns the held keys, sorted by key.
    pub fn open(path: &Path, options: Options) -> Result<(Wal, Vec<Held>, Recovery), WalError> {
        let mut held = Vec::new();
        let (wal, recovery) = Self::open_with(path, options, |h| held.push(h.to_owned()))?;
        Ok((wal, held, recovery))
    }

    /// [`Wal::open`], each held key told to `each` as read in place (no
    /// copy of its fields: what a restart of a million holds wants), sorted
    /// by key, then token, before the writer starts.
    pub fn open_with(
        path: &Path,
        options: Options,
        mut each: impl FnMut(HeldRef<'_>),
    ) -> Result<(Wal, Recovery), WalError> {
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
        let first_record = matches!(decode_ref(&bytes), Next::Record(..));
        let start = match file::classify(&bytes, first_record) {
            file::Format::New => {
                // New, or a crash cut its header short: (re)write the header.
                file.set_len(0).map_err(io(path, "truncate"))?;
                file.write_all_at(&file::header(), 0)
                    .map_err(io(path, "write the header of"))?;
                file.sync_all().map_err(io(path, "sync"))?;
                sync_dir(path).map_err(io(path, "sync the directory of"))?;
                file::HEADER_LEN
            }
            file::Format::Current => file::HEADER_LEN,
            file::Format::Earlier(version) => {
                // Same framing; from now on records of this version follow, so
                // the header must say so before any is appended (an older
                // lc-cli then refuses the file instead of misreading it).
                file.write_all_at(&file::header(), 0)
                    .map_err(io(path, "upgrade the header of"))?;
                file.sync_all().map_err(io(path, "sync"))?;
                recovery.upgraded = Some(version);
                file::HEADER_LEN
            }
            file::Format::Headerless => 0,
            file::Format::Version(version) => {
                return Err(WalError::Version {
                    path: path.to_path_buf(),
                    version,
                })
            }
            file::Format::Foreign => {
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

        // The set is by key; a key's holds are in log order, put in token
        // order here (the same but for logs before tokens).
        recovery.marks = live
            .frames()
            .filter_map(|f| match decode_ref(f) {
                Next::Record(RecordRef::Mark { key, mark: Some(m) }, _) => Some((key.to_vec(), m)),
                _ => None,
            })
            .collect();
        recovery.history = live
            .frames()
            .filter_map(|f| match decode_ref(f) {
                Next::Record(
                    RecordRef::History {
                        key, owner, entry, ..
                    },
                    _,
                ) => Some((key.to_vec(), owner, entry.to_vec())),
                _ => None,
            })
            .collect();
        let mut one_key: Vec<HeldRef<'_>> = Vec::new();
        for h in live.frames().filter_map(HeldRef::from_frame) {
            if one_key.last().is_some_and(|last| last.key != h.key) {
                one_key.sort_by_key(|h| h.token);
                one_key.drain(..).for_each(&mut each);
            }
            one_key.push(h);
        }
        one_key.sort_by_key(|h| h.token);
        one_key.drain(..).for_each(&mut each);
        drop(one_key);
        let wal = Wal::start(path, file, offset as u64, (live, max_token), options, lock)?;
        Ok((wal, recovery))
    }
}

/// Opens (or creates) the log file and reads it whole.
fn open_and_read(path: &Path) -> Result<(File, Vec<u8>), WalError> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(file::LOG_MODE)
        .truncate(false)
        .open(path)
        .map_err(io(path, "open"))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io(path, "read"))?;
    Ok((file, bytes))
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
///
/// Each record is checked and read in place; its change is kept beside its
/// framed bytes (this build's format: a grant of an earlier version gains
/// its fields, one of this version is kept as read), and the live set is
/// built from them grouped by key (a stable sort keeps each key's changes
/// in log order, and the changes of different keys commute). A lookup in
/// the set per record, two with its take and insert, was most of a
/// restart; a compacted log is in key order already, which the sort
/// finds in one pass.
fn replay(path: &Path, bytes: &[u8], start: usize) -> Result<Replayed, WalError> {
    let mut changes: Vec<(Change, Cow<'_, [u8]>)> = Vec::new();
    let mut max_token = 0;
    let mut records = 0;
    let mut offset = start;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        match decode_ref(rest) {
            Next::Record(record, used) => {
                records += 1;
                match record {
                    RecordRef::Grant { token, .. } | RecordRef::Floor { token } => {
                        max_token = max_token.max(token)
                    }
                    RecordRef::Release { .. }
                    | RecordRef::Mark { .. }
                    | RecordRef::History { .. } => {}
                }
                if let Some(change) = Change::of(&record) {
                    let framed = match record::is_current(rest) {
                        true => Cow::Borrowed(&rest[..used]),
                        false => Cow::Owned(record.encode()),
                    };
                    changes.push((change, framed));
                }
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
    changes.sort_by(|a, b| live::key_of(&a.1).cmp(live::key_of(&b.1)));
    let live = Live::from_key_order(changes.iter().map(|(c, f)| (*c, &f[..])));
    Ok(Replayed {
        live,
        offset,
        records,
        max_token,
    })
}

impl<'a> HeldRef<'a> {
    /// The hold a framed Grant record describes, its fields in the record.
    fn from_frame(framed: &'a [u8]) -> Option<HeldRef<'a>> {
        let Next::Record(
            RecordRef::Grant {
                key,
                source,
                peer,
                since_ms,
                token,
                session,
                mode,
                expires_ms,
                ownership,
            },
            _,
        ) = decode_ref(framed)
        else {
            return None;
        };
        Some(HeldRef {
            key,
            source,
            peer,
            since: UNIX_EPOCH + Duration::from_millis(since_ms),
            token,
            session,
            mode,
            expires: expires_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            ownership,
        })
    }
}
