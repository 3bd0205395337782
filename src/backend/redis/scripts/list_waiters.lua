-- Every live waiter (its queue entry not expired) of every key in
-- `lc-cli:keys`, each key's in line order; read only. Returns {now_ms,
-- {{name, id, source, queued ms or -1, mode, N, field list or ''}...}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', 'lc-cli:keys')) do
  local P = 'lc-cli:{'..name..'}:'
  for _, id in ipairs(redis.call('ZRANGE', P..'queue', 0, -1)) do
    local exp = tonumber(redis.call('ZSCORE', P..'expiry', id) or 0)
    local raw = redis.call('HGET', P..'waiters', id)
    if exp > now and raw then
      local w = cjson.decode(raw)
      out[#out + 1] = {name, id, w.s or '', tonumber(w.a) or -1, w.m or 'x', tostring(w.n or 0), w.f or ''}
    end
  end
end
return {now, out}
