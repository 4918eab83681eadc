-- The counts of one queue (or of every queue) from a minute on.
-- KEYS[1] the set of queues with counts. ARGV: the counts' key base, queue or '' (every
--   queue), the first minute (whole minutes since 1970).
-- Returns {{queue, minute, succeeded, failed, dead, deferred}, ...} (in no particular order).
local base = ARGV[1]
local queues = {ARGV[2]}
if ARGV[2] == '' then
  queues = redis.call('SMEMBERS', KEYS[1])
end
local out = {}
for _, queue in ipairs(queues) do
  for _, minute in ipairs(redis.call('ZRANGEBYSCORE', base .. 'q:' .. queue, ARGV[3], '+inf')) do
    local f = redis.call('HMGET', base .. 'm:' .. minute .. ':' .. queue,
      'succeeded', 'failed', 'dead', 'deferred')
    out[#out + 1] = {queue, minute, f[1] or '0', f[2] or '0', f[3] or '0', f[4] or '0'}
  end
end
return out
