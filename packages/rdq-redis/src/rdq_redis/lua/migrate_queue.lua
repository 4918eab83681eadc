-- Upgrade one queue from key layout 1 (one pending and one in-flight set, no DLQ groups) to
-- layout 2, a batch of DEAD tasks per call. Idempotent: a call interrupted by a crash is
-- simply made again.
-- KEYS[1] the queue's levels set.
-- ARGV: key base, queue registry key or '' (Cluster), queue name, rank of the first DEAD
--   entry to group, batch size.
-- Returns the rank to continue from, or -1 when the queue is done.
local base, registry, queue = ARGV[1], ARGV[2], ARGV[3]
local from, batch = tonumber(ARGV[4]), tonumber(ARGV[5])
-- Layout 1 tasks have no priority field: they are all priority 0.
for _, kind in ipairs({'pending', 'inflight'}) do
  local old, new = base .. kind, base .. kind .. ':0'
  if redis.call('EXISTS', old) == 1 then
    if redis.call('EXISTS', new) == 1 then
      redis.call('ZUNIONSTORE', new, 2, new, old, 'AGGREGATE', 'MIN')
      redis.call('DEL', old)
    else
      redis.call('RENAME', old, new)
    end
    redis.call('ZADD', base .. 'levels', 0, 0)
  end
end
if registry ~= '' then
  redis.call('SADD', registry, queue)
end
local dead = redis.call('ZRANGE', base .. 'dead', from, from + batch - 1, 'WITHSCORES')
for k = 1, #dead, 2 do
  local id = dead[k]
  local key = task_key(base, id)
  if redis.call('HEXISTS', key, 'dlq_group') == 0 then
    group_add(base, key, id, dead[k + 1])
  end
end
if #dead < 2 * batch then
  return -1
end
return from + batch
