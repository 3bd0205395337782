//! Key-prefix permissions of a `--token-file` line (`keys=deploy/*,ci/*`):
//! the keys a token may lock, try, wait for or mark. A pattern is a key,
//! or a prefix followed by `*` (`deploy/*`: every key that starts with
//! `deploy/`; `*`: every key); a line without `keys=` may use every key,
//! as before. Releases, reclaims and listings are not keyed here: a token
//! releases only its own holds anyway (`tokens.rs`), and an admin's
//! resets are the admin's.
//!
//! `waits=N` caps how many of its requests may wait in line at once
//! (default [`DEFAULT_WAITS`]): a lock that would queue beyond it is
//! refused in one line (76); a lock granted at once, a trylock and a
//! wait that ends are not counted. Counted by the table where a waiter is
//! made, uncounted where it is dropped (`table::key::WaitCount`), so
//! every way out of a line gives its place back.
//!
//! `held=N` caps how many holds a token may have at once (default
//! [`DEFAULT_HELD`], which a team does not notice and a runaway script
//! does): a lock or trylock beyond it is refused with one line naming the
//! limit (76 on the client). The count is the table's
//! (`Table::held_by`), kept where a hold with an owner enters or leaves
//! it, restored holds included; it is checked before the request goes to
//! the table, so requests of one token in flight at the same moment may
//! pass it by as many as there are of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::proto::{Request, MAX_FIELD};

/// The patterns of one `keys=` word; none for a line without one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct KeyPatterns {
    /// Each pattern, without its `*`, and whether it had one (a prefix).
    patterns: Box<[(Box<[u8]>, bool)]>,
    /// The word as given, for the refusal (`deploy/*,ci/*`).
    shown: Box<str>,
}

impl KeyPatterns {
    /// Parses the text after `keys=`: patterns split by `,`, each a key or
    /// a prefix and a final `*`. The message names what is wrong.
    pub(crate) fn parse(text: &[u8]) -> Result<Arc<KeyPatterns>, String> {
        let mut patterns = Vec::new();
        for p in text.split(|&b| b == b',') {
            if p.is_empty() || p.len() > MAX_FIELD {
                return Err(format!(
                    "keys= takes patterns of 1 to {MAX_FIELD} bytes split by commas \
                     (keys=deploy/*,ci/*)"
                ));
            }
            let (prefix, star) = match p.split_last() {
                Some((b'*', rest)) => (rest, true),
                _ => (p, false),
            };
            if prefix.contains(&b'*') {
                return Err("keys= takes a * only at the end of a pattern (deploy/*)".into());
            }
            patterns.push((prefix.to_vec().into_boxed_slice(), star));
        }
        Ok(Arc::new(KeyPatterns {
            patterns: patterns.into(),
            shown: String::from_utf8_lossy(text).into(),
        }))
    }

    /// Whether `key` matches one of the patterns.
    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        self.patterns.iter().any(|(p, star)| {
            if *star {
                key.starts_with(p)
            } else {
                key == &p[..]
            }
        })
    }

    /// The patterns as the token file gives them.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

/// The key a request would take, wait for or mark, if it is one that the
/// token's `keys=` decides.
pub(crate) fn key_taken(request: &Request) -> Option<&[u8]> {
    match request {
        Request::Lock { key, .. } | Request::ExpiringLock { key, .. } => Some(key),
        Request::Extended { lock, .. } => key_taken(lock),
        Request::Mark { key, .. } => Some(key),
        Request::Release { .. }
        | Request::Reclaim { .. }
        | Request::ResetByKey { .. }
        | Request::ResetBySource { .. }
        | Request::Ping
        | Request::Hello { .. }
        | Request::Keys { .. }
        | Request::History { .. } => None,
    }
}

/// The holds a token may have at once without a `held=` on its line.
pub(crate) const DEFAULT_HELD: u32 = 10_000;

/// The requests a token may have waiting in line at once without a
/// `waits=` on its line.
pub(crate) const DEFAULT_WAITS: u32 = 10_000;

/// Parses the number after `held=`: 1 to 4,294,967,295.
pub(crate) fn parse_held(text: &[u8]) -> Result<u32, String> {
    count(text)
        .ok_or_else(|| "held= takes a number of holds from 1 to 4294967295 (held=500)".into())
}

/// Parses the number after `waits=`: 1 to 4,294,967,295.
pub(crate) fn parse_waits(text: &[u8]) -> Result<u32, String> {
    count(text)
        .ok_or_else(|| "waits= takes a number of waits from 1 to 4294967295 (waits=100)".into())
}

