-- Gives back our hold and/or our place in line (release, cancel, rollback);
-- the next waiter is granted. ARGV: name, id, source, the order of a run
-- that ended with status 0 ('' or absent otherwise: the key's mark rises
-- to it first, so the next in line is checked against it), and for the
-- release of a hold: how it ended (`released`, `lost`, `cancelled`), the
-- command's status ('' unknown) and who ended it (`by`, '' none). Without
-- an ending (a waiter giving back a grant it never used) no history entry
-- is made. A hold whose lease ran out here but whose record still names
-- us is ended with our word too (lc-cli knows more than a lapsed lease).
-- Returns 1 if we held the lock, 2 if we only left the line, 0 if neither.
local id, src = ARGV[2], ARGV[3]
local function given(v) if v and v ~= '' then return v end return nil end
local order, ended, status, by = given(ARGV[4]), given(ARGV[5]), given(ARGV[6]), given(ARGV[7])
if order then raise_mark(order) end
local lock_kind = redis.call('MGET', LOCK, KIND)
-- Our exclusive hold and no kind: nobody waits and nobody else holds (each
-- of them records the kind), so the key leaves the index at once.
if lock_kind[1] == id and not lock_kind[2] and src then
  if ended then
    redis.call('DEL', LOCK)
    finish_owner(ended, status, by)
  else
    redis.call('DEL', LOCK, OWNER)
    redis.call('HDEL', 'lc-cli:source:'..src, NAME)
  end
  redis.call('SREM', ALL, NAME)
  return 1
end
local now = now_ms()
local was = 0
if lock_kind[1] == id then
  redis.call('DEL', LOCK)
  if ended then finish_owner(ended, status, by) end
  was = 1
elseif ended and not lock_kind[1] and redis.call('HGET', OWNER, 'token') == id then
  finish_owner(ended, status, by)
end
if redis.call('ZSCORE', HOLDERS, id) then
  drop_holder(id, false, ended, status, by)
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
