//! Naming the holder of a key: in the status line while waiting, and in the
//! one line of a conflict (`-n`) or a timeout (`-w`), with the exact `reset`
//! command that clears it. flock and etcdctl cannot say this.

use std::time::{Duration, SystemTime};

use crate::backend::{Backend, BackendConfig, KeyInfo};

/// The holder, or None when the service does not say (or not within `limit`:
/// a listing must not hold up an exit).
pub(super) async fn lookup(backend: &dyn Backend, key: &str, limit: Duration) -> Option<KeyInfo> {
    tokio::time::timeout(limit, backend.holder(key))
        .await
        .ok()?
        .ok()?
}

/// Why a key nobody holds keeps a request waiting, where the reason is a
/// request for several keys in front of it that reserved it (the built-in
/// server's one-step grant, docs/several-keys.md): `reserved by 'SOURCE'
/// (peer P), a request for N keys ...`. None otherwise, or not within
/// `limit`.
pub(super) async fn reserved_by(
    backend: &dyn Backend,
    key: &str,
    limit: Duration,
) -> Option<String> {
    let waiters = tokio::time::timeout(limit, backend.waiters_under(key))
        .await
        .ok()?
        .ok()??;
    let (w, n) = waiters.iter().filter(|w| w.key == key).find_map(|w| {
        let group = w.fields.get("group")?;
        Some((w, crate::backend::fields::parse_group(group)?.1))
    })?;
    let peer = w
        .peer
        .as_ref()
        .map(|p| format!(" (peer {})", super::printable(p)))
        .unwrap_or_default();
    Some(format!(
        "reserved by '{}'{peer}, a request for {n} keys that takes them together once all are free: it waits for its other keys, and nobody passes it",
        super::printable(&w.source)
    ))
}

/// [`reserved_by`], asked on a connection of its own within
/// `config.connect_timeout`.
pub(super) async fn reserved_anew(config: &BackendConfig, key: &str) -> Option<String> {
    let limit = config.connect_timeout;
    let ask = async {
        let backend = crate::backend::connect(config).await.ok()?;
        let why = reserved_by(&*backend, key, limit).await;
        backend.close().await;
        why
    };
    tokio::time::timeout(limit, ask).await.ok().flatten()
}

/// The holder, asked on a connection of its own: a backend may end its
/// session with a withdrawn request (ZooKeeper does), and the answer must
/// come within `config.connect_timeout` in all.
pub(super) async fn lookup_anew(config: &BackendConfig, key: &str) -> Option<KeyInfo> {
    let limit = config.connect_timeout;
    let ask = async {
        let backend = crate::backend::connect(config).await.ok()?;
        let info = backend.holder(key).await.ok().flatten();
        backend.close().await;
        info
    };
    tokio::time::timeout(limit, ask).await.ok().flatten()
}

/// `held by 'SOURCE' (order 41, note 'v1.4') (peer P) for 3m05s, since
/// 2026-12-01T09:41:46Z`
pub(super) fn describe(info: &KeyInfo, now: SystemTime) -> String {
    let mut text = format!("held by '{}'", super::printable(&info.source));
    text.push_str(&request(info));
    if let Some(peer) = &info.peer {
        text.push_str(&format!(" (peer {})", super::printable(peer)));
    }
    if let Some(since) = info.since {
        let held = now.duration_since(since).unwrap_or_default();
        text.push_str(&format!(
            " for {}, since {}",
            crate::status_line::format_waited(held),
            humantime::format_rfc3339_seconds(since)
        ));
    }
    text
}

/// ` (order 41, note 'v1.4')`: the holder's order and note where it gave
/// them, else "".
fn request(info: &KeyInfo) -> String {
    let mut parts = Vec::new();
    if let Some(order) = info.fields.get("order") {
        parts.push(format!("order {}", super::printable(order)));
    }
    if let Some(note) = info.fields.get("note") {
        parts.push(format!("note '{}'", super::printable(note)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// `held by 'SOURCE' (order 41, note 'v1.4') for 3m05s`, for the status line.
pub(super) fn short(info: &KeyInfo, now: SystemTime) -> String {
    let mut text = format!("held by '{}'", super::printable(&info.source));
    text.push_str(&request(info));
    if let Some(since) = info.since {
        let held = now.duration_since(since).unwrap_or_default();
        text.push_str(&format!(" for {}", crate::status_line::format_waited(held)));
    }
    text
}

/// `: held by ...; `lc-cli --server S reset KEY` clears it`, or nothing
/// when the holder is not known.
pub(super) fn clause(info: Option<&KeyInfo>, config: &BackendConfig, key: &str) -> String {
    match info {
        Some(info) => format!(
            ": {}; `{}` clears it",
            describe(info, SystemTime::now()),
            super::command_line(config, "reset", key)
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_source_peer_age_and_start() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let info = KeyInfo {
            identity: None,
            key: "k".into(),
            source: "ci-7\x1b[31m".into(),
            peer: Some("10.0.0.5:41000".into()),
            since: Some(now - Duration::from_secs(185)),
            waiting: 2,
            kept: Some(false),
            mode: crate::backend::LockMode::Exclusive,
            token: None,
            expires: None,
            fields: Default::default(),
            mark: None,
        };
        assert_eq!(
            describe(&info, now),
            "held by 'ci-7\\x1b[31m' (peer 10.0.0.5:41000) for 3m05s, since 2027-01-15T07:56:55Z"
        );
        assert_eq!(short(&info, now), "held by 'ci-7\\x1b[31m' for 3m05s");
        let noted = KeyInfo {
            fields: crate::backend::fields::FieldList::parse(b"note=v1.4\norder=41\n").unwrap(),
            ..info
        };
        assert_eq!(
            short(&noted, now),
            "held by 'ci-7\\x1b[31m' (order 41, note 'v1.4') for 3m05s"
        );
    }
}
