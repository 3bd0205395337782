//! A key's history on etcd (docs/history.md): one key per ended hold,
//! `PREFIX/.lc-cli-history/NAME/<token>` (the hold's fencing token, its
//! queue key's create revision, in 20 digits so that the keys sort as the
//! grants came), its value the entry's field list (docs/request-fields.md).
//! Outside `NAME/`, so `etcdctl lock NAME` never takes an entry for a
//! contender, and every key's entries in one range, which the scan of
//! `keys` leaves out (`names::history_root`); written in the transaction that ends the hold (a release, a
//! reset, an unlock), so an entry is there exactly when the hold ended
//! through lc-cli. A hold that ended otherwise (its lease ran out) is
//! recorded, if absent, by whoever sees it gone: its own lc-cli when it
//! comes back (`lost`), or the waiter behind it (`freed`, or `expired` for a
//! kept hold's `--expire`). The cap is kept by the transaction that adds an
//! entry: it deletes the oldest ones that the grant's transaction read.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::names::KeyData;
use crate::backend::fields::FieldList;
use crate::backend::history::{Ending, HistoryEntry, DEFAULT_HISTORY};
use crate::backend::LockMode;

/// How many of the oldest entries one transaction may delete (more than
/// one: concurrent holds of a shared or limited key may overshoot the cap,
/// and the next release brings it back).
const TRIM_AT_MOST: i64 = 4;

/// The entry of the hold whose token is `token`, in the key's range
/// (`names::history_range`).
pub(super) fn entry_key(range: &str, token: i64) -> String {
    format!("{range}{token:020}")
}

/// The read, in the transaction of a grant, of what the release will trim:
/// how many entries there are and the oldest few.
pub(super) fn trim_read(range: &str) -> TxnOp {
    TxnOp::get(
        range,
        Some(
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Key, SortOrder::Ascend)
                .with_limit(TRIM_AT_MOST)
                .with_keys_only(),
        ),
    )
}

/// What a grant's transaction read of the history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Trim {
    count: i64,
    oldest: Vec<Vec<u8>>,
}

impl Trim {
    pub(super) fn of(op: Option<&TxnOpResponse>) -> Trim {
        match op {
            Some(TxnOpResponse::Get(g)) => Trim {
                count: g.count(),
                oldest: g.kvs().iter().map(|kv| kv.key().to_vec()).collect(),
            },
            _ => Trim::default(),
        }
    }

    /// The deletes that keep the cap once one more entry is put.
    pub(super) fn deletes(&self) -> Vec<TxnOp> {
        let over = (self.count + 1 - DEFAULT_HISTORY as i64).max(0) as usize;
        self.oldest
            .iter()
            .take(over)
            .map(|k| TxnOp::delete(k.clone(), None))
            .collect()
    }
}

/// Milliseconds since the epoch.
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How one hold ended, to be written as its entry.
pub(super) struct Ended<'a> {
    /// The holder's queue key value (None: not lc-cli's, etcdctl's).
    pub data: Option<&'a KeyData>,
    pub token: i64,
    /// When lc-cli saw the grant (ms since the epoch), where it knows.
    pub granted_ms: Option<u64>,
    /// The slot the grant gave (`--limit`, `--slots`), where it knows.
    pub slot: Option<String>,
    pub ending: Ending,
    pub status: Option<i32>,
    pub by: Option<&'a str>,
}

impl Ended<'_> {
    /// The entry's field list: the holder (`source`, its request's own
    /// fields), the hold (`mode`, `limit`, `slot`, `token`, `since`,
    /// `granted`, in ms since the epoch) and the ending (`endedat`, `ended`,
    /// `status`, `by`).
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut list = FieldList::default();
        let source = self.data.map(|d| d.source.clone());
        list.push("source", source.as_deref().unwrap_or("etcdctl"));
        if let Some(d) = self.data {
            for (name, value) in d.list().iter() {
                if name != "slot" {
                    list.push(name, value);
                }
            }
        }
        let mode = self.data.map_or(LockMode::Exclusive, |d| d.mode);
        list.push(
            "mode",
            match mode {
                LockMode::Exclusive => "exclusive",
                LockMode::Shared => "shared",
                LockMode::Limit(_) => "limit",
            },
        );
        if let LockMode::Limit(n) = mode {
            list.push("limit", &n.get().to_string());
        }
        if let Some(slot) = &self.slot {
            list.push("slot", slot);
        }
        list.push("token", &self.token.to_string());
        if let Some(d) = self.data {
            list.push("since", &d.since_ms.to_string());
        }
        if let Some(g) = self.granted_ms {
            list.push("granted", &g.to_string());
        }
        list.push("endedat", &now_ms().to_string());
        list.push("ended", self.ending.name());
        if let Some(s) = self.status {
            list.push("status", &s.to_string());
        }
        if let Some(by) = self.by {
            list.push("by", by);
        }
        list.to_string().into_bytes()
    }

    /// Puts the entry (the release's, a reset's): overwrites none, as each
    /// hold ends once.
    pub(super) fn put(&self, range: &str) -> TxnOp {
        TxnOp::put(entry_key(range, self.token), self.encode(), None)
    }

    /// Puts the entry unless the hold's end is recorded already (by a
    /// release, a reset, or whoever saw it gone first): a transaction of
    /// its own, nested in another's `else` or sent alone.
    /// `also`: what else must hold (the holder's key gone).
    pub(super) fn put_if_absent(&self, range: &str, also: Option<Compare>) -> Txn {
        let key = entry_key(range, self.token);
        let mut when = vec![Compare::create_revision(key.as_str(), CompareOp::Equal, 0)];
        when.extend(also);
        Txn::new()
            .when(when)
            .and_then([TxnOp::put(key.as_str(), self.encode(), None)])
    }
}

