-- Quorum helpers, prepended to every script. `KEYS[1]` is the prefix
-- `lc-cli:{KEY}:`, `ARGV[1]` the key's name.
local P = KEYS[1]
local NAME = ARGV[1]
local LOCK, OWNER, QUEUE, EXPIRY, WAITERS = P..'lock', P..'owner', P..'queue', P..'expiry', P..'waiters'
local SEQ, FENCE, ALL = P..'seq', P..'fence', 'lc-cli:keys'
local HOLDERS, HINFO, KIND = P..'holders', P..'hinfo', P..'kind'
local NEWEST, MARK = P..'newest', P..'mark'
local HISTORY = P..'history'
-- How long the marker of a waiter that left the line (superseded,
-- outdated) lasts: a day, so that a waiter frozen past its queue timeout
-- still finds it when it wakes, rather than joining again as if new.
local MARKER = 86400000
local OFFER = __OFFER_MS__

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function wake_key(id) return P..'wake:'..id end
local function gone_key(id) return P..'gone:'..id end
-- Deploy queues (docs/request-fields.md): a request's field list is
-- `name=value` lines; its order a decimal string without leading zeros,
-- compared as such (exact up to 2^63-1, where a Lua number is not).
local function field(f, name)
  if not f then return nil end
  for n, v in string.gmatch(f, '([a-z]+)=([^\n]*)\n') do
    if n == name then return v end
  end
  return nil
end
local function order_below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
-- The key's mark when order o is below it (the request is outdated), else nil.
local function outdated(o)
  if not o then return nil end
  local m = redis.call('GET', MARK)
  if m and order_below(o, m) then return m end
  return nil
end
-- After a run of order o ended with status 0: the mark is max(mark, o).
local function raise_mark(o)
  local m = redis.call('GET', MARK)
  if not m or order_below(m, o) then redis.call('SET', MARK, o) end
end
-- Leaves waiter id a marker (`P sup:ID` or `P out:ID`) and wakes it.
local function tell_gone(id, info, what, value)
  redis.call('SET', P..what..':'..id, value, 'PX', MARKER)
  redis.call('LPUSH', wake_key(id), what)
  redis.call('PEXPIRE', wake_key(id), info.q)
end
-- A request as a superseded or cancelled one names it.
local function rival(info)
  return cjson.encode({s = info.s, f = info.f or ''})
