-- Return selected DEAD tasks of one queue to PENDING, due now, with attempt_count = 0 and
-- redrive_count + 1; the attempt history stays (values kept as 'raw.*' by earlier scripts are
-- dropped: the operator asked for a fresh start). Ids that are not DEAD here are ignored.
-- KEYS[1] the queue's levels set.
-- ARGV: key base, wake channel, then the selector (see select_ids).
-- Returns how many tasks were redriven.
local base = ARGV[1]
local dead = base .. 'dead'
local nows = fmt(now_us())
local n = 0
for _, id in ipairs(select_ids(dead, base, 3)) do
  if redis.call('ZREM', dead, id) == 1 then
    local key = task_key(base, id)
    group_remove(base, key, id)
    bump_count(key, 'redrive_count')
    redis.call('HSET', key, 'status', 'PENDING', 'attempt_count', '0', 'next_attempt_at', nows)
    redis.call('HDEL', key, 'dead_lettered_at', 'raw.attempt_count', 'raw.redrive_count',
      'raw.attempts')
    add_live(base, 'pending', level_of(key), nows, id)
    n = n + 1
  end
end
if n > 0 then
  redis.call('PUBLISH', ARGV[2], '1')
end
return n
