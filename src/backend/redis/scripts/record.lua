-- A key's history (docs/history.md), prepended to every script that can
-- end a hold (through common.lua) and to LIST, which settles dead holders
-- too. One entry per ended hold in the stream `lc-cli:{KEY}:history` (the
-- line's hash tag), trimmed to the last __HISTORY_CAP__ entries exactly
-- (`MAXLEN ~` would trim only whole nodes of 100 entries, keeping up to
-- 199). An entry's fields, each left out when unknown: source, mode (`x`,
-- `s` or N), token, granted (server ms), waited (ms), endedat (server ms),
-- ended, status, by, slot, fields (the request's field list).
-- `r` is the holder's record: {s = source, m = mode, f = fence, since = ms,
-- a = ms it queued, sl = slot, st = the status a kept hold was left with,
-- fl = field list}.
local function record_end(stream, r, ended, status, by, now)
  local e = {'source', r.s or '', 'mode', tostring(r.m or 'x')}
  local function add(name, value)
    if value ~= nil and value ~= false and value ~= '' then
      e[#e + 1] = name
      e[#e + 1] = tostring(value)
    end
  end
  add('token', r.f)
  add('granted', r.since)
  if tonumber(r.a) and tonumber(r.since) then
    add('waited', math.max(0, tonumber(r.since) - tonumber(r.a)))
  end
  add('endedat', now)
  add('ended', ended)
  add('status', status or r.st)
  add('by', by)
  add('slot', r.sl)
  add('fields', r.fl)
  redis.call('XADD', stream, 'MAXLEN', __HISTORY_CAP__, '*', unpack(e))
end
-- How a hold nobody released ended: a kept hold's `--expire` ran out
-- (`expired`); any other lease ran out unrenewed, its holder dead, frozen
-- or cut off (`freed`: Redis cannot tell which).
local function lapsed(kept, deadline)
  if tostring(kept) == '1' and deadline then return 'expired' end
  return 'freed'
end
