//! What makes a file an lc-cli log: its header, and the lock that keeps a
//! second server off it.
//!
//! Header: `magic "LCCLIWAL" | version:u32le`, 12 bytes, then records.
//!
//! The lock is an open-file-description lock (`F_OFD_SETLK`) on a sidecar
//! `PATH.lock`, not on the log itself: compaction renames a new file over
//! the log, and a lock on the old inode would not stop a server that opens
//! the new one. The sidecar holds the holder's PID as text, for the error
//! line of the next server and for operators. It is never deleted: removing
//! it could let two servers lock two different inodes of the same name.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const MAGIC: [u8; 8] = *b"LCCLIWAL";
/// The format this build writes and reads (8: a `--limit N` hold's slot,
/// tag 12, issue 45; 7: a key's history, tag 11,
/// issue 46; 6: a key's mark, tag 10, issue
/// 44; 5: a grant may carry its
/// owner, the token's fingerprint and name, and its session's secret
/// digest, tag 8; 4: a kept hold's grant may carry its expiry deadline,
/// tag 7; 3: grants carry a mode, and a release names the hold's token;
/// versions 1 to 4 are still read, and their header rewritten).
pub const VERSION: u32 = 8;
/// The earlier formats, read and upgraded in place: 1 (grants without
/// tokens), 2 (grants with a token and a session flag, one hold per key),
/// 3 (no expiring holds), 4 (no owners: their holds are restored without
/// one), 5 (no marks), 6 (no history), 7 (no slots: their `--limit N`
/// holds get one at start-up).
pub const EARLIER: std::ops::RangeInclusive<u32> = 1..=7;
pub const HEADER_LEN: usize = 12;

/// The rights a log file (and its lock and compaction files) is created
/// with, before the umask: its holders' keys and sources are the team's
/// business, not every local user's. An existing file keeps its own.
pub const LOG_MODE: u32 = 0o640;

/// The header of a log in this build's format.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Empty, or a header cut short by a crash at creation: a new log.
    New,
    /// This build's format; records start after the header.
    Current,
    /// An earlier version: the same framing, records this build reads.
    Earlier(u32),
    /// A log of an lc-cli release before the header: records from byte 0.
    Headerless,
    /// The header of a format this build does not know.
    Version(u32),
    /// Neither a header nor a first record: not an lc-cli log.
    Foreign,
}

/// Classifies `bytes`, the start of a file; `first_record` says whether a
/// whole, valid record starts at byte 0 (the mark of a headerless log).
pub fn classify(bytes: &[u8], first_record: bool) -> Format {
    let h = header();
    if bytes.len() < HEADER_LEN && h.starts_with(bytes) {
        return Format::New;
    }
    if bytes.starts_with(&MAGIC) && bytes.len() >= HEADER_LEN {
        let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        return match version {
            VERSION => Format::Current,
            v if EARLIER.contains(&v) => Format::Earlier(v),
            _ => Format::Version(version),
        };
    }
    if first_record {
        Format::Headerless
    } else {
        Format::Foreign
    }
}

pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// Why the lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it; its PID as it wrote it, if readable.
    Held {
        pid: Option<u32>,
    },
    Io(std::io::Error),
}

/// The exclusive lock on a log, held for as long as this value lives.
#[derive(Debug)]
pub struct LogLock {
    _file: File,
}

impl LogLock {
    /// Takes the lock without waiting and records our PID in it.
    pub fn acquire(path: &Path) -> Result<LogLock, LockError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(LOG_MODE)
            .truncate(false)
            .open(lock_path(path))
            .map_err(LockError::Io)?;
        let lock = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: 0,
            l_len: 0,
            // Must be 0 for open-file-description locks.
            l_pid: 0,
        };
        let taken = nix::fcntl::fcntl(&file, nix::fcntl::F_OFD_SETLK(&lock));
        match taken {
            Ok(_) => {}
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(LockError::Held {
                    pid: text.trim().parse().ok(),
                });
            }
            Err(e) => return Err(LockError::Io(e.into())),
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0).map_err(LockError::Io)?;
        file.write_all_at(pid.as_bytes(), 0)
            .map_err(LockError::Io)?;
        Ok(LogLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let h = header();
        assert_eq!(classify(&[], false), Format::New);
        assert_eq!(classify(&h[..5], false), Format::New);
        assert_eq!(classify(&h, false), Format::Current);
        let mut newer = h;
        newer[8] = 9;
        assert_eq!(classify(&newer, false), Format::Version(9));
        for v in [1, 2, 3, 4, 5, 6, 7] {
            let mut earlier = h;
            earlier[8] = v;
            assert_eq!(classify(&earlier, false), Format::Earlier(u32::from(v)));
        }
        assert_eq!(classify(b"hello world, not a log", false), Format::Foreign);
        assert_eq!(classify(&[9, 0, 0, 0], true), Format::Headerless);
        // A prefix of the header that goes wrong is not a new log.
        assert_eq!(classify(b"LCCX", false), Format::Foreign);
    }

    #[test]
    fn a_second_lock_is_refused_with_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.wal");
        let first = LogLock::acquire(&path).unwrap();
        match LogLock::acquire(&path) {
            Err(LockError::Held { pid }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        drop(first);
        LogLock::acquire(&path).unwrap();
    }
}
