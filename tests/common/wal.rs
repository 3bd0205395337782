//! Reading a write-ahead log file as the tests see it.

use lc_cli::wal::record::{decode, Next};

/// The offsets where each record of a log file's bytes starts (after the
/// header); panics at anything that does not decode.
pub(crate) fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = lc_cli::wal::file::HEADER_LEN;
    while at < bytes.len() {
        starts.push(at);
        match decode(&bytes[at..]) {
            Next::Record(_, used) => at += used,
            other => panic!("bad log at {at}: {other:?}"),
        }
    }
    starts
}
