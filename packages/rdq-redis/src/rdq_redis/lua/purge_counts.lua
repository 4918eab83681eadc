-- Delete the counts of the minutes before a cut-off, of every queue.
-- KEYS[1] the set of queues with counts. ARGV: the counts' key base, the cut-off (whole
--   minutes since 1970, exclusive).
-- Returns how many (queue, minute) entries were deleted.
local base = ARGV[1]
local n = 0
for _, queue in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local index = base .. 'q:' .. queue
  for _, minute in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. ARGV[2])) do
    redis.call('DEL', base .. 'm:' .. minute .. ':' .. queue)
    redis.call('ZREM', index, minute)
    n = n + 1
  end
  if redis.call('EXISTS', index) == 0 then
    redis.call('SREM', KEYS[1], queue)
  end
end
return n