end
-- Wakes waiter id with its grant ('g'), unless it is the caller (which
-- reads the script's answer); the word lasts as long as the waiter may.
local function tell_granted(id, info, caller)
  if id ~= caller then
    redis.call('LPUSH', wake_key(id), 'g')
    redis.call('PEXPIRE', wake_key(id), info.q)
  end
end
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
  if not info or info.nw then redis.call('HDEL', NEWEST, id) end
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
-- Ends the exclusive holder's record (the lock key is gone): kept in the
-- key's history as `ended` (nil: as a lease that ran out), unless it was an
-- offer never confirmed (nobody's command ran); its source leaves the index.
local function finish_owner(ended, status, by)
  local o = redis.call('HMGET', OWNER, 'source', 'since', 'fence', 'offered', 'fields', 'queued', 'status', 'detached', 'expires')
  if not o[1] then return end
  if o[4] ~= '1' then
    local r = {s = o[1], m = 'x', since = o[2], f = o[3], fl = o[5], a = o[6], st = o[7]}
    record_end(HISTORY, r, ended or lapsed(o[8], o[9]), status, by, now_ms())
  end
  src_add(o[1], -1)
  redis.call('DEL', OWNER)
end
-- True when the lock is free; settles the record of a holder whose lease ran out.
local function settle()
  if redis.call('EXISTS', LOCK) == 1 then return false end
  finish_owner(nil, nil, nil)
  return true
end
-- A shared or limited holder's record in the history (not an offer never
-- confirmed): ended (nil: its lease ran out).
local function record_holder(h, ended, status, by, now)
  if h.o then return end
  local r = {s = h.s, m = h.n or 's', since = h.since, f = h.f, fl = h.fl, a = h.a, sl = h.sl, st = h.st}
  record_end(HISTORY, r, ended or lapsed(h.d, h.e), status, by, now)
end
-- Shared and limited holders whose lease ran out leave; how many remain.
local function settle_set(now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', HOLDERS, id)
    local raw = redis.call('HGET', HINFO, id)
    if raw then
      local h = cjson.decode(raw)
      record_holder(h, nil, nil, nil, now)
      src_add(h.s, -1)
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
-- The lowest slot of 0..n-1 no holder of the key has (its holders whose
-- lease ran out settled first, by the caller), but `except`; nil: none.
local function free_slot(n, except)
  local used = {}
  for _, id in ipairs(redis.call('HKEYS', HINFO)) do
    if id ~= except then
      local raw = redis.call('HGET', HINFO, id)
      local sl = raw and cjson.decode(raw).sl
      if sl then used[tonumber(sl)] = true end
    end
  end
  for i = 0, n - 1 do
    if not used[i] then return i end
  end
  return nil
end
-- Whether slot sl is another holder's than id's.
local function slot_taken(sl, id)
  for _, other in ipairs(redis.call('HKEYS', HINFO)) do
    if other ~= id then
      local raw = redis.call('HGET', HINFO, other)
      if raw and tonumber(cjson.decode(raw).sl) == sl then return true end
    end
  end
  return false
end
-- Adds waiter id to the shared or limited holders (a --limit N one gets
-- the lowest free slot); wakes it unless it is the caller. Its fence and
-- its slot (-1: none).
local function grant_set(id, info, now, caller, lease)
  unqueue(id, info, true)
  local f = redis.call('INCR', FENCE)
  local t, o = lease_of(id, info, caller, lease)
  redis.call('ZADD', HOLDERS, now + t, id)
  local h = {s = info.s, since = now, f = f, d = 0, t = info.t, fl = info.f, a = info.a or now}
  if info.m == 'l' then
    h.n = info.n
    h.sl = free_slot(info.n, id)
  end
  if o == 1 then h.o = 1 end
  redis.call('HSET', HINFO, id, cjson.encode(h))
  tell_granted(id, info, caller)
  return f, h.sl or -1
end
-- The owner record of the lock just set to id (offered: 0 or 1), with
-- the request's field list (fresh: no record was there); its fence.
local function own(id, info, now, o, fresh)
  local f = redis.call('INCR', FENCE)
  redis.call('HSET', OWNER, 'token', id, 'source', info.s, 'since', now, 'fence', f, 'detached', 0, 'ttl', info.t, 'offered', o, 'queued', info.a or now)
  if info.f then
    redis.call('HSET', OWNER, 'fields', info.f)
  elseif not fresh then
    redis.call('HDEL', OWNER, 'fields')
  end
  return f
end
-- Gives the (free) lock to waiter id; wakes it unless it is the caller.
local function grant(id, info, now, caller, lease)
  unqueue(id, info, true)
  local t, o = lease_of(id, info, caller, lease)
  redis.call('SET', LOCK, id, 'PX', t)
  local f = own(id, info, now, o, false)
  tell_granted(id, info, caller)
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
-- free slot of a --limit N key goes to the next one). A head whose order
-- is below the mark when its turn comes leaves the line instead (told by
-- `P out:ID`) and the next is served. Returns caller when it was granted
-- (for `lease` ms), else false; and the mark, when the caller was
-- outdated so.
local function promote(now, caller, lease, cleaned)
  if not cleaned then cleanup(now) end
  local free = settle()
  -- Nobody fits beside an exclusive holder (their records are settled once it is gone).
  if not free then return false end
  local held = settle_set(now)
  local got, late = false, nil
  for _ = 1, 1000 do
    local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
    if not head then
      if free and held == 0 then
        redis.call('SREM', ALL, NAME)
        redis.call('DEL', KIND)
      end
      return got, late
    end
    local info = waiter(head)
    local m = info and outdated(info.o)
    if m then
      unqueue(head, info, false)
      if head == caller then late = m else tell_gone(head, info, 'out', m) end
    elseif info then
      if not fits(info, free, held) then return got, late end
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
  return got, late
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
-- The slot of holder id, -1 when it has none (exclusive, shared).
local function slot_of(id)
  local h = holder_info(id)
  return (h and tonumber(h.sl)) or -1
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
-- {1, fence} granted to id (for `lease` ms); {2, ahead, offer_left}
-- waiting; {5, mark} outdated when its turn came.
local function standing(now, id, lease, cleaned)
  local got, late = promote(now, id, lease, cleaned)
  if got == id then return {1, fence_of(id), slot_of(id)} end
  if late then return {5, late} end
  local ahead = redis.call('ZRANK', QUEUE, id)
  if ahead == 0 then return {2, 0, offer_left()} end
  return {2, ahead, -1}
end
-- Frees the shared or limited holder id (revoking its renewals if asked),
-- kept in the history as `ended` (nil: no entry, a waiter giving back a
-- grant it never used).
local function drop_holder(id, do_revoke, ended, status, by)
  local h = holder_info(id)
  if do_revoke and h then
    local t = tonumber(h.t) or 0
    if t > 0 then redis.call('SET', P..'revoked:'..id, 1, 'PX', t) end
  end
  redis.call('ZREM', HOLDERS, id)
  redis.call('HDEL', HINFO, id)
  if h then
    if ended then record_holder(h, ended, status, by, now_ms()) end
    src_add(h.s, -1)
  end
end
local function info_of(a)
  local m = a[6] or 'x'
  local info = {s = a[1], t = tonumber(a[2]), q = tonumber(a[3]), m = m}
  if m == 'l' then info.n = tonumber(a[7]) end
  info.w = tonumber(a[8])
  local f = a[9]
  if f and f ~= '' then
    info.f = f
    info.o = field(f, 'order')
    if field(f, 'newest') == '1' then info.nw = 1 end
    if field(f, 'cancel') == '1' then info.c = 1 end
  end
  return info
end
-- Whether request a (order, ticket, id) ranks at or above b: the higher
-- order where both have one and they differ, else the later arrival (the
-- larger ticket; equal tickets of a quorum: the larger id, on every node
-- alike).
local function outranks(ao, at, aid, bo, bt, bid)
  if ao and bo and ao ~= bo then return order_below(bo, ao) end
  if at ~= bt then return at > bt end
  return aid > bid
end
-- A request with --cancel-running joined: the holder that took the key
-- with it too is told to stop (`P cancel:HOLDER`, a list it BLPOPs on),
-- unless both have orders and the holder's is higher.
local function aim_cancel(id, info)
  local h = redis.call('GET', LOCK)
  if not h or h == id then return end
  local o = redis.call('HMGET', OWNER, 'token', 'fields', 'ttl')
  if o[1] ~= h or field(o[2], 'cancel') ~= '1' then return end
  local ho = field(o[2], 'order')
  if info.o and ho and order_below(info.o, ho) then return end
  local k = P..'cancel:'..h
  redis.call('LPUSH', k, rival(info))
  redis.call('PEXPIRE', k, tonumber(o[3]) or info.t)
end
-- Puts id in line (as enqueue) under the deploy-queue rules: a --newest
-- request supersedes the --newest waiters it outranks (each leaves the
-- line, told by `P sup:ID` naming it) or, outranked by one, is superseded
-- at once and does not wait ({6, 0}, its own marker naming that one); a
-- --cancel-running one aims at the holder when it arrives (not when a
-- check puts it back in line). Nil when it joined.
local function join(id, info, t, now, indexed, arriving)
  if info.nw then
    if t == 0 then t = redis.call('INCR', SEQ) end
    local losers = {}
    for _, wid in ipairs(redis.call('HKEYS', NEWEST)) do
      local wt, w = redis.call('ZSCORE', QUEUE, wid), waiter(wid)
      if not wt or not w then
        redis.call('HDEL', NEWEST, wid)
      elseif wid ~= id then
        if not outranks(info.o, t, id, w.o, tonumber(wt), wid) then
          redis.call('SET', P..'sup:'..id, rival(w), 'PX', MARKER)
          return {6, 0}
        end
        losers[#losers + 1] = {wid, w}
      end
    end
    for _, l in ipairs(losers) do
      unqueue(l[1], l[2], false)
      tell_gone(l[1], l[2], 'sup', rival(info))
    end
    redis.call('HSET', NEWEST, id, 1)
  end
  enqueue(id, info, t, now, indexed)
  if info.c and arriving then aim_cancel(id, info) end
  return nil
end
