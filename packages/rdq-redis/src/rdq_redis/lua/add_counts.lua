-- Add to the counts of (queue, minute)s, each addition an HINCRBY: concurrent additions never
-- lose one.
-- KEYS[1] the set of queues with counts (every counts key shares the hash tag {_counts}: one
--   slot on Cluster).
-- ARGV: the counts' key base, the number of entries n, then per entry: queue, minute (whole
--   minutes since 1970), succeeded, failed, dead, deferred.
local base = ARGV[1]
local n = tonumber(ARGV[2])
local names = {'succeeded', 'failed', 'dead', 'deferred'}
for i = 1, n do
  local a = 2 + (i - 1) * 6
  local queue, minute = ARGV[a + 1], ARGV[a + 2]
  local hash = base .. 'm:' .. minute .. ':' .. queue
  for j, name in ipairs(names) do
    redis.call('HINCRBY', hash, name, ARGV[a + 2 + j])
  end
  redis.call('ZADD', base .. 'q:' .. queue, minute, minute)
  redis.call('SADD', KEYS[1], queue)
end
return n
