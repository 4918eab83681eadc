-- Delete selected DEAD tasks of one queue: their hashes, DLQ entries and (indexed only) id
-- index entries.
-- KEYS[1] dead set. ARGV: key base, key prefix, indexed ('1' | '0': on Redis Cluster the
--   client deletes the index entries), then the selector (see select_dead).
-- Returns the ids deleted.
local base, prefix, indexed = ARGV[1], ARGV[2], ARGV[3] == '1'
local deleted = {}
for _, id in ipairs(select_dead(KEYS[1], base, 4)) do
  local key = task_key(base, id)
  if redis.call('HGET', key, 'status') == 'DEAD' then
    redis.call('ZREM', KEYS[1], id)
    redis.call('DEL', key)
    if indexed then
      redis.call('DEL', index_key(prefix, id))
    end
    deleted[#deleted + 1] = id
  end
end
return deleted
