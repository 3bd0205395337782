//! A key's history on etcd (docs/history.md): one key per hold,
//! `PREFIX/.lc-cli-history/NAME/<lease hex>` (named after the holder's
//! queue key `PREFIX/NAME/<lease hex>`, so that whoever ends the hold finds
//! it without a read; entries of older lc-cli are named by their token in
//! 20 digits), its value the entry's field list (docs/request-fields.md).
//! Outside `NAME/`, so `etcdctl lock NAME` never takes an entry for a
//! contender, and every key's entries in one range, which the scan of
//! `keys` leaves out (`names::history_root`).
//!
//! - **Opened** in the transaction that grants: the put's for a grant into
//!   an empty line (a nested transaction that puts it only if the line was
//!   empty), the look that shows a waiter its turn, a `--limit` holder's
//!   slot claim (which names its slot); else (a grant beside other holders
//!   at arrival) one transaction of its own before the command starts. An
//!   open entry has no `ended=`; its `token` is the queue key's create
//!   revision (for one opened with the put: the entry's own).
//! - **Closed** by whatever ends the hold, with `ended=`, `endedat` (and
//!   `status`, `by`): the release's transaction, a reset's or an unlock's
//!   (which read the open entry first), the holder's own lc-cli when it
//!   comes back (`lost`), or the waiter behind it (`freed`, or `expired`
//!   for a kept hold's `--expire`).
//! - An entry left open whose holder's queue key is gone ended in a way
//!   nobody recorded (its lease ran out with nobody waiting): `history`
//!   shows it `freed` (`expired` for a kept hold past its `expires`), with
//!   no end time; one whose holder is there is a hold that goes on, and is
//!   not listed.
//! - The cap: the transaction that grants reads how many entries there are
//!   and the oldest few by creation; the release deletes the oldest past
//!   the cap.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::arrive::Rules;
use super::names::{KeyData, OwnKey};
use super::queue::header_rev;
use super::rpc::Rpc;
use crate::backend::fields::FieldList;
use crate::backend::history::{Ending, HistoryEntry, DEFAULT_HISTORY};
use crate::backend::{LockMode, Result};

/// How many of the oldest entries one transaction may delete (more than
/// one: concurrent holds of a shared or limited key may overshoot the cap,
/// and the next release brings it back).
const TRIM_AT_MOST: i64 = 4;

/// The entry of the hold whose queue key is `queue_key`, in the key's
/// range (`names::history_range`): the queue key's last part, the lease id
/// in hex that named it when it was put (a kept hold keeps its name).
pub(super) fn entry_key(range: &str, queue_key: &[u8]) -> String {
    let key = String::from_utf8_lossy(queue_key);
    let name = key.rsplit('/').next().unwrap_or_default();
    format!("{range}{name}")
}

