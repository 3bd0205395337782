//! How `keys` shows what it found: the aligned tables of holds and of
//! waiters (the JSON lines: `json.rs`).

use std::time::{Duration, SystemTime};

use crate::backend::fields::FieldList;
use crate::backend::{KeyInfo, LockMode, WaiterInfo};

pub(super) fn mode_name(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::Shared => "shared",
        LockMode::Limit(_) => "limit",
    }
}

/// The waiters' table: `KEY PLACE SOURCE PEER WAITED SINCE MODE`, and
/// `IDENTITY` where the service names waiters' tokens; control characters
/// escaped as in [`as_table`].
pub(crate) fn waiters_table(waiters: &[WaiterInfo], now: SystemTime) -> String {
    let identities = waiters.iter().any(|w| w.identity.is_some());
    let mut header = [
        "WAITER OF",
        "PLACE",
        "SOURCE",
        "PEER",
        "WAITED",
        "SINCE",
        "MODE",
    ]
    .map(String::from)
    .to_vec();
    if identities {
        header.push("IDENTITY".into());
    }
    let queued = waiters.iter().any(|w| !request_cell(&w.fields).is_empty());
    let notes = waiters.iter().any(|w| w.fields.get("note").is_some());
    if queued {
        header.push("REQUEST".into());
    }
    if notes {
        header.push("NOTE".into());
    }
    let mut rows = vec![header];
    for w in waiters {
        let waited = w.since.map_or_else(
            || "-".into(),
            |s| {
                let d = now.duration_since(s).unwrap_or_default();
                humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
            },
        );
        rows.push(vec![
            crate::cmd::printable(&w.key).into_owned(),
            w.place.to_string(),
            crate::cmd::printable(&w.source).into_owned(),
            w.peer
                .as_deref()
                .map_or_else(|| "-".into(), |p| crate::cmd::printable(p).into_owned()),
            waited,
            w.since.map_or_else(
                || "-".into(),
                |s| humantime::format_rfc3339_seconds(s).to_string(),
            ),
            mode_cell(w.mode),
        ]);
        let row = rows.last_mut().expect("just pushed");
        if identities {
            row.push(identity_cell(w.identity.as_deref()));
        }
        if queued {
            row.push(dash_if_empty(request_cell(&w.fields)));
        }
        if notes {
            row.push(note_cell(&w.fields));
        }
    }
    aligned(&rows)
}

/// A REQUEST cell: the deploy-queue rules a request was made with
/// (`order 7, newest, cancel-running`), "" for none.
pub(super) fn request_cell(fields: &FieldList) -> String {
    let mut parts = Vec::new();
    if let Some(order) = fields.get("order") {
        parts.push(format!("order {}", crate::cmd::printable(order)));
    }
    if fields.get("newest") == Some("1") {
        parts.push("newest".to_string());
    }
    if fields.get("cancel") == Some("1") {
        parts.push("cancel-running".to_string());
    }
    parts.join(", ")
}

fn dash_if_empty(cell: String) -> String {
    if cell.is_empty() {
        "-".into()
    } else {
        cell
    }
}

/// A NOTE cell, control characters escaped, or `-`.
fn note_cell(fields: &FieldList) -> String {
    fields
        .get("note")
        .map_or_else(|| "-".into(), |n| crate::cmd::printable(n).into_owned())
}

/// An IDENTITY cell: the name, or `-`.
fn identity_cell(identity: Option<&str>) -> String {
    identity.map_or_else(|| "-".into(), |i| crate::cmd::printable(i).into_owned())
}

/// By key; or by age, oldest first (a hold of unknown age last), then key.
/// The HOLD column: a running command's hold (on lc-cli's server, a session
/// hold), or one kept by `lock KEY` without a command (`-` where the
/// service cannot tell).
fn hold_kind(kept: Option<bool>) -> &'static str {
    match kept {
        Some(true) => "kept",
        Some(false) => "command",
        None => "-",
    }
}

