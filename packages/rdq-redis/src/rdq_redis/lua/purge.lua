-- Delete selected DEAD tasks of one queue (their hashes, DLQ entries and id index entries).
-- KEYS[1] dead set. ARGV: key base, key prefix, then the selector (see select_dead).
-- Returns how many tasks were deleted.
local base, prefix = ARGV[1], ARGV[2]
local n = 0
for _, id in ipairs(select_dead(KEYS[1], base, 3)) do
  local key = task_key(base, id)
  if redis.call('HGET', key, 'status') == 'DEAD' then
    redis.call('ZREM', KEYS[1], id)
    redis.call('DEL', key, index_key(prefix, id))
    n = n + 1
  end
end
return n
