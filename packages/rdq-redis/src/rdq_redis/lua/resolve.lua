-- Resolve a claimed task (reschedule, complete or dead-letter), fenced on its token: append
-- the attempt, count it, drop the lease and move the task to its new state, atomically.
--
-- KEYS: [1] pending, [2] in-flight, [3] dead, [4] succeeded sets.
-- ARGV: key base, id, token, new status (PENDING | SUCCEEDED | DEAD), attempt_json,
--   attempt error type or '', next_at_us (PENDING only) or '', wake channel.
-- Returns {'OK'}, {'STALE'} or {'NOTFOUND'} (not in this queue).
local id = ARGV[2]
local key = task_key(ARGV[1], id)
local held = check_claim(key, ARGV[3])
if held ~= 'OK' then
  return {held}
end
local nows = fmt(now_us())
local status = ARGV[4]
finish_claim(key, KEYS[2], id, ARGV[5], ARGV[6])
redis.call('HSET', key, 'status', status)
if status == 'PENDING' then
  redis.call('HSET', key, 'next_attempt_at', ARGV[7])
  redis.call('ZADD', KEYS[1], ARGV[7], id)
  redis.call('PUBLISH', ARGV[8], '1')
elseif status == 'SUCCEEDED' then
  redis.call('HSET', key, 'completed_at', nows)
  redis.call('ZADD', KEYS[4], nows, id)
else
  redis.call('HSET', key, 'dead_lettered_at', nows)
  redis.call('ZADD', KEYS[3], nows, id)
end
return {'OK'}
