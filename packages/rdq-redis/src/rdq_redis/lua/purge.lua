-- Delete selected tasks of one queue: by ids DEAD and CANCELLED ones, by filter DEAD ones
-- that match; their hashes, set entries and (indexed only) id index entries.
-- KEYS[1] the queue's levels set.
-- ARGV: key base, key prefix, indexed ('1' | '0': on Redis Cluster the client deletes the
--   index entries), queue registry key or '' (Cluster), queue name, then the selector (see
--   select_ids).
-- Returns {ids deleted, 1 if the queue is now empty else 0}.
local base, prefix, indexed = ARGV[1], ARGV[2], ARGV[3] == '1'
local registry, queue = ARGV[4], ARGV[5]
local dead, cancelled = base .. 'dead', base .. 'cancelled'
local by_ids = ARGV[6] == 'ids'
local deleted = {}
for _, id in ipairs(select_ids(dead, base, 6)) do
  local key = task_key(base, id)
  local gone = false
  if redis.call('ZREM', dead, id) == 1 then
    group_remove(base, key, id)
    gone = true
  elseif by_ids and redis.call('ZREM', cancelled, id) == 1 then
    gone = true
  end
  if gone then
    drop_dedup(base, key, id)
    redis.call('DEL', key)
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
