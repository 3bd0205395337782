//! The Lua scripts: every step that touches more than one key runs as one
//! script, so no interleaving of clients can break the queue or the lock.
//!
//! Keys of a lock named KEY (`P` = `lc-cli:{KEY}:`):
//!
//! | key | type | what |
//! | --- | --- | --- |
//! | `P lock` | string, PX ttl | the exclusive holder's token; absent = no exclusive holder |
//! | `P holders` | zset | shared (`-s`) and `--limit N` holders: id -> server ms when its lease runs out (`+inf`: a kept hold; a kept hold that expires, `--expire`: its deadline) |
//! | `P hinfo` | hash | holder id -> `{"s":source,"since":ms,"f":fence,"d":detached,"t":ttl_ms,"o":1 while offered,"e":deadline ms of a kept hold that expires,"fl":field list,"a":ms it queued,"n":N of --limit N,"sl":its slot 0..N-1,"st":status its command ended with (a kept hold)}` |
//! | `P kind` | string | `lock` (exclusive and shared requests) or N (`--limit N`): what every holder and waiter agreed on; gone once nobody holds or waits; absent under an exclusive hold with nobody else around (`P lock` without a kind is a lock) |
//! | `P owner` | hash | token, source, since (server ms), fence, detached, ttl (ms), offered (1: granted but not yet confirmed), expires (server ms, a kept hold that expires: `P lock` has that PTTL; read only while detached is 1), fields (the request's field list, absent when none), queued (server ms it joined the line), status (a kept hold's command's); valid only while `P lock` holds the same token |
//! | `P queue` | zset | waiter id -> ticket (from `P seq`, never a client clock); ties broken by id |
//! | `P expiry` | zset | waiter id -> server ms when the entry dies unless refreshed |
//! | `P waiters` | hash | waiter id -> `{"s":source,"t":ttl_ms,"q":queue_timeout_ms,"m":mode,"n":N,"w":offer_ms,"a":ms it queued,"f":field list,"o":order,"nw":1 with --newest,"c":1 with --cancel-running}` (mode `x`, `s` or `l`; the last four only with fields) |
//! | `P newest` | hash | the `--newest` waiters (id -> 1): whom a newer `--newest` request compares itself with |
//! | `P mark` | string | the highest `--order` whose command ended with status 0 (a decimal string); no TTL: it outlives holds, `reset`, and (with AOF) restarts; `lc-cli mark --clear` deletes it |
//! | `P sup:ID` | string, PX a day | waiter ID was superseded: `{"s":source,"f":field list}` of the newer request |
//! | `P out:ID` | string, PX a day | waiter ID's turn came with its order below the mark: the mark |
//! | `P cancel:ID` | list, PX the ttl | holder ID (taken with `--cancel-running`) is asked to stop: the newer request, as in `P sup:ID`; the holder BLPOPs on it |
//! | `P history` | stream | the key's last ended holds, one entry each (`record.lua`), trimmed to [`DEFAULT_HISTORY`](crate::backend::history::DEFAULT_HISTORY) |
//! | `P seq` | counter | tickets |
//! | `P fence` | counter | grants (`LC_LOCK_TOKEN`) |
//! | `P wake:ID` | list | pushed once when waiter ID is granted or withdrawn; it BLPOPs on it |
//! | `P gone:ID` | string, PX | tombstone of a waiter withdrawn by `reset --source` |
//! | `P revoked:ID` | string, PX ttl | tombstone of a hold freed by `reset`: its renewals must not put the key back |
//! | `lc-cli:source:SRC` | hash | KEY -> how many holds and waits SRC has on KEY |
//! | `lc-cli:keys` | set | every KEY held or waited for (for `keys`); a KEY out of it has nothing to settle |
//!
//! Offers: a grant to a waiter other than the script's caller (a release
//! handing the key on) is an *offer*, leased for [`OFFER`] only (at most
//! the ttl). The woken waiter confirms it (CHECK with refresh on one node,
//! RENEW on a quorum), which restarts the full ttl and clears `offered`.
//! A waiter that died in line never confirms: its offer runs out like any
//! lease, the next script settles it and offers the key to the next waiter,
//! who polls the key that often while it is near the head of the line.
//! A caller granted by its own script gets the full ttl where that answer
//! is its confirmation (one node), else an offer too (a quorum confirms
//! with RENEW right after).
//!
//! A key stays in `lc-cli:keys` after its holder's lease ran out until a
//! script settles it (the next waiter's heartbeat, a release, or `keys`).
//!
//! The uncontended lock: a key out of `lc-cli:keys` has no holder, no
//! waiter and no record left to settle, so ENQUEUE's `SADD` answering 1 lets
//! an exclusive request take it at once without looking further (7
//! commands, the EVALSHA included). Such a hold records no `P kind`; every
//! waiter and every other holder does, so RELEASE finding our token and no
//! kind (one `MGET`) frees the key and takes it out of the index without
//! looking at the line (5 commands).
//!
//! The per-waiter and per-source keys are named inside the scripts, so the
//! layout is for standalone Redis (not Redis Cluster).
//!
//! Each script but [`LIST`] and [`LIST_WAITERS`] returns integers only.
//! Time inside the scripts is the server's (`TIME`): for the expiry of
//! queue entries and the start of a hold (`since`).
//!
//! Each script is a file of its own, `scripts/NAME.lua`, whose opening
//! comment tells its arguments and its answer; this file loads them
//! (`include_str!`) and holds the Rust around them: their compiled forms,
//! the key names and the mode arguments they share with their callers.

