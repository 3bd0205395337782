-- Renews our lease and raises the node's fence counter to our token (the
-- floor). Where the key is missing and free (the node restarted empty, or
-- our lease ran out there and nobody took it), puts it back: not where it
-- is another's, where a reset revoked our hold, or where the owner record
-- still names us (the lock key deleted by hand).
-- A shared or limited hold (mode `s` or `l`) is renewed in `P holders`,
-- put back only where the key has room for it and agrees on its kind.
-- ARGV: name, id, ttl_ms, fence_floor, source, mode, N, the request's
-- field list (absent or '' when none), kept with a hold put back, and a
-- --limit holder's slot (absent: none). A limited hold whose slot here is
-- not that one moves to it where it is free (nodes of a quorum that chose
-- differently), and is not renewed where another holder has it.
-- Returns the fence, or -1 when the lock is not ours.
local id, ttl, floor, src = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local mode = ARGV[6] or 'x'
local fl = ARGV[8]
if fl == '' then fl = nil end
local want = tonumber(ARGV[9])
if mode ~= 'x' then
  local now = now_ms()
  local score = redis.call('ZSCORE', HOLDERS, id)
  if score then
    if want then
      local h = holder_info(id)
      if h and tonumber(h.sl) ~= want then
        if slot_taken(want, id) then return -1 end
        h.sl = want
        redis.call('HSET', HINFO, id, cjson.encode(h))
      end
    end
    if score ~= 'inf' then redis.call('ZADD', HOLDERS, 'XX', now + tonumber(ttl), id) end
  else
    if redis.call('EXISTS', P..'revoked:'..id) == 1 then return -1 end
    local info = {s = src, t = tonumber(ttl), q = tonumber(ttl), m = mode, n = tonumber(ARGV[7])}
    if disagrees(info, now) or not fits(info, settle(), settle_set(now)) then return -1 end
    if want and slot_taken(want, id) then return -1 end
    local h = {s = src, since = now, f = floor, d = 0, t = tonumber(ttl), fl = fl}
    if mode == 'l' then
      h.n = info.n
      h.sl = want or free_slot(info.n, id)
    end
    redis.call('ZADD', HOLDERS, now + tonumber(ttl), id)
    redis.call('HSET', HINFO, id, cjson.encode(h))
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
  if fl then redis.call('HSET', OWNER, 'fields', fl) else redis.call('HDEL', OWNER, 'fields') end
  src_add(src, 1)
  redis.call('SADD', ALL, NAME)
end
if floor > 0 then
  if tonumber(redis.call('GET', FENCE) or 0) < floor then redis.call('SET', FENCE, floor) end
  redis.call('HSET', OWNER, 'fence', floor, 'offered', 0)
end
return fence_of_owner()
