-- `reset KEY`: frees the key whoever holds it; waiters keep their places
-- and the first is granted. ARGV: name, and who resets (the history's
-- `by`). Returns 1 if it was held.
local by = ARGV[2]
local token = redis.call('GET', LOCK)
if token then revoke(token) end
local held = redis.call('DEL', LOCK)
if held == 1 then finish_owner('reset', nil, by) end
for _, id in ipairs(redis.call('ZRANGE', HOLDERS, 0, -1)) do
  drop_holder(id, true, 'reset', nil, by)
  held = 1
end
promote(now_ms(), false, 0)
return held
