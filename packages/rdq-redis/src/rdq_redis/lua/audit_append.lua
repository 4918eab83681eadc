-- Store one audit entry: a new id (a zero-padded counter, so ids order as numbers), the
-- server's now, the entry hash and its place in the log.
-- KEYS[1] the audit log, KEYS[2] the id counter. ARGV: audit key base, queue, action, actor,
--   entry JSON (without id and time).
-- Returns {id, time_us}.
local nows = fmt(now_us())
local id = string.format('%016d', redis.call('INCR', KEYS[2]))
redis.call('HSET', ARGV[1] .. 'entry:' .. id, 'queue', ARGV[2], 'action', ARGV[3],
  'actor', ARGV[4], 'body', ARGV[5], 'time', nows)
redis.call('ZADD', KEYS[1], nows, id)
return {id, nows}
