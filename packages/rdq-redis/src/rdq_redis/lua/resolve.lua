-- Resolve a claimed task (reschedule, complete or dead-letter), fenced on its token: append
-- the attempt, count it, drop the lease and the claim and move the task to its new state,
-- atomically.
--
-- KEYS[1] the queue's levels set.
-- ARGV: key base, id, token, new status (PENDING | SUCCEEDED | DEAD), attempt_json,
--   attempt error type ('' or '=' .. type), next_at_us (PENDING only) or '', wake channel.
-- Returns {'OK'}, {'STALE'} or {'NOTFOUND'} (not in this queue).
local base, id = ARGV[1], ARGV[2]
local key = task_key(base, id)
local held = check_claim(key, ARGV[3])
if held ~= 'OK' then
  return {held}
end
local nows = fmt(now_us())
local status = ARGV[4]
finish_claim(base, key, id, ARGV[5], ARGV[6], 'status', status)
if status == 'PENDING' then
  redis.call('HSET', key, 'next_attempt_at', ARGV[7])
  add_live(base, 'pending', level_of(key), ARGV[7], id)
  redis.call('PUBLISH', ARGV[8], '1')
elseif status == 'SUCCEEDED' then
  redis.call('HSET', key, 'completed_at', nows)
  redis.call('ZADD', base .. 'succeeded', nows, id)
else
  redis.call('HSET', key, 'dead_lettered_at', nows)
  redis.call('ZADD', base .. 'dead', nows, id)
  group_add(base, key, id, nows)
end
return {'OK'}
