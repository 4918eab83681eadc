-- Return selected DEAD tasks of one queue to PENDING, due now, with attempt_count = 0 and
-- redrive_count + 1; the attempt history stays. Ids that are not DEAD here are ignored.
-- KEYS[1] pending set, KEYS[2] dead set.
-- ARGV: key base, wake channel, then the selector (see select_dead).
-- Returns how many tasks were redriven.
local base = ARGV[1]
local nows = fmt(now_us())
local n = 0
for _, id in ipairs(select_dead(KEYS[2], base, 3)) do
  local key = task_key(base, id)
  if redis.call('HGET', key, 'status') == 'DEAD' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('HSET', key, 'status', 'PENDING', 'attempt_count', '0', 'next_attempt_at', nows)
    redis.call('HINCRBY', key, 'redrive_count', 1)
    redis.call('HDEL', key, 'dead_lettered_at')
    redis.call('ZADD', KEYS[1], nows, id)
    n = n + 1
  end
end
if n > 0 then
  redis.call('PUBLISH', ARGV[2], '1')
end
return n