/// How long until a kept hold frees itself (`lock KEY --expire`); zero
/// once due (the service frees it at its next check).
pub(super) fn expires_in(info: &KeyInfo, now: SystemTime) -> Option<Duration> {
    info.expires
        .map(|e| e.duration_since(now).unwrap_or_default())
}

/// The EXPIRES cell: `in 1h 59m 58s`, `due`, or `-` for a hold that does
/// not expire.
fn expires_cell(info: &KeyInfo, now: SystemTime) -> String {
    match expires_in(info, now) {
        None => "-".into(),
        Some(d) if d.as_secs() == 0 => "due".into(),
        Some(d) => format!(
            "in {}",
            humantime::format_duration(Duration::from_secs(d.as_secs()))
        ),
    }
}

pub(super) fn held_for(info: &KeyInfo, now: SystemTime) -> Option<Duration> {
    info.since
        .map(|s| now.duration_since(s).unwrap_or_default())
}

/// The MODE column: only when a key is shared or limited, so the table of
/// exclusive locks reads as before.
fn mode_cell(mode: LockMode) -> String {
    match mode {
        LockMode::Exclusive => "exclusive".into(),
        LockMode::Shared => "shared".into(),
        LockMode::Limit(n) => format!("limit {n}"),
    }
}

/// A SLOT cell (issue 45): the slot's name where the request named its
/// pool (`slots=`), else its index; `-` for a hold without one.
fn slot_cell(fields: &FieldList) -> String {
    crate::cmd::printable(fields.slot().unwrap_or("-")).into_owned()
}

/// A plain aligned table with a header. Keys, sources and peers have their
/// control characters escaped: a key with a newline cannot forge a row, nor
/// an escape sequence recolour the terminal (`--json` has them as JSON
/// escapes).
pub(crate) fn as_table(keys: &[KeyInfo], now: SystemTime) -> String {
    let with_mode = keys.iter().any(|k| k.mode != LockMode::Exclusive);
    // A TOKEN column only where the service shows tokens (lc-cli's server).
    let tokens = keys.iter().any(|k| k.token.is_some());
    // An EXPIRES column only where some kept hold expires (`--expire`).
    let expiring = keys.iter().any(|k| k.expires.is_some());
    // An IDENTITY column only where the service names holders' tokens
    // (lc-cli's server with --token-file).
    let identities = keys.iter().any(|k| k.identity.is_some());
    // Deploy queues: the holder's rules, the key's mark, the holder's note
    // (last: the widest), each only where some row has one.
    let queued = keys.iter().any(|k| !request_cell(&k.fields).is_empty());
    let marks = keys.iter().any(|k| k.mark.is_some());
    let notes = keys.iter().any(|k| k.fields.get("note").is_some());
    let mut header: Vec<String> = ["KEY", "SOURCE", "PEER", "HELD", "HOLD", "WAITING"]
        .map(String::from)
        .to_vec();
    if with_mode {
        header.push("MODE".into());
    }
    // A SLOT column only where some hold has one (`--limit N`, issue 45).
    let slots = keys.iter().any(|k| k.fields.get("slot").is_some());
    if slots {
        header.push("SLOT".into());
    }
    if expiring {
        header.push("EXPIRES".into());
    }
    if identities {
        header.push("IDENTITY".into());
    }
    if tokens {
        header.push("TOKEN".into());
    }
    for (wanted, name) in [(queued, "REQUEST"), (marks, "MARK"), (notes, "NOTE")] {
        if wanted {
            header.push(name.into());
        }
    }
    let mut rows = vec![header];
    for k in keys {
        let held = held_for(k, now)
            .map(|d| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string())
            .unwrap_or_else(|| "-".into());
        let mut row = vec![
            crate::cmd::printable(&k.key).into_owned(),
            crate::cmd::printable(&k.source).into_owned(),
            k.peer
                .as_deref()
                .map_or_else(|| "-".into(), |p| crate::cmd::printable(p).into_owned()),
            held,
            hold_kind(k.kept).into(),
            k.waiting.to_string(),
        ];
        if with_mode {
            row.push(mode_cell(k.mode));
        }
        if slots {
            row.push(slot_cell(&k.fields));
        }
        if expiring {
            row.push(expires_cell(k, now));
        }
        if identities {
            row.push(identity_cell(k.identity.as_deref()));
        }
        if tokens {
            row.push(k.token.map_or_else(|| "-".into(), |t| t.to_string()));
        }
        if queued {
            row.push(dash_if_empty(request_cell(&k.fields)));
        }
        if marks {
            row.push(k.mark.map_or_else(|| "-".into(), |m| m.to_string()));
        }
        if notes {
            row.push(note_cell(&k.fields));
        }
        rows.push(row);
    }
    aligned(&rows)
}

