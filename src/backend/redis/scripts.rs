//! The Lua scripts: every step that touches more than one key runs as one
//! script, so no interleaving of clients can break the queue or the lock.
//!
//! Keys of a lock named KEY (`P` = `lc-cli:{KEY}:`):
//!
//! | key | type | what |
//! | --- | --- | --- |
//! | `P lock` | string, PX ttl | the exclusive holder's token; absent = no exclusive holder |
//! | `P holders` | zset | shared (`-s`) and `--limit N` holders: id -> server ms when its lease runs out (`+inf`: a kept hold; a kept hold that expires, `--expire`: its deadline) |
//! | `P hinfo` | hash | holder id -> `{"s":source,"since":ms,"f":fence,"d":detached,"t":ttl_ms,"o":1 while offered,"e":deadline ms of a kept hold that expires}` |
//! | `P kind` | string | `lock` (exclusive and shared requests) or N (`--limit N`): what every holder and waiter agreed on; gone once nobody holds or waits; absent under an exclusive hold with nobody else around (`P lock` without a kind is a lock) |
//! | `P owner` | hash | token, source, since (server ms), fence, detached, ttl (ms), offered (1: granted but not yet confirmed), expires (server ms, a kept hold that expires: `P lock` has that PTTL; read only while detached is 1); valid only while `P lock` holds the same token |
//! | `P queue` | zset | waiter id -> ticket (from `P seq`, never a client clock); ties broken by id |
//! | `P expiry` | zset | waiter id -> server ms when the entry dies unless refreshed |
//! | `P waiters` | hash | waiter id -> `{"s":source,"t":ttl_ms,"q":queue_timeout_ms,"m":mode,"n":N,"w":offer_ms,"a":ms it queued}` (mode `x`, `s` or `l`) |
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
//! Each script but [`LIST`] and [`LIST_WAITERS`] returns integers only. Time inside the scripts is
//! the server's (`TIME`): for the expiry of queue entries and the start of a
//! hold (`since`).

use std::time::Duration;

use redis::Script;

use crate::backend::LockMode;

/// How long a waiter woken by a release has to confirm its grant on one
/// node (at most the ttl): a waiter that died in line holds the key up this
/// long. A quorum adds two response timeouts (see `Quorum::offer_window`).
pub const OFFER: Duration = Duration::from_millis(1000);

/// Quorum helpers, prepended to every script. `KEYS[1]` is the prefix
/// `lc-cli:{KEY}:`, `ARGV[1]` the key's name.
const COMMON: &str = r#"
local P = KEYS[1]
local NAME = ARGV[1]
local LOCK, OWNER, QUEUE, EXPIRY, WAITERS = P..'lock', P..'owner', P..'queue', P..'expiry', P..'waiters'
local SEQ, FENCE, ALL = P..'seq', P..'fence', 'lc-cli:keys'
local HOLDERS, HINFO, KIND = P..'holders', P..'hinfo', P..'kind'
local OFFER = __OFFER_MS__

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function wake_key(id) return P..'wake:'..id end
local function gone_key(id) return P..'gone:'..id end
local function src_add(s, n)
  local k = 'lc-cli:source:'..s
  if redis.call('HINCRBY', k, NAME, n) <= 0 then redis.call('HDEL', k, NAME) end
end
local function waiter(id)
  local raw = redis.call('HGET', WAITERS, id)
  if raw then return cjson.decode(raw) end
  return nil
end
-- Takes a waiter out of the line; its source count drops unless it becomes the holder.
local function unqueue(id, info, keep_source)
  redis.call('ZREM', QUEUE, id)
  redis.call('ZREM', EXPIRY, id)
  redis.call('HDEL', WAITERS, id)
  if info and not keep_source then src_add(info.s, -1) end
end
-- Waiters whose entry was not refreshed in time: O(expired), at most 100 a call.
local function cleanup(now)
  local dead = redis.call('ZRANGEBYSCORE', EXPIRY, '-inf', now, 'LIMIT', 0, 100)
  for _, id in ipairs(dead) do
    unqueue(id, waiter(id), false)
    redis.call('DEL', wake_key(id))
  end
end
-- True when the lock is free; settles the record of a holder whose lease ran out.
local function settle()
  if redis.call('EXISTS', LOCK) == 1 then return false end
  local s = redis.call('HGET', OWNER, 'source')
  if s then
    src_add(s, -1)
    redis.call('DEL', OWNER)
  end
  return true