/// The read, in the transaction of a grant, of what the release will trim:
/// how many entries there are and the oldest few.
pub(super) fn trim_read(range: &str) -> TxnOp {
    TxnOp::get(
        range,
        Some(
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
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

/// One hold, to be written as its entry: open (no `ending`) or ended.
pub(super) struct Ended<'a> {
    /// The holder's queue key value (None: not lc-cli's, etcdctl's).
    pub data: Option<&'a KeyData>,
    /// Its queue key's create revision (0: not known yet, the entry is put
    /// with the key; its own create revision is the token).
    pub token: i64,
    /// When lc-cli saw the grant (ms since the epoch), where it knows.
    pub granted_ms: Option<u64>,
    /// The slot the grant gave (`--limit`, `--slots`), where it knows.
    pub slot: Option<String>,
    /// None: the entry is opened, not closed.
    pub ending: Option<Ending>,
    pub status: Option<i32>,
    pub by: Option<&'a str>,
}

/// The closed entry of a hold whose entry was never opened (its holder's
/// key value `kv`, ended as `ending`, by `by`), as whoever ends it writes.
pub(super) fn unopened(kv: &etcd_client::KeyValue, ending: Ending, by: Option<&str>) -> Vec<u8> {
    let data = KeyData::decode(kv.value());
    Ended {
        data: data.as_ref(),
        token: kv.create_revision(),
        granted_ms: None,
        slot: None,
        ending: Some(ending),
        status: None,
        by,
    }
    .encode()
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
        if self.token > 0 {
            list.push("token", &self.token.to_string());
        }
        if let Some(d) = self.data {
            list.push("since", &d.since_ms.to_string());
            if let Some(e) = d.expires_ms {
                list.push("expires", &e.to_string());
            }
        }
        if let Some(g) = self.granted_ms {
            list.push("granted", &g.to_string());
        }
        // An open entry may know the command's status already (a kept
        // hold's `--hold-at-least`): written with the hold.
        if let (None, Some(s)) = (self.ending, self.status) {
            list.push("status", &s.to_string());
        }
        let mut out = list.to_string().into_bytes();
        if let Some(ending) = self.ending {
            out.extend(ending_lines(ending, self.status, self.by));
        }
        out
    }
}

/// The lines that close an entry: `endedat` (now), `ended`, `status`, `by`.
fn ending_lines(ending: Ending, status: Option<i32>, by: Option<&str>) -> Vec<u8> {
    let mut list = FieldList::default();
    list.push("endedat", &now_ms().to_string());
    list.push("ended", ending.name());
    if let Some(s) = status {
        list.push("status", &s.to_string());
    }
    if let Some(by) = by {
        list.push("by", by);
    }
    list.to_string().into_bytes()
}

/// Whether an entry's value is still open (no `ended=`).
pub(super) fn is_open(value: &[u8]) -> bool {
    FieldList::parse(value).is_ok_and(|f| f.get("ended").is_none())
}

/// An open entry's value (as read), closed: None if it is no open entry.
/// `token`: the queue key's create revision, written where the opening
/// could not.
pub(super) fn close(
    value: &[u8],
    token: i64,
    ending: Ending,
    status: Option<i32>,
    by: Option<&str>,
) -> Option<Vec<u8>> {
    let fields = FieldList::parse(value).ok()?;
    if fields.get("ended").is_some() {
        return None;
    }
    let mut out = value.to_vec();
    if fields.get("token").is_none() && token > 0 {
        let mut t = FieldList::default();
        t.push("token", &token.to_string());
        out.extend(t.to_string().into_bytes());
    }
    let status = status.filter(|_| fields.get("status").is_none());
    out.extend(ending_lines(ending, status, by));
    Some(out)
}

/// How an open entry's hold ended when its key went without a record:
/// `expired` for a kept hold that said when it expires, else `fallback`.
pub(super) fn vanished_as(value: &[u8], fallback: Ending) -> Ending {
    match FieldList::parse(value).is_ok_and(|f| f.get("expires").is_some()) {
        true => Ending::Expired,
        false => fallback,
    }
}

/// A transaction that writes `value` at `key` only if no entry is there,
/// or only if it is as last read (`mod_rev`, an open entry), and `also`
/// holds (the holder's key gone): the first when `mod_rev` is 0.
pub(super) fn put_when(key: &str, value: Vec<u8>, mod_rev: i64, also: Option<Compare>) -> Txn {
    let mut when = vec![match mod_rev {
        0 => Compare::create_revision(key, CompareOp::Equal, 0),
        m => Compare::mod_revision(key, CompareOp::Equal, m),
    }];
    when.extend(also);
    Txn::new()
        .when(when)
        .and_then([TxnOp::put(key, value, None)])
}

/// Our history entry as opened (`history.rs`): the revision of the
/// transaction that put it (what a `lost` compares) and the grant's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opened {
    pub rev: i64,
    pub granted_ms: u64,
}

