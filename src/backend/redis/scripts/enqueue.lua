-- Enqueue, or with nonblock only take the key if this mode fits beside its
-- holders and nobody waits.
-- ARGV: name, id, source, ttl_ms, queue_timeout_ms, ticket (0 = assign),
-- nonblock, mode (`x`, `s`, `l`), N, the lease (ms) of a grant to us here
-- (the ttl where this answer confirms it, else an offer), how long an
-- offer to us lasts (ms; kept in `P waiters` as `w`), and the request's
-- field list (absent when it has none).
-- Returns {1, fence, slot} granted (slot: a --limit holder's 0..N-1, else
-- -1; absent from the quick grant of a free key), {2, ahead, offer_left_ms or -1} queued (the
-- offer: of the lock to the waiter ahead, known to the first in line),
-- {0, 0} busy (nonblock),
-- {4, theirs} refused: the key is used another way (0: as a lock, N: with
-- --limit N), {5, mark} outdated (its order is below the key's mark), {6,
-- 0} superseded at once by a waiting --newest request (`P sup:ID` names it).
local id, lease = ARGV[2], tonumber(ARGV[10])
local info = info_of({ARGV[3], ARGV[4], ARGV[5], nil, nil, ARGV[8], ARGV[9], ARGV[11], ARGV[12]})
local late = outdated(info.o)
if late then return {5, late} end
-- A key out of the index is unused (nobody holds, waits, or left a record
-- to settle): an exclusive request takes it at once, in a few commands.
local indexed = info.m == 'x'
if indexed and redis.call('SADD', ALL, NAME) == 1 and redis.call('SET', LOCK, id, 'NX', 'PX', lease) then
  raise_seq(tonumber(ARGV[6]))
  src_add(info.s, 1)
  return {1, own(id, info, now_ms(), 0, true)}
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
    if info.m == 'x' then return {1, grant(id, info, now, id, lease), -1} end
    local f, sl = grant_set(id, info, now, id, lease)
    return {1, f, sl}
  end
  return {0, 0}
end
local at_once = join(id, info, tonumber(ARGV[6]), now, indexed, true)
if at_once then return at_once end
return standing(now, id, lease, true)