/// Rows as columns padded to their widest cell, the last left ragged.
fn aligned(rows: &[Vec<String>]) -> String {
    let mut widths = vec![0usize; rows[0].len()];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::json::{as_json, as_json_with_waiters};
    use super::*;

    fn info(key: &str, waiting: usize, secs_ago: u64, now: SystemTime) -> KeyInfo {
        KeyInfo {
            identity: None,
            key: key.into(),
            source: "host-a".into(),
            peer: Some("127.0.0.1:4000".into()),
            since: Some(now - Duration::from_secs(secs_ago)),
            waiting,
            kept: None,
            mode: crate::backend::LockMode::Exclusive,
            token: None,
            expires: None,
            fields: Default::default(),
            mark: None,
        }
    }

    #[test]
    fn table_is_aligned() {
        let now = SystemTime::now();
        let t = as_table(
            &[info("a", 0, 5, now), info("deploy/prod", 12, 3700, now)],
            now,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        let col = lines[0].find("SOURCE").unwrap();
        assert_eq!(lines[1].find("host-a"), Some(col));
        assert_eq!(lines[2].find("host-a"), Some(col));
        assert!(lines[2].contains("1h 1m 40s"), "{t}");
        assert!(lines[2].ends_with("12"));
    }

    #[test]
    fn control_characters_cannot_forge_rows_or_recolour() {
        let now = SystemTime::now();
        let mut forged = info("a\nb    evil  -  1h  0", 0, 5, now);
        forged.source = "\x1b[31mred".into();
        let t = as_table(&[forged], now);
        assert_eq!(t.lines().count(), 2, "{t}");
        assert!(!t.contains('\x1b'), "{t:?}");
        assert!(t.contains("a\\nb") && t.contains("\\x1b[31mred"), "{t}");
    }

    fn waiter(key: &str, place: usize, secs_ago: u64, now: SystemTime) -> WaiterInfo {
        WaiterInfo {
            key: key.into(),
            source: format!("w{place}"),
            peer: None,
            since: Some(now - Duration::from_secs(secs_ago)),
            mode: LockMode::Shared,
            place,
            kept: Some(false),
            identity: None,
            fields: Default::default(),
        }
    }

    #[test]
    fn waiters_in_a_table_and_in_json() {
        let now = SystemTime::now();
        let w = [
            waiter("a", 0, 9, now),
            waiter("a", 1, 3, now),
            waiter("z", 0, 1, now),
        ];
        let t = waiters_table(&w, now);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[1].starts_with("a ") && lines[1].contains(" w0 "),
            "{t}"
        );
        assert!(
            lines[2].contains(" w1 ") && lines[2].ends_with("shared"),
            "{t}"
        );
        let j = as_json_with_waiters(&[info("a", 2, 1, now)], Some(&w), now);
        let objs: Vec<serde_json::Value> = j
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(objs.len(), 2, "{j}");
        assert_eq!(objs[0]["waiters"][1]["source"], "w1");
        assert_eq!(objs[0]["waiters"][0]["waited_ms"], 9000);
        // A key with waiters and no holder listed: its own object.
        assert_eq!(objs[1]["key"], "z");
        assert_eq!(objs[1]["source"], serde_json::Value::Null);
        assert_eq!(objs[1]["waiters"][0]["place"], 0);
        let j = as_json_with_waiters(&[info("a", 2, 1, now)], None, now);
        assert!(j.contains("\"waiters\":null"), "{j}");
    }

    #[test]
    fn json_is_one_object_per_line() {
        let now = SystemTime::now();
        let j = as_json(&[info("a", 2, 1, now)], now);
        let v: serde_json::Value = serde_json::from_str(j.trim()).unwrap();
        assert_eq!(v["key"], "a");
        assert_eq!(v["waiting"], 2);
        assert_eq!(v["held_ms"], 1000);
        assert_eq!(v["peer"], "127.0.0.1:4000");
        assert_eq!(v["expires"], serde_json::Value::Null);
        assert_eq!(v["expires_in_ms"], serde_json::Value::Null);
    }

    /// What `as_json` wrote with `serde_json::json!` (a map, by name).
    fn json_by_map(k: &KeyInfo, now: SystemTime) -> String {
        let since = k
            .since
            .map(|s| humantime::format_rfc3339_millis(s).to_string());
        let held_ms = held_for(k, now).map(|d| d.as_millis() as u64);
        let line = serde_json::json!({
            "key": k.key,
            "source": k.source,
            "peer": k.peer,
            "since": since,
            "held_ms": held_ms,
            "waiting": k.waiting,
            "kept": k.kept,
            "mode": mode_name(k.mode),
            "limit": k.mode.slots().filter(|_| k.mode != LockMode::Exclusive),
            "token": k.token,
            "ident": k.identity,
            "expires": k.expires.map(|e| humantime::format_rfc3339_millis(e).to_string()),
            "expires_in_ms": expires_in(k, now).map(|d| d.as_millis() as u64),
            "fields": k.fields.to_json(),
            "mark": k.mark,
            "slot": k.fields.slot(),
        });
        format!("{line}\n")
    }

    #[test]
    fn json_is_the_maps_text() {
        let now = SystemTime::now();
        let mut odd = info("quote\" back\\ nl\n tab\t \u{1} é \u{1F512}", 3, 7, now);
        odd.source = "\x1b[31m".into();
        odd.peer = None;
        odd.since = None;
        odd.kept = Some(true);
        odd.mode = LockMode::Limit(std::num::NonZeroU32::new(4).unwrap());
        odd.token = Some(u64::MAX);
        odd.identity = Some("ali\"ce".into());
        odd.expires = Some(now + Duration::from_millis(1500));
        let mut shared = info("s", 0, 0, now);
        shared.mode = LockMode::Shared;
        shared.kept = Some(false);
        shared.expires = Some(now - Duration::from_secs(2));
        let mut queued = info("q", 1, 2, now);
        queued.fields =
            FieldList::parse(b"note=deploy \"1.4\"\norder=7\nnewest=1\nfuture=x\n").unwrap();
        queued.mark = Some(6);
        for k in [info("a", 2, 1, now), odd, shared, queued] {
            assert_eq!(as_json(std::slice::from_ref(&k), now), json_by_map(&k, now));
        }
    }

    /// Times of one second and of the next, one after another, as the map
    /// wrote them (the date and time of day are made once per second).
    #[test]
    fn times_written_in_a_row_are_the_maps_text() {
        let now = SystemTime::now();
        let epoch = std::time::UNIX_EPOCH;
        let times = [
            now,
            now - Duration::from_millis(1),
            now - Duration::from_millis(999),
            now - Duration::from_millis(1000),
            now - Duration::from_millis(1000),
            epoch + Duration::from_millis(1_700_000_000_009),
            epoch + Duration::from_millis(1_700_000_000_999),
            epoch + Duration::from_millis(1_700_000_001_000),
            epoch,
        ];
        let keys: Vec<KeyInfo> = times
            .iter()
            .map(|t| KeyInfo {
                identity: None,
                since: Some(*t),
                ..info("k", 1, 0, now)
            })
            .collect();
        let want: String = keys.iter().map(|k| json_by_map(k, now)).collect();
        assert_eq!(as_json(&keys, now), want);
    }

    #[test]
    fn identities_have_a_column_where_the_service_names_them() {
        let now = SystemTime::now();
        let plain = info("a", 0, 5, now);
        assert!(!as_table(std::slice::from_ref(&plain), now).contains("IDENTITY"));
        let mut named = info("b", 0, 5, now);
        named.identity = Some("alice".into());
        named.token = Some(7);
        let t = as_table(&[plain, named.clone()], now);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with("IDENTITY  TOKEN"), "{t}");
        assert!(lines[1].ends_with("0        -         -"), "{t}");
        assert!(lines[2].ends_with("alice     7"), "{t}");
        let v: serde_json::Value = serde_json::from_str(as_json(&[named], now).trim()).unwrap();
        assert_eq!(v["ident"], "alice");
    }

    #[test]
    fn deploy_queue_rules_marks_and_notes_have_columns_where_used() {
        let now = SystemTime::now();
        let plain = info("a", 0, 5, now);
        let t = as_table(std::slice::from_ref(&plain), now);
        assert!(
            !t.contains("REQUEST") && !t.contains("MARK") && !t.contains("NOTE"),
            "{t}"
        );
        let mut deploy = info("deploy/prod", 2, 5, now);
        deploy.fields =
            FieldList::parse(b"note=v1.4 by ci\norder=42\nnewest=1\ncancel=1\n").unwrap();
        deploy.mark = Some(41);
        let t = as_table(&[plain, deploy], now);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].ends_with("REQUEST                           MARK  NOTE"),
            "{t}"
        );
        assert!(
            lines[1].ends_with(" -                                 -     -"),
            "{t}"
        );
        assert!(
            lines[2].ends_with("order 42, newest, cancel-running  41    v1.4 by ci"),
            "{t}"
        );
    }

    /// Issue 45: a SLOT column where some hold has one, with the slot's
    /// name where the request named its pool.
    #[test]
    fn slots_have_a_column_where_held() {
        let now = SystemTime::now();
        let plain = info("a", 0, 5, now);
        assert!(!as_table(std::slice::from_ref(&plain), now).contains("SLOT"));
        let mut second = info("pool", 0, 5, now);
        second.fields = FieldList::parse(b"slot=1\n").unwrap();
        let mut named = info("pool", 0, 5, now);
        named.fields = FieldList::parse(b"slots=db1,db2,db3\nslot=2\n").unwrap();
        let t = as_table(&[plain, second, named], now);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with("SLOT"), "{t}");
        assert!(lines[1].ends_with(" -"), "{t}");
        assert!(lines[2].ends_with(" 1"), "{t}");
        assert!(lines[3].ends_with(" db3"), "{t}");
    }

    #[test]
    fn an_expiring_hold_shows_when_it_frees_itself() {
        let now = SystemTime::now();
        let plain = info("a", 0, 5, now);
        assert!(!as_table(std::slice::from_ref(&plain), now).contains("EXPIRES"));
        let mut kept = info("b", 1, 5, now);
        kept.kept = Some(true);
        kept.expires = Some(now + Duration::from_millis(7_200_400));
        let mut due = info("c", 0, 5, now);
        due.expires = Some(now - Duration::from_secs(1));
        let t = as_table(&[plain, kept.clone(), due], now);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with("EXPIRES"), "{t}");
        assert!(lines[1].ends_with(" -"), "{t}");
        assert!(lines[2].ends_with("in 2h"), "{t}");
        assert!(lines[3].ends_with("due"), "{t}");
        let j = as_json(&[kept], now);
        let v: serde_json::Value = serde_json::from_str(j.trim()).unwrap();
        assert_eq!(v["expires_in_ms"], 7_200_400);
        assert!(v["expires"].as_str().unwrap().ends_with('Z'));
    }
}
