-- `reset --source S` for one key: frees it if S holds it and withdraws S's
-- waiters (O(waiters of this key)). ARGV: name, source, and who resets
-- (the history's `by`).
-- Returns how many holds and waits were removed.
local src, now, by = ARGV[2], now_ms(), ARGV[3]
local n = 0
local token = redis.call('GET', LOCK)
if token and redis.call('HGET', OWNER, 'token') == token and redis.call('HGET', OWNER, 'source') == src then
  revoke(token)
  redis.call('DEL', LOCK)
  finish_owner('reset', nil, by)
  n = n + 1
end
for _, id in ipairs(redis.call('ZRANGE', HOLDERS, 0, -1)) do
  local h = holder_info(id)
  if h and h.s == src then
    drop_holder(id, true, 'reset', nil, by)
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
