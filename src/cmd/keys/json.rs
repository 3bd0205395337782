//! `keys --json`: one JSON object per hold, one per line (written in
//! pieces, times formatted once a second), with its key's waiters if asked.

use std::io::Write;
use std::time::SystemTime;

use super::render::{expires_in, held_for, mode_name};
use crate::backend::{KeyInfo, LockMode, WaiterInfo};

pub(super) fn waiter_json(w: &WaiterInfo, now: SystemTime) -> serde_json::Value {
    let waited_ms = w
        .since
        .map(|s| now.duration_since(s).unwrap_or_default().as_millis() as u64);
    serde_json::json!({
        "place": w.place,
        "source": w.source,
        "peer": w.peer,
        "since": w.since.map(|s| humantime::format_rfc3339_millis(s).to_string()),
        "waited_ms": waited_ms,
        "mode": mode_name(w.mode),
        "limit": w.mode.slots().filter(|_| w.mode != LockMode::Exclusive),
        "kept": w.kept,
        "ident": w.identity,
        "fields": w.fields.to_json(),
    })
}

/// As [`as_json`], each object with its key's `waiters` (null where the
/// service does not say); a key with waiters but no holder listed gets an
/// object of its own, its holder's fields null.
pub(crate) fn as_json_with_waiters(
    keys: &[KeyInfo],
    waiters: Option<&[WaiterInfo]>,
    now: SystemTime,
) -> String {
    let of = |key: &str| -> serde_json::Value {
        match waiters {
            None => serde_json::Value::Null,
            Some(w) => w
                .iter()
                .filter(|w| w.key == key)
                .map(|w| waiter_json(w, now))
                .collect(),
        }
    };
    let mut out = String::new();
    for (k, line) in keys.iter().zip(as_json(keys, now).lines()) {
        let mut v: serde_json::Value = serde_json::from_str(line).expect("our own JSON");
        v["waiters"] = of(&k.key);
        out.push_str(&v.to_string());
        out.push('\n');
    }
    let mut unheld: Vec<&str> = waiters
        .unwrap_or_default()
        .iter()
        .map(|w| w.key.as_str())
        .filter(|w| !keys.iter().any(|k| k.key == *w))
        .collect();
    unheld.dedup();
    for key in unheld {
        let line = serde_json::json!({
            "key": key,
            "source": null,
            "peer": null,
            "since": null,
            "held_ms": null,
            "waiting": waiters.unwrap_or_default().iter().filter(|w| w.key == key).count(),
            "kept": null,
            "ident": null,
            "fields": null,
            "mark": null,
            "mode": null,
            "limit": null,
            "slot": null,
            "token": null,
            "waiters": of(key),
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// One JSON object per key, one per line.
pub(crate) fn as_json(keys: &[KeyInfo], now: SystemTime) -> String {
    let mut out = Vec::with_capacity(keys.len() * 240);
    write_json(keys, now, &mut out).expect("a Vec takes every write");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// [`as_json`] written to `to` in pieces of [`PIECE`] bytes: a million keys
/// are 240 MB of JSON, never in memory at once.
pub(crate) fn write_json(
    keys: &[KeyInfo],
    now: SystemTime,
    to: &mut impl Write,
) -> std::io::Result<()> {
    const PIECE: usize = 256 * 1024;
    let mut out = Vec::with_capacity(PIECE + 4096);
    let mut clock = Clock::default();
    for k in keys {
        json_line(&mut out, k, now, &mut clock);
        if out.len() >= PIECE {
            to.write_all(&out)?;
            out.clear();
        }
    }
    to.write_all(&out)?;
    to.flush()
}

/// Writes times as `humantime::format_rfc3339_millis` does, the date and
/// time of day made once per second (a listing's holds mostly began within
/// a few seconds of each other).
#[derive(Default)]
struct Clock {
    /// The second last written, and its text up to the seconds' digits
    /// (`2026-12-03T06:48:53`).
    second: Option<(u64, [u8; 19])>,
}

impl Clock {
    fn push(&mut self, out: &mut Vec<u8>, t: SystemTime) {
        let Ok(since) = t.duration_since(std::time::UNIX_EPOCH) else {
            let _ = write!(out, "{}", humantime::format_rfc3339_millis(t));
            return;
        };
        let secs = since.as_secs();
        let prefix = match self.second {
            Some((s, prefix)) if s == secs => prefix,
            _ => {
                let text = humantime::format_rfc3339_seconds(t).to_string();
                let Some(prefix) = text.as_bytes().get(..19).and_then(|p| p.try_into().ok()) else {
                    let _ = write!(out, "{}", humantime::format_rfc3339_millis(t));
                    return;
                };
                self.second = Some((secs, prefix));
                prefix
            }
        };
        out.extend_from_slice(&prefix);
        let ms = since.subsec_millis();
        out.extend_from_slice(&[
            b'.',
            b'0' + (ms / 100) as u8,
            b'0' + (ms / 10 % 10) as u8,
            b'0' + (ms % 10) as u8,
            b'Z',
        ]);
    }
}

/// One key's object, written straight into `out` with its fields in the
/// order serde_json's map gives them (by name), as `serde_json::json!` did
/// (`json_is_the_maps_text` checks the two agree): a million keys are
/// printed in well under a second, where a `Value` per key took seconds.
fn json_line(out: &mut Vec<u8>, k: &KeyInfo, now: SystemTime, clock: &mut Clock) {
    let mut time = |out: &mut Vec<u8>, t: Option<SystemTime>| match t {
        // Digits, '-', ':', 'T', '.' and 'Z': nothing to escape.
        Some(t) => {
            out.push(b'"');
            clock.push(out, t);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    };
    fn num(out: &mut Vec<u8>, n: Option<u64>) {
        match n {
            Some(n) => crate::proto::listing::push_decimal(out, n),
            None => out.extend_from_slice(b"null"),
        }
    }
    fn text(out: &mut Vec<u8>, s: Option<&str>) {
        match s {
            // Nothing serde_json would escape (a control character, '"' or
            // '\\'): as it is.
            Some(s) if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') => {
                out.push(b'"');
                out.extend_from_slice(s.as_bytes());
                out.push(b'"');
            }
            Some(s) => serde_json::to_writer(&mut *out, s).expect("a string"),
            None => out.extend_from_slice(b"null"),
        }
    }
    out.extend_from_slice(b"{\"expires\":");
    time(out, k.expires);
    out.extend_from_slice(b",\"expires_in_ms\":");
    num(out, expires_in(k, now).map(|d| d.as_millis() as u64));
    out.extend_from_slice(b",\"fields\":");
    serde_json::to_writer(&mut *out, &k.fields.to_json()).expect("a map");
    out.extend_from_slice(b",\"held_ms\":");
    num(out, held_for(k, now).map(|d| d.as_millis() as u64));
    out.extend_from_slice(b",\"ident\":");
    text(out, k.identity.as_deref());
    out.extend_from_slice(b",\"kept\":");
    out.extend_from_slice(match k.kept {
        Some(true) => b"true",
        Some(false) => b"false",
        None => b"null",
    });
    out.extend_from_slice(b",\"key\":");
    text(out, Some(&k.key));
    out.extend_from_slice(b",\"limit\":");
    let limit = k.mode.slots().filter(|_| k.mode != LockMode::Exclusive);
    num(out, limit.map(u64::from));
    out.extend_from_slice(b",\"mark\":");
    num(out, k.mark);
    out.extend_from_slice(b",\"mode\":");
    text(out, Some(mode_name(k.mode)));
    out.extend_from_slice(b",\"peer\":");
    text(out, k.peer.as_deref());
    out.extend_from_slice(b",\"since\":");
    time(out, k.since);
    out.extend_from_slice(b",\"slot\":");
    text(out, k.fields.slot());
    out.extend_from_slice(b",\"source\":");
    text(out, Some(&k.source));
    out.extend_from_slice(b",\"token\":");
    num(out, k.token);
    out.extend_from_slice(b",\"waiting\":");
    num(out, Some(k.waiting as u64));
    out.extend_from_slice(b"}\n");
}
