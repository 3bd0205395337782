//! The server's event log: one timestamped line per event on stderr (not
//! to be confused with the write-ahead log of `--data`).
//! Start-up, resets and errors always; grants, releases and withdrawals with `-v`.

use std::collections::HashMap;
use std::fmt::Arguments;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::table::Owner;
use crate::proto::printable;

pub(crate) struct Events {
    pub verbose: bool,
    /// Per (address, kind) of refusal: when its window began, the lines
    /// logged in it, and how many were left out.
    limited: Mutex<HashMap<(Option<IpAddr>, &'static str), Window>>,
}

/// At most [`LIMITED_BURST`] lines per address and kind of refusal in this
/// time: a flood of bad frames or handshakes cannot fill the disk.
pub(crate) const LIMITED_EVERY: Duration = Duration::from_secs(60);

/// The lines an address may cause of one kind in [`LIMITED_EVERY`].
pub(crate) const LIMITED_BURST: u64 = 20;

/// One (address, kind)'s window of [`LIMITED_EVERY`].
struct Window {
    start: Instant,
    logged: u64,
    left_out: u64,
}

/// The (address, kind) pairs remembered; past that the memory starts anew
/// (a flood from many addresses then logs a line each again, once).
const LIMITED_PEERS: usize = 4096;

impl Events {
    pub(crate) fn new(verbose: bool) -> Events {
        Events {
            verbose,
            limited: Mutex::new(HashMap::new()),
        }
    }

    /// An error line about a peer's refused connection or request (`kind`
    /// names it: "bad request", "TLS handshake"): at most [`LIMITED_BURST`]
    /// per [`LIMITED_EVERY`] per address and kind, the last of them saying
    /// so; the first line of the next window says how many were left out.
    /// `ip` none: a refusal of no one address (`accept` failing).
    pub(crate) fn limited(&self, ip: Option<IpAddr>, kind: &'static str, args: Arguments<'_>) {
        let (left_out, last) = {
            let mut limited = self.limited.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if limited.len() >= LIMITED_PEERS && !limited.contains_key(&(ip, kind)) {
                limited.clear();
            }
            let w = limited.entry((ip, kind)).or_insert(Window {
                start: now,
                logged: 0,
                left_out: 0,
            });
            let mut left_out = 0;
            if now.duration_since(w.start) >= LIMITED_EVERY {
                left_out = std::mem::take(&mut w.left_out);
                w.start = now;
                w.logged = 0;
            }
            if w.logged >= LIMITED_BURST {
                w.left_out += 1;
                return;
            }
            w.logged += 1;
            (left_out, w.logged == LIMITED_BURST)
        };
        let whose = ip.map_or(String::new(), |ip| format!(" from {ip}"));
        let every = LIMITED_EVERY.as_secs();
        let note = match (left_out, last) {
            (0, false) => String::new(),
            (0, true) => format!(" (further {kind} lines{whose} are left out for {every}s)"),
            (n, false) => format!(" ({n} {kind} line(s){whose} were left out before this)"),
            (n, true) => format!(
                " ({n} {kind} line(s){whose} were left out before this; further ones are left out for {every}s)"
            ),
        };
        self.error(format_args!("{args}{note}"));
    }

