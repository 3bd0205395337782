//! etcd key layout and the value lc-cli writes into its keys. Pure: no I/O.
//!
//! The lock NAME is the key prefix `PREFIX/NAME/` (`NAME/` without a
//! prefix), exactly what `etcdctl lock PREFIX/NAME` uses; each waiter or
//! holder is the key `PREFIX/NAME/<lease id in lowercase hex>` and the one
//! with the smallest create revision holds. A NAME may not contain '/': the
//! range `a/` covers `a/b/...`, so `lock a` would queue behind every holder
//! of `a/b` (etcdctl has that trap; lc-cli refuses such names instead).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::fields::FieldList;
use crate::backend::{LockMode, Rival};

/// The end of the name of a key's state range (beside its queue).
const STATE: &str = ".lc-cli";

/// The range of every key's history, under the prefix (`history.rs`).
const HISTORY: &str = ".lc-cli-history";

/// Why a lock name cannot be used on etcd (`None` when it can).
pub(super) fn key_problem(key: &str) -> Option<String> {
    if key == HISTORY {
        return Some(format!(
            "'{HISTORY}' is no etcd lock name: 'PREFIX/{HISTORY}/' keeps the history of every lock"
        ));
    }
    if key.ends_with(STATE) {
        return Some(format!(
            "an etcd lock name must not end in '{STATE}': 'NAME{STATE}/' keeps the mark and notices of the lock NAME"
        ));
    }
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

/// The state range of `key` (its mark and notices): `PREFIX/KEY.lc-cli/`.
pub(super) fn state_prefix(prefix: &str, key: &str) -> String {
    let queue = queue_prefix(prefix, key);
    format!("{}{STATE}/", &queue[..queue.len() - 1])
}

/// The range of every key's history: `PREFIX/.lc-cli-history/`.
pub(super) fn history_root(prefix: &str) -> String {
    format!("{}{HISTORY}/", scan_prefix(prefix))
}

/// The range of `key`'s history: `PREFIX/.lc-cli-history/KEY/`.
pub(super) fn history_range(prefix: &str, key: &str) -> String {
    format!("{}{key}/", history_root(prefix))
}

/// The key's mark: the highest order whose command ended with status 0.
pub(super) fn mark_key(state: &str) -> String {
    format!("{state}mark")
}

/// The notice that the waiter on `lease` was superseded (and by whom).
pub(super) fn superseded_key(state: &str, lease: i64) -> String {
    format!("{state}superseded.{lease:x}")
}

/// The notice that the holder on `lease` is to stop its command.
pub(super) fn cancel_key(state: &str, lease: i64) -> String {
    format!("{state}cancel.{lease:x}")
}

/// A mark found by a scan: the lock name it belongs to (below the prefix).
pub(super) fn mark_owner<'a>(scan_prefix: &str, key: &'a str) -> Option<&'a str> {
    let name = key
        .strip_prefix(scan_prefix)?
        .strip_suffix("/mark")?
        .strip_suffix(STATE)?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// A mark's value: the decimal order.
pub(super) fn mark_value(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

/// A notice's value: who left it, as a [`Rival`].
pub(super) fn notice(source: &str, fields: &str) -> Vec<u8> {
    serde_json::json!({"lc-cli": 1, "source": source, "fields": fields})
        .to_string()
        .into_bytes()
}

/// The request a notice names; an unreadable one names nobody.
pub(super) fn notice_rival(value: &[u8]) -> Rival {
    let v: serde_json::Value = serde_json::from_slice(value).unwrap_or_default();
    let text = |name: &str| v.get(name).and_then(|s| s.as_str()).unwrap_or_default();
    Rival {
        source: text("source").to_string(),
        identity: None,
        fields: FieldList::parse(text("fields").as_bytes()).unwrap_or_default(),
    }
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
    // A history entry (`.lc-cli-history/NAME/<lease hex>`) is none.
    let history = name.starts_with(HISTORY) && name[HISTORY.len()..].starts_with('/');
    (hex && !name.is_empty() && !history).then_some(name)
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
    /// The request's field list (docs/request-fields.md), `"fields"`;
    /// empty (and not written) without any.
    pub fields: String,
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
            fields: String::new(),
        }
    }

    /// With the request's field list.
    pub(super) fn with_fields(mut self, fields: String) -> KeyData {
        self.fields = fields;
        self
    }

    /// The field list as read (an unreadable one is empty).
    pub(super) fn list(&self) -> FieldList {
        FieldList::parse(self.fields.as_bytes()).unwrap_or_default()
    }

    /// The request a key stands for, as a notice or an outcome names it.
    pub(super) fn rival(&self) -> Rival {
        Rival {
            source: self.source.clone(),
            identity: None,
            fields: self.list(),
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
        if !self.fields.is_empty() {
            v["fields"] = self.fields.as_str().into();
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
            fields: v
                .get("fields")
                .and_then(|f| f.as_str())
                .unwrap_or_default()
                .to_string(),
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
        assert!(key_problem("a.lc-cli").is_some());
        assert!(key_problem(".lc-cli-history").is_some());
        assert_eq!(history_root(""), ".lc-cli-history/");
        assert_eq!(history_range("locks", "job"), "locks/.lc-cli-history/job/");
        assert_eq!(state_prefix("", "job"), "job.lc-cli/");
        assert_eq!(
            mark_key(&state_prefix("locks", "job")),
            "locks/job.lc-cli/mark"
        );
        assert_eq!(
            superseded_key("job.lc-cli/", 0x1f),
            "job.lc-cli/superseded.1f"
        );
        assert_eq!(cancel_key("job.lc-cli/", 0x1f), "job.lc-cli/cancel.1f");
    }

    #[test]
    fn state_keys_are_no_queue_keys() {
        for key in [
            "job.lc-cli/mark",
            "job.lc-cli/superseded.1f",
            "job.lc-cli/cancel.1f",
        ] {
            assert_eq!(lock_name_of("", key), None, "{key}");
            assert!(!key.starts_with(&queue_prefix("", "job")));
        }
        assert_eq!(mark_owner("", "job.lc-cli/mark"), Some("job"));
        assert_eq!(mark_owner("locks/", "locks/job.lc-cli/mark"), Some("job"));
        assert_eq!(mark_owner("", "job/mark"), None);
        assert_eq!(mark_value(b"42"), Some(42));
        let r = notice_rival(&notice("b-7", "order=7\nnewest=1\n"));
        assert_eq!(r.source, "b-7");
        assert_eq!(r.fields.get("order"), Some("7"));
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
        let d = KeyData::new("b", LockMode::Exclusive, false).with_fields("order=3\n".into());
        assert_eq!(KeyData::decode(&d.encode()), Some(d.clone()));
        assert_eq!(d.list().get("order"), Some("3"));
        assert!(
            !String::from_utf8(KeyData::new("b", LockMode::Exclusive, false).encode())
                .unwrap()
                .contains("fields")
        );
        assert_eq!(KeyData::mode_of(b""), LockMode::Exclusive);
        let old = br#"{"lc-cli":1,"source":"a","since_ms":1,"detached":false}"#;
        assert_eq!(KeyData::mode_of(old), LockMode::Exclusive);
        assert_eq!(KeyData::decode(b""), None);
        assert_eq!(KeyData::decode(b"{\"source\":\"x\"}"), None);
    }
}