fn count(text: &[u8]) -> Option<u32> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<u32>().ok())
        .filter(|&n| n > 0)
}

/// The refusal of a wait beyond the token's `waits=`: one line naming the
/// limit, never the token.
pub(crate) fn over_waits(name: &str, waits: u32) -> String {
    format!(
        "token '{name}' has {waits} requests waiting, its quota (waits= in the token file, \
         default {DEFAULT_WAITS})"
    )
}

/// Whether a request may take a new hold (a lock or trylock; not a mark).
pub(crate) fn takes_hold(request: &Request) -> bool {
    match request {
        Request::Lock { .. } | Request::ExpiringLock { .. } => true,
        Request::Extended { lock, .. } => takes_hold(lock),
        _ => false,
    }
}

/// The refusal of a hold beyond the token's `held=`: one line naming the
/// limit, never the token.
pub(crate) fn over_held(name: &str, held: u32) -> String {
    format!(
        "token '{name}' holds {held} keys, its quota (held= in the token file, default \
         {DEFAULT_HELD}): release some, or ask the server's admin to raise it"
    )
}

/// `serve --max-log-bytes`: new holds are refused while what a compaction
/// of the log keeps (its held keys, marks and history) takes half of the
/// cap, so the log (which grows to twice that before it is compacted)
/// stays under it. Releases, resets and expiries only shrink what is kept.
pub(crate) struct LogCap {
    pub max: u64,
    /// The log's live bytes ([`crate::wal::Wal::live_gauge`]).
    pub live: Arc<AtomicU64>,
}

impl LogCap {
    /// The refusal of a new hold, while the log is full.
    pub(crate) fn full(&self) -> Option<String> {
        let live = self.live.load(Ordering::Relaxed);
        (live >= self.max / 2).then(|| {
            // Within a refusal's 127 bytes.
            format!(
                "the server's log is full: held keys take {}, half its --max-log-bytes {}; \
                 release keys or have it raised",
                mib(live),
                mib(self.max)
            )
        })
    }
}

/// Bytes as MiB with one decimal, or GiB from 1 GiB on.
fn mib(bytes: u64) -> String {
    match bytes as f64 / f64::from(1 << 20) {
        m if m >= 1024.0 => format!("{:.1} GiB", m / 1024.0),
        m => format!("{m:.1} MiB"),
    }
}

/// The refusal of a key outside the caller's `keys=`: one line naming the
/// limit, neither the token nor the key (the client names the key).
pub(crate) fn outside(name: &str, keys: &KeyPatterns) -> String {
    format!(
        "token '{name}' may use only keys matching {} (keys= in the token file)",
        keys.shown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_keys_or_prefixes() {
        let k = KeyPatterns::parse(b"deploy/*,ci/*,exact").unwrap();
        assert!(k.matches(b"deploy/prod") && k.matches(b"ci/") && k.matches(b"exact"));
        assert!(!k.matches(b"exactly") && !k.matches(b"deploy") && !k.matches(b"x"));
        assert!(KeyPatterns::parse(b"*").unwrap().matches(b"anything"));
        assert!(KeyPatterns::parse(b"").is_err());
        assert!(KeyPatterns::parse(b"a,,b").is_err());
        assert!(KeyPatterns::parse(b"a*b").is_err());
        assert_eq!(k.shown(), "deploy/*,ci/*,exact");
    }

    #[test]
    fn the_log_is_full_at_half_its_cap() {
        let cap = LogCap {
            max: 8 << 20,
            live: Arc::new(AtomicU64::new((4 << 20) - 1)),
        };
        assert_eq!(cap.full(), None);
        cap.live.store(4 << 20, Ordering::Relaxed);
        let line = cap.full().unwrap();
        assert!(
            line.contains("take 4.0 MiB, half its --max-log-bytes 8.0 MiB"),
            "{line}"
        );
        // Up to a PiB, within a refusal's 127 bytes.
        let big = LogCap {
            max: 2 << 50,
            live: Arc::new(AtomicU64::new(1 << 50)),
        };
        assert!(big.full().unwrap().len() <= crate::proto::MAX_FIELD);
    }

    #[test]
    fn held_takes_a_positive_number() {
        assert_eq!(parse_held(b"500"), Ok(500));
        assert!(parse_held(b"0").is_err() && parse_held(b"x").is_err());
        assert!(parse_held(b"").is_err() && parse_held(b"99999999999").is_err());
    }
}
