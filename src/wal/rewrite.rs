//! Replacing the log whole (a compaction, the migration of a headerless
//! log): temp file, fsync, rename, fsync of the directory.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::file;
use super::live::Live;
use super::record::Record;

pub(super) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compact");
    path.with_file_name(name)
}

pub(super) fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// The records of a compacted log: the token floor, then every live grant.
pub(super) fn snapshot(max_token: u64, live: &Live) -> Vec<u8> {
    let mut snap = Record::Floor { token: max_token }.encode();
    for framed in live.frames() {
        snap.extend_from_slice(framed);
    }
    snap
}

/// Writes `header + records` to the temp file, syncs it, renames it over
/// `path` and syncs the directory: the log is replaced whole or not at all.
/// Returns the new log, open for appends.
pub(super) fn replace_log(path: &Path, records: &[u8]) -> std::io::Result<File> {
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
pub(super) fn write_temp(
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
            .mode(file::LOG_MODE)
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
