-- Gives back our hold and/or our place in line (release, cancel, rollback);
-- the next waiter is granted. ARGV: name, id, source, and the order of
-- a run that ended with status 0 (absent otherwise): the key's mark rises
-- to it first, so the next in line is checked against it.
-- Returns 1 if we held the lock, 2 if we only left the line, 0 if neither.
local id, src = ARGV[2], ARGV[3]
if ARGV[4] then raise_mark(ARGV[4]) end
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
