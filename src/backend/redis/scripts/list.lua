-- `keys`: every held key, in one round trip; O(keys in `lc-cli:keys`), the
-- waiters counted with one ZCOUNT each. A key whose lease ran out is not
-- listed; when nobody waits for it either, its record is settled and it
-- leaves the index (what a release would have done). Stands alone: no
-- `KEYS`, no `ARGV`, not prefixed with common.lua (only with record.lua).
-- Returns {now_ms, {{name, token, source, since_ms, waiting, detached, mode, expires_ms, fields, mark}, ...}},
-- one entry per holder (mode `x` exclusive, `s` shared, N for --limit N),
-- where source is '' and since_ms and detached -1 when the owner record does
-- not match the lock (a lock key written by someone else), detached is 1 for
-- a kept hold, 0 for a running command's and -1 for an offer not yet
-- confirmed (its holder is not known to run yet), waiting counts the queue
-- entries not yet expired, and expires_ms is a kept hold's deadline
-- (`--expire`, server ms) or -1; fields is the holder's field list and
-- mark the key's (`--order`), each '' when there is none; a --limit
-- holder's fields end with `slot=I` (the slot it was given). A key settled
-- here leaves its dead holders' ends in its history (record.lua).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = {}
for _, name in ipairs(redis.call('SMEMBERS', 'lc-cli:keys')) do
  local P = 'lc-cli:{'..name..'}:'
  local token = redis.call('GET', P..'lock')
  local mark
  local function mark_of()
    if not mark then mark = redis.call('GET', P..'mark') or '' end
    return mark
  end
  if token then
    local o = redis.call('HMGET', P..'owner', 'token', 'source', 'since', 'detached', 'offered', 'expires', 'fields')
    local source, since, detached, expires, fields = '', -1, -1, -1, ''
    if o[1] == token then
      source, since, detached, fields = o[2] or '', tonumber(o[3]) or -1, tonumber(o[4]) or -1, o[7] or ''
      if o[5] == '1' then detached = -1 end
      if detached == 1 then expires = tonumber(o[6]) or -1 end
    end
    local waiting = redis.call('ZCOUNT', P..'expiry', '('..now, '+inf')
    held[#held + 1] = {name, token, source, since, waiting, detached, 'x', expires, fields, mark_of()}
  end
  local set = redis.call('ZRANGEBYSCORE', P..'holders', '('..now, '+inf')
  if #set > 0 then
    local kind = redis.call('GET', P..'kind') or 'lock'
    local mode = 's'
    if kind ~= 'lock' then mode = kind end
    local waiting = redis.call('ZCOUNT', P..'expiry', '('..now, '+inf')
    for _, id in ipairs(set) do
      local raw = redis.call('HGET', P..'hinfo', id)
      local source, since, detached, expires, fields = '', -1, -1, -1, ''
      if raw then
        local h = cjson.decode(raw)
        source, since, detached, fields = h.s or '', tonumber(h.since) or -1, tonumber(h.d) or -1, h.fl or ''
        -- The slot the service gave, after the request's own fields.
        if h.sl then fields = fields..'slot='..tostring(h.sl)..'\n' end
        if h.o then detached = -1 end
        if detached == 1 and h.e then expires = tonumber(h.e) end
      end
      held[#held + 1] = {name, id, source, since, waiting, detached, mode, expires, fields, mark_of()}
    end
  end
  if not token and #set == 0 and redis.call('EXISTS', P..'queue') == 0 then
    local function leave_source(s)
      local k = 'lc-cli:source:'..s
      if redis.call('HINCRBY', k, name, -1) <= 0 then redis.call('HDEL', k, name) end
    end
    -- Their ends in the key's history, as a script settling them says it.
    local o = redis.call('HMGET', P..'owner', 'source', 'since', 'fence', 'offered', 'fields', 'queued', 'status', 'detached', 'expires')
    if o[1] then
      if o[4] ~= '1' then
        local r = {s = o[1], m = 'x', since = o[2], f = o[3], fl = o[5], a = o[6], st = o[7]}
        record_end(P..'history', r, lapsed(o[8], o[9]), nil, nil, now)
      end
      leave_source(o[1])
      redis.call('DEL', P..'owner')
    end
    -- Shared holders whose lease ran out: a key out of the index has none.
    for _, id in ipairs(redis.call('ZRANGE', P..'holders', 0, -1)) do
      local raw = redis.call('HGET', P..'hinfo', id)
      if raw then
        local h = cjson.decode(raw)
        if not h.o then
          local r = {s = h.s, m = h.n or 's', since = h.since, f = h.f, fl = h.fl, a = h.a, sl = h.sl, st = h.st}
          record_end(P..'history', r, lapsed(h.d, h.e), nil, nil, now)
        end
        leave_source(h.s)
      end
    end
    redis.call('DEL', P..'holders', P..'hinfo')
    redis.call('DEL', P..'kind')
    redis.call('SREM', 'lc-cli:keys', name)
  end
end
return {now, held}
