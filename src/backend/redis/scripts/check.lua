-- A waiter's heartbeat: refreshes its entry, takes the lock if it is its turn.
-- An entry that is gone (it expired while we were stalled, the node
-- restarted empty, or missed our enqueue) is put back at `ticket` (0: the
-- end of the line), unless `reset --source` withdrew it, a newer
-- --newest request superseded it (`P sup:ID`), or its turn came with its
-- order below the mark (`P out:ID`).
-- ARGV: name, id, source, ttl_ms, queue_timeout_ms, ticket, refresh, mode, N,
-- the lease of a grant made here and of an offer to us, the field list (as
-- ENQUEUE).
-- With refresh, a grant is confirmed: an offer becomes the full ttl.
-- Returns {1, fence, slot} granted (with refresh: the lease restarts now;
-- slot: a --limit holder's, else -1),
-- {2, ahead, offer_left} waiting, {3, 0} withdrawn by a reset, {4, theirs} refused,
-- {5, mark} outdated, {6, 0} superseded (as ENQUEUE).
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
  return {1, fence_of(id), slot_of(id)}
end
if redis.call('EXISTS', gone_key(id)) == 1 then return {3, 0} end
if redis.call('ZSCORE', QUEUE, id) then
  redis.call('ZADD', EXPIRY, 'XX', now + tonumber(ARGV[5]), id)
else
  if redis.call('EXISTS', P..'sup:'..id) == 1 then return {6, 0} end
  local late = redis.call('GET', P..'out:'..id)
  if late then return {5, late} end
  local info = info_of({ARGV[3], ARGV[4], ARGV[5], nil, nil, ARGV[8], ARGV[9], ARGV[11], ARGV[12]})
  late = outdated(info.o)
  if late then return {5, late} end
  local theirs = disagrees(info, now)
  if theirs then return {4, theirs} end
  local at_once = join(id, info, tonumber(ARGV[6]), now, false, false)
  if at_once then return at_once end
end
return standing(now, id, lease, false)
