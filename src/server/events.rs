//! The server's event log: one timestamped line per event on stderr (not
//! to be confused with the write-ahead log of `--data`).
//! Start-up, resets and errors always; grants, releases and withdrawals with `-v`.

use std::fmt::Arguments;
use std::io::Write;
use std::net::SocketAddr;
use std::time::SystemTime;

use crate::proto::printable;

pub struct Events {
    pub verbose: bool,
}

impl Events {
    fn line(&self, args: Arguments<'_>) {
        let now = humantime::format_rfc3339_millis(SystemTime::now());
        // One write per line so concurrent tasks never interleave within a line.
        let line = format!("{now} {args}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    pub fn info(&self, args: Arguments<'_>) {
        self.line(args);
    }

    pub fn warn(&self, args: Arguments<'_>) {
        self.line(format_args!("warning: {args}"));
    }

    pub fn error(&self, args: Arguments<'_>) {
        self.line(format_args!("error: {args}"));
    }

    pub fn reset(&self, args: Arguments<'_>) {
        self.line(args);
    }

    /// A session hold's connection ended, was reclaimed, or expired: always
    /// logged, as a reset is (a key changed hands without its holder's word).
    pub fn session(&self, args: Arguments<'_>) {
        self.line(args);
    }

    fn event(&self, what: &str, key: &[u8], source: &[u8], peer: SocketAddr) {
        if self.verbose {
            self.line(format_args!(
                "{what} '{}' source '{}' peer {peer}",
                printable(key),
                printable(source)
            ));
        }
    }

    pub fn grant(&self, key: &[u8], source: &[u8], peer: SocketAddr) {
        self.event("grant", key, source, peer);
    }

    pub fn queued(&self, key: &[u8], source: &[u8], peer: SocketAddr) {
        self.event("queue", key, source, peer);
    }

    pub fn release(&self, key: &[u8], source: &[u8], peer: SocketAddr) {
        self.event("release", key, source, peer);
    }

    pub fn withdrawal(&self, key: &[u8], source: &[u8], peer: SocketAddr) {
        self.event("withdraw", key, source, peer);
    }
}

/// `, now held by 'a', 'b'` for the holders a release let in, or nothing.
pub fn now_held_by(next: &[super::table::Holder]) -> String {
    if next.is_empty() {
        return String::new();
    }
    let names: Vec<String> = next
        .iter()
        .map(|h| format!("'{}'", printable(&h.source)))
        .collect();
    format!(", now held by {}", names.join(", "))
}
