//! `lc-cli keys [PATTERN] [--json] [--waiters] [--watch]`: who holds what,
//! since when, and how many wait behind them; with `--waiters`, who they
//! are; with `--watch`, again every second.
//!
//! This file lists, filters and sorts; `render.rs` writes the tables,
//! `json.rs` the JSON, `watch.rs` the live view and `events.rs` its JSON.

mod events;
mod json;
mod render;
mod views;
mod watch;

use std::time::SystemTime;

use anyhow::{Context, Result};
use wildmatch::WildMatch;

pub(crate) use self::json::{as_json_with_waiters, write_json};
pub(crate) use self::render::{as_table, waiters_table};
use super::OrFail;
use crate::backend::{BackendConfig, KeyInfo};
use crate::cli::{KeysArgs, KeysOrder};
use crate::exit::ExitCode;

pub(crate) fn run(config: &BackendConfig, args: KeysArgs) -> Result<ExitCode> {
    let KeysArgs {
        pattern,
        json,
        sort: order,
        waiters: with_waiters,
        watch,
        interval,
        ..
    } = args;
    if watch {
        let watch = watch::Watch {
            pattern,
            json,
            order,
            waiters: with_waiters,
            interval,
        };
        return watch::run(config, watch);
    }
    let under = literal_prefix(pattern.as_deref());
    let (mut keys, mut waiters) = super::block_on(async {
        let backend = super::connect_for(config, &[]).await?;
        let listed = async {
            let keys = backend.keys_under(under).await?;
            let waiters = match with_waiters {
                true => backend.waiters_under(under).await?,
                false => None,
            };
            Ok((keys, waiters))
        }
        .await;
        backend.close().await;
        listed
            .or_fail()
            .with_context(|| format!("list keys on {}", config.shown()))
    })?;
    if let Some(p) = pattern {
        let glob = WildMatch::new(&p);
        keys.retain(|k| glob.matches(&k.key));
        if let Some(w) = &mut waiters {
            w.retain(|w| glob.matches(&w.key));
        }
    }
    sort(&mut keys, order);
    if let Some(w) = &mut waiters {
        // By key, each key's line in order.
        w.sort_by(|a, b| (&a.key, a.place).cmp(&(&b.key, b.place)));
    }
    if with_waiters && waiters.is_none() {
        eprintln!(
            "lc-cli: {} does not say who waits, only how many (WAITING)",
            config.shown()
        );
    }
    let now = SystemTime::now();
    let out = match (json, with_waiters) {
        (true, false) => {
            super::print_with(|out| write_json(&keys, now, out))?;
            return Ok(ExitCode::Success);
        }
        (true, true) => as_json_with_waiters(&keys, waiters.as_deref(), now),
        (false, _) => {
            let mut out = as_table(&keys, now);
            if let Some(w) = waiters.as_deref().filter(|w| !w.is_empty()) {
                out.push('\n');
                out.push_str(&waiters_table(w, now));
            }
            out
        }
    };
    super::print_out(out)?;
    Ok(ExitCode::Success)
}

/// What every key a pattern matches starts with: the pattern up to its
/// first wildcard (`deploy/*` -> `deploy/`), so the service lists only
/// those keys (the pattern still filters them). Empty without a pattern.
pub(crate) fn literal_prefix(pattern: Option<&str>) -> &str {
    let p = pattern.unwrap_or_default();
    &p[..p.find(['*', '?']).unwrap_or(p.len())]
}

fn sort(keys: &mut [KeyInfo], order: KeysOrder) {
    match order {
        KeysOrder::Key => keys.sort_by(|a, b| a.key.cmp(&b.key)),
        KeysOrder::Age => keys.sort_by(|a, b| {
            let age = |k: &KeyInfo| k.since.map_or((1, None), |s| (0, Some(s)));
            age(a).cmp(&age(b)).then_with(|| a.key.cmp(&b.key))
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::LockMode;

    #[test]
    fn a_pattern_lists_what_starts_with_its_literal_part() {
        assert_eq!(literal_prefix(Some("deploy/*")), "deploy/");
        assert_eq!(literal_prefix(Some("a?b*")), "a");
        assert_eq!(literal_prefix(Some("*prod")), "");
        assert_eq!(literal_prefix(Some("exact")), "exact");
        assert_eq!(literal_prefix(None), "");
    }

    fn info(key: &str, secs_ago: u64, now: SystemTime) -> KeyInfo {
        KeyInfo {
            identity: None,
            key: key.into(),
            source: "host-a".into(),
            peer: None,
            since: Some(now - Duration::from_secs(secs_ago)),
            waiting: 0,
            kept: None,
            mode: LockMode::Exclusive,
            token: None,
            expires: None,
            fields: Default::default(),
            mark: None,
        }
    }

    #[test]
    fn by_age_is_oldest_first_unknown_last() {
        let now = SystemTime::now();
        let mut unknown = info("u", 0, now);
        unknown.since = None;
        let mut keys = vec![info("new", 5, now), unknown, info("old", 500, now)];
        sort(&mut keys, KeysOrder::Age);
        let order: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(order, ["old", "new", "u"]);
        sort(&mut keys, KeysOrder::Key);
        let order: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(order, ["new", "old", "u"]);
    }
}
