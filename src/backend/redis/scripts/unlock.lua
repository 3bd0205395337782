-- `unlock KEY` from another process: releases a detached hold only (of a
-- shared or limited key: the oldest kept one).
-- ARGV: name, and who unlocks (the history's `by`). Returns 1 released, 0 not held, -1 held by a running lc-cli.
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
    drop_holder(kept, false, 'released', nil, ARGV[2])
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
finish_owner('released', nil, ARGV[2])
promote(now, false, 0)
return 1
