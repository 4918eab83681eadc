-- Delete up to `batch` SUCCEEDED tasks of one queue completed before the cutoff.
-- KEYS[1] succeeded set. ARGV: key base, key prefix, cutoff_us (exclusive), batch.
-- Returns how many were deleted (the client calls again while it gets a full batch).
local base, prefix = ARGV[1], ARGV[2]
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('DEL', task_key(base, id), index_key(prefix, id))
end
return #ids
