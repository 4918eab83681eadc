-- Delete up to `batch` finished tasks of one queue: SUCCEEDED ones completed before the
-- cutoff, then CANCELLED ones cancelled before it.
-- KEYS[1] the queue's levels set. ARGV: key base, key prefix, cutoff_us (exclusive), batch,
--   indexed ('1' | '0': on Redis Cluster the client deletes the id index entries), queue
--   registry key or '' (Cluster), queue name.
-- Returns {ids deleted, 1 if the queue is now empty else 0} (the client calls again while it
--   gets a full batch).
local base, prefix, indexed = ARGV[1], ARGV[2], ARGV[5] == '1'
local registry, queue = ARGV[6], ARGV[7]
local batch = tonumber(ARGV[4])
local deleted = {}
for _, set in ipairs({base .. 'succeeded', base .. 'cancelled'}) do
  local room = batch - #deleted
  if room <= 0 then
    break
  end
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', '(' .. ARGV[3], 'LIMIT', 0, room)
  for _, id in ipairs(ids) do
    redis.call('ZREM', set, id)
    drop_dedup(base, task_key(base, id), id)
    redis.call('DEL', task_key(base, id))
    if indexed then
      redis.call('DEL', index_key(prefix, id))
    end
    deleted[#deleted + 1] = id
  end
end
local empty = 0
if #deleted > 0 and queue_empty(base) then
  empty = 1
  if registry ~= '' then
    redis.call('SREM', registry, queue)
  end
end
return {deleted, empty}