/// Opens our entry in a transaction of its own (a grant whose answer could
/// not): while our key is ours. None where it was gone (the hold is then
/// lost, and its release records it).
pub(super) async fn open_alone(rpc: &Rpc, place: &OwnKey, rules: &Rules) -> Result<Option<Opened>> {
    let granted_ms = now_ms();
    let txn = Txn::new()
        .when([Compare::create_revision(
            place.key.as_str(),
            CompareOp::Equal,
            place.rev,
        )])
        .and_then([TxnOp::put(
            rules.entry_key(&place.key),
            rules.opened(place.rev, None, granted_ms),
            None,
        )]);
    let resp = rpc
        .call("opening our history entry", |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    Ok(resp.succeeded().then(|| Opened {
        rev: header_rev(resp.header()),
        granted_ms,
    }))
}

/// Every entry of the key, for `Backend::history` (the cap keeps them
/// few); sorted by token there.
pub(super) fn read_options() -> GetOptions {
    GetOptions::new().with_prefix()
}

fn ms(value: Option<&str>) -> Option<u64> {
    value.and_then(|v| v.parse().ok())
}

fn at(ms: Option<u64>) -> Option<SystemTime> {
    ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
}

/// One entry as read; None for a value that is no field list, and for an
/// open entry whose hold goes on (`live`: whether a queue key of that
/// create revision is there). An open entry whose holder is gone is shown
/// `freed` (`expired` past a kept hold's `expires`), with no end time.
pub(super) fn decode(key: &str, kv: &KeyValue, live: impl Fn(i64) -> bool) -> Option<HistoryEntry> {
    let mut fields = FieldList::parse(kv.value()).ok()?;
    let token = ms(fields.get("token"))
        .and_then(|t| i64::try_from(t).ok())
        .unwrap_or(kv.create_revision());
    if fields.get("ended").is_none() {
        if live(token) {
            return None;
        }
        let expired = ms(fields.get("expires")).is_some_and(|e| e <= now_ms());
        let how = match expired {
            true => Ending::Expired,
            false => Ending::Freed,
        };
        fields.push("ended", how.name());
    }
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
        token: u64::try_from(token).ok(),
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
    fn entries_are_named_after_their_queue_keys_outside_the_queue() {
        let range = super::super::names::history_range("locks", "job");
        let e = entry_key(&range, b"locks/job/694d8a3b1c2e7f05");
        assert_eq!(e, "locks/.lc-cli-history/job/694d8a3b1c2e7f05");
        assert!(!e.starts_with("locks/job/"));
        assert!(e.starts_with(&super::super::names::history_root("locks")));
        assert_eq!(super::super::names::lock_name_of("locks/", &e), None);
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
            ending: Some(Ending::Released),
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
        assert!(!is_open(&kv_value));
        assert_eq!(close(&kv_value, 77, Ending::Freed, None, None), None);
    }

    #[test]
    fn an_open_entry_closes_with_its_grant() {
        let data = KeyData::new("host-1", LockMode::Exclusive, false);
        let open = Ended {
            data: Some(&data),
            token: 0,
            granted_ms: Some(data.since_ms + 20),
            slot: None,
            ending: None,
            status: None,
            by: None,
        }
        .encode();
        assert!(is_open(&open));
        let fields = FieldList::parse(&open).unwrap();
        assert_eq!(fields.get("token"), None);
        assert_eq!(fields.get("endedat"), None);
        let closed = close(&open, 42, Ending::Reset, None, Some("ops@h")).unwrap();
        let fields = FieldList::parse(&closed).unwrap();
        assert_eq!(fields.get("token"), Some("42"));
        assert_eq!(fields.get("ended"), Some("reset"));
        assert_eq!(fields.get("by"), Some("ops@h"));
        assert_eq!(
            fields.get("granted").map(str::to_string),
            Some((data.since_ms + 20).to_string())
        );
        assert!(fields.get("endedat").is_some());
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
