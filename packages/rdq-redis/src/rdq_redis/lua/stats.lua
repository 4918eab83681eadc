-- A consistent snapshot of one queue's counts by the server clock.
-- KEYS: [1] pending, [2] in-flight, [3] dead, [4] succeeded sets.
-- Returns {now_us, pending, in_flight, dead, succeeded, oldest due pending score or ''}.
local now = now_us()
local oldest = ''
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 and tonumber(first[2]) <= now then
  oldest = first[2]
end
return {fmt(now), redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[4]), oldest}
