//! `lc-cli keys [PATTERN] [--json]`: who holds what, since when, and how many
//! wait behind them.

use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use wildmatch::WildMatch;

use super::OrFail;
use crate::backend::{BackendConfig, KeyInfo, LockMode};
use crate::cli::{KeysArgs, KeysOrder};
use crate::exit::ExitCode;

pub fn run(config: &BackendConfig, args: KeysArgs) -> Result<ExitCode> {
    let KeysArgs {
        pattern,
        json,
        sort: order,
        ..
    } = args;
    let mut keys = super::block_on(async {
        let backend = super::connect_for(config, &[]).await?;
        let keys = backend.keys().await;
        backend.close().await;
        keys.or_fail()
            .with_context(|| format!("list keys on {}", config.shown()))
    })?;
    if let Some(p) = pattern {
        let glob = WildMatch::new(&p);
        keys.retain(|k| glob.matches(&k.key));
    }
    sort(&mut keys, order);
    let now = SystemTime::now();
    let out = if json {
        as_json(&keys, now)
    } else {
        as_table(&keys, now)
    };
    super::print_out(out)?;
    Ok(ExitCode::Success)
}

/// By key; or by age, oldest first (a hold of unknown age last), then key.
fn sort(keys: &mut [KeyInfo], order: KeysOrder) {
    match order {
        KeysOrder::Key => keys.sort_by(|a, b| a.key.cmp(&b.key)),
        KeysOrder::Age => keys.sort_by(|a, b| {
            let age = |k: &KeyInfo| k.since.map_or((1, None), |s| (0, Some(s)));
            age(a).cmp(&age(b)).then_with(|| a.key.cmp(&b.key))
        }),
    }
}

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
fn expires_in(info: &KeyInfo, now: SystemTime) -> Option<Duration> {
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

fn held_for(info: &KeyInfo, now: SystemTime) -> Option<Duration> {
    info.since
        .map(|s| now.duration_since(s).unwrap_or_default())
}

/// One JSON object per key, one per line.
pub fn as_json(keys: &[KeyInfo], now: SystemTime) -> String {
    let mut out = String::new();
    for k in keys {
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
            "mode": match k.mode {
                LockMode::Exclusive => "exclusive",
                LockMode::Shared => "shared",
                LockMode::Limit(_) => "limit",
            },
            "limit": k.mode.slots().filter(|_| k.mode != LockMode::Exclusive),
            "token": k.token,
            "expires": k.expires.map(|e| humantime::format_rfc3339_millis(e).to_string()),
            "expires_in_ms": expires_in(k, now).map(|d| d.as_millis() as u64),
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// A plain aligned table with a header. Keys, sources and peers have their
/// control characters escaped: a key with a newline cannot forge a row, nor
/// an escape sequence recolour the terminal (`--json` has them as JSON
/// escapes).
/// The MODE column: only when a key is shared or limited, so the table of
/// exclusive locks reads as before.
fn mode_cell(mode: LockMode) -> String {
    match mode {
        LockMode::Exclusive => "exclusive".into(),
        LockMode::Shared => "shared".into(),
        LockMode::Limit(n) => format!("limit {n}"),
    }
}

pub fn as_table(keys: &[KeyInfo], now: SystemTime) -> String {
    let with_mode = keys.iter().any(|k| k.mode != LockMode::Exclusive);
    // A TOKEN column only where the service shows tokens (lc-cli's server).
    let tokens = keys.iter().any(|k| k.token.is_some());
    // An EXPIRES column only where some kept hold expires (`--expire`).
    let expiring = keys.iter().any(|k| k.expires.is_some());
    let mut header: Vec<String> = ["KEY", "SOURCE", "PEER", "HELD", "HOLD", "WAITING"]
        .map(String::from)
        .to_vec();
    if with_mode {
        header.push("MODE".into());
    }
    if expiring {
        header.push("EXPIRES".into());
    }
    if tokens {
        header.push("TOKEN".into());
    }
    let mut rows = vec![header];
    for k in keys {
        let held = held_for(k, now)
            .map(|d| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string())
            .unwrap_or_else(|| "-".into());
        let mut row = vec![
            super::printable(&k.key).into_owned(),
            super::printable(&k.source).into_owned(),
            k.peer
                .as_deref()
                .map_or_else(|| "-".into(), |p| super::printable(p).into_owned()),
            held,
            hold_kind(k.kept).into(),
            k.waiting.to_string(),
        ];
        if with_mode {
            row.push(mode_cell(k.mode));
        }
        if expiring {
            row.push(expires_cell(k, now));
        }
        if tokens {
            row.push(k.token.map_or_else(|| "-".into(), |t| t.to_string()));
        }
        rows.push(row);
    }
    let mut widths = vec![0usize; rows[0].len()];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
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
    use super::*;

    fn info(key: &str, waiting: usize, secs_ago: u64, now: SystemTime) -> KeyInfo {
        KeyInfo {
            key: key.into(),
            source: "host-a".into(),
            peer: Some("127.0.0.1:4000".into()),
            since: Some(now - Duration::from_secs(secs_ago)),
            waiting,
            kept: None,
            mode: crate::backend::LockMode::Exclusive,
            token: None,
            expires: None,
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

    #[test]
    fn by_age_is_oldest_first_unknown_last() {
        let now = SystemTime::now();
        let mut unknown = info("u", 0, 0, now);
        unknown.since = None;
        let mut keys = vec![info("new", 0, 5, now), unknown, info("old", 0, 500, now)];
        sort(&mut keys, KeysOrder::Age);
        let order: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(order, ["old", "new", "u"]);
        sort(&mut keys, KeysOrder::Key);
        let order: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(order, ["new", "old", "u"]);
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