/// The newest `limit` entries of the key, for `Backend::history`.
pub(super) fn read_options(limit: usize) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Key, SortOrder::Descend)
        .with_limit(i64::try_from(limit).unwrap_or(i64::MAX))
}

fn ms(value: Option<&str>) -> Option<u64> {
    value.and_then(|v| v.parse().ok())
}

fn at(ms: Option<u64>) -> Option<SystemTime> {
    ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
}

/// One entry as read; None for a value that is no field list.
pub(super) fn decode(key: &str, kv: &KeyValue) -> Option<HistoryEntry> {
    let fields = FieldList::parse(kv.value()).ok()?;
    let mode = match (fields.get("mode"), ms(fields.get("limit"))) {
        (Some("shared"), _) => LockMode::Shared,
        (Some("limit"), Some(n)) => LockMode::limit(u32::try_from(n).ok()?),
        _ => LockMode::Exclusive,
    };
    let since = ms(fields.get("since"));
    let granted = ms(fields.get("granted"));
    Some(HistoryEntry {
        key: key.to_string(),
        source: fields.get("source").unwrap_or_default().to_string(),
        identity: None,
        peer: None,
        mode,
        token: ms(fields.get("token")),
        granted: at(granted),
        waited: since
            .zip(granted)
            .map(|(s, g)| Duration::from_millis(g.saturating_sub(s))),
        ended_at: at(ms(fields.get("endedat"))),
        fields,
    })
}

/// How a hold that vanished without a record ended, as one who sees it gone
/// can tell: a kept hold's `--expire` ran out (`expired`), or a running
/// hold's lease ran out (`freed`: its lc-cli died or lost the service). A
/// hold off any lease, or not lc-cli's, can only have been deleted (by an
/// `etcdctl del`, an etcdctl holder's own release): None, not recorded.
pub(super) fn vanished(kv: &KeyValue) -> Option<Ending> {
    let data = KeyData::decode(kv.value())?;
    if kv.lease() == 0 {
        return None;
    }
    Some(match data.detached && data.expires_ms.is_some() {
        true => Ending::Expired,
        false => Ending::Freed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_sort_by_token_and_stay_outside_the_queue() {
        let range = super::super::names::history_range("locks", "job");
        assert_eq!(
            entry_key(&range, 42),
            "locks/.lc-cli-history/job/00000000000000000042"
        );
        assert!(entry_key(&range, 9) < entry_key(&range, 10));
        assert!(!entry_key(&range, 9).starts_with("locks/job/"));
        assert!(entry_key(&range, 9).starts_with(&super::super::names::history_root("locks")));
        assert_eq!(
            super::super::names::lock_name_of("locks/", &entry_key(&range, 9)),
            None
        );
    }

    #[test]
    fn an_entry_reads_back() {
        let data = KeyData::new("host-1", LockMode::limit(3), false)
            .with_fields("note=deploy%0Ait\n".into());
        let ended = Ended {
            data: Some(&data),
            token: 77,
            granted_ms: Some(data.since_ms + 1500),
            slot: Some("db2".into()),
            ending: Ending::Released,
            status: Some(3),
            by: None,
        };
        let kv_value = ended.encode();
        let fields = FieldList::parse(&kv_value).unwrap();
        assert_eq!(fields.get("note"), Some("deploy\nit"));
        assert_eq!(fields.get("slot"), Some("db2"));
        assert_eq!(fields.get("ended"), Some("released"));
        assert_eq!(fields.get("status"), Some("3"));
        assert_eq!(fields.get("token"), Some("77"));
    }

    #[test]
    fn the_trim_deletes_only_past_the_cap() {
        let keys = |n: usize| (0..n).map(|i| vec![i as u8]).collect::<Vec<_>>();
        let t = Trim {
            count: DEFAULT_HISTORY as i64 - 1,
            oldest: keys(4),
        };
        assert!(t.deletes().is_empty());
        let t = Trim {
            count: DEFAULT_HISTORY as i64,
            oldest: keys(4),
        };
        assert_eq!(t.deletes().len(), 1);
        let t = Trim {
            count: DEFAULT_HISTORY as i64 + 10,
            oldest: keys(4),
        };
        assert_eq!(t.deletes().len(), 4);
    }
}
