//! etcd key layout and the value lc-cli writes into its keys. Pure: no I/O.
//!
//! The lock NAME is the key prefix `PREFIX/NAME/` (`NAME/` without a
//! prefix), exactly what `etcdctl lock PREFIX/NAME` uses; each waiter or
//! holder is the key `PREFIX/NAME/<lease id in lowercase hex>` and the one
//! with the smallest create revision holds. A NAME may not contain '/': the
//! range `a/` covers `a/b/...`, so `lock a` would queue behind every holder
//! of `a/b` (etcdctl has that trap; lc-cli refuses such names instead).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::LockMode;

/// Why a lock name cannot be used on etcd (`None` when it can).
pub(super) fn key_problem(key: &str) -> Option<String> {
    if key.contains('/') {
        return Some(
            "an etcd lock name must not contain '/' (the queue of 'a' is every key under 'a/', \
             so 'a' would wait behind any holder of 'a/b'); use the address's /PREFIX for a \
             hierarchy"
                .into(),
        );
    }
    None
}

/// The range of the queue of `key`: `PREFIX/KEY/`.
pub(super) fn queue_prefix(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        format!("{key}/")
    } else {
        format!("{prefix}/{key}/")
    }
}

/// Our queue key: the queue prefix and the lease id in lowercase hex, as
/// concurrency.Mutex names it.
pub(super) fn own_key(queue_prefix: &str, lease: i64) -> String {
    format!("{queue_prefix}{lease:x}")
}

/// Our key in a queue, as the wait found it and the hold keeps it.
pub(super) struct OwnKey {
    pub key: String,
    /// The create revision of our key: the order of the queue, and the token.
    pub rev: i64,
    /// The queue's range (`queue_prefix`).
    pub queue: String,
}

/// The range scanned by `keys` and `reset --source`: under the prefix, or
/// the whole keyspace without one.
pub(super) fn scan_prefix(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    }
}

/// A queue key found by a scan: the lock name it belongs to (below the
/// prefix), when its last segment is a lease id in hex.
pub(super) fn lock_name_of<'a>(scan_prefix: &str, key: &'a str) -> Option<&'a str> {
    let rest = key.strip_prefix(scan_prefix)?;
    let (name, lease) = rest.rsplit_once('/')?;
    let hex = !lease.is_empty()
        && lease.len() <= 16
        && lease
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex && !name.is_empty()).then_some(name)
}

/// The exclusive end of the range of keys starting with `prefix` (etcd's
/// `GetPrefixRangeEnd`); `\0` (to the end of the keyspace) for an empty one.
pub(super) fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// What lc-cli writes into its queue key; etcdctl writes nothing, and a
/// key without lc-cli's value is an exclusive one (`mode_of`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyData {
    pub source: String,
    /// `"mode": "exclusive" | "shared" | "limit"` with `"limit": N`; absent
    /// (an older lc-cli) is exclusive.
    pub mode: LockMode,
    /// Milliseconds since the epoch: arrival in the queue, or the moment a
    /// detached hold was taken.
    pub since_ms: u64,
    /// Held after its lc-cli exited (no lease), until `unlock` or `reset`;
    /// or on a lease nobody renews, until it runs out (`--expire`).
    pub detached: bool,
    /// The deadline of a kept hold that expires (ms since the epoch, the
    /// writer's clock); absent otherwise.
    pub expires_ms: Option<u64>,
}

impl KeyData {
    pub(super) fn new(source: &str, mode: LockMode, detached: bool) -> KeyData {
        let since_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        KeyData {
            source: source.to_string(),
            mode,
            since_ms,
            detached,
            expires_ms: None,
        }
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = serde_json::json!({
            "lc-cli": 1,
            "source": self.source,
            "mode": match self.mode {
                LockMode::Exclusive => "exclusive",
                LockMode::Shared => "shared",
                LockMode::Limit(_) => "limit",
            },
            "since_ms": self.since_ms,
            "detached": self.detached,
        });
        if let LockMode::Limit(n) = self.mode {
            v["limit"] = n.get().into();
        }
        if let Some(at) = self.expires_ms {
            v["expires_ms"] = at.into();
        }
        v.to_string().into_bytes()
    }

    /// None for a value lc-cli did not write (etcdctl's empty one).
    pub(super) fn decode(value: &[u8]) -> Option<KeyData> {
        let v: serde_json::Value = serde_json::from_slice(value).ok()?;
        v.get("lc-cli")?;
        let mode = match v.get("mode").and_then(|m| m.as_str()) {
            None | Some("exclusive") => LockMode::Exclusive,
            Some("shared") => LockMode::Shared,
            Some("limit") => LockMode::limit(u32::try_from(v.get("limit")?.as_u64()?).ok()?),
            Some(_) => return None,
        };
        Some(KeyData {
            source: v.get("source")?.as_str()?.to_string(),
            mode,
            since_ms: v.get("since_ms")?.as_u64()?,
            detached: v.get("detached")?.as_bool()?,
            expires_ms: v.get("expires_ms").and_then(|e| e.as_u64()),
        })
    }

    /// The mode of any queue key: etcdctl's (not lc-cli's value) is
    /// exclusive, as concurrency.Mutex makes it.
    pub(super) fn mode_of(value: &[u8]) -> LockMode {
        KeyData::decode(value).map_or(LockMode::Exclusive, |d| d.mode)
    }

    pub(super) fn since(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.since_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_etcdctl_lock() {
        assert_eq!(queue_prefix("", "job"), "job/");
        assert_eq!(queue_prefix("locks", "job"), "locks/job/");
        assert_eq!(own_key("job/", 0x694d9a3c2b1e0a0f), "job/694d9a3c2b1e0a0f");
        assert!(key_problem("a/b").is_some());
        assert!(key_problem("a.b-c").is_none());
    }

    #[test]
    fn scans_find_queue_keys_only() {
        assert_eq!(lock_name_of("", "job/694d9a3c2b1e0a0f"), Some("job"));
        assert_eq!(lock_name_of("locks/", "locks/job/1f"), Some("job"));
        assert_eq!(lock_name_of("locks/", "other/job/1f"), None);
        assert_eq!(lock_name_of("", "config/Value"), None);
        assert_eq!(lock_name_of("", "/1f"), None);
        assert_eq!(lock_name_of("", "plain"), None);
    }

    #[test]
    fn range_end_is_the_next_prefix() {
        assert_eq!(range_end(b"a/"), b"a0".to_vec());
        assert_eq!(range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(range_end(b""), vec![0]);
    }

    #[test]
    fn data_round_trips_and_foreign_values_are_none() {
        for mode in [LockMode::Exclusive, LockMode::Shared, LockMode::limit(3)] {
            let d = KeyData::new("host-1", mode, true);
            assert_eq!(KeyData::decode(&d.encode()), Some(d.clone()));
            assert_eq!(KeyData::mode_of(&d.encode()), mode);
        }
        assert_eq!(KeyData::mode_of(b""), LockMode::Exclusive);
        let old = br#"{"lc-cli":1,"source":"a","since_ms":1,"detached":false}"#;
        assert_eq!(KeyData::mode_of(old), LockMode::Exclusive);
        assert_eq!(KeyData::decode(b""), None);
        assert_eq!(KeyData::decode(b"{\"source\":\"x\"}"), None);
    }
}