use std::time::Duration;

use redis::Script;

use crate::backend::LockMode;

/// How long a waiter woken by a release has to confirm its grant on one
/// node (at most the ttl): a waiter that died in line holds the key up this
/// long. A quorum adds two response timeouts (see `Quorum::offer_window`).
pub(super) const OFFER: Duration = Duration::from_millis(1000);

/// The history's recorder, prepended to [`COMMON`] and [`LIST`] (which
/// settles dead holders too). `scripts/record.lua` tells an entry's fields.
const RECORD: &str = include_str!("scripts/record.lua");

/// Helpers prepended to every script but the listings: `KEYS[1]` is the
/// prefix `lc-cli:{KEY}:`, `ARGV[1]` the key's name. `scripts/common.lua` tells its arguments and answer.
const COMMON: &str = include_str!("scripts/common.lua");

/// Enqueue, or with nonblock take the key only if this mode fits now. `scripts/enqueue.lua` tells its arguments and answer.
const ENQUEUE: &str = include_str!("scripts/enqueue.lua");

/// A waiter's heartbeat: takes the key when it is its turn. `scripts/check.lua` tells its arguments and answer.
const CHECK: &str = include_str!("scripts/check.lua");

/// Renews a hold's lease, putting it back on a node that lost it. `scripts/renew.lua` tells its arguments and answer.
const RENEW: &str = include_str!("scripts/renew.lua");

/// Gives back a hold and/or a place in line; the next is granted. `scripts/release.lua` tells its arguments and answer.
const RELEASE: &str = include_str!("scripts/release.lua");

/// Makes a hold a kept one (`lock` without a command). `scripts/detach.lua` tells its arguments and answer.
const DETACH: &str = include_str!("scripts/detach.lua");

/// `unlock KEY` from another process: releases a kept hold. `scripts/unlock.lua` tells its arguments and answer.
const UNLOCK: &str = include_str!("scripts/unlock.lua");

/// `reset KEY`: frees the key whoever holds it. `scripts/reset_key.lua` tells its arguments and answer.
const RESET_KEY: &str = include_str!("scripts/reset_key.lua");

/// `reset --source S` for one key. `scripts/reset_source.lua` tells its arguments and answer.
const RESET_SOURCE: &str = include_str!("scripts/reset_source.lua");

/// `history KEY`: its last ended holds. `scripts/history.lua` tells its arguments and answer.
const HISTORY: &str = include_str!("scripts/history.lua");

/// `keys`: every held key. Stands alone (no [`COMMON`]). `scripts/list.lua` tells its arguments and answer.
const LIST: &str = include_str!("scripts/list.lua");

/// `keys --waiters`: every live waiter. Stands alone (no [`COMMON`]). `scripts/list_waiters.lua` tells its arguments and answer.
const LIST_WAITERS: &str = include_str!("scripts/list_waiters.lua");

/// The compiled scripts (each sent by SHA, loaded on first use).
pub(super) struct Scripts {
    pub enqueue: Script,
    pub check: Script,
    pub renew: Script,
    pub release: Script,
    pub detach: Script,
    pub unlock: Script,
    pub reset_key: Script,
    pub reset_source: Script,
    pub list: Script,
    pub list_waiters: Script,
    pub history: Script,
}

impl Scripts {
    pub(super) fn get() -> &'static Scripts {
        static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
        SCRIPTS.get_or_init(Scripts::new)
    }

    fn new() -> Self {
        let record = RECORD.replace(
            "__HISTORY_CAP__",
            &crate::backend::history::DEFAULT_HISTORY.to_string(),
        );
        let common = COMMON.replace("__OFFER_MS__", &OFFER.as_millis().to_string());
        let common = format!("{record}\n{common}");
        let s = |body: &str| Script::new(&format!("{common}\n{body}"));
        Scripts {
            enqueue: s(ENQUEUE),
            check: s(CHECK),
            renew: s(RENEW),
            release: s(RELEASE),
            detach: s(DETACH),
            unlock: s(UNLOCK),
            reset_key: s(RESET_KEY),
            reset_source: s(RESET_SOURCE),
            list: Script::new(&format!("{record}\n{LIST}")),
            list_waiters: Script::new(LIST_WAITERS),
            history: s(HISTORY),
        }
    }
}

/// `lc-cli:{KEY}:`: the prefix of every key of one lock.
pub(super) fn prefix(key: &str) -> String {
    format!("lc-cli:{{{key}}}:")
}

/// The hash of keys held or waited for by `source`.
pub(super) fn source_index(source: &str) -> String {
    format!("lc-cli:source:{source}")
}
/// The mode arguments of ENQUEUE and CHECK (after nonblock/refresh), and
/// of RENEW: `x`, `s` or `l`, and N.
pub(super) fn mode_args(mode: LockMode) -> [String; 2] {
    match mode {
        LockMode::Exclusive => ["x".into(), "1".into()],
        LockMode::Shared => ["s".into(), "0".into()],
        LockMode::Limit(n) => ["l".into(), n.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_share_a_hash_tag() {
        assert_eq!(prefix("deploy/prod"), "lc-cli:{deploy/prod}:");
        assert_eq!(source_index("host-7"), "lc-cli:source:host-7");
    }
}
