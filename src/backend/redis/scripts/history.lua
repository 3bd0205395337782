-- `lc-cli history KEY`: the key's last ended holds, newest first. A hold
-- whose lease ran out and that nothing settled yet is settled first (as
-- the next script on the key would), so its end is in the answer.
-- ARGV: name, how many (at most). Returns XREVRANGE's answer: {{id,
-- {field, value, ...}}, ...}.
settle()
settle_set(now_ms())
return redis.call('XREVRANGE', HISTORY, '+', '-', 'COUNT', tonumber(ARGV[2]))
