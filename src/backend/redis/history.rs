//! `lc-cli history KEY` on Redis (docs/history.md): each key's last ended
//! holds are a stream, `lc-cli:{KEY}:history`, beside its line (the same
//! hash tag), written by the scripts that end a hold (`scripts/record.lua`):
//! the release (with the command's status, or `lost`, or `cancelled`), the
//! resets (`by`), `unlock`, and whichever script settles a holder whose
//! lease ran out (`expired` for a kept hold's `--expire`, else `freed`).
//! Trimmed to [`DEFAULT_HISTORY`] entries; no round trip is added to a lock
//! or a release.
//!
//! Reading runs one script per node (`scripts/history.lua`: it settles a
//! dead holder first, then `XREVRANGE ... COUNT`). On a quorum each node
//! keeps its own stream: a hold is listed once (by its token and source),
//! with the word of lc-cli where a node has it, newest first.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::node::NodeResult;
use super::quorum::Quorum;
use crate::backend::fields::FieldList;
use crate::backend::history::{Ending, HistoryEntry};
use crate::backend::{LockMode, Result};

#[cfg(doc)]
use crate::backend::history::DEFAULT_HISTORY;

/// One stream entry: its id and its `field, value, ...`.
type StreamEntry = (String, Vec<String>);

pub(super) use crate::backend::history::operator;

pub(super) async fn read(sh: &Quorum, key: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
    let count = limit.clamp(1, 100_000).to_string();
    let answers: Vec<NodeResult<Vec<StreamEntry>>> = sh
        .script(|s| &s.history, key, vec![key.to_string(), count])
        .await;
    sh.need_quorum(&answers)?;
    let nodes: Vec<Vec<HistoryEntry>> = answers
        .into_iter()
        .filter_map(|a| a.ok())
        .map(|entries| entries.iter().map(|e| entry(key, &e.1)).collect())
        .collect();
    Ok(merged(nodes, limit))
}

fn time(ms: Option<&str>) -> Option<SystemTime> {
    let ms: u64 = ms?.parse().ok()?;
    Some(UNIX_EPOCH + Duration::from_millis(ms))
}

/// One stream entry as `lc-cli history` shows it: the request's field
/// list, then what the service added (`slot`, `ended`, `status`, `by`).
fn entry(key: &str, pairs: &[String]) -> HistoryEntry {
    let get = |name: &str| {
        pairs
            .chunks(2)
            .find(|p| p.len() == 2 && p[0] == name)
            .map(|p| p[1].as_str())
    };
    let mut fields = get("fields")
        .and_then(|f| FieldList::parse(f.as_bytes()).ok())
        .unwrap_or_default();
    for name in ["slot", "ended", "status", "by"] {
        if let Some(v) = get(name) {
            fields.push(name, v);
        }
    }
    HistoryEntry {
        key: key.to_string(),
        source: get("source").unwrap_or("-").to_string(),
        identity: None,
        peer: None,
        mode: match get("mode") {
            Some("s") => LockMode::Shared,
            Some(n) => LockMode::limit(n.parse().unwrap_or(1)),
            None => LockMode::Exclusive,
        },
        token: get("token").and_then(|t| t.parse().ok()),
        granted: time(get("granted")),
        waited: get("waited")
            .and_then(|w| w.parse().ok())
            .map(Duration::from_millis),
        ended_at: time(get("endedat")),
        fields,
    }
}

/// Whether lc-cli itself said how the hold ended (not a lapsed lease).
fn told(e: &HistoryEntry) -> bool {
    !matches!(e.ending(), Some(Ending::Freed | Ending::Expired) | None)
}

/// Every node's entries, each node's newest first, as one list: a hold
/// (its token and source) once, lc-cli's word preferred to a lapsed
/// lease's; newest end first; at most `limit`.
fn merged(nodes: Vec<Vec<HistoryEntry>>, limit: usize) -> Vec<HistoryEntry> {
    if nodes.len() == 1 {
        let mut only = nodes.into_iter().next().unwrap_or_default();
        only.truncate(limit);
        return only;
    }
    let mut by_hold: BTreeMap<(Option<u64>, String), usize> = BTreeMap::new();
    let mut out: Vec<HistoryEntry> = Vec::new();
    for e in nodes.into_iter().flatten() {
        let id = (e.token, e.source.clone());
        match by_hold.get(&id) {
            Some(&i) => {
                if told(&e) && !told(&out[i]) {
                    out[i] = e;
                }
            }
            None => {
                by_hold.insert(id, out.len());
                out.push(e);
            }
        }
    }
    // Stable: entries ending in the same ms keep their node's order.
    out.sort_by_key(|e| std::cmp::Reverse(e.ended_at));
    out.truncate(limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<String> {
        list.iter()
            .flat_map(|(n, v)| [n.to_string(), v.to_string()])
            .collect()
    }

    #[test]
    fn an_entry_reads_its_stream_fields() {
        let e = entry(
            "k",
            &pairs(&[
                ("source", "ci-7"),
                ("mode", "3"),
                ("token", "42"),
                ("granted", "1000"),
                ("waited", "250"),
                ("endedat", "4000"),
                ("ended", "released"),
                ("status", "3"),
                ("slot", "2"),
                ("fields", "note=deploy\norder=7\n"),
            ]),
        );
        assert_eq!(e.source, "ci-7");
        assert_eq!(e.mode, LockMode::limit(3));
        assert_eq!(e.token, Some(42));
        assert_eq!(e.granted, Some(UNIX_EPOCH + Duration::from_secs(1)));
        assert_eq!(e.waited, Some(Duration::from_millis(250)));
        assert_eq!(e.ending(), Some(Ending::Released));
        assert_eq!(e.status(), Some(3));
        assert_eq!(e.fields.get("note"), Some("deploy"));
        assert_eq!(e.fields.get("slot"), Some("2"));
        assert_eq!(e.by(), None);
        let bare = entry("k", &pairs(&[("source", "a"), ("mode", "x")]));
        assert_eq!(bare.mode, LockMode::Exclusive);
        assert_eq!(bare.token, None);
        assert_eq!(bare.ended_at, None);
    }

    #[test]
    fn a_quorum_lists_each_hold_once_with_lc_clis_word() {
        let e = |token: &str, ended: &str, at: &str| {
            entry(
                "k",
                &pairs(&[
                    ("source", "s"),
                    ("mode", "x"),
                    ("token", token),
                    ("endedat", at),
                    ("ended", ended),
                ]),
            )
        };
        let n0 = vec![e("2", "freed", "30"), e("1", "released", "10")];
        let n1 = vec![e("2", "lost", "20"), e("1", "released", "11")];
        let got = merged(vec![n0, n1], 10);
        let ended: Vec<(Option<u64>, &str)> = got
            .iter()
            .map(|e| (e.token, e.fields.get("ended").unwrap()))
            .collect();
        assert_eq!(ended, [(Some(2), "lost"), (Some(1), "released")]);
        assert_eq!(merged(vec![vec![e("1", "reset", "1")]; 3], 0).len(), 0);
    }
}
