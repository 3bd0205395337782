//! `lc-cli history KEY [--limit N] [--json]`: how KEY's last holds ended,
//! newest first (docs/history.md). Refused at once (76) where the backend
//! keeps no history.

use std::time::SystemTime;

use anyhow::{Context, Result};

use super::OrFail;
use crate::backend::history::HistoryEntry;
use crate::backend::{check_history, BackendConfig, LockMode};
use crate::cli::HistoryArgs;
use crate::exit::ExitCode;

pub(crate) fn run(config: &BackendConfig, args: HistoryArgs) -> Result<ExitCode> {
    let key = args.key.as_str();
    let context = || format!("history '{key}' on {}", config.shown());
    check_history(&*config.server, &config.shown())
        .or_fail()
        .with_context(context)?;
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    super::block_on(async {
        let backend = super::connect_for(config, &[key])
            .await
            .with_context(context)?;
        let answer = backend.history(key, limit).await;
        backend.close().await;
        let entries = answer.or_fail().with_context(context)?;
        let text = if args.json {
            entries
                .iter()
                .map(|e| format!("{}\n", as_json(e)))
                .collect()
        } else {
            as_table(&entries)
        };
        super::print_out(text)?;
        Ok(ExitCode::Success)
    })
}

fn time(t: Option<SystemTime>) -> Option<String> {
    t.map(|t| humantime::format_rfc3339_millis(t).to_string())
}

fn mode_name(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::Shared => "shared",
        LockMode::Limit(_) => "limit",
    }
}

/// One entry as one JSON object: the entry's own members, then its field
/// list whole (`fields`), with `ended`, `status` and `by` also lifted out.
pub(crate) fn as_json(e: &HistoryEntry) -> serde_json::Value {
    serde_json::json!({
        "key": e.key,
        "source": e.source,
        "ident": e.identity,
        "peer": e.peer,
        "mode": mode_name(e.mode),
        "limit": e.mode.slots().filter(|_| e.mode != LockMode::Exclusive),
        "slot": e.fields.slot(),
        "token": e.token,
        "granted": time(e.granted),
        "waited_ms": e.waited.map(|w| w.as_millis() as u64),
        "ended_at": time(e.ended_at),
        "ended": e.fields.get("ended"),
        "status": e.status(),
        "by": e.by(),
        "fields": e.fields.to_json(),
    })
}

/// `GRANTED SOURCE [SLOT] ENDED STATUS BY HELD NOTE`, newest first (SLOT
/// where some entry has one: a `--limit` or `--slots` hold's).
fn as_table(entries: &[HistoryEntry]) -> String {
    let slots = entries.iter().any(|e| e.fields.slot().is_some());
    let mut out = match slots {
        true => String::from("GRANTED\tSOURCE\tSLOT\tENDED\tSTATUS\tBY\tHELD\tNOTE\n"),
        false => String::from("GRANTED\tSOURCE\tENDED\tSTATUS\tBY\tHELD\tNOTE\n"),
    };
    for e in entries {
        let held = match (e.granted, e.ended_at) {
            (Some(g), Some(end)) => end
                .duration_since(g)
                .map(|d| {
                    humantime::format_duration(std::time::Duration::from_millis(
                        d.as_millis() as u64
                    ))
                    .to_string()
                })
                .unwrap_or_default(),
            _ => "-".into(),
        };
        let cell = |v: Option<&str>| super::printable(v.unwrap_or("-")).into_owned();
        let slot = match slots {
            true => format!("{}\t", cell(e.fields.slot())),
            false => String::new(),
        };
        out.push_str(&format!(
            "{}\t{}\t{slot}{}\t{}\t{}\t{}\t{}\n",
            time(e.granted).unwrap_or_else(|| "-".into()),
            super::printable(&e.source),
            cell(e.fields.get("ended")),
            e.status().map_or("-".into(), |s| s.to_string()),
            cell(e.by()),
            held,
            cell(e.fields.get("note")),
        ));
    }
    out
}
