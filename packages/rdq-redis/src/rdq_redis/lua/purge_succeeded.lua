-- Delete up to `batch` SUCCEEDED tasks of one queue completed before the cutoff.
-- KEYS[1] succeeded set. ARGV: key base, key prefix, cutoff_us (exclusive), batch, indexed
--   ('1' | '0': on Redis Cluster the client deletes the id index entries).
-- Returns the ids deleted (the client calls again while it gets a full batch).
local base, prefix, indexed = ARGV[1], ARGV[2], ARGV[5] == '1'
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('DEL', task_key(base, id))
  if indexed then
    redis.call('DEL', index_key(prefix, id))
  end
end
return ids
