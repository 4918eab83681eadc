-- Register a worker's heartbeat: its registration replaces the one before, seen_at is now and
-- started_at the time of its first heartbeat.
-- KEYS: the registry's info hash, started hash and seen set (they share the hash tag
--   {_workers}: one slot on Cluster). ARGV: worker id, its registration as JSON.
-- Returns {started_at_us, seen_at_us}.
local nows = fmt(now_us())
local id = ARGV[1]
local started = redis.call('HGET', KEYS[2], id)
if not started then
  started = nows
  redis.call('HSET', KEYS[2], id, nows)
end
redis.call('HSET', KEYS[1], id, ARGV[2])
redis.call('ZADD', KEYS[3], nows, id)
return {started, nows}