end
-- Shared and limited holders whose lease ran out leave; how many remain.
local function settle_set(now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', HOLDERS, id)
    local raw = redis.call('HGET', HINFO, id)
    if raw then
      src_add(cjson.decode(raw).s, -1)
      redis.call('HDEL', HINFO, id)
    end
  end
  return redis.call('ZCARD', HOLDERS)
end
-- What a waiter's mode asks of the key's kind: 'lock' or N.
local function kind_of(info)
  if info.m == 'l' then return tostring(info.n) end
  return 'lock'
end
-- Nil when a request of this mode agrees with the key's holders and
-- waiters (recording the kind of a key nobody uses); else their kind as a
-- number (0: a lock, N: --limit N).
local function disagrees(info, now)
  local want, have = kind_of(info), redis.call('GET', KIND)
  -- An exclusive hold taken at once (ENQUEUE's first branch) records no kind.
  if not have and redis.call('EXISTS', LOCK) == 1 then have = 'lock' end
  if have and have ~= want then
    local used = redis.call('EXISTS', LOCK) == 1 or settle_set(now) > 0 or redis.call('ZCARD', QUEUE) > 0
    if used then
      if have == 'lock' then return 0 end
      return tonumber(have)
    end
  end
  redis.call('SET', KIND, want)
  return nil
end
-- The lease of a grant: `lease` for the caller (its own script), else a
-- short offer the woken waiter must confirm (see the module docs).
local function lease_of(id, info, caller, lease)
  if id == caller then return lease, 0 end
  return math.min(info.w or OFFER, info.t), 1
end
-- Adds waiter id to the shared or limited holders; wakes it unless it is the caller.
local function grant_set(id, info, now, caller, lease)
  unqueue(id, info, true)
  local f = redis.call('INCR', FENCE)
  local t, o = lease_of(id, info, caller, lease)
  redis.call('ZADD', HOLDERS, now + t, id)
  local h = {s = info.s, since = now, f = f, d = 0, t = info.t}
  if o == 1 then h.o = 1 end
  redis.call('HSET', HINFO, id, cjson.encode(h))
  if id ~= caller then
    redis.call('LPUSH', wake_key(id), 'g')
    redis.call('PEXPIRE', wake_key(id), info.q)
  end
  return f
end
-- The owner record of the lock just set to id (offered: 0 or 1); its fence.
local function own(id, info, now, o)
  local f = redis.call('INCR', FENCE)
  redis.call('HSET', OWNER, 'token', id, 'source', info.s, 'since', now, 'fence', f, 'detached', 0, 'ttl', info.t, 'offered', o)
  return f
end
-- Gives the (free) lock to waiter id; wakes it unless it is the caller.
local function grant(id, info, now, caller, lease)
  unqueue(id, info, true)
  local t, o = lease_of(id, info, caller, lease)
  redis.call('SET', LOCK, id, 'PX', t)
  local f = own(id, info, now, o)
  if id ~= caller then
    redis.call('LPUSH', wake_key(id), 'g')
    redis.call('PEXPIRE', wake_key(id), info.q)
  end
  return f
end
-- Whether a waiter of this mode can hold now, beside the holders there.
local function fits(info, free, held)
  if info.m == 's' then return free end
  if info.m == 'l' then return free and held < info.n end
  return free and held == 0
end
-- Grants the waiters at the head of the line while they fit, first come
-- first served (an exclusive waiter stops the shared ones behind it; each
-- free slot of a --limit N key goes to the next one). Returns caller when
-- it was granted (for `lease` ms), else false.
local function promote(now, caller, lease, cleaned)
  if not cleaned then cleanup(now) end
  local free = settle()
  -- Nobody fits beside an exclusive holder (their records are settled once it is gone).
  if not free then return false end
  local held = settle_set(now)
  local got = false
  for _ = 1, 1000 do
    local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
    if not head then
      if free and held == 0 then
        redis.call('SREM', ALL, NAME)
        redis.call('DEL', KIND)
      end
      return got
    end
    local info = waiter(head)
    if info then
      if not fits(info, free, held) then return got end
      if (info.m or 'x') == 'x' then
        grant(head, info, now, caller, lease)
        free = false
      else
        grant_set(head, info, now, caller, lease)
        held = held + 1
      end
      if head == caller then got = caller end
    else
      unqueue(head, nil, false)
    end
  end
  return got
end
local function fence_of_owner() return tonumber(redis.call('HGET', OWNER, 'fence') or 0) end
local function holder_info(id)
  local raw = redis.call('HGET', HINFO, id)
  if raw then return cjson.decode(raw) end
  return nil
end
-- The fence of holder id, exclusive or not; nil when it holds nothing.
local function fence_of(id)
  if redis.call('GET', LOCK) == id then return fence_of_owner() end
  if redis.call('ZSCORE', HOLDERS, id) then
    local h = holder_info(id)
    return h and tonumber(h.f) or 0
  end
  return nil
end
-- Before a reset frees the key: the holder's renewals must not put it back
-- while its lease could still be running.
local function revoke(token)
  local t = tonumber(redis.call('HGET', OWNER, 'ttl') or 0)
  if redis.call('HGET', OWNER, 'token') ~= token or t <= 0 then t = redis.call('PTTL', LOCK) end
  if t > 0 then redis.call('SET', P..'revoked:'..token, 1, 'PX', t) end
end
-- A quorum's ticket t raises this node's counter (later tickets are larger).
local function raise_seq(t)
  if t > 0 and tonumber(redis.call('GET', SEQ) or 0) < t then redis.call('SET', SEQ, t) end
end
-- Puts id in line at ticket t (0: take the next ticket here); indexed:
-- the key is already in `lc-cli:keys`.
local function enqueue(id, info, t, now, indexed)
  if t == 0 then
    t = redis.call('INCR', SEQ)
  else
    raise_seq(t)
  end
  redis.call('ZADD', QUEUE, t, id)
  redis.call('ZADD', EXPIRY, now + info.q, id)
  info.a = info.a or now
  redis.call('HSET', WAITERS, id, cjson.encode(info))
  src_add(info.s, 1)
  if not indexed then redis.call('SADD', ALL, NAME) end
end
-- Ms left of an unconfirmed offer of the lock (it passes on after that,
-- at the next script), else -1; the first in line re-checks then.
local function offer_left()
  if redis.call('HGET', OWNER, 'offered') ~= '1' then return -1 end
  local t = redis.call('PTTL', LOCK)
  if t < 0 then return -1 end
  return t
end
-- {1, fence} granted to id (for `lease` ms); {2, ahead, offer_left} waiting.
local function standing(now, id, lease, cleaned)
  if promote(now, id, lease, cleaned) == id then return {1, fence_of(id)} end
  local ahead = redis.call('ZRANK', QUEUE, id)
  if ahead == 0 then return {2, 0, offer_left()} end
  return {2, ahead, -1}
end
-- Frees the shared or limited holder id (revoking its renewals if asked).
local function drop_holder(id, do_revoke)
  local h = holder_info(id)
  if do_revoke and h then
    local t = tonumber(h.t) or 0
    if t > 0 then redis.call('SET', P..'revoked:'..id, 1, 'PX', t) end
  end
  redis.call('ZREM', HOLDERS, id)
  redis.call('HDEL', HINFO, id)
  if h then src_add(h.s, -1) end
end
local function info_of(a)
  local m = a[6] or 'x'
  local info = {s = a[1], t = tonumber(a[2]), q = tonumber(a[3]), m = m}
  if m == 'l' then info.n = tonumber(a[7]) end
  info.w = tonumber(a[8])
  return info
end
"#;

/// Enqueue, or with nonblock only take the key if this mode fits beside its
/// holders and nobody waits.
/// ARGV: name, id, source, ttl_ms, queue_timeout_ms, ticket (0 = assign),
/// nonblock, mode (`x`, `s`, `l`), N, the lease (ms) of a grant to us here
/// (the ttl where this answer confirms it, else an offer), how long an
/// offer to us lasts (ms; kept in `P waiters` as `w`).
/// Returns {1, fence} granted, {2, ahead, offer_left_ms or -1} queued (the
/// offer: of the lock to the waiter ahead, known to the first in line),
/// {0, 0} busy (nonblock),
/// {4, theirs} refused: the key is used another way (0: as a lock, N: with
/// --limit N).
const ENQUEUE: &str = r#"
local id, lease = ARGV[2], tonumber(ARGV[10])
local info = info_of({ARGV[3], ARGV[4], ARGV[5], nil, nil, ARGV[8], ARGV[9], ARGV[11]})
-- A key out of the index is unused (nobody holds, waits, or left a record
-- to settle): an exclusive request takes it at once, in a few commands.
local indexed = info.m == 'x'
if indexed and redis.call('SADD', ALL, NAME) == 1 and redis.call('SET', LOCK, id, 'NX', 'PX', lease) then
  raise_seq(tonumber(ARGV[6]))
  src_add(info.s, 1)
  return {1, own(id, info, now_ms(), 0)}
end
local now = now_ms()
cleanup(now)
local theirs = disagrees(info, now)
if theirs then return {4, theirs} end
if ARGV[7] == '1' then
  local free = settle()
  if fits(info, free, settle_set(now)) and redis.call('ZCARD', QUEUE) == 0 then
    src_add(info.s, 1)
    if not indexed then redis.call('SADD', ALL, NAME) end
    if info.m == 'x' then return {1, grant(id, info, now, id, lease)} end
    return {1, grant_set(id, info, now, id, lease)}
  end
  return {0, 0}
end
enqueue(id, info, tonumber(ARGV[6]), now, indexed)
return standing(now, id, lease, true)
"#;

/// A waiter's heartbeat: refreshes its entry, takes the lock if it is its turn.
/// An entry that is gone (it expired while we were stalled, the node
/// restarted empty, or missed our enqueue) is put back at `ticket` (0: the
/// end of the line), unless `reset --source` withdrew it.
/// ARGV: name, id, source, ttl_ms, queue_timeout_ms, ticket, refresh, mode, N,
/// the lease of a grant made here and of an offer to us (as ENQUEUE).
/// With refresh, a grant is confirmed: an offer becomes the full ttl.
/// Returns {1, fence} granted (with refresh: the lease restarts now),
/// {2, ahead, offer_left} waiting, {3, 0} withdrawn by a reset, {4, theirs} refused (as
/// ENQUEUE).
const CHECK: &str = r#"
local id, now, lease = ARGV[2], now_ms(), tonumber(ARGV[10])
if redis.call('GET', LOCK) == id then
  if ARGV[7] == '1' then
    redis.call('PEXPIRE', LOCK, ARGV[4])
    redis.call('HSET', OWNER, 'offered', 0)
  end
  return {1, fence_of_owner()}
end
if redis.call('ZSCORE', HOLDERS, id) then
  if ARGV[7] == '1' then
    redis.call('ZADD', HOLDERS, 'XX', now + tonumber(ARGV[4]), id)
    local h = holder_info(id)
    if h and h.o then
      h.o = nil
      redis.call('HSET', HINFO, id, cjson.encode(h))
    end
  end
  return {1, fence_of(id)}
end
if redis.call('EXISTS', gone_key(id)) == 1 then return {3, 0} end
if redis.call('ZSCORE', QUEUE, id) then
  redis.call('ZADD', EXPIRY, 'XX', now + tonumber(ARGV[5]), id)
else
  local info = info_of({ARGV[3], ARGV[4], ARGV[5], nil, nil, ARGV[8], ARGV[9], ARGV[11]})
  local theirs = disagrees(info, now)
  if theirs then return {4, theirs} end
  enqueue(id, info, tonumber(ARGV[6]), now, false)
end
return standing(now, id, lease, false)
"#;

/// Renews our lease and raises the node's fence counter to our token (the
/// floor). Where the key is missing and free (the node restarted empty, or
/// our lease ran out there and nobody took it), puts it back: not where it
/// is another's, where a reset revoked our hold, or where the owner record
/// still names us (the lock key deleted by hand).
/// A shared or limited hold (mode `s` or `l`) is renewed in `P holders`,
/// put back only where the key has room for it and agrees on its kind.
/// ARGV: name, id, ttl_ms, fence_floor, source, mode, N.
/// Returns the fence, or -1 when the lock is not ours.
const RENEW: &str = r#"
local id, ttl, floor, src = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local mode = ARGV[6] or 'x'
if mode ~= 'x' then
  local now = now_ms()
  if redis.call('ZSCORE', HOLDERS, id) then
    if redis.call('ZSCORE', HOLDERS, id) ~= 'inf' then redis.call('ZADD', HOLDERS, 'XX', now + tonumber(ttl), id) end
  else
    if redis.call('EXISTS', P..'revoked:'..id) == 1 then return -1 end
    local info = {s = src, t = tonumber(ttl), q = tonumber(ttl), m = mode, n = tonumber(ARGV[7])}
    if disagrees(info, now) or not fits(info, settle(), settle_set(now)) then return -1 end
    redis.call('ZADD', HOLDERS, now + tonumber(ttl), id)
    redis.call('HSET', HINFO, id, cjson.encode({s = src, since = now, f = floor, d = 0, t = tonumber(ttl)}))
    src_add(src, 1)
    redis.call('SADD', ALL, NAME)
  end
  if floor > 0 then
    if tonumber(redis.call('GET', FENCE) or 0) < floor then redis.call('SET', FENCE, floor) end
    local h = holder_info(id)
    if h then
      h.f = floor
      h.o = nil
      redis.call('HSET', HINFO, id, cjson.encode(h))
    end
  end
  return fence_of(id)
end
local token = redis.call('GET', LOCK)
if token == id then
  redis.call('PEXPIRE', LOCK, ttl)
else
  if token or redis.call('EXISTS', P..'revoked:'..id) == 1 then return -1 end
  if redis.call('HGET', OWNER, 'token') == id then return -1 end
  settle()
  redis.call('SET', LOCK, id, 'PX', ttl)
  redis.call('HSET', OWNER, 'token', id, 'source', src, 'since', now_ms(), 'fence', floor, 'detached', 0, 'ttl', ttl)
  src_add(src, 1)
  redis.call('SADD', ALL, NAME)
end
if floor > 0 then
  if tonumber(redis.call('GET', FENCE) or 0) < floor then redis.call('SET', FENCE, floor) end
  redis.call('HSET', OWNER, 'fence', floor, 'offered', 0)
end
return fence_of_owner()
"#;

/// Gives back our hold and/or our place in line (release, cancel, rollback);
/// the next waiter is granted. ARGV: name, id, source.
/// Returns 1 if we held the lock, 2 if we only left the line, 0 if neither.
const RELEASE: &str = r#"
local id, src = ARGV[2], ARGV[3]
local lock_kind = redis.call('MGET', LOCK, KIND)
-- Our exclusive hold and no kind: nobody waits and nobody else holds (each
-- of them records the kind), so the key leaves the index at once.
if lock_kind[1] == id and not lock_kind[2] and src then
  redis.call('DEL', LOCK, OWNER)
  redis.call('HDEL', 'lc-cli:source:'..src, NAME)
  redis.call('SREM', ALL, NAME)
  return 1
end
local now = now_ms()
local was = 0
if lock_kind[1] == id then
  redis.call('DEL', LOCK)
  was = 1
end
if redis.call('ZSCORE', HOLDERS, id) then
  drop_holder(id, false)
  was = 1
end
local info = waiter(id)
if info then
  unqueue(id, info, false)
  if was == 0 then was = 2 end
end
redis.call('DEL', wake_key(id))
promote(now, false, 0)
return was
"#;

/// Makes our hold permanent (`lock` without a command); with a TTL
/// (`--expire`), a kept hold whose lease runs out that long from now, as a
/// dead holder's does: the next script to settle the key (a waiter's
/// heartbeat) grants the next waiter. ARGV: name, id, ttl_ms (0 or absent:
/// no expiry). Returns 1, or 0 when the lock is not ours.
const DETACH: &str = r#"
local id = ARGV[2]
local ttl = tonumber(ARGV[3] or '0') or 0
if redis.call('ZSCORE', HOLDERS, id) then
  local h = holder_info(id)
  h.d = 1
  if ttl > 0 then
    h.e = now_ms() + ttl
    redis.call('HSET', HINFO, id, cjson.encode(h))
    redis.call('ZADD', HOLDERS, 'XX', h.e, id)
  else
    redis.call('HSET', HINFO, id, cjson.encode(h))
    redis.call('ZADD', HOLDERS, 'XX', 'inf', id)
  end
  return 1
end
if redis.call('GET', LOCK) ~= ARGV[2] then return 0 end
if ttl > 0 then
  redis.call('PEXPIRE', LOCK, ttl)
  redis.call('HSET', OWNER, 'detached', 1, 'expires', now_ms() + ttl)
else
  redis.call('PERSIST', LOCK)
  redis.call('HSET', OWNER, 'detached', 1)
  redis.call('HDEL', OWNER, 'expires')
end
return 1
"#;

/// `unlock KEY` from another process: releases a detached hold only (of a
/// shared or limited key: the oldest kept one).
/// ARGV: name. Returns 1 released, 0 not held, -1 held by a running lc-cli.
const UNLOCK: &str = r#"
local now = now_ms()
local token = redis.call('GET', LOCK)
if not token then
  local kept = redis.call('ZRANGEBYSCORE', HOLDERS, 'inf', 'inf', 'LIMIT', 0, 1)[1]
  if not kept then
    -- A kept hold that expires (`--expire`) has its deadline as score.
    local oldest
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', HOLDERS, '('..now, '(inf')) do
      local h = holder_info(id)
      if h and h.d == 1 and h.e and (not oldest or h.since < oldest) then
        kept, oldest = id, h.since
      end
    end
  end
  if kept then
    drop_holder(kept, false)
    promote(now, false, 0)
    return 1
  end
  local any = settle_set(now) > 0
  promote(now, false, 0)
  if any then return -1 end
  return 0
end
if redis.call('HGET', OWNER, 'token') ~= token or redis.call('HGET', OWNER, 'detached') ~= '1' then
  return -1
end
redis.call('DEL', LOCK)
promote(now, false, 0)
return 1
"#;

/// `reset KEY`: frees the key whoever holds it; waiters keep their places
/// and the first is granted. ARGV: name. Returns 1 if it was held.
const RESET_KEY: &str = r#"
local token = redis.call('GET', LOCK)
if token then revoke(token) end
local held = redis.call('DEL', LOCK)
for _, id in ipairs(redis.call('ZRANGE', HOLDERS, 0, -1)) do
  drop_holder(id, true)
  held = 1
end
promote(now_ms(), false, 0)
return held
"#;

/// `reset --source S` for one key: frees it if S holds it and withdraws S's
/// waiters (O(waiters of this key)). ARGV: name, source.
/// Returns how many holds and waits were removed.
const RESET_SOURCE: &str = r#"
local src, now = ARGV[2], now_ms()
local n = 0
local token = redis.call('GET', LOCK)
if token and redis.call('HGET', OWNER, 'token') == token and redis.call('HGET', OWNER, 'source') == src then
  revoke(token)
  redis.call('DEL', LOCK)
  n = n + 1
end
for _, id in ipairs(redis.call('ZRANGE', HOLDERS, 0, -1)) do
  local h = holder_info(id)
  if h and h.s == src then
    drop_holder(id, true)
    n = n + 1
  end
end
local all = redis.call('HGETALL', WAITERS)
for i = 1, #all, 2 do
  local id, info = all[i], cjson.decode(all[i + 1])
  if info.s == src then
    unqueue(id, info, false)
    redis.call('SET', gone_key(id), 1, 'PX', info.q)
    redis.call('LPUSH', wake_key(id), 'w')
    redis.call('PEXPIRE', wake_key(id), info.q)
    n = n + 1
  end
end
promote(now, false, 0)
redis.call('HDEL', 'lc-cli:source:'..src, NAME)
return n
"#;

/// `keys`: every held key, in one round trip; O(keys in `lc-cli:keys`), the
/// waiters counted with one ZCOUNT each. A key whose lease ran out is not
/// listed; when nobody waits for it either, its record is settled and it
/// leaves the index (what a release would have done). Stands alone: no
/// `KEYS`, no `ARGV`, not prefixed with [`COMMON`].
/// Returns {now_ms, {{name, token, source, since_ms, waiting, detached, mode, expires_ms}, ...}},
/// one entry per holder (mode `x` exclusive, `s` shared, N for --limit N),
/// where source is '' and since_ms and detached -1 when the owner record does
/// not match the lock (a lock key written by someone else), detached is 1 for
/// a kept hold, 0 for a running command's and -1 for an offer not yet
/// confirmed (its holder is not known to run yet), waiting counts the queue
/// entries not yet expired, and expires_ms is a kept hold's deadline
/// (`--expire`, server ms) or -1.
const LIST: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = {}
for _, name in ipairs(redis.call('SMEMBERS', 'lc-cli:keys')) do
  local P = 'lc-cli:{'..name..'}:'
  local token = redis.call('GET', P..'lock')
  if token then
    local o = redis.call('HMGET', P..'owner', 'token', 'source', 'since', 'detached', 'offered', 'expires')
    local source, since, detached, expires = '', -1, -1, -1
    if o[1] == token then
      source, since, detached = o[2] or '', tonumber(o[3]) or -1, tonumber(o[4]) or -1
      if o[5] == '1' then detached = -1 end
      if detached == 1 then expires = tonumber(o[6]) or -1 end
    end
    local waiting = redis.call('ZCOUNT', P..'expiry', '('..now, '+inf')
    held[#held + 1] = {name, token, source, since, waiting, detached, 'x', expires}
  end
  local set = redis.call('ZRANGEBYSCORE', P..'holders', '('..now, '+inf')
  if #set > 0 then
    local kind = redis.call('GET', P..'kind') or 'lock'
    local mode = 's'
    if kind ~= 'lock' then mode = kind end
    local waiting = redis.call('ZCOUNT', P..'expiry', '('..now, '+inf')
    for _, id in ipairs(set) do
      local raw = redis.call('HGET', P..'hinfo', id)
      local source, since, detached, expires = '', -1, -1, -1
      if raw then
        local h = cjson.decode(raw)
        source, since, detached = h.s or '', tonumber(h.since) or -1, tonumber(h.d) or -1
        if h.o then detached = -1 end
        if detached == 1 and h.e then expires = tonumber(h.e) end
      end
      held[#held + 1] = {name, id, source, since, waiting, detached, mode, expires}
    end
  end
  if not token and #set == 0 and redis.call('EXISTS', P..'queue') == 0 then
    local function leave_source(s)
      local k = 'lc-cli:source:'..s
      if redis.call('HINCRBY', k, name, -1) <= 0 then redis.call('HDEL', k, name) end
    end
    local s = redis.call('HGET', P..'owner', 'source')
    if s then
      leave_source(s)
      redis.call('DEL', P..'owner')
    end
    -- Shared holders whose lease ran out: a key out of the index has none.
    for _, id in ipairs(redis.call('ZRANGE', P..'holders', 0, -1)) do
      local raw = redis.call('HGET', P..'hinfo', id)
      if raw then leave_source(cjson.decode(raw).s) end
    end
    redis.call('DEL', P..'holders', P..'hinfo')
    redis.call('DEL', P..'kind')
    redis.call('SREM', 'lc-cli:keys', name)
  end
end
return {now, held}
"#;

/// Every live waiter (its queue entry not expired) of every key in
/// `lc-cli:keys`, each key's in line order; read only. Returns {now_ms,
/// {{name, id, source, queued ms or -1, mode, N}...}}.
const LIST_WAITERS: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', 'lc-cli:keys')) do
  local P = 'lc-cli:{'..name..'}:'
  for _, id in ipairs(redis.call('ZRANGE', P..'queue', 0, -1)) do
    local exp = tonumber(redis.call('ZSCORE', P..'expiry', id) or 0)
    local raw = redis.call('HGET', P..'waiters', id)
    if exp > now and raw then
      local w = cjson.decode(raw)
      out[#out + 1] = {name, id, w.s or '', tonumber(w.a) or -1, w.m or 'x', tostring(w.n or 0)}
    end
  end
end
return {now, out}
"#;

/// The compiled scripts (each sent by SHA, loaded on first use).
pub struct Scripts {
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
}

impl Scripts {
    pub fn get() -> &'static Scripts {
        static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
        SCRIPTS.get_or_init(Scripts::new)
    }

    fn new() -> Self {
        let common = COMMON.replace("__OFFER_MS__", &OFFER.as_millis().to_string());
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
            list: Script::new(LIST),
            list_waiters: Script::new(LIST_WAITERS),
        }
    }
}

/// `lc-cli:{KEY}:`: the prefix of every key of one lock.
pub fn prefix(key: &str) -> String {
    format!("lc-cli:{{{key}}}:")
}

/// The hash of keys held or waited for by `source`.
pub fn source_index(source: &str) -> String {
    format!("lc-cli:source:{source}")
}
/// The mode arguments of ENQUEUE and CHECK (after nonblock/refresh), and
/// of RENEW: `x`, `s` or `l`, and N.
pub fn mode_args(mode: LockMode) -> [String; 2] {
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
