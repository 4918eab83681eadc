-- Make the listed PENDING tasks of one queue that are not yet due due now (next_attempt_at
-- and their pending set's score); other ids are ignored.
-- KEYS[1] the queue's levels set. ARGV: key base, wake channel, id... (each once).
-- Returns how many tasks were moved.
local now = now_us()
local nows = fmt(now)
local base = ARGV[1]
local n = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local key = task_key(base, id)
  local set, p, kind, held = find_live(base, key, id)
  if set and kind == 'pending' and not held then
    local score = redis.call('ZSCORE', set, id)
    if score and tonumber(score) > now then
      redis.call('HSET', key, 'next_attempt_at', nows)
      redis.call('ZADD', set, nows, id)
      fair_add(base, redis.call('HGET', key, 'fg'), p, nows, id)
      n = n + 1
    end
  end
end
if n > 0 then
  redis.call('PUBLISH', ARGV[2], '1')
end
return n