    fn line(&self, args: Arguments<'_>) {
        let now = humantime::format_rfc3339_millis(SystemTime::now());
        // One write per line so concurrent tasks never interleave within a line.
        let line = format!("{now} {args}\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    pub(crate) fn info(&self, args: Arguments<'_>) {
        self.line(args);
    }

    pub(crate) fn warn(&self, args: Arguments<'_>) {
        self.line(format_args!("warning: {args}"));
    }

    pub(crate) fn error(&self, args: Arguments<'_>) {
        self.line(format_args!("error: {args}"));
    }

    pub(crate) fn reset(&self, args: Arguments<'_>) {
        self.line(args);
    }

    /// A session hold's connection ended, was reclaimed, or expired: always
    /// logged, as a reset is (a key changed hands without its holder's word).
    pub(crate) fn session(&self, args: Arguments<'_>) {
        self.line(args);
    }

    fn event(
        &self,
        what: &str,
        key: &[u8],
        source: &[u8],
        peer: SocketAddr,
        owner: Option<&Owner>,
        by: Option<&Owner>,
    ) {
        if self.verbose {
            // A release by another token (an admin's) names both.
            let by = match by.filter(|b| owner.is_none_or(|o| o.fingerprint != b.fingerprint)) {
                Some(b) => format!(" by '{}'", printable(b.name.as_bytes())),
                None => String::new(),
            };
            self.line(format_args!(
                "{what} '{}' source '{}' peer {peer}{}{by}",
                printable(key),
                printable(source),
                as_identity(owner),
            ));
        }
    }

    /// A grant to `owner` (the token's identity, with `--token-file`).
    pub(crate) fn grant(&self, key: &[u8], source: &[u8], peer: SocketAddr, owner: Option<&Owner>) {
        self.event("grant", key, source, peer, owner, None);
    }

    pub(crate) fn queued(
        &self,
        key: &[u8],
        source: &[u8],
        peer: SocketAddr,
        owner: Option<&Owner>,
    ) {
        self.event("queue", key, source, peer, owner, None);
    }

    /// `--newest`: a request left the line (or never joined it) for a
    /// newer one, `by` its source.
    pub(crate) fn superseded(&self, key: &[u8], source: &[u8], peer: SocketAddr, by: &[u8]) {
        if self.verbose {
            self.line(format_args!(
                "superseded '{}' source '{}' peer {peer} by '{}'",
                printable(key),
                printable(source),
                printable(by)
            ));
        }
    }

    /// `--order`: a request below the key's mark left the line.
    pub(crate) fn outdated(&self, key: &[u8], source: &[u8], peer: SocketAddr, mark: u64) {
        if self.verbose {
            self.line(format_args!(
                "outdated '{}' source '{}' peer {peer} (mark {mark})",
                printable(key),
                printable(source)
            ));
        }
    }

    /// The release of `owner`'s hold, asked by `by` (from `peer`).
    pub(crate) fn release(
        &self,
        key: &[u8],
        source: &[u8],
        peer: SocketAddr,
        owner: Option<&Owner>,
        by: Option<&Owner>,
    ) {
        self.event("release", key, source, peer, owner, by);
    }

    pub(crate) fn withdrawal(&self, key: &[u8], source: &[u8], peer: SocketAddr) {
        self.event("withdraw", key, source, peer, None, None);
    }
}

/// ` as 'IDENTITY'` for a hold (or request) of a token's, else nothing:
/// the log names the token's identity, never the token.
pub(crate) fn as_identity(owner: Option<&Owner>) -> String {
    match owner {
        Some(o) => format!(" as '{}'", printable(o.name.as_bytes())),
        None => String::new(),
    }
}

/// `'a', 'b' as 'alice'`: holders by source, and identity if any.
pub(crate) fn holders_named(holders: &[super::table::Holder]) -> String {
    let names: Vec<String> = holders
        .iter()
        .map(|h| {
            format!(
                "'{}'{}",
                printable(&h.source),
                as_identity(h.owner.as_ref())
            )
        })
        .collect();
    names.join(", ")
}

/// `, now held by 'a', 'b' as 'alice'` for the holders a release let
/// in, or nothing.
pub(crate) fn now_held_by(next: &[super::table::Holder]) -> String {
    if next.is_empty() {
        return String::new();
    }
    format!(", now held by {}", holders_named(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_logs_a_line_per_address_and_kind() {
        let events = Events::new(false);
        let a = Some(IpAddr::from([192, 0, 2, 1]));
        let b = Some(IpAddr::from([192, 0, 2, 2]));
        for _ in 0..1000 {
            events.limited(a, "bad request", format_args!("x"));
        }
        events.limited(b, "bad request", format_args!("x"));
        events.limited(a, "TLS handshake", format_args!("x"));
        let limited = events.limited.lock().unwrap();
        assert_eq!(limited.len(), 3);
        let flood = &limited[&(a, "bad request")];
        assert_eq!(
            (flood.logged, flood.left_out),
            (LIMITED_BURST, 1000 - LIMITED_BURST)
        );
        let one = &limited[&(b, "bad request")];
        assert_eq!((one.logged, one.left_out), (1, 0));
    }
}
