-- Makes our hold permanent (`lock` without a command); with a TTL
-- (`--expire`), a kept hold whose lease runs out that long from now, as a
-- dead holder's does: the next script to settle the key (a waiter's
-- heartbeat) grants the next waiter. ARGV: name, id, ttl_ms (0 or absent:
-- no expiry), and the status of the command before it (`--hold-at-least`;
-- absent or '': none), kept for the hold's history entry.
-- Returns 1, or 0 when the lock is not ours.
local id = ARGV[2]
local ttl = tonumber(ARGV[3] or '0') or 0
local status = ARGV[4]
if status == '' then status = nil end
if redis.call('ZSCORE', HOLDERS, id) then
  local h = holder_info(id)
  h.d = 1
  h.st = status
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
if status then redis.call('HSET', OWNER, 'status', status) end
if ttl > 0 then
  redis.call('PEXPIRE', LOCK, ttl)
  redis.call('HSET', OWNER, 'detached', 1, 'expires', now_ms() + ttl)
else
  redis.call('PERSIST', LOCK)
  redis.call('HSET', OWNER, 'detached', 1)
  redis.call('HDEL', OWNER, 'expires')
end
return 1
