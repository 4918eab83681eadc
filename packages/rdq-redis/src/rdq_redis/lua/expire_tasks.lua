-- The retention step: delete the listed finished tasks of one queue whose status time is
-- before the cut-off (the score of the status's sorted set: dead_lettered_at, completed_at,
-- cancelled_at); their hashes, set entries, DLQ group entries and (indexed only) id index
-- entries. A live task is in none of those sets, and a task redriven and dead-lettered again
-- since the engine read it has a later score: both stay.
-- KEYS[1] the queue's levels set.
-- ARGV: key base, key prefix, cutoff_us (exclusive), indexed ('1' | '0': on Redis Cluster
--   the client deletes the index entries), queue registry key or '' (Cluster), queue name,
--   then the ids.
-- Returns {ids deleted, 1 if the queue is now empty else 0}.
local base, prefix, indexed = ARGV[1], ARGV[2], ARGV[4] == '1'
local cutoff = tonumber(ARGV[3])
local registry, queue = ARGV[5], ARGV[6]
local sets = {base .. 'dead', base .. 'succeeded', base .. 'cancelled'}
local deleted = {}
for i = 7, #ARGV do
  local id = ARGV[i]
  for n, set in ipairs(sets) do
    local score = redis.call('ZSCORE', set, id)
    if score then
      if tonumber(score) < cutoff then
        local key = task_key(base, id)
        redis.call('ZREM', set, id)
        if n == 1 then
          group_remove(base, key, id)
        end
        drop_dedup(base, key, id)
        redis.call('DEL', key)
        if indexed then
          redis.call('DEL', index_key(prefix, id))
        end
        deleted[#deleted + 1] = id
      end
      break
    end
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
